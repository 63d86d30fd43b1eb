//! Isaac-GR00T's ZMQ policy protocol (`gr00t/policy/server_client.py` `PolicyServer`): a REP
//! socket, one msgpack request `{"endpoint", "data", "api_token"}` per message and one reply,
//! endpoints `ping`, `get_action`, `reset`, `get_modality_config` and (with `--allow-kill`)
//! `kill`. Arrays may come as N1.7's msgpack-numpy maps or the older `.npy` maps; the reply
//! uses the form the request used. Object-dtype payloads anywhere in a request are refused
//! (their data is a pickle). Every failure is answered `{"error": "..."}` and the socket keeps
//! serving.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::answers::{Answered, Answers, Door, Outcome};
use super::wire::msgpack_numpy::{find_refused_payload, get, pack, str_map, type_name, unpack};
use super::wire::observation::{action_reply, parse, pick_schema, Schema};
use super::wire::session::session_id;
use super::Stop;
use gr00t_core::auth::token_matches;
use gr00t_core::request::Request;
use gr00t_core::response::PredictResponse;
use gr00t_core::Queue;
use rmpv::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use zeromq::{RepSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

/// What the ZMQ endpoint needs.
pub struct ZmqContext {
    /// The shared inference queue.
    pub worker: Queue,
    /// Observation layout and modality config.
    /// One per served embodiment, the default first.
    pub schemas: Vec<Schema>,
    /// `--api-token`.
    pub api_token: Option<String>,
    /// `--allow-kill`.
    pub allow_kill: bool,
    /// Where `get_action` answers are counted (`/metrics`, `door="zmq"`).
    pub answers: Arc<Answers>,
}

impl ZmqContext {
    /// The schema of the embodiment a request names (`options.embodiment`; a tag or
    /// upstream's enum name), or the default one.
    fn schema(&self, named: Option<&Value>) -> Result<&Schema, String> {
        pick_schema(&self.schemas, named)
    }
}

/// Binds a REP socket on `host:port` (port 0: any free port).
pub async fn bind(host: &str, port: u16) -> std::io::Result<(RepSocket, SocketAddr)> {
    let listener = std::net::TcpListener::bind((host, port)).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot listen for ZMQ on {host}:{port}: {e}"),
        )
    })?;
    let addr = listener.local_addr()?;
    let mut socket = RepSocket::new();
    socket
        .bind_listener(listener)
        .await
        .map_err(|e| std::io::Error::other(format!("ZMQ bind on {addr}: {e}")))?;
    Ok((socket, addr))
}

/// Answers requests until `stop` fires (a request in progress is answered first).
pub async fn serve(mut socket: RepSocket, ctx: ZmqContext, stop: Stop) {
    loop {
        let msg = tokio::select! {
            biased;
            _ = stop.wait() => break,
            m = socket.recv() => m,
        };
        let msg = match msg {
            Ok(m) => m,
            Err(e) => {
                // A peer that broke the ZMTP framing or went away; the others go on.
                tracing::debug!("zmq: receive error: {e}");
                continue;
            }
        };
        let (reply, kill) = if msg.len() == 1 {
            let body = msg.get(0).map(|b| b.as_ref()).unwrap_or_default();
            handle(&ctx, body).await
        } else {
            (
                error(format!(
                    "expected a single-frame message, got {} frames",
                    msg.len()
                )),
                false,
            )
        };
        if let Err(e) = socket.send(ZmqMessage::from(pack(&reply))).await {
            tracing::debug!("zmq: reply not delivered: {e}");
        }
        if kill {
            tracing::info!("zmq: kill requested: shutting the server down");
            stop.trigger();
            break;
        }
    }
}

fn error(message: impl Into<String>) -> Value {
    str_map([("error", Value::from(message.into()))])
}

/// One request → its reply, and whether the server should stop afterwards (`kill`).
async fn handle(ctx: &ZmqContext, body: &[u8]) -> (Value, bool) {
    let request = match unpack(body) {
        Ok(v) => v,
        Err(e) => return (error(e), false),
    };
    // MsgSerializer refuses these while decoding, whatever key they sit under.
    if let Some((path, why)) = find_refused_payload(&request, "") {
        return (error(format!("{path}: {why}")), false);
    }
    let Value::Map(req) = &request else {
        return (
            error(format!(
                "the request must be a dict {{'endpoint', 'data', 'api_token'}}. Got {}",
                type_name(&request)
            )),
            false,
        );
    };
    if let Some(expected) = &ctx.api_token {
        let given = match get(req, "api_token") {
            Some(Value::String(s)) => s.as_bytes(),
            _ => &[][..],
        };
        if !token_matches(given, expected.as_bytes()) {
            return (error("Unauthorized: Invalid API token"), false);
        }
    }
    let endpoint = match get(req, "endpoint") {
        None => "get_action",
        Some(Value::String(s)) => s.as_str().unwrap_or(""),
        Some(v) => {
            return (
                error(format!("endpoint must be a str. Got {}", type_name(v))),
                false,
            )
        }
    };
    let data = match get(req, "data") {
        None | Some(Value::Nil) => None,
        Some(Value::Map(m)) => Some(m.as_slice()),
        Some(v) => {
            return (
                error(format!("data must be a dict. Got {}", type_name(v))),
                false,
            )
        }
    };
    match endpoint {
        "ping" => (
            str_map([
                ("status", Value::from("ok")),
                ("message", Value::from("Server is running")),
            ]),
            false,
        ),
        "kill" if ctx.allow_kill => (Value::Nil, true),
        "kill" => (
            error("kill is disabled on this server (start it with --allow-kill)"),
            false,
        ),
        // `Gr00tPolicy.reset` answers `{}`; here `options.session_id` names a session to clear.
        "reset" => (reset(ctx, data), false),
        "get_modality_config" => match ctx.schema(data.and_then(|d| get(d, "embodiment"))) {
            Ok(s) => (s.modality_config.clone(), false),
            Err(e) => (error(e), false),
        },
        "get_action" => {
            let data = data.unwrap_or(&[]);
            (
                get_action(ctx, get(data, "observation"), get(data, "options")).await,
                false,
            )
        }
        other => (error(format!("Unknown endpoint: {other}")), false),
    }
}

/// `reset` with `{"options": {"session_id": ...}}` clears that session; without one there is
/// nothing to clear (the policy keeps no other state), as upstream.
fn reset(ctx: &ZmqContext, data: Option<&[(Value, Value)]>) -> Value {
    let options = match data.and_then(|d| get(d, "options")) {
        None | Some(Value::Nil) => return Value::Map(vec![]),
        Some(Value::Map(m)) => m.as_slice(),
        Some(v) => return error(format!("options must be a dict. Got {}", type_name(v))),
    };
    match session_id(options, "options.") {
        Ok(Some(id)) => {
            let existed = ctx.worker.reset_session(&id);
            str_map([
                ("session_id", Value::from(id)),
                ("reset", Value::Boolean(existed)),
            ])
        }
        Ok(None) => Value::Map(vec![]),
        Err(e) => error(e),
    }
}

/// `get_action`'s reply; the message is counted, timed and logged.
async fn get_action(ctx: &ZmqContext, obs: Option<&Value>, options: Option<&Value>) -> Value {
    let t0 = Instant::now();
    let answer = answer_action(ctx, obs, options).await;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let record = |answered| ctx.answers.record(Door::Zmq, "get_action", ms, answered);
    match answer {
        Ok((reply, responses)) => {
            record(Answered::Served(&responses));
            reply
        }
        Err((outcome, message)) => {
            record(Answered::Refused(outcome, &message));
            error(message)
        }
    }
}

/// The reply and the responses behind it, or the refusal's outcome and text.
async fn answer_action(
    ctx: &ZmqContext,
    obs: Option<&Value>,
    options: Option<&Value>,
) -> Result<(Value, Vec<PredictResponse>), (Outcome, String)> {
    let named = match options {
        Some(Value::Map(m)) => get(m, "embodiment"),
        _ => None,
    };
    let refused = |e: String| (Outcome::refused(), e);
    let schema = ctx.schema(named).map_err(refused)?;
    let p = parse(obs, options, schema).map_err(refused)?;
    let (items, form, rtc, session) = (p.items, p.form, p.rtc, p.session);
    // One queue entry per batch item, in order, so a batch never overflows the queue.
    let mut responses = Vec::with_capacity(items.len());
    for item in &items {
        let request = Request::from(item.clone())
            .with_rtc_plan(rtc.clone())
            .in_session(session.clone());
        let r = ctx
            .worker
            .infer(request)
            .await
            .map_err(|e| (Outcome::of_error(&e), e.to_string()))?;
        responses.push(r);
    }
    let reply = action_reply(&responses, schema, form)
        .map_err(|e| (Outcome::Internal, format!("internal error: {e}")))?;
    Ok((reply, responses))
}
