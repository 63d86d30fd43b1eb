//! openpi's DROID dialect (`examples/droid/main.py` keys, `WebsocketClientPolicy`): one
//! msgpack-numpy observation in, one reply map out with `actions` `[H, 8]` and
//! `server_timing`; errors are a text frame then close 1011. An observation that carries
//! `endpoint` is RoboArena's dialect of the same keys (`super::roboarena`). An observation in
//! upstream's nested GR00T form (`video` / `state` / `language`, optional `embodiment`, `seed`
//! or `noise`) is served for any embodiment and answered `{action key: [B, H, D]}` plus the
//! same timing fields.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::droid_obs::{parse, HISTORY_STEPS};
use super::roboarena::{self, Endpoint};
use super::{recorded, Answer, Refusal, Step, WsContext};

use crate::doors::request_line::TraceParent;
use crate::doors::wire::error::WireError;
use crate::doors::wire::msgpack_numpy::ArrayForm;
use crate::doors::wire::msgpack_numpy::{get, openpi_array, pack, str_map, type_name, unpack_ref};
use crate::doors::wire::ndarray::NdArray;
use crate::doors::wire::observation::{parse_openpi, rtc};
use crate::doors::wire::reply::{action_dict, reply_info};
use crate::doors::wire::schema::pick_schema;
use crate::doors::wire::session::{session_id, session_token};
use axum::extract::ws::Message;
use gr00t_core::info::EngineInfo;
use gr00t_core::request::Request;
use gr00t_core::response::PredictResponse;
use gr00t_core::rtc::RtcPlan;
use gr00t_core::session::SessionKey;
use gr00t_core::Queue;
use gr00t_embodiment::EMBODIMENT_TAG;
use rmpv::{Value, ValueRef};
use std::time::Instant;

/// The openpi `actions` columns of the DROID dialect, in order (each absolute, `[horizon, dim]`).
const ACTION_KEYS: [(&str, usize); 2] = [("joint_position", 7), ("gripper_position", 1)];

/// The metadata text of the `actions` array, from [`ACTION_KEYS`].
fn actions_text() -> String {
    let width: usize = ACTION_KEYS.iter().map(|(_, d)| d).sum();
    let keys: Vec<String> = ACTION_KEYS
        .iter()
        .map(|(k, d)| format!("{k} ({d})"))
        .collect();
    format!(
        "float32 [horizon, {width}]: {}, absolute",
        keys.join(" then ")
    )
}

/// The metadata frame: what openpi clients may want to know about the policy, plus the
/// `PolicyServerConfig` fields RoboArena's evaluation client reads (`roboarena::config`).
pub fn metadata(info: &EngineInfo) -> Vec<u8> {
    let mut fields = vec![
        ("model", Value::from(info.model_id.as_str())),
        ("revision", Value::from(info.revision.as_str())),
        ("embodiment", Value::from(info.embodiment.as_str())),
        ("action_horizon", Value::from(info.action_horizon as u64)),
        ("actions", Value::from(actions_text())),
        ("frame_history_steps", Value::from(HISTORY_STEPS as u64)),
        (
            "image_size",
            Value::from("16:9 frames, e.g. 180x320 (H x W)"),
        ),
    ];
    fields.extend(roboarena::config());
    pack(&str_map(fields))
}

/// The namespace of the connections' own sessions: apart from every other door's.
const SESSIONS: &str = "ws";

/// RoboArena sessions one connection without a token keeps at most (an evaluation client
/// names one per episode).
const MAX_NAMED_SESSIONS: usize = 16;

/// One openpi connection's state.
pub struct Connection {
    /// How long the previous message took, receive to reply sent.
    prev_total_ms: Option<f64>,
    /// The connection's own session (its frames and last chunk serve the observations that
    /// name no session), under a random id no client can name; closed with it.
    session: SessionKey,
    /// Whether the server takes an API token: then the sessions RoboArena messages name are
    /// shared by the (authenticated) connections; otherwise each connection has its own.
    authenticated: bool,
    /// The RoboArena sessions this connection named, closed with it when they are its own.
    named: Vec<SessionKey>,
    /// To close the sessions when the connection ends.
    worker: Queue,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.worker.close_session(&self.session);
        for key in &self.named {
            self.worker.close_session(key);
        }
    }
}

impl Connection {
    /// A new connection with its own session; `authenticated`: the server takes an API token.
    pub fn new(worker: &Queue, authenticated: bool) -> std::io::Result<Connection> {
        Ok(Connection {
            prev_total_ms: None,
            session: SessionKey::private(SESSIONS)?,
            authenticated,
            named: Vec::new(),
            worker: worker.clone(),
        })
    }

    /// The table key of the RoboArena session `id` names on this connection.
    fn arena_key(&mut self, id: &str) -> SessionKey {
        if self.authenticated {
            return roboarena::session_key(id);
        }
        let key = self.session.within(roboarena::SESSIONS, id);
        if !self.named.contains(&key) {
            // A connection naming ever new sessions keeps the newest few: the oldest closes.
            if self.named.len() >= MAX_NAMED_SESSIONS {
                let oldest = self.named.remove(0);
                self.worker.close_session(&oldest);
            }
            self.named.push(key.clone());
        }
        key
    }

    /// Answers one binary message; counts, times and logs it unless it was a reset, in the
    /// trace of the handshake's `parent`.
    pub async fn handle(
        &mut self,
        ctx: &WsContext,
        bytes: &[u8],
        parent: Option<TraceParent>,
    ) -> Step {
        match recorded(ctx, "openpi", parent, self.answer(ctx, bytes)).await {
            Ok(reply) => Step::Send(reply),
            Err(r) => Step::Fail(r.message),
        }
    }

    /// Records the time the last answered message took (reported as `prev_total_ms`).
    pub fn served(&mut self, total_ms: f64) {
        self.prev_total_ms = Some(total_ms);
    }

    /// The reply, and the responses behind it (`None` for a reset).
    async fn answer(&mut self, ctx: &WsContext, bytes: &[u8]) -> Answer<Message> {
        // Read in place: a frame's bytes stay in the message until the frame copies them.
        let v = unpack_ref(bytes)?;
        let ValueRef::Map(m) = &v else {
            return Err(format!("the observation must be a dict. Got {}", type_name(&v)).into());
        };
        let nested = is_nested(m);
        // openpi's DROID keys: the frames and the RTC keys beside them are checked against the
        // served DROID layout here, before queueing.
        let droid = |m: &[(ValueRef, ValueRef)]| -> Result<(Request, Option<RtcPlan>), WireError> {
            let obs = tracing::info_span!("parse").in_scope(|| parse(m))?;
            let schema = ctx
                .schemas
                .iter()
                .find(|s| s.tag() == EMBODIMENT_TAG)
                .ok_or_else(|| {
                    WireError::from(gr00t_core::error::not_served(
                        EMBODIMENT_TAG,
                        ctx.schemas.iter().map(|s| s.tag()),
                    ))
                })?;
            obs.check_frames(&schema.layout.frames)?;
            let plan = rtc(m, schema, "", true)?;
            Ok((obs.into_request(schema.layout.clone()), plan))
        };
        let (item, rtc, session) = match get(m, "endpoint") {
            None if nested => return self.nested(ctx, &v, m).await.map(|(r, p)| (r, Some(p))),
            None => {
                let (request, plan) = droid(m)?;
                (request, plan, None)
            }
            Some(e) => {
                let session = session_id(m, "")?.map(|id| self.arena_key(&id));
                match roboarena::endpoint(e)? {
                    Endpoint::Reset => {
                        let token = session_token(m, "", session.is_some())?;
                        ctx.worker
                            .reset_session(
                                session.as_ref().unwrap_or(&self.session),
                                token.as_deref(),
                            )
                            .map_err(Refusal::infer)?;
                        return Ok((Message::Text(roboarena::RESET_REPLY.into()), None));
                    }
                    Endpoint::Infer if nested => {
                        return self.nested(ctx, &v, m).await.map(|(r, p)| (r, Some(p)))
                    }
                    Endpoint::Infer => {
                        let (request, plan) = droid(m)?;
                        (request, plan, session)
                    }
                }
            }
        };
        let token = session_token(m, "", session.is_some())?;
        // Always in a session: its frame history supplies t−15 for a camera sent alone.
        let session = session.unwrap_or_else(|| self.session.clone());
        let (resp, infer_ms) = run(ctx, item, rtc, session, token).await?;
        let mut map = reply_map(&resp);
        let timing = self.server_timing(infer_ms, std::slice::from_ref(&resp));
        map.push((Value::from("server_timing"), timing));
        Ok((
            Message::Binary(pack(&Value::Map(map)).into()),
            Some(vec![resp]),
        ))
    }

    /// The nested GR00T observation of the embodiment `embodiment` names (default: the
    /// server's default): `{action key: float32 [B, H, D]}` plus the timing fields. It carries
    /// all its frames, so the frame history is not used.
    async fn nested(
        &mut self,
        ctx: &WsContext,
        msg: &ValueRef<'_>,
        m: &[(ValueRef<'_>, ValueRef<'_>)],
    ) -> Result<(Message, Vec<PredictResponse>), Refusal> {
        let schema = pick_schema(&ctx.schemas, get(m, "embodiment"))?;
        let parsed = tracing::info_span!("parse").in_scope(|| parse_openpi(msg, schema))?;
        // A batch is several robots: only a batch of one is the connection's robot.
        let session = match &parsed.session {
            Some(id) => Some(self.arena_key(id)),
            None => (parsed.items.len() == 1).then(|| self.session.clone()),
        };
        let t0 = Instant::now();
        // One queue entry per batch item, in order, as on the ZMQ door.
        let mut responses = Vec::with_capacity(parsed.items.len());
        for request in parsed.into_requests(session) {
            responses.push(ctx.worker.infer(request).await.map_err(Refusal::infer)?);
        }
        let infer_ms = t0.elapsed().as_secs_f64() * 1e3;
        let Value::Map(mut map) = action_dict(&responses, schema, ArrayForm::Openpi)
            .map_err(|e| Refusal::internal(format!("internal error: {e}")))?
        else {
            return Err(Refusal::internal(
                "internal error: actions are not a map".into(),
            ));
        };
        let policy_ms = responses.iter().map(|r| r.timing_ms.total).sum::<f64>();
        map.push((
            Value::from("policy_timing"),
            str_map([("infer_ms", Value::F64(policy_ms))]),
        ));
        let timing = self.server_timing(infer_ms, &responses);
        map.push((Value::from("server_timing"), timing));
        Ok((Message::Binary(pack(&Value::Map(map)).into()), responses))
    }

    /// `server_timing`: this message's inference time, the previous message's total, and the
    /// queue wait and observation age of [`reply_info`].
    fn server_timing(&self, infer_ms: f64, responses: &[PredictResponse]) -> Value {
        let mut timing = vec![(Value::from("infer_ms"), Value::F64(infer_ms))];
        if let Some(prev) = self.prev_total_ms {
            timing.push((Value::from("prev_total_ms"), Value::F64(prev)));
        }
        timing.extend(reply_info(responses));
        Value::Map(timing)
    }
}

/// Whether a message is upstream's nested GR00T observation rather than openpi's DROID keys:
/// it has `video`, `state` or `language` (the parser then names what is missing).
fn is_nested(m: &[(ValueRef, ValueRef)]) -> bool {
    ["video", "state", "language"]
        .iter()
        .any(|k| get(m, k).is_some())
}

/// Queues and runs one request; returns the response and the inference time.
async fn run(
    ctx: &WsContext,
    item: Request,
    rtc: Option<RtcPlan>,
    session: SessionKey,
    token: Option<String>,
) -> Result<(PredictResponse, f64), Refusal> {
    let t0 = Instant::now();
    let request = item
        .with_rtc_plan(rtc)
        .in_session(Some(session))
        .with_session_token(token);
    let resp = ctx.worker.infer(request).await.map_err(Refusal::infer)?;
    Ok((resp, t0.elapsed().as_secs_f64() * 1e3))
}

/// `actions` `[H, 8]` ([`ACTION_KEYS`] side by side), the three groups by name, and
/// `policy_timing` (the model's own time, as openpi policies report it).
fn reply_map(r: &PredictResponse) -> Vec<(Value, Value)> {
    let a = &r.actions;
    let (joints, gripper) = (a.rows("joint_position"), a.rows("gripper_position"));
    let h = joints.len();
    let group = |rows: &[Vec<f32>]| {
        let d = rows.first().map_or(0, Vec::len);
        let flat: Vec<f32> = rows.iter().flatten().copied().collect();
        openpi_array(&NdArray::from_f32(vec![rows.len(), d], &flat))
    };
    let columns: Vec<&[Vec<f32>]> = ACTION_KEYS.iter().map(|(k, _)| a.rows(k)).collect();
    let combined: Vec<f32> = (0..h)
        .flat_map(|t| {
            columns
                .iter()
                .flat_map(move |c| c.get(t).into_iter().flatten().copied())
        })
        .collect();
    let width = combined.len() / h.max(1);
    vec![
        (
            Value::from("actions"),
            openpi_array(&NdArray::from_f32(vec![h, width], &combined)),
        ),
        (Value::from("eef_9d"), group(a.rows("eef_9d"))),
        (Value::from("joint_position"), group(joints)),
        (Value::from("gripper_position"), group(gripper)),
        (
            Value::from("policy_timing"),
            str_map([("infer_ms", Value::F64(r.timing_ms.total))]),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_keeps_the_newest_roboarena_sessions_it_named() {
        let predict: gr00t_core::queue::PredictFn =
            Box::new(|_, _| Err(gr00t_core::InferError::Stopped));
        let (worker, queue) = gr00t_core::queue::start(predict, 1).unwrap();
        let mut own = Connection::new(&queue, false).unwrap();
        let first = own.arena_key("ep-0");
        for i in 0..40 {
            own.arena_key(&format!("ep-{i}"));
        }
        assert_eq!(own.named.len(), MAX_NAMED_SESSIONS);
        assert!(!own.named.contains(&first));
        // Apart from another connection's, and from the shared ones behind a token.
        let other = Connection::new(&queue, false).unwrap().arena_key("ep-0");
        assert_ne!(other, first);
        let mut shared = Connection::new(&queue, true).unwrap();
        assert_eq!(shared.arena_key("ep-0"), roboarena::session_key("ep-0"));
        assert!(shared.named.is_empty());
        drop((own, shared, queue));
        worker.join();
    }
}
