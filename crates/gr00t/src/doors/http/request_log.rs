//! The log's set-up (text or JSON) and the middleware that assigns request ids, logs each HTTP
//! request on one line ([`RequestLine`]) and feeds finished `/predict` requests to the
//! [`Observer`](super::observe::Observer).

use super::errors::ErrorNote;
use super::metrics::{Outcome, Stage};
use super::observe::Finished;
use super::state::AppState;
use crate::doors::request_line::request_span;
pub use crate::doors::request_line::{PredictFields, RequestId, RequestLine, X_REQUEST_ID};
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;
use gr00t_core::response::PredictResponse;
use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

/// Log output format (`--log-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, event fields at the top level.
    Json,
}

/// Installs the global log subscriber on stderr (`RUST_LOG` filters; default `info`) and,
/// with an `otlp_endpoint`, the OTLP exporter of the request spans ([`crate::otlp`]).
pub fn init_logging(format: LogFormat, otlp_endpoint: Option<&str>) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let stderr = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let log = match format {
        // Plain text when piped, so tooling can match log lines such as the start-up line.
        LogFormat::Text => stderr
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed(),
        // Each line lists its spans outermost first: a request's id, door, session, embodiment.
        LogFormat::Json => stderr
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .boxed(),
    };
    // Its own filter: RUST_LOG quietens the log, not the traces.
    let otlp = otlp_endpoint.and_then(|url| match crate::otlp::OtlpLayer::start(url) {
        Ok(layer) => Some(layer.with_filter(crate::otlp::span_filter())),
        Err(e) => {
            eprintln!("--otlp-endpoint {url}: cannot start the exporter thread: {e}");
            None
        }
    });
    tracing_subscriber::registry()
        .with(log.with_filter(filter))
        .with(otlp)
        .init();
    if let Some(url) = otlp_endpoint {
        tracing::info!("exporting request spans over OTLP/HTTP to {url}/v1/traces");
    }
}

/// Left on a `/predict` response by its handler for this middleware.
#[derive(Clone)]
pub enum PredictNote {
    /// Computed and answered 200.
    Served {
        /// The request body.
        body: Bytes,
        /// The answer.
        response: Arc<PredictResponse>,
        /// Time spent waiting for the worker.
        queue_ms: f64,
    },
    /// Refused; the status is the response's.
    Refused {
        /// The field at fault, for a 400.
        field: Option<String>,
    },
}

/// Middleware: assigns the request id, echoes it, logs the request, and reports finished
/// `/predict` requests to the observer.
pub async fn observe(State(app): State<AppState>, mut req: Request, next: Next) -> Response {
    let id = RequestId::from_headers(req.headers());
    req.extensions_mut().insert(id.clone());
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    // A span for predictions only: page polls and scrapes are not worth a trace.
    let span = if method == Method::POST && path == "/predict" {
        request_span("http", &id)
    } else {
        tracing::Span::none()
    };
    let t0 = Instant::now();
    let mut response = next.run(req).instrument(span.clone()).await;
    let elapsed_s = t0.elapsed().as_secs_f64();
    if let Ok(v) = HeaderValue::from_str(id.as_str()) {
        response.headers_mut().insert(X_REQUEST_ID, v);
    }
    let status = response.status().as_u16();
    let error = response
        .extensions()
        .get::<ErrorNote>()
        .map(|ErrorNote(m)| m.clone());
    let note = response
        .extensions_mut()
        .remove::<PredictNote>()
        .or_else(|| {
            // Refused before the handler ran (an access or body check layered inside this
            // one): still a `/predict` outcome. Such checks only fail on the body or the
            // caller, never on a field inside it.
            (method == Method::POST && path == "/predict").then(|| PredictNote::Refused {
                field: (status == 400).then(|| "body".to_string()),
            })
        });
    let mut line = RequestLine {
        door: "http",
        request_id: id.as_str(),
        method: method.as_str(),
        path: &path,
        status,
        ms: elapsed_s * 1e3,
        error: error.as_deref(),
        predict: None,
    };
    let observer = app.observer();
    // The line carries the span's fields (`--log-format json`: `spans`).
    let _in_request = span.enter();
    match &note {
        Some(PredictNote::Served {
            body,
            response: r,
            queue_ms,
        }) => {
            line.predict = Some(PredictFields::served(r, *queue_ms));
            line.emit();
            observer.metrics().observe(Stage::Request, elapsed_s);
            observer.finished(
                id.as_str(),
                Finished::Served {
                    body: body.clone(),
                    response: r.clone(),
                    queue_ms: *queue_ms,
                },
            );
        }
        Some(PredictNote::Refused { field }) => {
            let outcome = Outcome::from_status(status, field.as_deref());
            line.predict = Some(PredictFields::refused(outcome.name(), field.as_deref()));
            line.emit();
            observer.metrics().observe(Stage::Request, elapsed_s);
            observer.finished(
                id.as_str(),
                Finished::Refused {
                    status,
                    field: field.clone(),
                    message: error.clone().unwrap_or_default(),
                },
            );
        }
        None => line.emit(),
    }
    response
}
