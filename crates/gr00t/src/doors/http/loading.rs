//! The HTTP door while the model loads and warms up: `/health` answers 503
//! `{"status":"loading"}` (a readiness or startup probe holds traffic back, a balancer tries
//! another replica) and every other path 503 with `Retry-After` (through a proxy: closed
//! unanswered, so the proxy tries another replica), behind the same connection cap and timers
//! as the routes. [`Switch::ready`] swaps the routes in once the model is ready.

use super::errors::{json_response, ApiError};
use super::routes::with_replica;
use crate::doors::connections::conn_of;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::json;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

/// Seconds a client is asked to wait before retrying a loading server.
const RETRY_AFTER_S: u64 = 5;

/// What the HTTP door answers with: the loading answers, then, once set, the routes.
#[derive(Clone)]
pub struct Switch {
    loading: Router,
    routes: Arc<OnceLock<Router>>,
}

impl Switch {
    /// The loading answers (naming the replica, when it has an id).
    pub fn loading(replica: Option<HeaderValue>) -> Switch {
        Switch {
            loading: loading_routes(replica),
            routes: Arc::new(OnceLock::new()),
        }
    }

    /// The routes from the start (no loading phase).
    pub fn serving(routes: Router) -> Switch {
        let switch = Switch {
            loading: Router::new(),
            routes: Arc::new(OnceLock::new()),
        };
        switch.ready(routes);
        switch
    }

    /// From now on, requests go to `routes` (the first call decides; later ones are ignored).
    pub fn ready(&self, routes: Router) {
        let _ = self.routes.set(routes);
    }

    fn current(&self) -> Router {
        self.routes.get().unwrap_or(&self.loading).clone()
    }
}

impl tower_service::Service<Request> for Switch {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let mut routes = self.current();
        // A Router is always ready (axum's docs), so it is called without polling.
        Box::pin(async move { tower_service::Service::call(&mut routes, req).await })
    }
}

/// `/health` 503 `loading`, anything else 503 with `Retry-After`; the body is never read.
fn loading_routes(replica: Option<HeaderValue>) -> Router {
    let named = move |r: Response| with_replica(r, replica.as_ref());
    let health = {
        let named = named.clone();
        move || async move {
            named(json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({ "status": "loading" }),
            ))
        }
    };
    let other = move |req: Request| async move {
        // Through a proxy (X-Forwarded-For), the connection closes unanswered so the proxy
        // tries another replica, as it did while this port was closed.
        if req.headers().contains_key("x-forwarded-for") {
            if let Some(conn) = conn_of(&req) {
                conn.close_unanswered();
            }
        }
        named(
            ApiError {
                retry_after_s: Some(RETRY_AFTER_S),
                ..ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the model is loading: retry in a few seconds (GET /health says ok when ready)",
                )
            }
            .into_response(),
        )
    };
    Router::new().route("/health", get(health)).fallback(other)
}
