//! The HTTP door (docs/API.md): routes, the body → request decoding, refusals
//! (`From<InferError>` for the JSON error shape), hardening, the status page, the request log
//! and `/metrics`. It knows the core's queue and nothing of the other doors.

pub mod body;
pub(crate) mod demo;
mod errors;
pub mod hardening;
mod history;
pub(crate) mod metrics;
pub(crate) mod observe;
pub mod request_log;
pub(crate) mod routes;
mod ui;

pub use hardening::HardeningOptions;
pub use observe::DEFAULT_HISTORY;
pub use request_log::{init_logging, LogFormat};

#[cfg(test)]
mod test_client;
#[cfg(test)]
mod tests;

use super::Stop;
use routes::AppState;
use tokio::net::TcpListener;

/// Serves the routes on `listener` behind the connection cap, idle and body timeouts and the
/// `api_token` check, until `stop` fires.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    hardening: &HardeningOptions,
    api_token: Option<&str>,
    max_message: usize,
    stop: Stop,
) -> std::io::Result<()> {
    // Connection cap and idle timeout (the listener also sets TCP_NODELAY).
    let listener = hardening::LimitedListener::new(listener, hardening, max_message);
    let guard = hardening::Guard {
        api_token: api_token.map(Into::into),
        body_timeout: hardening::seconds(hardening.body_timeout_s),
        max_body_bytes: max_message,
    };
    let app = routes::router_with(state, |r| {
        r.layer(axum::middleware::from_fn_with_state(
            guard,
            hardening::guard,
        ))
    });
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<hardening::ConnInfo>(),
    )
    .with_graceful_shutdown(async move { stop.wait().await })
    .await
}
