//! One line per prediction request in the log (target `gr00t::request`), whichever door it
//! came through, and the request ids those lines carry.

use axum::http::{HeaderMap, HeaderName};
use gr00t_core::response::PredictResponse;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The header a request id travels in, both ways.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// Longest client-chosen request id that is kept as is.
pub const MAX_REQUEST_ID: usize = 128;

/// A request's id: the client's `x-request-id` when usable, else a fresh one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(Arc<str>);

impl RequestId {
    /// The client's id if it is 1..=[`MAX_REQUEST_ID`] visible ASCII characters, else a new one.
    pub fn from_headers(headers: &HeaderMap) -> RequestId {
        headers
            .get(X_REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .filter(|s| {
                !s.is_empty()
                    && s.len() <= MAX_REQUEST_ID
                    && s.bytes().all(|b| b.is_ascii_graphic())
            })
            .map(|s| RequestId(s.into()))
            .unwrap_or_else(RequestId::generate)
    }

    /// 16 hex digits, unique within the process and unlikely to repeat across restarts.
    pub fn generate() -> RequestId {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        // RandomState is seeded per process from the OS; hashing the counter spreads it.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(n);
        RequestId(format!("{:016x}", h.finish()).into())
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The W3C trace-context header a client's own trace arrives in.
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// A client's W3C `traceparent`: the trace a request's span joins and the client's span it is
/// a child of (the OTLP export continues the client's trace instead of starting one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// The client's trace.
    pub trace_id: u128,
    /// The client's span the request is a child of.
    pub parent_id: u64,
}

impl TraceParent {
    /// `version-traceid-parentid-flags` as W3C Trace Context writes it (lowercase hex; ids not
    /// all zero; version `ff` invalid; a later version may append fields); `None` otherwise.
    pub fn parse(s: &str) -> Option<TraceParent> {
        fn hex(part: &str, len: usize) -> Option<&str> {
            (part.len() == len && part.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
                .then_some(part)
        }
        let mut parts = s.splitn(5, '-');
        let version = hex(parts.next()?, 2)?;
        let trace = hex(parts.next()?, 32)?;
        let parent = hex(parts.next()?, 16)?;
        hex(parts.next()?, 2)?;
        let more = parts.next();
        if version == "ff" || (version == "00" && more.is_some()) {
            return None;
        }
        let trace_id = u128::from_str_radix(trace, 16).ok().filter(|&t| t != 0)?;
        let parent_id = u64::from_str_radix(parent, 16).ok().filter(|&p| p != 0)?;
        Some(TraceParent {
            trace_id,
            parent_id,
        })
    }

    /// The request's `traceparent` header, if it is a valid one.
    pub fn from_headers(headers: &HeaderMap) -> Option<TraceParent> {
        TraceParent::parse(headers.get(TRACEPARENT)?.to_str().ok()?)
    }
}

impl std::fmt::Display for TraceParent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "00-{:032x}-{:016x}-01", self.trace_id, self.parent_id)
    }
}

/// Target of the request log lines and of the request spans.
pub const REQUEST_TARGET: &str = "gr00t::request";

/// The span of one prediction request of `door` (`http`, `zmq`, `ws`): its stages are its
/// children, the queue records `session` on it and carries it to the engine thread, which
/// records `embodiment`, and the request's log line is written inside it. A client's
/// `traceparent` makes it a child of the client's span.
pub fn request_span(
    door: &'static str,
    id: &RequestId,
    parent: Option<TraceParent>,
) -> tracing::Span {
    tracing::info_span!(
        target: "gr00t::request",
        "request",
        request_id = id.as_str(),
        door,
        traceparent = parent.map(tracing::field::display),
        session = tracing::field::Empty,
        embodiment = tracing::field::Empty,
    )
}

/// The prediction part of a request's log line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PredictFields<'a> {
    /// `ok`, `bad_request`, `too_large`, `busy`, `error`.
    pub outcome: &'static str,
    /// The refused field of a 400.
    pub field: Option<&'a str>,
    /// Waiting for the worker.
    pub queue_ms: Option<f64>,
    /// Stage times as the response reports them.
    pub decode_ms: Option<f64>,
    /// Resize, patchify, tokenise, state, noise.
    pub encode_ms: Option<f64>,
    /// Vision tower.
    pub vision_ms: Option<f64>,
    /// LLM.
    pub llm_ms: Option<f64>,
    /// VL adapter.
    pub adapter_ms: Option<f64>,
    /// Flow-matching loop.
    pub denoise_ms: Option<f64>,
    /// Action decoding.
    pub decode_actions_ms: Option<f64>,
    /// The worker's whole job.
    pub compute_ms: Option<f64>,
    /// VLM sequence length.
    pub seq_len: Option<usize>,
    /// `seed` or `client`.
    pub noise_source: Option<&'a str>,
    /// The seed, when the noise was drawn from one.
    pub seed: Option<u64>,
}

impl<'a> PredictFields<'a> {
    /// The fields of a computed request.
    pub fn served(r: &'a PredictResponse, queue_ms: f64) -> PredictFields<'a> {
        let t = &r.timing_ms;
        PredictFields {
            outcome: "ok",
            field: None,
            queue_ms: Some(queue_ms),
            decode_ms: Some(t.decode),
            encode_ms: Some(t.encode),
            vision_ms: t.vision,
            llm_ms: t.llm,
            adapter_ms: t.adapter,
            denoise_ms: t.denoise,
            decode_actions_ms: Some(t.decode_actions),
            compute_ms: Some(t.total),
            seq_len: Some(r.seq_len),
            noise_source: Some(r.noise_source),
            seed: r.seed,
        }
    }

    /// The fields of a refused request (`outcome`: the label, as `Outcome::name` gives it).
    pub fn refused(outcome: &'static str, field: Option<&'a str>) -> PredictFields<'a> {
        PredictFields {
            outcome,
            field,
            ..PredictFields::default()
        }
    }
}

/// One request's log line.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestLine<'a> {
    /// The door: `http`, `zmq` or `ws`.
    pub door: &'static str,
    /// The request id (also in the `x-request-id` response header).
    pub request_id: &'a str,
    /// HTTP method.
    pub method: &'a str,
    /// Path without the query.
    pub path: &'a str,
    /// Status code.
    pub status: u16,
    /// Time from request head to response head.
    pub ms: f64,
    /// The error message of a refusal.
    pub error: Option<&'a str>,
    /// Set for `/predict`.
    pub predict: Option<PredictFields<'a>>,
}

impl RequestLine<'_> {
    /// Page polls and metric scrapes that went fine are logged at debug level only.
    pub fn is_routine(&self) -> bool {
        self.status == 200 && matches!(self.path, "/ui/requests" | "/metrics")
    }

    /// Writes the line through `tracing` (target `gr00t::request`).
    pub fn emit(&self) {
        let p = self.predict.clone().unwrap_or_default();
        let outcome = self.predict.as_ref().map(|p| p.outcome);
        let (method, path, status, ms) = (self.method, self.path, self.status, self.ms);
        // The message repeats the essentials so text logs read well without the fields.
        let message = match self.error {
            Some(e) => format!("{method} {path} {status} {ms:.1} ms: {e}"),
            None => format!("{method} {path} {status} {ms:.1} ms"),
        };
        macro_rules! line {
            ($level:expr) => {
                tracing::event!(
                    target: "gr00t::request",
                    $level,
                    door = self.door,
                    request_id = self.request_id,
                    method,
                    path,
                    status,
                    ms,
                    error = self.error,
                    outcome,
                    field = p.field,
                    queue_ms = p.queue_ms,
                    decode_ms = p.decode_ms,
                    encode_ms = p.encode_ms,
                    vision_ms = p.vision_ms,
                    llm_ms = p.llm_ms,
                    adapter_ms = p.adapter_ms,
                    denoise_ms = p.denoise_ms,
                    decode_actions_ms = p.decode_actions_ms,
                    compute_ms = p.compute_ms,
                    seq_len = p.seq_len,
                    noise_source = p.noise_source,
                    seed = p.seed,
                    "{message}"
                )
            };
        }
        if self.is_routine() {
            line!(tracing::Level::DEBUG)
        } else {
            line!(tracing::Level::INFO)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_as_w3c_writes_it() {
        let t = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let p = TraceParent::parse(t).unwrap();
        assert_eq!(p.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(p.parent_id, 0x00f067aa0ba902b7);
        assert_eq!(p.to_string(), t);
        // A later version may append fields; version 00 may not.
        assert!(TraceParent::parse(&format!("01-{}-extra", &t[3..])).is_some());
        for bad in [
            "",
            "00",
            &format!("{t}-extra"),
            &t.to_uppercase(),
            &format!("ff-{}", &t[3..]),
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad}");
        }
    }
    use crate::doors::answers::Outcome;
    use axum::http::HeaderValue;
    use gr00t_core::response::TimingMs;
    use serde_json::Value;
    use std::io::Write;
    use std::sync::Mutex;

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The JSON lines `f` logs, with the subscriber `--log-format json` installs.
    fn json_lines(level: tracing::Level, f: impl FnOnce()) -> Vec<Value> {
        let sink = Sink::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_max_level(level)
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    fn response() -> PredictResponse {
        // Only what the log line carries; the rest as `Default` gives it.
        PredictResponse {
            seq_len: 517,
            noise_source: "seed",
            seed: Some(42),
            timing_ms: TimingMs {
                decode: 1.5,
                encode: 2.5,
                device: 90.0,
                decode_actions: 0.25,
                total: 95.0,
                vision: Some(10.0),
                llm: Some(20.0),
                adapter: None,
                denoise: Some(60.0),
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_served_prediction_logs_ids_stages_and_noise() {
        let r = response();
        let lines = json_lines(tracing::Level::INFO, || {
            RequestLine {
                door: "http",
                request_id: "req-1",
                method: "POST",
                path: "/predict",
                status: 200,
                ms: 97.0,
                error: None,
                predict: Some(PredictFields::served(&r, 1.75)),
            }
            .emit()
        });
        assert_eq!(lines.len(), 1);
        let l = &lines[0];
        assert_eq!(l["level"], "INFO");
        assert_eq!(l["target"], "gr00t::request");
        assert_eq!(l["message"], "POST /predict 200 97.0 ms");
        assert_eq!(l["request_id"], "req-1");
        assert_eq!(l["status"], 200);
        assert_eq!(l["outcome"], "ok");
        assert_eq!(l["seq_len"], 517);
        assert_eq!(l["noise_source"], "seed");
        assert_eq!(l["seed"], 42);
        assert_eq!(l["queue_ms"], 1.75);
        assert_eq!(l["decode_ms"], 1.5);
        assert_eq!(l["encode_ms"], 2.5);
        assert_eq!(l["vision_ms"], 10.0);
        assert_eq!(l["llm_ms"], 20.0);
        assert_eq!(l["denoise_ms"], 60.0);
        assert_eq!(l["decode_actions_ms"], 0.25);
        assert_eq!(l["compute_ms"], 95.0);
        // Stages the engine did not time are left out, not written as null or 0.
        assert!(l.get("adapter_ms").is_none(), "{l}");
        assert!(l.get("field").is_none() && l.get("error").is_none(), "{l}");
    }

    #[test]
    fn a_refusal_logs_outcome_field_and_message() {
        let outcome = Outcome::from_status(400, Some("state.eef_9d"));
        let lines = json_lines(tracing::Level::INFO, || {
            RequestLine {
                door: "http",
                request_id: "abc",
                method: "POST",
                path: "/predict",
                status: 400,
                ms: 0.5,
                error: Some("state.eef_9d: expected 9 numbers, got 8"),
                predict: Some(PredictFields::refused(outcome.name(), Some("state.eef_9d"))),
            }
            .emit()
        });
        let l = &lines[0];
        assert_eq!(l["outcome"], "bad_request");
        assert_eq!(l["field"], "state.eef_9d");
        assert_eq!(l["error"], "state.eef_9d: expected 9 numbers, got 8");
        assert_eq!(
            l["message"],
            "POST /predict 400 0.5 ms: state.eef_9d: expected 9 numbers, got 8"
        );
        assert!(l.get("seq_len").is_none() && l.get("noise_source").is_none());
    }

    #[test]
    fn page_polls_and_scrapes_log_at_debug() {
        let line = |path| RequestLine {
            door: "http",
            request_id: "x",
            method: "GET",
            path,
            status: 200,
            ms: 0.1,
            error: None,
            predict: None,
        };
        let at_info = json_lines(tracing::Level::INFO, || {
            line("/ui/requests").emit();
            line("/metrics").emit();
            line("/health").emit();
        });
        assert_eq!(at_info.len(), 1);
        assert_eq!(at_info[0]["path"], "/health");
        assert!(at_info[0].get("outcome").is_none());
        let at_debug = json_lines(tracing::Level::DEBUG, || line("/metrics").emit());
        assert_eq!(at_debug[0]["level"], "DEBUG");
    }

    #[test]
    fn request_ids_are_taken_from_the_client_or_made() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(X_REQUEST_ID, HeaderValue::from_str(v).unwrap());
            RequestId::from_headers(&h)
        };
        assert_eq!(with("trace-42/a").as_str(), "trace-42/a");
        let long = "a".repeat(MAX_REQUEST_ID + 1);
        for bad in ["", "has space", long.as_str()] {
            let id = with(bad);
            assert_ne!(id.as_str(), bad);
            assert_eq!(id.as_str().len(), 16);
        }
        let ids: std::collections::HashSet<String> = (0..1000)
            .map(|_| {
                RequestId::from_headers(&HeaderMap::new())
                    .as_str()
                    .to_string()
            })
            .collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids
            .iter()
            .all(|s| s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit())));
    }
}
