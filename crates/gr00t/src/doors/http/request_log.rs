//! The middleware that assigns request ids, logs each HTTP request on one line
//! ([`RequestLine`]) and feeds finished `/predict` requests to the
//! [`Observer`](super::observe::Observer).

use super::errors::ErrorNote;
use super::history::Shown;
use super::metrics::{Outcome, Stage};
use super::observe::Finished;
use super::state::AppState;
use crate::doors::request_line::{request_span, TraceParent};
pub use crate::doors::request_line::{PredictFields, RequestId, RequestLine, X_REQUEST_ID};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;
use gr00t_core::response::PredictResponse;
use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

/// Left on a `/predict` response by its handler for this middleware.
#[derive(Clone)]
pub enum PredictNote {
    /// Computed and answered 200.
    Served {
        /// The request's input as the status page shows it (`None` with `--no-ui`).
        shown: Option<Arc<Shown>>,
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

/// When a request's head reached the door, before its body was read: the request log times
/// the request from it, and latest-wins within a session compares these
/// (`Queue::submit_at`), not when each parse ended.
#[derive(Clone, Copy, Debug)]
pub struct Arrived(pub Instant);

/// Middleware: assigns the request id, stamps its arrival, echoes the id, logs the request,
/// and reports finished `/predict` requests to the observer.
pub async fn observe(State(app): State<AppState>, mut req: Request, next: Next) -> Response {
    let t0 = Instant::now();
    req.extensions_mut().insert(Arrived(t0));
    let id = RequestId::from_headers(req.headers());
    req.extensions_mut().insert(id.clone());
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    // A span for predictions only: page polls and scrapes are not worth a trace.
    let span = if method == Method::POST && path == "/predict" {
        request_span("http", &id, TraceParent::from_headers(req.headers()))
    } else {
        tracing::Span::none()
    };
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
            shown,
            response: r,
            queue_ms,
        }) => {
            line.predict = Some(PredictFields::served(r, *queue_ms));
            line.emit();
            observer.metrics().observe(Stage::Request, elapsed_s);
            observer.finished(
                id.as_str(),
                Finished::Served {
                    shown: shown.clone(),
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
