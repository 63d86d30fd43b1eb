//! The HTTP door (docs/API.md): routes and their shared state, the body → request decoding,
//! refusals (`ApiError`, the JSON error shape; `routes::api_error` maps the core's), hardening,
//! the status page, the request log and `/metrics`. It knows the core's queue and nothing of the
//! other doors.

pub mod body;
pub(crate) mod demo;
mod errors;
pub mod hardening;
mod history;
mod json;
mod loading;
pub(crate) mod metrics;
pub(crate) mod observe;
pub mod reply;
pub mod request_log;
pub(crate) mod routes;
pub(crate) mod state;
mod ui;

pub use errors::HttpError;
pub use loading::Switch;
pub use observe::DEFAULT_HISTORY;

#[cfg(test)]
mod tests;

use super::connections::{ConnInfo, LimitedListener};
use super::{DoorLimits, Stop};
use state::AppState;
use tokio::net::TcpListener;

/// Serves the routes on `listener` behind the connection cap and timers, the browser rules,
/// the body deadline and the `api_token` check, until `stop` fires.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    limits: &DoorLimits,
    stop: Stop,
) -> std::io::Result<()> {
    let app = Switch::serving(guarded_routes(state, limits));
    serve_switch(listener, app, limits.clone(), stop).await
}

/// The routes behind the browser rules, the body deadline and the `api_token` check.
pub fn guarded_routes(state: AppState, limits: &DoorLimits) -> axum::Router {
    let guard = hardening::Guard {
        api_token: limits.api_token.clone(),
        body: limits.body,
        max_body_bytes: limits.max_message_bytes,
        browser: limits.browser.clone(),
    };
    routes::router_with(state, |r| {
        r.layer(axum::middleware::from_fn_with_state(
            guard,
            hardening::guard,
        ))
    })
}

/// Serves what `app` answers with now (the loading answers, then the routes) on `listener`
/// behind the connection cap and timers, until `stop` fires.
pub async fn serve_switch(
    listener: TcpListener,
    app: Switch,
    limits: DoorLimits,
    stop: Stop,
) -> std::io::Result<()> {
    // Connection cap and timers (the listener also sets TCP_NODELAY).
    let listener = LimitedListener::new(listener, "http", limits.caps.http, limits.timers);
    let app = axum::Router::new().fallback_service(app);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<ConnInfo>(),
    )
    .with_graceful_shutdown(async move { stop.wait().await })
    .await
}
