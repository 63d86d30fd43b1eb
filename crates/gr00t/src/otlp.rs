//! `serve --otlp-endpoint`: the request spans exported over OTLP/HTTP with the JSON encoding.
//!
//! Why a small exporter of our own instead of `opentelemetry-otlp` + `tracing-opentelemetry`:
//! those crates bring the OpenTelemetry SDK, an async HTTP stack (reqwest/hyper, or tonic and
//! prost for gRPC) and a batch processor on its own runtime, for what is here a handful of
//! spans per request. OTLP/HTTP JSON is a documented, stable encoding every collector (the
//! OpenTelemetry Collector, Jaeger, Tempo) accepts on `/v1/traces`; the server already has
//! `ureq`, `serde_json` and `tracing-subscriber`, so this costs no new dependency.
//!
//! Finished spans go through a bounded channel to one background thread that batches them and
//! POSTs `{endpoint}/v1/traces`. The request path never waits: a full channel drops the span
//! (counted, and logged by the exporter), and a collector that is down only costs the exporter
//! thread a timeout.

use crate::doors::request_line::{TraceParent, REQUEST_TARGET};
use serde_json::{json, Value};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::filter::FilterFn;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Finished spans that may wait for the exporter; more are dropped.
const QUEUE: usize = 4096;
/// Spans sent in one POST at most.
const BATCH: usize = 512;
/// How long the exporter waits for more spans after the first of a batch.
const LINGER: Duration = Duration::from_millis(100);
/// Longest a POST to the collector may take (the exporter thread alone waits on it).
const TIMEOUT: Duration = Duration::from_secs(5);

/// The endpoint spans are exported to, once logging is set up with one (`/info` shows it).
static ENDPOINT: OnceLock<String> = OnceLock::new();

/// The `--otlp-endpoint` in effect, if any.
pub fn endpoint() -> Option<&'static str> {
    ENDPOINT.get().map(String::as_str)
}

/// Which spans are exported: this server's own at `info` or above (the request spans and
/// their stages), whatever `RUST_LOG` says.
pub fn span_filter() -> FilterFn {
    fn exported(m: &Metadata<'_>) -> bool {
        m.is_span() && *m.level() <= Level::INFO && m.target().starts_with("gr00t")
    }
    FilterFn::new(exported as fn(&Metadata<'_>) -> bool)
}

/// One attribute value as OTLP's `AnyValue` JSON.
#[derive(Debug, Clone)]
enum Attr {
    Str(String),
    Int(i64),
    Double(f64),
    Bool(bool),
}

impl Attr {
    fn to_json(&self) -> Value {
        match self {
            Attr::Str(s) => json!({ "stringValue": s }),
            // OTLP JSON writes 64-bit integers as strings.
            Attr::Int(i) => json!({ "intValue": i.to_string() }),
            Attr::Double(d) => json!({ "doubleValue": d }),
            Attr::Bool(b) => json!({ "boolValue": b }),
        }
    }
}

/// A span's fields, as recorded so far.
#[derive(Default)]
struct Fields(Vec<(&'static str, Attr)>);

impl Fields {
    fn set(&mut self, name: &'static str, value: Attr) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name, value)),
        }
    }
}

impl Fields {
    /// The client's trace the span continues (the request span's `traceparent` field).
    fn traceparent(&self) -> Option<TraceParent> {
        match self.0.iter().find(|(n, _)| *n == "traceparent") {
            Some((_, Attr::Str(s))) => TraceParent::parse(s),
            _ => None,
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field.name(), Attr::Str(value.to_string()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field.name(), Attr::Int(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.set(field.name(), Attr::Int(value as i64));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.set(field.name(), Attr::Double(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.set(field.name(), Attr::Bool(value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.set(field.name(), Attr::Str(format!("{value:?}")));
    }
}

/// What the layer keeps on an open span (in the registry's extensions).
struct Open {
    trace_id: u128,
    span_id: u64,
    parent_id: Option<u64>,
    start: SystemTime,
    fields: Fields,
}

/// A closed span on its way to the collector.
struct Finished {
    open: Open,
    name: &'static str,
    target: &'static str,
    end: SystemTime,
}

/// A random non-zero 64-bit id (std's per-process random hasher keys, spread by a counter).
fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    loop {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        let v = h.finish();
        if v != 0 {
            return v;
        }
    }
}

fn unix_nanos(t: SystemTime) -> String {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
        .to_string()
}

impl Finished {
    fn to_json(&self) -> Value {
        let o = &self.open;
        let attributes: Vec<Value> = o
            .fields
            .0
            .iter()
            .map(|(k, v)| json!({ "key": k, "value": v.to_json() }))
            .collect();
        // SERVER for the span of a whole request, INTERNAL for its stages.
        let kind = if self.target == REQUEST_TARGET { 2 } else { 1 };
        let mut span = json!({
            "traceId": format!("{:032x}", o.trace_id),
            "spanId": format!("{:016x}", o.span_id),
            "name": self.name,
            "kind": kind,
            "startTimeUnixNano": unix_nanos(o.start),
            "endTimeUnixNano": unix_nanos(self.end),
            "attributes": attributes,
        });
        if let Some(p) = o.parent_id {
            span["parentSpanId"] = json!(format!("{p:016x}"));
        }
        span
    }
}

/// The OTLP `ExportTraceServiceRequest` JSON of one batch.
fn export_body(spans: &[Finished]) -> Value {
    json!({
        "resourceSpans": [{
            "resource": { "attributes": [
                { "key": "service.name", "value": { "stringValue": "gr00t" } },
                { "key": "service.version",
                  "value": { "stringValue": env!("CARGO_PKG_VERSION") } },
            ]},
            "scopeSpans": [{
                "scope": { "name": "gr00t", "version": env!("CARGO_PKG_VERSION") },
                "spans": spans.iter().map(Finished::to_json).collect::<Vec<_>>(),
            }],
        }],
    })
}

/// A `tracing_subscriber` layer that exports every span it sees, once closed, over OTLP/HTTP
/// JSON. Never blocks or panics the thread that closes a span.
pub struct OtlpLayer {
    tx: SyncSender<Finished>,
    dropped: Arc<AtomicU64>,
}

impl OtlpLayer {
    /// The layer and its exporter thread, posting to `{endpoint}/v1/traces`.
    pub fn start(endpoint: &str) -> std::io::Result<OtlpLayer> {
        let (tx, rx) = sync_channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
        let counter = dropped.clone();
        std::thread::Builder::new()
            .name("gr00t-otlp".into())
            .spawn(move || export(&url, &rx, &counter))?;
        let _ = ENDPOINT.set(endpoint.to_string());
        Ok(OtlpLayer { tx, dropped })
    }
}

impl<S> Layer<S> for OtlpLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let parent = span.parent().and_then(|p| {
            p.extensions()
                .get::<Open>()
                .map(|o| (o.trace_id, o.span_id))
        });
        let (trace_id, parent_id) = match parent {
            Some((t, s)) => (t, Some(s)),
            // A request continues the client's trace when it sent one.
            None if span.metadata().target() == REQUEST_TARGET => match fields.traceparent() {
                Some(p) => (p.trace_id, Some(p.parent_id)),
                None => (
                    (u128::from(random_u64()) << 64) | u128::from(random_u64()),
                    None,
                ),
            },
            // A stage outside any request (the warm-up, a bench): no trace of its own.
            None => return,
        };
        span.extensions_mut().insert(Open {
            trace_id,
            span_id: random_u64(),
            parent_id,
            start: SystemTime::now(),
            fields,
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(open) = span.extensions_mut().get_mut::<Open>() {
                values.record(&mut open.fields);
            }
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(open) = span.extensions_mut().remove::<Open>() else {
            return;
        };
        let finished = Finished {
            open,
            name: span.name(),
            target: span.metadata().target(),
            end: SystemTime::now(),
        };
        match self.tx.try_send(finished) {
            Ok(()) => {}
            // The exporter is behind (a slow collector): lose the span, not the request's time.
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

/// The exporter thread: batches what arrives and posts it, until every sender is gone.
fn export(url: &str, rx: &Receiver<Finished>, dropped: &AtomicU64) {
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(TIMEOUT)
        .timeout(TIMEOUT)
        .build();
    // Failures are logged when they start and when they end, not once per batch.
    let mut failing = false;
    let mut reported_drops = 0;
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        let deadline = Instant::now() + LINGER;
        while batch.len() < BATCH {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(s) => batch.push(s),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        let body = export_body(&batch).to_string();
        let sent = agent
            .post(url)
            .set("Content-Type", "application/json")
            .send_string(&body);
        match sent {
            Ok(_) if failing => {
                failing = false;
                tracing::info!("OTLP export to {url} works again");
            }
            Ok(_) => {}
            Err(e) if !failing => {
                failing = true;
                tracing::warn!("OTLP export to {url} failed, spans are dropped: {e}");
            }
            Err(_) => {}
        }
        let d = dropped.load(Ordering::Relaxed);
        if d > reported_drops {
            tracing::warn!("OTLP export fell behind: {d} spans dropped so far");
            reported_drops = d;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    /// A layer whose finished spans arrive on the returned receiver.
    fn test_layer() -> (OtlpLayer, Receiver<Finished>) {
        let (tx, rx) = sync_channel(64);
        let layer = OtlpLayer {
            tx,
            dropped: Arc::default(),
        };
        (layer, rx)
    }

    #[test]
    fn spans_keep_their_trace_parents_and_fields() {
        let (layer, rx) = test_layer();
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let root = tracing::info_span!(
                target: "gr00t::request",
                "request",
                door = "http",
                embodiment = tracing::field::Empty
            );
            root.record("embodiment", "oxe_droid");
            root.in_scope(|| {
                let _child = tracing::info_span!("vision").entered();
            });
        });
        let spans: Vec<Finished> = rx.try_iter().collect();
        assert_eq!(spans.len(), 2);
        let (child, root) = (&spans[0], &spans[1]);
        assert_eq!((child.name, root.name), ("vision", "request"));
        assert_eq!(child.open.trace_id, root.open.trace_id);
        assert_eq!(child.open.parent_id, Some(root.open.span_id));
        assert_eq!(root.open.parent_id, None);
        let body = export_body(&spans);
        let json = &body["resourceSpans"][0]["scopeSpans"][0]["spans"];
        assert_eq!(json[1]["kind"], 2);
        assert_eq!(json[0]["parentSpanId"], json[1]["spanId"]);
        assert_eq!(json[1]["traceId"].as_str().unwrap().len(), 32);
        let attrs = json[1]["attributes"].to_string();
        assert!(
            attrs.contains("\"oxe_droid\"") && attrs.contains("\"http\""),
            "{attrs}"
        );
    }

    #[test]
    fn a_request_with_a_traceparent_continues_the_clients_trace() {
        let (layer, rx) = test_layer();
        let client = TraceParent {
            trace_id: 0x4bf92f3577b34da6a3ce929d0e0e4736,
            parent_id: 0x00f067aa0ba902b7,
        };
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let id = crate::doors::request_line::RequestId::generate();
            let root = crate::doors::request_line::request_span("http", &id, Some(client));
            root.in_scope(|| {
                let _child = tracing::info_span!("vision").entered();
            });
            drop(root);
            let plain = crate::doors::request_line::request_span("http", &id, None);
            drop(plain);
        });
        let spans: Vec<Finished> = rx.try_iter().collect();
        assert_eq!(spans.len(), 3);
        let (child, root, plain) = (&spans[0].open, &spans[1].open, &spans[2].open);
        assert_eq!(root.trace_id, client.trace_id);
        assert_eq!(root.parent_id, Some(client.parent_id));
        assert_eq!(child.trace_id, client.trace_id);
        assert_eq!(child.parent_id, Some(root.span_id));
        assert_ne!(plain.trace_id, client.trace_id);
        assert_eq!(plain.parent_id, None);
    }
}
