//! The HTTP surface of docs/API.md: routes, handlers, and the one-line-per-request log.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::errors::{json_response, ApiError, HttpError};
use super::history::Shown;
use super::request_log::{self, PredictNote};
use super::state::AppState;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, FailedToBufferBody};
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use gr00t_core::session::check_session_id;
use gr00t_core::InferError;
use serde_json::json;
use std::sync::Arc;

/// Request header naming the client's session (what the balancer hashes on); the body's
/// `session_id` may name it instead.
pub const SESSION_HEADER: &str = "x-session-id";

/// The [`SESSION_HEADER`]'s session, checked.
fn session_header(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get(SESSION_HEADER) else {
        return Ok(None);
    };
    let id = v
        .to_str()
        .map_err(|_| ApiError::bad_field(SESSION_HEADER, "expected printable ASCII"))?;
    check_session_id(id).map_err(|m| ApiError::bad_field(SESSION_HEADER, m))?;
    Ok(Some(id.to_string()))
}

/// Response header naming the replica that answered (`--replica-id`), so that a client behind a
/// load balancer, and the fleet test, can tell which replica served it.
pub const REPLICA_HEADER: &str = "x-gr00t-replica";

/// Checks a `--replica-id`: 1 to 253 characters of `A-Z a-z 0-9 . _ -` (any Kubernetes pod
/// name fits), returned as the header value.
pub fn replica_id(id: &str) -> Result<HeaderValue, HttpError> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if id.is_empty() || id.len() > 253 || !id.chars().all(ok) {
        return Err(HttpError::ReplicaId(id.into()));
    }
    HeaderValue::from_str(id).map_err(|cause| HttpError::ReplicaHeader {
        id: id.into(),
        cause,
    })
}

/// Names the replica on every response, refusals and unknown paths included.
async fn name_replica(
    State(app): State<AppState>,
    req: Request,
    next: middleware::Next,
) -> Response {
    with_replica(next.run(req).await, app.0.replica.as_ref())
}

/// `r` with the replica's header, when it has an id.
pub(crate) fn with_replica(mut r: Response, replica: Option<&HeaderValue>) -> Response {
    if let Some(id) = replica {
        r.headers_mut().insert(REPLICA_HEADER, id.clone());
    }
    r
}

/// All routes, JSON fallbacks for unknown paths and methods, and the request log, with
/// `inner` layers (e.g. access checks) applied inside the request log, so
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
        .route("/reset", post(reset))
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
        Ok((shown, response, queue_ms)) => {
            let mut r = json_response(StatusCode::OK, &super::reply::PredictBody::from(&response));
            r.extensions_mut().insert(PredictNote::Served {
                shown,
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

/// What the status page shows of the request (when it is on), the answer and the time it
/// waited in the queue.
async fn compute(
    app: &AppState,
    req: Request,
) -> Result<
    (
        Option<Arc<Shown>>,
        gr00t_core::response::PredictResponse,
        f64,
    ),
    ApiError,
> {
    // The guard refused non-JSON bodies (`doors::browser`); the request log stamped the
    // head's arrival.
    let arrived = req
        .extensions()
        .get::<super::request_log::Arrived>()
        .map_or_else(std::time::Instant::now, |a| a.0);
    let session = session_header(req.headers())?;
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
    // A full queue refuses a body before parsing it, unless the X-Session-Id header names a
    // session, whose observation may still replace its waiting one (a body's own session_id
    // is only known after parsing).
    if session.is_none() && app.0.worker.is_full() {
        return Err(api_error(app.0.worker.busy()));
    }
    let layouts = app.0.layouts.clone();
    let page = app.0.observer.history().is_some();
    // Parsed off the two runtime threads, a few at a time; the session must be known before
    // queueing, for latest-wins.
    let permit = app
        .0
        .parsing
        .acquire()
        .await
        .map_err(|e| ApiError::internal(format!("the body parser is closed: {e}")))?;
    // Parsed and its frames decoded here, on the blocking pool: the request's `parse` span.
    let parse = tracing::info_span!("parse");
    let (request, shown) = tokio::task::spawn_blocking(move || {
        let request =
            parse.in_scope(|| super::body::request_from_body(&body, &layouts, session))?;
        // The page's copy of the decoded input: its history thread never reads the body.
        let shown = page.then(|| Arc::new(Shown::of(&request)));
        Ok::<_, gr00t_embodiment::observation::RequestError>((request, shown))
    })
    .await
    .map_err(|e| ApiError::internal(format!("the body decoder failed: {e}")))?
    .map_err(|e| ApiError::bad_field(&e.field, e.message))?;
    drop(permit);
    let reply = app
        .0
        .worker
        .submit_at(request, arrived)
        .map_err(api_error)?;
    match reply.await {
        Ok(Ok(response)) => {
            // The body's parse counts as decoding (`timing_ms.decode`), not waiting.
            let queue_ms = response.queue_ms;
            Ok((shown, response, queue_ms))
        }
        Ok(Err(e)) => Err(api_error(e)),
        Err(_) => Err(ApiError::internal(
            "the inference worker dropped the request",
        )),
    }
}

/// The HTTP answer of a core refusal: 400 naming the field, 503 with `Retry-After`, 500.
fn api_error(e: InferError) -> ApiError {
    match e {
        InferError::Invalid(e) => ApiError::bad_field(&e.field, e.message),
        InferError::Busy {
            capacity,
            retry_after_s,
        } => ApiError::busy(capacity, retry_after_s),
        InferError::Superseded => ApiError::new(
            StatusCode::CONFLICT,
            "superseded by a newer observation of this session (it was never computed)",
        ),
        InferError::SessionRestarted(m) => ApiError {
            field: Some("session_token".into()),
            ..ApiError::new(StatusCode::CONFLICT, format!("session restarted: {m}"))
        },
        InferError::SessionLocked(m) => ApiError {
            field: Some("session_token".into()),
            ..ApiError::new(StatusCode::CONFLICT, format!("session locked: {m}"))
        },
        InferError::Stopped => ApiError::internal("the inference worker has stopped"),
        InferError::Internal(m) => ApiError::internal(format!("internal error: {m}")),
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

/// `POST /reset`: clears the session the body's `session_id` or the [`SESSION_HEADER`] names
/// (a locked one only with the body's `session_token`).
async fn reset(State(app): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    match reset_session(&app, &headers, &body) {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

fn reset_session(app: &AppState, headers: &HeaderMap, body: &[u8]) -> Result<Response, ApiError> {
    let header = session_header(headers)?;
    let value = if body.iter().all(u8::is_ascii_whitespace) {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_field("body", format!("invalid JSON: {e}")))?
    };
    let id = super::body::session_of(&value, header)
        .map_err(|e| ApiError::bad_field(&e.field, e.message))?
        .ok_or_else(|| {
            ApiError::bad_field(
                "session_id",
                format!("is required (in the body or the {SESSION_HEADER} header)"),
            )
        })?;
    let token = super::body::session_token_of(&value, true)
        .map_err(|e| ApiError::bad_field(&e.field, e.message))?;
    let existed = app
        .0
        .worker
        .reset_session(&super::body::session_key(&id), token.as_deref())
        .map_err(api_error)?;
    Ok(json_response(
        StatusCode::OK,
        &json!({ "session_id": id, "reset": existed }),
    ))
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
        "connections": limits.connections,
    });
    body["queue"] = serde_json::to_value(app.0.worker.state()).unwrap_or_default();
    body["sessions"] = serde_json::to_value(app.0.worker.session_stats()).unwrap_or_default();
    body["replica_id"] = json!(app.0.replica.as_ref().and_then(|v| v.to_str().ok()));
    body["otlp_endpoint"] = json!(crate::otlp::endpoint());
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
            "no route {method} {} (see /info; POST /predict /reset, GET /health /info /demo /v1/models)",
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

    #[test]
    fn replica_ids_are_header_safe() {
        assert_eq!(
            replica_id("gr00t-7d9f-x2.b_1").unwrap(),
            "gr00t-7d9f-x2.b_1"
        );
        assert!(replica_id(&"a".repeat(253)).is_ok());
        for bad in ["", "a b", "r\nx", "é", &"a".repeat(254)] {
            let e = replica_id(bad).unwrap_err().to_string();
            assert!(e.starts_with("--replica-id "), "{e}");
        }
    }
}
