//! The HTTP surface of docs/API.md: routes, handlers, and the one-line-per-request log.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::demo::demo_body;
use super::errors::{json_response, ApiError};
use super::observe::Observer;
use super::request_log::{self, PredictNote};
use super::worker::{QueueState, SubmitError, WorkerHandle};
use crate::engine::{EngineInfo, PredictError};
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, FailedToBufferBody};
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

/// Request limits, reported by `/info`.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Requests that may wait behind the one in flight.
    pub queue: usize,
    /// Largest accepted `/predict` body.
    pub max_body_bytes: usize,
}

/// What the handlers share.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

struct Inner {
    worker: WorkerHandle,
    replica: Option<HeaderValue>,
    info: EngineInfo,
    limits: Limits,
    started_unix: u64,
    demo: Bytes,
    observer: Observer,
}

impl AppState {
    /// State with default observation (metrics, and a status page without frames), for tests.
    #[cfg(test)]
    pub fn new(worker: WorkerHandle, info: EngineInfo, limits: Limits) -> AppState {
        let observer = Observer::new(Default::default()).expect("start the history thread");
        AppState::with_observer(worker, info, limits, observer, None)
    }

    /// State over a running worker, the engine's description, an observer and the replica id
    /// that every response names (see [`replica_id`]).
    pub fn with_observer(
        worker: WorkerHandle,
        info: EngineInfo,
        limits: Limits,
        observer: Observer,
        replica: Option<HeaderValue>,
    ) -> AppState {
        let started_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        AppState(Arc::new(Inner {
            worker,
            replica,
            info,
            limits,
            started_unix,
            demo: Bytes::from(demo_body()),
            observer,
        }))
    }

    /// Metrics and history.
    pub fn observer(&self) -> &Observer {
        &self.0.observer
    }

    /// The queue's live state.
    pub fn queue_state(&self) -> QueueState {
        self.0.worker.state()
    }
}

/// Response header naming the replica that answered (`--replica-id`), so that a client behind a
/// load balancer, and the fleet test, can tell which replica served it.
pub const REPLICA_HEADER: &str = "x-gr00t-replica";

/// Checks a `--replica-id`: 1 to 253 characters of `A-Z a-z 0-9 . _ -` (any Kubernetes pod
/// name fits), returned as the header value.
pub fn replica_id(id: &str) -> Result<HeaderValue, String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if id.is_empty() || id.len() > 253 || !id.chars().all(ok) {
        return Err(format!(
            "--replica-id {id:?}: expected 1 to 253 characters of A-Z a-z 0-9 . _ -"
        ));
    }
    HeaderValue::from_str(id).map_err(|e| format!("--replica-id {id:?}: {e}"))
}

/// Names the replica on every response, refusals and unknown paths included.
async fn name_replica(
    State(app): State<AppState>,
    req: Request,
    next: middleware::Next,
) -> Response {
    let mut r = next.run(req).await;
    if let Some(id) = &app.0.replica {
        r.headers_mut().insert(REPLICA_HEADER, id.clone());
    }
    r
}

/// All routes, JSON fallbacks for unknown paths and methods, and the request log.
#[cfg(test)]
pub fn router(state: AppState) -> Router {
    router_with(state, |r| r)
}

/// [`router`] with `inner` layers (e.g. access checks) applied inside the request log, so
/// that their refusals are logged, counted and carry an `x-request-id` like any answer.
pub fn router_with(
    state: AppState,
    inner: impl FnOnce(Router<AppState>) -> Router<AppState>,
) -> Router {
    let limit = state.0.limits.max_body_bytes;
    let routes = Router::new()
        .route(
            "/predict",
            post(predict).layer(DefaultBodyLimit::max(limit)),
        )
        .route("/health", get(health))
        .route("/info", get(info))
        .route("/demo", get(demo))
        .route("/v1/models", get(models))
        .merge(super::ui::routes(state.observer().history().is_some()))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed);
    inner(routes)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            request_log::observe,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), name_replica))
        .with_state(state)
}

/// Answers `/predict`, leaving a [`PredictNote`] on the response for the log and metrics.
async fn predict(State(app): State<AppState>, req: Request) -> Response {
    match compute(&app, req).await {
        Ok((body, response, queue_ms)) => {
            let mut r = json_response(StatusCode::OK, &response);
            r.extensions_mut().insert(PredictNote::Served {
                body,
                response: Arc::new(response),
                queue_ms,
            });
            r
        }
        Err(e) => {
            let field = e.field.clone();
            let mut r = e.into_response();
            r.extensions_mut().insert(PredictNote::Refused { field });
            r
        }
    }
}

/// The body, the answer and the time it waited in the queue.
async fn compute(
    app: &AppState,
    req: Request,
) -> Result<(Bytes, gr00t_droid::response::PredictResponse, f64), ApiError> {
    check_content_type(req.headers())?;
    let limit = app.0.limits.max_body_bytes;
    // Refuse a declared oversize body before reading any of it.
    if content_length(req.headers()).is_some_and(|n| n > limit as u64) {
        return Err(ApiError::too_large(limit));
    }
    let body = match Bytes::from_request(req, &()).await {
        Ok(b) => b,
        Err(BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_))) => {
            return Err(ApiError::too_large(limit))
        }
        Err(e) => {
            return Err(ApiError::bad_field(
                "body",
                format!("cannot read the request body: {e}"),
            ))
        }
    };
    let worker = &app.0.worker;
    let queued = Instant::now();
    let reply = worker.submit(body.clone()).map_err(|e| match e {
        SubmitError::Full => ApiError::busy(app.0.limits.queue, worker.retry_after_s()),
        SubmitError::Stopped => ApiError::internal("the inference worker has stopped"),
    })?;
    match reply.await {
        Ok(Ok(response)) => {
            // Waiting = time to the answer minus the worker's own measure of its job.
            let queue_ms =
                (queued.elapsed().as_secs_f64() * 1e3 - response.timing_ms.total).max(0.0);
            Ok((body, response, queue_ms))
        }
        Ok(Err(PredictError::BadRequest(e))) => Err(ApiError::bad_field(&e.field, e.message)),
        Ok(Err(PredictError::Internal(m))) => {
            Err(ApiError::internal(format!("internal error: {m}")))
        }
        Err(_) => Err(ApiError::internal(
            "the inference worker dropped the request",
        )),
    }
}

/// Accepts a missing content type (raw clients) or any JSON one; refuses the rest.
fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let text = value.to_str().unwrap_or("");
    let mime = text
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json")) {
        Ok(())
    } else {
        Err(ApiError::bad_field(
            "content-type",
            format!("expected application/json, got {text:?}"),
        ))
    }
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

async fn health() -> Response {
    json_response(StatusCode::OK, &json!({ "status": "ok" }))
}

async fn info(State(app): State<AppState>) -> Response {
    let mut body = serde_json::to_value(&app.0.info).unwrap_or_else(|_| json!({}));
    let limits = app.0.limits;
    body["limits"] = json!({
        "queue": limits.queue,
        "max_body_bytes": limits.max_body_bytes,
        "max_body_mb": limits.max_body_bytes / (1024 * 1024),
    });
    body["queue"] = serde_json::to_value(app.0.worker.state()).unwrap_or_default();
    body["replica_id"] = json!(app.0.replica.as_ref().and_then(|v| v.to_str().ok()));
    json_response(StatusCode::OK, &body)
}

async fn demo(State(app): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        app.0.demo.clone(),
    )
        .into_response()
}

async fn models(State(app): State<AppState>) -> Response {
    let info = &app.0.info;
    json_response(
        StatusCode::OK,
        &json!({
            "object": "list",
            "data": [{
                "id": info.model_id,
                "object": "model",
                "created": app.0.started_unix,
                "owned_by": "nvidia",
                "revision": info.revision,
                "embodiment": info.embodiment,
            }],
        }),
    )
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "no route {method} {} (see /info; POST /predict, GET /health /info /demo /v1/models)",
            uri.path()
        ),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("method {method} is not allowed on {}", uri.path()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(ct: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(ct) = ct {
            h.insert(header::CONTENT_TYPE, HeaderValue::from_str(ct).unwrap());
        }
        h
    }

    #[test]
    fn content_type_rules() {
        assert!(check_content_type(&headers(None)).is_ok());
        assert!(check_content_type(&headers(Some("application/json"))).is_ok());
        assert!(check_content_type(&headers(Some("Application/JSON; charset=utf-8"))).is_ok());
        assert!(check_content_type(&headers(Some("application/vnd.api+json"))).is_ok());
        let e =
            check_content_type(&headers(Some("application/x-www-form-urlencoded"))).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(e.message.starts_with("content-type: "), "{}", e.message);
        assert!(check_content_type(&headers(Some("text/plain"))).is_err());
    }

    #[test]
    fn replica_ids_are_header_safe() {
        assert_eq!(
            replica_id("gr00t-7d9f-x2.b_1").unwrap(),
            "gr00t-7d9f-x2.b_1"
        );
        assert!(replica_id(&"a".repeat(253)).is_ok());
        for bad in ["", "a b", "r\nx", "é", &"a".repeat(254)] {
            let e = replica_id(bad).unwrap_err();
            assert!(e.starts_with("--replica-id "), "{e}");
        }
    }
}
