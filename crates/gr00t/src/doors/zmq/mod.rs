//! Isaac-GR00T's ZMQ policy protocol (`gr00t/policy/server_client.py` `PolicyServer`): the
//! REP end of REQ (or DEALER) connections, one msgpack request `{"endpoint", "data",
//! "api_token"}` per message and one reply, endpoints `ping`, `get_action`, `reset`,
//! `get_modality_config` and (with `--allow-kill`) `kill`. Arrays may come as N1.7's
//! msgpack-numpy maps or the older `.npy` maps; the reply uses the form the request used.
//! Object-dtype payloads anywhere in a request are refused (their data is a pickle). Every
//! failure is answered `{"error": "..."}` and the connection keeps serving.
//!
//! The framing is this crate's own ([`zmtp`]): each connection is a task under the door's
//! connection cap and timers (`doors::connections`), a message over the size limit is refused
//! at its frame header and closes the connection, and `get_action`s are answered one at a
//! time across connections, as a REP socket answers them.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod zmtp;

use super::answers::{Answered, Answers, Door, Outcome};
use super::connections::{within, BodyPace, GuardedStream, LimitedListener};
use super::wire::error::WireError;
use super::wire::msgpack_numpy::{find_refused_payload, get, pack, str_map, type_name, unpack_ref};
use super::wire::observation::parse;
use super::wire::reply::action_reply;
use super::wire::schema::{pick_schema, Schema};
use super::wire::session::{session_id, session_token};
use super::{DoorLimits, Stop};
use gr00t_core::auth::token_matches;
use gr00t_core::response::PredictResponse;
use gr00t_core::session::SessionKey;
use gr00t_core::Queue;
use rmpv::{Value, ValueRef};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// What the ZMQ endpoint needs.
pub struct ZmqContext {
    /// The shared inference queue.
    pub worker: Queue,
    /// Observation layout and modality config.
    /// One per served embodiment, the default first.
    pub schemas: Vec<Schema>,
    /// `--api-token`.
    pub api_token: Option<Arc<str>>,
    /// `--allow-kill`.
    pub allow_kill: bool,
    /// `--zmq-max-batch`: batch items a `get_action` may carry.
    pub max_batch: usize,
    /// Where `get_action` answers are counted (`/metrics`, `door="zmq"`).
    pub answers: Arc<Answers>,
    /// One `get_action` batch item at a time, as a REP socket answers.
    pub turn: tokio::sync::Mutex<()>,
}

/// Batch items a `get_action` may carry unless `--zmq-max-batch` says otherwise.
pub const DEFAULT_MAX_BATCH: u16 = 8;

impl ZmqContext {
    /// The schema of the embodiment a request names (`options.embodiment`; a tag or
    /// upstream's enum name), or the default one.
    fn schema(&self, named: Option<&ValueRef>) -> Result<&Schema, WireError> {
        pick_schema(&self.schemas, named)
    }
}

/// The namespace of the sessions ZMQ clients name: apart from every other door's.
const SESSIONS: &str = "zmq";

/// Accepts and serves connections until `stop` fires; then waits for the requests in
/// progress to be answered.
pub async fn serve(
    listener: tokio::net::TcpListener,
    ctx: ZmqContext,
    limits: DoorLimits,
    stop: Stop,
) {
    let mut listener = LimitedListener::new(listener, "zmq", limits.caps.zmq, limits.timers);
    let ctx = Arc::new(ctx);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            _ = stop.wait() => break,
            c = listener.accept_guarded() => c,
        };
        // Finished connections are reaped as new ones come.
        while connections.try_join_next().is_some() {}
        let (ctx, stop) = (ctx.clone(), stop.clone());
        let timing = Timing {
            body: limits.body,
            write: limits.timers.write,
        };
        let limit = limits.max_message_bytes;
        connections.spawn(async move {
            if let Err(e) = connection(stream, &ctx, limit, timing, &stop).await {
                tracing::info!("zmq: {peer}: connection closed: {e}");
            }
        });
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// Why a connection closed early (logged, never sent: the peer is gone or speaks no ZMTP).
#[derive(Debug, thiserror::Error)]
enum ConnectionError {
    /// Reading or writing the socket failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The peer broke the framing (or a message is over the size limit).
    #[error("{0}")]
    Zmtp(#[from] zmtp::Error),
    /// A message began but did not arrive at its pace (the rule broken, in words).
    #[error("a message {0}")]
    BodyLate(String),
    /// A reply did not drain within the write timeout (seconds): the peer does not read.
    #[error("a reply was not read within {0:.1} s (--write-timeout-s)")]
    WriteTimeout(f64),
    /// The routing envelope is larger than a proxy's (its reply would echo it).
    #[error(
        "a routing envelope of {frames} frames, the largest {largest} bytes: at most \
         {MAX_ROUTING_FRAMES} frames of {MAX_ROUTING_FRAME_BYTES} bytes"
    )]
    Envelope {
        /// Frames before the delimiter.
        frames: usize,
        /// The largest of them, in bytes.
        largest: usize,
    },
}

/// Routing frames a message may carry before its delimiter: a chain of proxies adds one each.
const MAX_ROUTING_FRAMES: usize = 4;
/// Bytes of one routing frame: ZMQ routing ids are at most 255 bytes.
const MAX_ROUTING_FRAME_BYTES: usize = 255;

/// The frames a reply echoes first: the routing ids and the delimiter.
type Envelope = Vec<Vec<u8>>;

/// A message split into its envelope (every frame up to and with the empty delimiter a REQ
/// puts first; none for a bare DEALER, whose message is all body) and its body. An envelope no
/// proxy makes is refused: the reply echoes it, so a large one would turn a client's bytes into
/// the server's memory and write time (issue 43).
fn split_envelope(mut frames: Vec<Vec<u8>>) -> Result<(Envelope, Vec<Vec<u8>>), ConnectionError> {
    let Some(routing) = frames.iter().position(Vec::is_empty) else {
        return Ok((Vec::new(), frames));
    };
    let largest = frames[..routing].iter().map(Vec::len).max().unwrap_or(0);
    if routing > MAX_ROUTING_FRAMES || largest > MAX_ROUTING_FRAME_BYTES {
        return Err(ConnectionError::Envelope {
            frames: routing,
            largest,
        });
    }
    let body = frames.split_off(routing + 1);
    Ok((frames, body))
}

/// A connection's deadlines: a message once begun, a reply once written.
#[derive(Clone, Copy)]
struct Timing {
    body: BodyPace,
    write: Duration,
}

/// One peer's connection: the handshake, then its messages, each answered in turn.
async fn connection(
    mut stream: GuardedStream,
    ctx: &ZmqContext,
    max_message: usize,
    timing: Timing,
    stop: &Stop,
) -> Result<(), ConnectionError> {
    let pace = timing.body;
    let state = stream.state().clone();
    stream.write_all(&zmtp::greeting()).await?;
    let mut decoder = zmtp::Decoder::new(zmtp::Limits::new(max_message));
    let mut buf = vec![0u8; 64 * 1024];
    let mut events = Vec::new();
    // When the message being read began, and the bytes read since: it must arrive at its pace.
    let mut message_began: Option<Instant> = None;
    let mut message_bytes = 0usize;
    loop {
        let read = if let Some(began) = message_began {
            let (due, late) = pace.due(began, message_bytes);
            tokio::time::timeout_at(due, stream.read(&mut buf))
                .await
                .map_err(|_| ConnectionError::BodyLate(pace.explain(late)))?
        } else {
            tokio::select! {
                biased;
                _ = stop.wait() => return Ok(()),
                r = stream.read(&mut buf) => r,
            }
        };
        let n = read?;
        if n == 0 {
            return Ok(());
        }
        decoder.feed(&buf[..n], &mut events)?;
        // Whether a message ended in this read: one still in progress then began in it.
        let mut ended = false;
        for event in events.drain(..) {
            match event {
                zmtp::Event::Greeting { .. } => stream.write_all(&zmtp::ready()).await?,
                zmtp::Event::Ready { .. } => state.mark_greeted(),
                zmtp::Event::Ping(context) => stream.write_all(&zmtp::pong(&context)).await?,
                zmtp::Event::Message(frames) => {
                    ended = true;
                    let (envelope, body) = split_envelope(frames)?;
                    let busy = state.busy();
                    let (reply, kill, served) = answer(ctx, &envelope, &body).await;
                    // Answered: a peer that does not read its reply is not busy (evictable at
                    // the cap) and has the write timeout to drain it.
                    drop(busy);
                    within(timing.write, stream.write_all(&reply))
                        .await
                        .map_err(|()| {
                            ConnectionError::WriteTimeout(timing.write.as_secs_f64())
                        })??;
                    // Answered without an error (so through the token check): evicted last.
                    if served {
                        state.mark_served();
                    }
                    if kill {
                        tracing::info!("zmq: kill requested: shutting the server down");
                        stop.trigger();
                        return Ok(());
                    }
                }
            }
        }
        // A pipelining peer's next message is timed from the read that began it (after the
        // previous one's answer), not from the first message's start.
        message_began = match (decoder.in_message(), message_began) {
            (false, _) => None,
            (true, Some(began)) if !ended => {
                message_bytes += n;
                Some(began)
            }
            // Begun in this read: all of it, unless a message ended in it too.
            (true, _) => {
                message_bytes = if ended { 0 } else { n };
                Some(Instant::now())
            }
        };
    }
}

/// A message's reply on the wire (its envelope, then the reply), whether the server should
/// stop afterwards (`kill`) and whether it answered without an error.
async fn answer(ctx: &ZmqContext, envelope: &[Vec<u8>], body: &[Vec<u8>]) -> (Vec<u8>, bool, bool) {
    let (reply, kill) = match body {
        [one] => handle(ctx, one).await,
        _ => (
            error(format!(
                "expected a single-frame message, got {} frames",
                body.len()
            )),
            false,
        ),
    };
    let served = !matches!(&reply, Value::Map(m) if get(m, "error").is_some());
    let reply = pack(&reply);
    let mut parts: Vec<&[u8]> = envelope.iter().map(Vec::as_slice).collect();
    parts.push(&reply);
    (zmtp::message(&parts), kill, served)
}

/// The `{"error": ...}` reply: the refusal's text, as the client sees it.
fn error(message: impl ToString) -> Value {
    str_map([("error", Value::from(message.to_string()))])
}

/// One request → its reply, and whether the server should stop afterwards (`kill`).
async fn handle(ctx: &ZmqContext, body: &[u8]) -> (Value, bool) {
    // Read in place: a frame's bytes stay in the message until the frame copies them.
    let request = match unpack_ref(body) {
        Ok(v) => v,
        Err(e) => return (error(e), false),
    };
    // MsgSerializer refuses these while decoding, whatever key they sit under.
    if let Some((path, why)) = find_refused_payload(&request, "") {
        return (error(format!("{path}: {why}")), false);
    }
    let ValueRef::Map(req) = &request else {
        return (
            error(format!(
                "the request must be a dict {{'endpoint', 'data', 'api_token'}}. Got {}",
                type_name(&request)
            )),
            false,
        );
    };
    if let Some(expected) = ctx.api_token.as_deref() {
        let given = match get(req, "api_token") {
            Some(ValueRef::String(s)) => s.as_bytes(),
            _ => &[][..],
        };
        if !token_matches(given, expected.as_bytes()) {
            return (error("Unauthorized: Invalid API token"), false);
        }
    }
    let endpoint = match get(req, "endpoint") {
        None => "get_action",
        Some(ValueRef::String(s)) => s.as_str().unwrap_or(""),
        Some(v) => {
            return (
                error(format!("endpoint must be a str. Got {}", type_name(v))),
                false,
            )
        }
    };
    let data = match get(req, "data") {
        None | Some(ValueRef::Nil) => None,
        Some(ValueRef::Map(m)) => Some(m.as_slice()),
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

/// `reset` with `{"options": {"session_id": ...}}` clears that session (a locked one only
/// with `options.session_token`); without one there is
/// nothing to clear (the policy keeps no other state), as upstream.
fn reset(ctx: &ZmqContext, data: Option<&[(ValueRef, ValueRef)]>) -> Value {
    let options = match data.and_then(|d| get(d, "options")) {
        None | Some(ValueRef::Nil) => return Value::Map(vec![]),
        Some(ValueRef::Map(m)) => m.as_slice(),
        Some(v) => return error(format!("options must be a dict. Got {}", type_name(v))),
    };
    let id = match session_id(options, "options.") {
        Ok(id) => id,
        Err(e) => return error(e),
    };
    let token = match session_token(options, "options.", id.is_some()) {
        Ok(token) => token,
        Err(e) => return error(e),
    };
    let Some(id) = id else {
        return Value::Map(vec![]);
    };
    match ctx
        .worker
        .reset_session(&SessionKey::named(SESSIONS, &id), token.as_deref())
    {
        Ok(existed) => str_map([
            ("session_id", Value::from(id)),
            ("reset", Value::Boolean(existed)),
        ]),
        Err(e) => error(e),
    }
}

/// `get_action`'s reply; the message is counted, timed and logged.
async fn get_action(
    ctx: &ZmqContext,
    obs: Option<&ValueRef<'_>>,
    options: Option<&ValueRef<'_>>,
) -> Value {
    let work = answer_action(ctx, obs, options);
    let answer = ctx
        .answers
        .answer_in_span(Door::Zmq, "get_action", None, work, |a| {
            Some(match a {
                Ok((_, responses)) => Answered::Served(responses),
                Err((outcome, message)) => Answered::Refused(outcome.clone(), message),
            })
        })
        .await;
    match answer {
        Ok((reply, _)) => reply,
        Err((_, message)) => error(message),
    }
}

/// The reply and the responses behind it, or the refusal's outcome and text.
async fn answer_action(
    ctx: &ZmqContext,
    obs: Option<&ValueRef<'_>>,
    options: Option<&ValueRef<'_>>,
) -> Result<(Value, Vec<PredictResponse>), (Outcome, String)> {
    let named = match options {
        Some(ValueRef::Map(m)) => get(m, "embodiment"),
        _ => None,
    };
    let refused = |e: WireError| (Outcome::refused(e.field_at_fault()), e.to_string());
    let schema = ctx.schema(named).map_err(refused)?;
    let p = tracing::info_span!("parse")
        .in_scope(|| parse(obs, options, schema))
        .map_err(refused)?;
    let session = p.session.as_ref().map(|id| SessionKey::named(SESSIONS, id));
    let form = p.form;
    let requests = p.into_requests(session);
    if requests.len() > ctx.max_batch {
        return Err(refused(WireError::field(
            "observation",
            format!(
                "a batch of {} items: at most {} per message (--zmq-max-batch)",
                requests.len(),
                ctx.max_batch
            ),
        )));
    }
    // One queue entry per batch item, in order, so a batch never overflows the queue; each
    // item takes its own turn (one at a time across connections, as a REP socket answers), so
    // another robot's request runs between two items of a batch.
    let mut responses = Vec::with_capacity(requests.len());
    for request in requests {
        let _turn = ctx.turn.lock().await;
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
