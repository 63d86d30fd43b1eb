//! openpi's websocket policy protocol (`openpi/serving/websocket_policy_server.py`): on connect
//! one binary frame with the msgpack metadata, then per binary msgpack-numpy observation one
//! binary reply with `server_timing`; on an error a text frame with the message (no traceback)
//! and close code 1011. `GET /healthz` on the same port answers `OK\n`.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::droid_obs::{parse, FrameHistory, HISTORY_STEPS};
use super::engine_ext::infer;
use super::msgpack_numpy::{openpi_array, pack, str_map, type_name, unpack};
use super::ndarray::NdArray;
use super::Stop;
use crate::engine::EngineInfo;
use crate::server::WorkerHandle;
use axum::extract::ws::{close_code, CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use gr00t_droid::response::PredictResponse;
use rmpv::Value;
use std::sync::Arc;
use std::time::Instant;

/// What every websocket connection shares.
pub struct WsContext {
    /// The shared inference queue.
    pub worker: WorkerHandle,
    /// The metadata frame sent on connect.
    pub metadata: Vec<u8>,
    /// `--api-token`: then the handshake needs `Authorization: Api-Key <token>`.
    pub api_token: Option<String>,
    /// Largest accepted message.
    pub max_message_bytes: usize,
    /// Fires at shutdown.
    pub stop: Stop,
    /// Dropped with the last connection: the listener waits for it at shutdown.
    #[allow(dead_code)] // held only for its drop
    pub alive: tokio::sync::mpsc::Sender<()>,
}

/// The metadata frame: what a client may want to know about the policy.
pub fn metadata(info: &EngineInfo) -> Vec<u8> {
    pack(&str_map([
        ("model", Value::from(info.model_id.as_str())),
        ("revision", Value::from(info.revision.as_str())),
        ("embodiment", Value::from(info.embodiment.as_str())),
        ("action_horizon", Value::from(info.action_horizon as u64)),
        (
            "actions",
            Value::from(
                "float32 [horizon, 8]: joint_position (7) then gripper_position (1), absolute",
            ),
        ),
        ("frame_history_steps", Value::from(HISTORY_STEPS as u64)),
        (
            "image_size",
            Value::from("16:9 frames, e.g. 180x320 (H x W)"),
        ),
    ]))
}

/// `GET /healthz`, and a websocket on every other path.
pub fn router(ctx: Arc<WsContext>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "OK\n" }))
        .fallback(upgrade)
        .with_state(ctx)
}

async fn upgrade(
    State(ctx): State<Arc<WsContext>>,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    if let Some(token) = &ctx.api_token {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Api-Key "));
        if given != Some(token.as_str()) {
            return (StatusCode::UNAUTHORIZED, "Unauthorized: Invalid API key\n").into_response();
        }
    }
    match ws {
        Ok(ws) => ws
            .max_message_size(ctx.max_message_bytes)
            .max_frame_size(ctx.max_message_bytes)
            .on_upgrade(move |socket| connection(socket, ctx)),
        Err(rejection) => rejection.into_response(),
    }
}

async fn connection(mut socket: WebSocket, ctx: Arc<WsContext>) {
    if socket
        .send(Message::Binary(ctx.metadata.clone().into()))
        .await
        .is_err()
    {
        return;
    }
    let mut history = FrameHistory::default();
    let mut prev_total_ms: Option<f64> = None;
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
        let bytes = match msg {
            Some(Ok(Message::Binary(b))) => b,
            Some(Ok(Message::Text(_))) => {
                return fail(
                    socket,
                    "expected a binary msgpack frame, got a text frame".into(),
                )
                .await
            }
            // Pings are answered by the library; a close or a broken connection ends it.
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
        };
        let reply = match observe(&ctx, &mut history, &bytes).await {
            Ok(r) => r,
            Err(e) => return fail(socket, e).await,
        };
        let (resp, infer_ms) = reply;
        let mut timing = vec![("infer_ms", Value::F64(infer_ms))];
        if let Some(prev) = prev_total_ms {
            timing.push(("prev_total_ms", Value::F64(prev)));
        }
        let mut map = reply_map(&resp);
        map.push((Value::from("server_timing"), str_map(timing)));
        if socket
            .send(Message::Binary(pack(&Value::Map(map)).into()))
            .await
            .is_err()
        {
            return;
        }
        prev_total_ms = Some(start.elapsed().as_secs_f64() * 1e3);
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
    tracing::info!("websocket request refused: {message}");
    let _ = socket.send(Message::Text(message.into())).await;
    let _ = socket
        .send(close(
            close_code::ERROR,
            "Error. Message included in previous frame.",
        ))
        .await;
}

/// Decodes, queues and runs one observation; returns the response and the inference time.
async fn observe(
    ctx: &WsContext,
    history: &mut FrameHistory,
    bytes: &[u8],
) -> Result<(PredictResponse, f64), String> {
    let v = unpack(bytes)?;
    let Value::Map(m) = &v else {
        return Err(format!(
            "the observation must be a dict. Got {}",
            type_name(&v)
        ));
    };
    let obs = parse(m)?;
    let req = history.resolve(obs);
    let t0 = Instant::now();
    let resp = infer(&ctx.worker, &req).await.map_err(|e| e.to_string())?;
    Ok((resp, t0.elapsed().as_secs_f64() * 1e3))
}

/// `actions` `[H, 8]` (joint_position then gripper_position), the three groups by name, and
/// `policy_timing` (the model's own time, as openpi policies report it).
fn reply_map(r: &PredictResponse) -> Vec<(Value, Value)> {
    let a = &r.actions;
    let h = a.joint_position.len();
    let group = |rows: &Vec<Vec<f32>>| {
        let d = rows.first().map_or(0, Vec::len);
        let flat: Vec<f32> = rows.iter().flatten().copied().collect();
        openpi_array(&NdArray::from_f32(vec![rows.len(), d], &flat))
    };
    let combined: Vec<f32> = a
        .joint_position
        .iter()
        .zip(&a.gripper_position)
        .flat_map(|(j, g)| j.iter().chain(g).copied())
        .collect();
    let width = combined.len() / h.max(1);
    vec![
        (
            Value::from("actions"),
            openpi_array(&NdArray::from_f32(vec![h, width], &combined)),
        ),
        (Value::from("eef_9d"), group(&a.eef_9d)),
        (Value::from("joint_position"), group(&a.joint_position)),
        (Value::from("gripper_position"), group(&a.gripper_position)),
        (
            Value::from("policy_timing"),
            str_map([("infer_ms", Value::F64(r.timing_ms.total))]),
        ),
    ]
}
