//! The websocket front door: routing, handshake and the connection loop shared by the openpi
//! dialects. The path picks the dialect:
//!
//! - `/v1/realtime/robot/openpi`: vLLM-Omni's GR00T dialect (`vllm_omni`);
//! - any other path: openpi (`openpi/serving/websocket_policy_server.py`), and, per message,
//!   RoboArena's DROID evaluation dialect when the observation carries `endpoint`
//!   (`openpi`, `roboarena`); an observation with `video` / `state` / `language` is upstream's
//!   nested GR00T one, for any served embodiment (`openpi`).
//!
//! On connect the server sends one binary msgpack metadata frame, then answers each binary
//! msgpack-numpy message with one frame. `GET /healthz` on the same port answers `OK\n`.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod droid_obs;
mod openpi;
pub mod roboarena;
#[cfg(test)]
mod tests;
mod vllm_omni;

pub use openpi::metadata;
pub use vllm_omni::metadata as vllm_omni_metadata;

use super::answers::{Answered, Answers, Door, Outcome};
use super::browser::{BrowserRules, Verdict};
use super::connections::{within, ConnInfo, ConnState};
use super::request_line::TraceParent;
use super::wire::error::WireError;
use super::wire::schema::Schema;
use super::Stop;
use axum::extract::ws::{close_code, CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use gr00t_core::auth::token_matches;
use gr00t_core::response::PredictResponse;
use gr00t_core::{InferError, Queue};
use std::sync::Arc;
use std::time::Instant;

/// vLLM-Omni's route for openpi-style robot policies.
pub const VLLM_OMNI_PATH: &str = "/v1/realtime/robot/openpi";

/// What every websocket connection shares.
pub struct WsContext {
    /// The shared inference queue.
    pub worker: Queue,
    /// The metadata frame sent on connect by the openpi / RoboArena path.
    pub metadata: Vec<u8>,
    /// The metadata frame sent on connect by the vLLM-Omni path.
    pub vllm_omni_metadata: Vec<u8>,
    /// The GR00T observation layout (vLLM-Omni's nested observations).
    pub schema: Schema,
    /// The nested GR00T layouts of every served embodiment, the default first (the openpi
    /// path's nested observations).
    pub schemas: Vec<Schema>,
    /// Where the answers to observations are counted (`/metrics`, `door="ws"`).
    pub answers: Arc<Answers>,
    /// `--api-token`: then the handshake needs `Authorization: Api-Key <token>`.
    pub api_token: Option<Arc<str>>,
    /// Origin and Host rules for the handshake (a page's `new WebSocket(...)`).
    pub browser: Arc<BrowserRules>,
    /// Largest accepted message.
    pub max_message_bytes: usize,
    /// `--write-timeout-s`: a reply must drain within this long.
    pub write_timeout: std::time::Duration,
    /// Fires at shutdown.
    pub stop: Stop,
    /// Dropped with the last connection: the listener waits for it at shutdown.
    #[allow(dead_code)] // held only for its drop
    pub alive: tokio::sync::mpsc::Sender<()>,
}

/// What one incoming message leads to.
enum Step {
    /// Send this frame and keep serving.
    Send(Message),
    /// openpi's error path: this text, then close 1011.
    Fail(String),
}

/// Why a message got no actions: the text the client gets and the outcome counted.
struct Refusal {
    message: String,
    outcome: Outcome,
}

impl From<String> for Refusal {
    /// A message the door refused while reading it.
    fn from(message: String) -> Refusal {
        Refusal {
            message,
            outcome: Outcome::refused(""),
        }
    }
}

impl From<WireError> for Refusal {
    /// A message the wire layer could not read, labelled by its key at fault.
    fn from(e: WireError) -> Refusal {
        Refusal {
            outcome: Outcome::refused(e.field_at_fault()),
            message: e.to_string(),
        }
    }
}

impl Refusal {
    /// The queue or the engine did not answer.
    fn infer(e: InferError) -> Refusal {
        Refusal {
            outcome: Outcome::of_error(&e),
            message: e.to_string(),
        }
    }

    /// The server failed to write the reply.
    fn internal(message: String) -> Refusal {
        Refusal {
            message,
            outcome: Outcome::Internal,
        }
    }
}

/// A dialect's answer to one message: the reply and the responses behind it (`None` for a
/// reset), or the refusal.
type Answer<T> = Result<(T, Option<Vec<PredictResponse>>), Refusal>;

/// Runs one message's answer and records it (a reset aside) on the websocket door as `what`:
/// counted, timed and logged, its span a child of the handshake's `traceparent` (`parent`).
async fn recorded<T>(
    ctx: &WsContext,
    what: &str,
    parent: Option<TraceParent>,
    answer: impl std::future::Future<Output = Answer<T>>,
) -> Result<T, Refusal> {
    let answer = ctx
        .answers
        .answer_in_span(Door::Ws, what, parent, answer, |a| match a {
            Ok((_, responses)) => responses.as_deref().map(Answered::Served),
            Err(r) => Some(Answered::Refused(r.outcome.clone(), &r.message)),
        })
        .await;
    answer.map(|(reply, _)| reply)
}

/// The dialect of one connection, with its per-connection state.
enum Dialect {
    Openpi(openpi::Connection),
    VllmOmni,
}

/// `GET /healthz`, vLLM-Omni's path, and an openpi websocket on every other path.
pub fn router(ctx: Arc<WsContext>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "OK\n" }))
        .route(VLLM_OMNI_PATH, get(upgrade::<true>))
        .fallback(upgrade::<false>)
        .layer(axum::middleware::from_fn_with_state(
            ctx.clone(),
            browser_rules,
        ))
        .with_state(ctx)
}

type Upgrade = Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>;
/// The connection a handshake came on (absent only in tests that serve the router bare).
type Conn = Option<axum::Extension<ConnectInfo<ConnInfo>>>;

/// The browser rules for every request on the websocket port: its handshakes and `/healthz`.
async fn browser_rules(
    State(ctx): State<Arc<WsContext>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    // A websocket handshake is HTTP/1.1; HTTP/2 (linked for the LeRobot door) is not this
    // door's.
    if req.version() == axum::http::Version::HTTP_2 {
        return (
            StatusCode::HTTP_VERSION_NOT_SUPPORTED,
            "HTTP/2 is not served on this port: websockets use HTTP/1.1\n",
        )
            .into_response();
    }
    if let Some(state) = super::connections::conn_of(&req) {
        // The HTTP head arrived: what follows is the upgrade (or /healthz).
        state.mark_greeted();
    }
    let token = ctx.api_token.is_some();
    match ctx.browser.check(req.method(), req.headers(), token) {
        Ok(Verdict::Pass(_)) if req.method() == Method::GET => next.run(req).await,
        Ok(_) => (StatusCode::METHOD_NOT_ALLOWED, "websocket port: GET only\n").into_response(),
        Err(e) => {
            tracing::info!(
                "ws: {} {} refused: {}",
                req.method(),
                req.uri().path(),
                e.message
            );
            (e.status, format!("{}\n", e.message)).into_response()
        }
    }
}

/// Both dialects' refusal of an `endpoint` other than `infer` and `reset` (upstream's words),
/// quoting a long one by its start and length.
fn unknown_endpoint(name: &str) -> String {
    format!(
        "endpoint must be 'infer' or 'reset'. Got '{}'",
        super::excerpt::excerpt(name)
    )
}

/// A websocket handshake: the vLLM-Omni dialect when `VLLM_OMNI`, else openpi's.
async fn upgrade<const VLLM_OMNI: bool>(
    State(ctx): State<Arc<WsContext>>,
    conn: Conn,
    headers: HeaderMap,
    ws: Upgrade,
) -> Response {
    let vllm_omni = VLLM_OMNI;
    if let Some(token) = &ctx.api_token {
        let given = crate::doors::authorization(&headers, "Api-Key");
        // Constant time, as on the other doors.
        let matches = given.is_some_and(|g| token_matches(g.as_bytes(), token.as_bytes()));
        if !matches {
            return (StatusCode::UNAUTHORIZED, "Unauthorized: Invalid API key\n").into_response();
        }
    }
    let dialect = if vllm_omni {
        Dialect::VllmOmni
    } else {
        match openpi::Connection::new(&ctx.worker, ctx.api_token.is_some()) {
            Ok(c) => Dialect::Openpi(c),
            Err(e) => {
                let text = format!("internal error: no session id for the connection: {e}\n");
                return (StatusCode::INTERNAL_SERVER_ERROR, text).into_response();
            }
        }
    };
    let conn = conn.map(|axum::Extension(ConnectInfo(ConnInfo(state)))| state);
    // A client's trace given at the handshake: every message's span joins it.
    let parent = TraceParent::from_headers(&headers);
    match ws {
        Ok(ws) => ws
            .max_message_size(ctx.max_message_bytes)
            .max_frame_size(ctx.max_message_bytes)
            .on_upgrade(move |socket| connection(socket, ctx, dialect, conn, parent)),
        Err(rejection) => rejection.into_response(),
    }
}

/// Whether a receive error is a message or frame over the size limit.
fn too_big(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(tungstenite::Error::Capacity(_)) = s.downcast_ref::<tungstenite::Error>() {
            return true;
        }
        source = s.source();
    }
    false
}

async fn connection(
    mut socket: WebSocket,
    ctx: Arc<WsContext>,
    mut dialect: Dialect,
    conn: Option<Arc<ConnState>>,
    parent: Option<TraceParent>,
) {
    let metadata = match dialect {
        Dialect::Openpi(_) => ctx.metadata.clone(),
        Dialect::VllmOmni => ctx.vllm_omni_metadata.clone(),
    };
    if socket.send(Message::Binary(metadata.into())).await.is_err() {
        return;
    }
    loop {
        let msg = tokio::select! {
            biased;
            _ = ctx.stop.wait() => {
                let _ = socket.send(close(close_code::AWAY, "server shutting down")).await;
                return;
            }
            m = socket.recv() => m,
        };
        let start = Instant::now();
        // Computing: the connection's idle timer and eviction wait.
        let busy = conn.as_ref().map(|c| c.busy());
        let step = match msg {
            Some(Ok(Message::Binary(bytes))) => match &mut dialect {
                Dialect::Openpi(c) => c.handle(&ctx, &bytes, parent).await,
                Dialect::VllmOmni => vllm_omni::handle(&ctx, &bytes, parent).await,
            },
            Some(Ok(Message::Text(_))) => {
                let e = "expected a binary msgpack frame, got a text frame".to_string();
                let what = match dialect {
                    Dialect::Openpi(_) => "openpi",
                    Dialect::VllmOmni => "vllm-omni",
                };
                let ms = start.elapsed().as_secs_f64() * 1e3;
                let refused = Answered::Refused(Outcome::refused(""), &e);
                ctx.answers.record(Door::Ws, what, ms, refused);
                match dialect {
                    Dialect::Openpi(_) => Step::Fail(e),
                    Dialect::VllmOmni => vllm_omni::error(e),
                }
            }
            // Pings are answered by the library; a close or a broken connection ends it.
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Err(e)) if too_big(&e) => {
                tracing::info!(
                    "ws: a message over {} bytes (--max-body-mb): closed 1009",
                    ctx.max_message_bytes
                );
                let reason = "message too big (--max-body-mb)";
                let _ = socket.send(close(close_code::SIZE, reason)).await;
                // The rest of the message is still coming: the close lingers, so the client
                // reads the close frame rather than a reset.
                if let Some(c) = &conn {
                    c.set_linger(true);
                }
                return;
            }
            Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
        };
        // Answered: a peer that does not read its reply is not busy (evictable at the cap) and
        // has the write timeout to drain it.
        drop(busy);
        match step {
            Step::Send(reply) => match within(ctx.write_timeout, socket.send(reply)).await {
                // Through the handshake's token check and answered: evicted last at the cap.
                Ok(Ok(())) => {
                    if let Some(c) = &conn {
                        c.mark_served();
                    }
                }
                Ok(Err(_)) => return,
                Err(()) => {
                    tracing::info!(
                        "ws: a reply was not read within {:.1} s (--write-timeout-s): closed",
                        ctx.write_timeout.as_secs_f64()
                    );
                    return;
                }
            },
            Step::Fail(message) => return fail(socket, message).await,
        }
        if let Dialect::Openpi(c) = &mut dialect {
            c.served(start.elapsed().as_secs_f64() * 1e3);
        }
    }
}

fn close(code: u16, reason: &str) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: reason.into(),
    }))
}

/// openpi's error path: the message as a text frame, then close 1011.
async fn fail(mut socket: WebSocket, message: String) {
    let _ = socket.send(Message::Text(message.into())).await;
    let _ = socket
        .send(close(
            close_code::ERROR,
            "Error. Message included in previous frame.",
        ))
        .await;
}
