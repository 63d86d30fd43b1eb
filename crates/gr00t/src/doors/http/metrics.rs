//! `GET /metrics`: request counters, per-stage latency histograms and process gauges, written in
//! the Prometheus text exposition format (version 0.0.4) by hand.

use crate::doors::answers::{Answers, Door, FieldLabels};
pub use crate::doors::answers::{Outcome, Stage, BUCKETS_S};
use gr00t_core::response::TimingMs;
use gr00t_core::session::SessionStats;
use std::fmt::Write as _;
use std::sync::Arc;

/// Vision-cache counters read from the engine at scrape time (per image: 4 per request).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheCounts {
    /// Images whose vision features came from the cache.
    pub hits: u64,
    /// Images the vision tower encoded.
    pub misses: u64,
}

/// Values read at scrape time rather than accumulated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gauges {
    /// Requests waiting in the queue.
    pub queue_waiting: usize,
    /// Queue capacity.
    pub queue_capacity: usize,
    /// Whether a request is being computed.
    pub busy: bool,
    /// Requests computed since start-up (any protocol).
    pub computed: u64,
    /// Resident set size of the process, when known.
    pub rss_bytes: Option<u64>,
    /// Vision cache counters (zero while the engine has no cache).
    pub vision_cache: CacheCounts,
    /// Entries held by the page's history (0 with `--no-ui`).
    pub history_entries: usize,
    /// Requests answered 409 (a newer observation of their session replaced them).
    pub superseded: u64,
    /// Session counts.
    pub sessions: SessionStats,
}

/// Counters and histograms shared by the handlers.
pub struct Metrics {
    /// Every door's answers and stage latencies (the ZMQ and websocket doors hold it too).
    answers: Arc<Answers>,
    model_load_s: f64,
    build: Vec<(&'static str, String)>,
}

impl Metrics {
    /// Empty metrics; `model_load_s` and the `build` labels are fixed for the process, and a
    /// refused field is counted by its label in `labels`.
    pub fn new(
        model_load_s: f64,
        build: Vec<(&'static str, String)>,
        labels: FieldLabels,
    ) -> Metrics {
        Metrics {
            answers: Arc::new(Answers::new(labels)),
            model_load_s,
            build,
        }
    }

    /// Counts one `/predict` outcome.
    pub fn count_request(&self, outcome: Outcome) {
        self.answers.count(Door::Http, outcome);
    }

    /// The answer counters, for the other doors to count theirs.
    pub fn answers(&self) -> Arc<Answers> {
        self.answers.clone()
    }

    /// Adds one latency observation to a stage.
    pub fn observe(&self, stage: Stage, seconds: f64) {
        self.answers.observe(stage, seconds);
    }

    /// Adds a computed request's stage timings (ms, as the response reports them).
    pub fn observe_timings(&self, t: &TimingMs, queue_ms: f64) {
        self.answers.observe_timings(t, queue_ms);
    }

    /// The whole exposition, `text/plain; version=0.0.4`.
    pub fn render(&self, g: &Gauges) -> String {
        let stages = self.answers.stage_snapshot();
        let mut out = String::with_capacity(8 * 1024);
        let w = &mut out;

        header(
            w,
            "gr00t_predict_requests_total",
            "counter",
            "Prediction requests by door and outcome (400s by the refused field; code: the HTTP \
             status, or the one HTTP would answer).",
        );
        let mut requests = self.answers.snapshot();
        // The common outcomes are always present, so a scraper sees them at 0.
        for door in Door::ALL {
            for o in [Outcome::Ok, Outcome::Busy, Outcome::Internal] {
                requests.entry((door, o)).or_insert(0);
            }
        }
        requests.entry((Door::Http, Outcome::TooLarge)).or_insert(0);
        for ((door, o), n) in &requests {
            let code = o.code().to_string();
            let mut labels = vec![("outcome", o.name()), ("code", code.as_str())];
            if let Outcome::BadRequest(field) = o {
                labels.push(("field", field.as_str()));
            }
            labels.push(("door", door.name()));
            sample(w, "gr00t_predict_requests_total", &labels, *n as f64);
        }

        header(
            w,
            "gr00t_stage_duration_seconds",
            "histogram",
            "Latency of each stage of a prediction (queue = waiting for the worker, compute = \
             the worker's whole job, request = the whole request as its door saw it); every door's \
             predictions.",
        );
        for stage in Stage::ALL {
            let h = stages.get(&stage).cloned().unwrap_or_default();
            let name = stage.name();
            let mut cumulative = 0u64;
            for (i, le) in BUCKETS_S.iter().enumerate() {
                cumulative += h.counts[i];
                let le = fmt_float(*le);
                sample(
                    w,
                    "gr00t_stage_duration_seconds_bucket",
                    &[("stage", name), ("le", &le)],
                    cumulative as f64,
                );
            }
            sample(
                w,
                "gr00t_stage_duration_seconds_bucket",
                &[("stage", name), ("le", "+Inf")],
                h.count as f64,
            );
            sample(
                w,
                "gr00t_stage_duration_seconds_sum",
                &[("stage", name)],
                h.sum,
            );
            sample(
                w,
                "gr00t_stage_duration_seconds_count",
                &[("stage", name)],
                h.count as f64,
            );
        }

        let gauges: [(&str, &str, &str, f64); 16] = [
            (
                "gr00t_queue_depth",
                "gauge",
                "Requests waiting in the queue.",
                g.queue_waiting as f64,
            ),
            (
                "gr00t_queue_capacity",
                "gauge",
                "Requests that may wait; more are refused with 503.",
                g.queue_capacity as f64,
            ),
            (
                "gr00t_inference_busy",
                "gauge",
                "1 while a request is being computed.",
                if g.busy { 1.0 } else { 0.0 },
            ),
            (
                "gr00t_computed_requests_total",
                "counter",
                "Requests the worker took from the queue since start-up (400s it found included).",
                g.computed as f64,
            ),
            (
                "gr00t_vision_cache_hits_total",
                "counter",
                "Images whose vision-tower features came from the cache (4 images a request).",
                g.vision_cache.hits as f64,
            ),
            (
                "gr00t_vision_cache_misses_total",
                "counter",
                "Images the vision tower encoded (cache misses; 4 images a request).",
                g.vision_cache.misses as f64,
            ),
            (
                "gr00t_model_load_seconds",
                "gauge",
                "Time taken to load the model at start-up.",
                self.model_load_s,
            ),
            (
                "gr00t_ui_history_entries",
                "gauge",
                "Requests held for the status page.",
                g.history_entries as f64,
            ),
            (
                "gr00t_superseded_requests_total",
                "counter",
                "Requests answered 409: a newer observation of their session replaced them.",
                g.superseded as f64,
            ),
            (
                "gr00t_sessions_active",
                "gauge",
                "Sessions alive (bounded by --max-sessions).",
                g.sessions.active as f64,
            ),
            (
                "gr00t_sessions_created_total",
                "counter",
                "Sessions created since start-up.",
                g.sessions.created as f64,
            ),
            (
                "gr00t_sessions_dropped_total",
                "counter",
                "Sessions dropped after --session-ttl-s or evicted by --max-sessions.",
                (g.sessions.expired + g.sessions.evicted) as f64,
            ),
            (
                "gr00t_sessions_reset_total",
                "counter",
                "Sessions cleared by a client's reset.",
                g.sessions.resets as f64,
            ),
            (
                "gr00t_sessions_restarted_total",
                "counter",
                "Requests answered 409 session restarted: their session_token named a session \
                 this server no longer holds.",
                g.sessions.restarted as f64,
            ),
            (
                "gr00t_sessions_history_bytes",
                "gauge",
                "Bytes of decoded frames the sessions' frame histories hold (--max-history-mb \
                 bounds them).",
                g.sessions.history_bytes as f64,
            ),
            (
                "gr00t_sessions_locked_refusals_total",
                "counter",
                "Requests and resets answered 409 session locked: their session is locked to \
                 the session_token an earlier request carried, and they did not carry it.",
                g.sessions.locked as f64,
            ),
        ];
        for (name, kind, help, value) in gauges {
            header(w, name, kind, help);
            sample(w, name, &[], value);
        }
        if let Some(rss) = g.rss_bytes {
            header(
                w,
                "process_resident_memory_bytes",
                "gauge",
                "Resident memory size in bytes.",
            );
            sample(w, "process_resident_memory_bytes", &[], rss as f64);
        }
        header(
            w,
            "gr00t_build_info",
            "gauge",
            "The served model and build, as labels.",
        );
        let labels: Vec<(&str, &str)> = self.build.iter().map(|(k, v)| (*k, v.as_str())).collect();
        sample(w, "gr00t_build_info", &labels, 1.0);
        out
    }
}

fn header(w: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(w, "# HELP {name} {}", escape_help(help));
    let _ = writeln!(w, "# TYPE {name} {kind}");
}

fn sample(w: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    w.push_str(name);
    if !labels.is_empty() {
        w.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                w.push(',');
            }
            let _ = write!(w, "{k}=\"{}\"", escape_label(v));
        }
        w.push('}');
    }
    let _ = writeln!(w, " {}", fmt_float(value));
}

/// A sample value as the format spells it (`+Inf`, `-Inf`, `NaN`, else shortest decimal).
pub fn fmt_float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

/// Label values escape backslash, double quote and newline.
pub fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// HELP text escapes backslash and newline.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// The process's resident set size (`VmRSS` of `/proc/self/status`, Linux); `None` elsewhere.
pub fn process_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Parses the exposition into (name, sorted labels) → value, checking each line's syntax.
    fn parse(text: &str) -> BTreeMap<(String, Vec<(String, String)>), f64> {
        let mut out = BTreeMap::new();
        let mut typed = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut it = rest.split(' ');
                let name = it.next().unwrap();
                let kind = it.next().unwrap();
                assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
                assert!(typed.insert(name.to_string()), "TYPE twice: {line}");
                continue;
            }
            if line.starts_with("# HELP ") {
                continue;
            }
            assert!(!line.starts_with('#') && !line.is_empty(), "{line:?}");
            let (series, value) = line.rsplit_once(' ').unwrap();
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("bad value in {line}")),
            };
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let body = rest.strip_suffix('}').expect("closing brace");
                    let mut labels: Vec<(String, String)> = body
                        .split("\",")
                        .map(|kv| {
                            let (k, v) = kv.split_once("=\"").expect("k=\"v\"");
                            (k.to_string(), v.trim_end_matches('"').to_string())
                        })
                        .collect();
                    labels.sort();
                    (name.to_string(), labels)
                }
                None => (series.to_string(), vec![]),
            };
            assert!(
                name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{name}"
            );
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|f| typed.contains(*f))
                .unwrap_or(&name)
                .to_string();
            assert!(typed.contains(&family), "sample before its TYPE: {line}");
            assert!(out.insert((name, labels), value).is_none(), "dup: {line}");
        }
        out
    }

    fn key(name: &str, labels: &[(&str, &str)]) -> (String, Vec<(String, String)>) {
        let mut l: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        l.sort();
        (name.to_string(), l)
    }

    /// The field labels of a server of the DROID layout.
    fn droid_labels() -> FieldLabels {
        let ckpt = gr00t_model::Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
        let tags = [gr00t_embodiment::EMBODIMENT_TAG];
        FieldLabels::of_layouts(&gr00t_core::layouts::Layouts::of_checkpoint(&ckpt, &tags).unwrap())
    }

    fn metrics() -> Metrics {
        Metrics::new(
            1.25,
            vec![("version", "0.1.0".into()), ("model", "m\"x".into())],
            droid_labels(),
        )
    }

    #[test]
    fn outcomes_are_counted_by_code_and_field() {
        let m = metrics();
        m.count_request(Outcome::from_status(200, None));
        m.count_request(Outcome::from_status(200, None));
        m.count_request(Outcome::from_status(400, Some("state.eef_9d")));
        m.count_request(Outcome::from_status(400, Some("noise[3][17]")));
        m.count_request(Outcome::from_status(400, Some("noise")));
        m.count_request(Outcome::from_status(413, Some("body")));
        m.count_request(Outcome::from_status(503, None));
        m.answers().count(Door::Zmq, Outcome::Ok);
        m.answers()
            .count(Door::Ws, Outcome::refused("observation/state"));
        let s = parse(&m.render(&Gauges::default()));
        let n = |labels: &[(&str, &str)]| {
            let mut labels = labels.to_vec();
            labels.push(("door", "http"));
            s[&key("gr00t_predict_requests_total", &labels)]
        };
        assert_eq!(n(&[("outcome", "ok"), ("code", "200")]), 2.0);
        assert_eq!(
            n(&[
                ("outcome", "bad_request"),
                ("code", "400"),
                ("field", "state.eef_9d")
            ]),
            1.0
        );
        assert_eq!(
            n(&[
                ("outcome", "bad_request"),
                ("code", "400"),
                ("field", "noise")
            ]),
            2.0
        );
        assert_eq!(n(&[("outcome", "too_large"), ("code", "413")]), 1.0);
        assert_eq!(n(&[("outcome", "busy"), ("code", "503")]), 1.0);
        // Never seen, still exported at zero.
        assert_eq!(n(&[("outcome", "error"), ("code", "500")]), 0.0);
        // The other doors' answers, by door; the HTTP series do not move.
        let at = |door: &str, labels: &[(&str, &str)]| {
            let mut labels = labels.to_vec();
            labels.push(("door", door));
            s.get(&key("gr00t_predict_requests_total", &labels))
                .copied()
        };
        assert_eq!(at("zmq", &[("outcome", "ok"), ("code", "200")]), Some(1.0));
        assert_eq!(at("ws", &[("outcome", "ok"), ("code", "200")]), Some(0.0));
        let refused = [
            ("outcome", "bad_request"),
            ("code", "400"),
            ("field", "observation"),
        ];
        assert_eq!(at("ws", &refused), Some(1.0));
        assert_eq!(at("http", &refused), None);
        assert_eq!(
            at("zmq", &[("outcome", "busy"), ("code", "503")]),
            Some(0.0)
        );
        assert_eq!(
            at("zmq", &[("outcome", "too_large"), ("code", "413")]),
            None
        );
    }

    #[test]
    fn histograms_are_cumulative_with_sum_and_count() {
        let m = metrics();
        let t = TimingMs {
            decode: 2.0,
            encode: 3.0,
            device: 100.0,
            decode_actions: 0.2,
            total: 105.2,
            vision: Some(30.0),
            llm: Some(40.0),
            adapter: None,
            denoise: Some(30.0),
        };
        m.observe_timings(&t, 0.0);
        m.observe_timings(&TimingMs { decode: 7.0, ..t }, 1500.0);
        m.observe(Stage::Request, 0.2);
        let s = parse(&m.render(&Gauges::default()));
        let b = |stage: &str, le: &str| {
            s[&key(
                "gr00t_stage_duration_seconds_bucket",
                &[("stage", stage), ("le", le)],
            )]
        };
        // decode: 2 ms and 7 ms.
        assert_eq!(b("decode", "0.001"), 0.0);
        assert_eq!(b("decode", "0.0025"), 1.0);
        assert_eq!(b("decode", "0.005"), 1.0);
        assert_eq!(b("decode", "0.01"), 2.0);
        assert_eq!(b("decode", "+Inf"), 2.0);
        // queue: 0 s lands in the first bucket, 1.5 s in le=2.5.
        assert_eq!(b("queue", "0.0005"), 1.0);
        assert_eq!(b("queue", "1"), 1.0);
        assert_eq!(b("queue", "2.5"), 2.0);
        let sum = s[&key("gr00t_stage_duration_seconds_sum", &[("stage", "decode")])];
        assert!((sum - 0.009).abs() < 1e-12, "{sum}");
        assert_eq!(
            s[&key(
                "gr00t_stage_duration_seconds_count",
                &[("stage", "compute")]
            )],
            2.0
        );
        // A stage the engine did not time is exported empty, not skipped.
        assert_eq!(b("adapter", "+Inf"), 0.0);
        assert_eq!(b("request", "0.25"), 1.0);
        // Buckets never decrease.
        for stage in Stage::ALL {
            let mut last = 0.0;
            for le in BUCKETS_S
                .iter()
                .map(|v| fmt_float(*v))
                .chain(["+Inf".into()])
            {
                let v = b(stage.name(), &le);
                assert!(v >= last, "{stage:?} le={le}");
                last = v;
            }
        }
    }

    #[test]
    fn gauges_and_build_info() {
        let m = metrics();
        let g = Gauges {
            queue_waiting: 3,
            queue_capacity: 8,
            busy: true,
            computed: 11,
            rss_bytes: Some(123 * 4096),
            vision_cache: CacheCounts { hits: 5, misses: 2 },
            history_entries: 4,
            superseded: 6,
            sessions: SessionStats {
                active: 2,
                created: 9,
                expired: 3,
                evicted: 1,
                resets: 4,
                restarted: 7,
                locked: 5,
                history_bytes: 3 << 20,
                ..Default::default()
            },
        };
        let text = m.render(&g);
        let s = parse(&text);
        let v = |name: &str| s[&key(name, &[])];
        assert_eq!(v("gr00t_queue_depth"), 3.0);
        assert_eq!(v("gr00t_queue_capacity"), 8.0);
        assert_eq!(v("gr00t_inference_busy"), 1.0);
        assert_eq!(v("gr00t_computed_requests_total"), 11.0);
        assert_eq!(v("gr00t_superseded_requests_total"), 6.0);
        assert_eq!(v("gr00t_sessions_active"), 2.0);
        assert_eq!(v("gr00t_sessions_created_total"), 9.0);
        assert_eq!(v("gr00t_sessions_dropped_total"), 4.0);
        assert_eq!(v("gr00t_sessions_reset_total"), 4.0);
        assert_eq!(v("gr00t_sessions_restarted_total"), 7.0);
        assert_eq!(v("gr00t_sessions_locked_refusals_total"), 5.0);
        assert_eq!(v("gr00t_sessions_history_bytes"), 3_145_728.0);
        assert_eq!(v("gr00t_vision_cache_hits_total"), 5.0);
        assert_eq!(v("gr00t_vision_cache_misses_total"), 2.0);
        assert_eq!(v("gr00t_model_load_seconds"), 1.25);
        assert_eq!(v("gr00t_ui_history_entries"), 4.0);
        assert_eq!(v("process_resident_memory_bytes"), 503808.0);
        assert!(
            text.contains("gr00t_build_info{version=\"0.1.0\",model=\"m\\\"x\"} 1\n"),
            "{text}"
        );
        assert!(text.ends_with('\n'));
        // Without a reading, the RSS series is left out rather than faked.
        let text = m.render(&Gauges::default());
        assert!(!text.contains("process_resident_memory_bytes"));
    }

    #[test]
    fn value_and_label_escaping() {
        assert_eq!(fmt_float(f64::INFINITY), "+Inf");
        assert_eq!(fmt_float(f64::NAN), "NaN");
        assert_eq!(fmt_float(0.0005), "0.0005");
        assert_eq!(fmt_float(2.0), "2");
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn rss_agrees_with_statm() {
        let Some(rss) = process_rss_bytes() else {
            return; // not Linux
        };
        // statm's second field is the same counter in pages (4 KiB on x86_64 and aarch64 Linux
        // with default kernels); the two reads are moments apart.
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        let diff = (rss as i64 - (pages * 4096) as i64).unsigned_abs();
        assert!(
            rss > 0 && diff < 16 << 20,
            "status {rss} vs statm {pages} pages"
        );
    }
}
