//! vLLM-Omni's GR00T dialect (`vllm serve nvidia/GR00T-N1.7-3B --omni`, path
//! `/v1/realtime/robot/openpi`): openpi msgpack-numpy messages carrying `endpoint`,
//! `session_id` and the nested GR00T observation (`video {cam: uint8 [B,T,H,W,3]}`, `state
//! {key: float32 [B,1,D]}`, `language {key: [[str]]}`, optional `seed`). `infer` answers
//! `{key: float32 [B,40,D]}`, `reset` `{"status": "reset successful"}`; an error is the binary
//! map `{"type": "error", "message": ...}` and the connection stays open.
//!
//! The observation carries both frames per camera, so the server keeps no state per session:
//! `session_id` is accepted and `reset` has nothing to forget (upstream's GR00T policy is
//! stateless too).
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::{recorded, Answer, Refusal, Step, WsContext};
use crate::doors::request_line::TraceParent;
use crate::doors::wire::msgpack_numpy::{
    get, pack, str_map, type_name, uint, unpack_ref, ArrayForm,
};
use crate::doors::wire::observation::parse;
use crate::doors::wire::reply::action_dict;
use crate::doors::wire::schema::Schema;
use axum::extract::ws::Message;
use gr00t_core::response::PredictResponse;
use gr00t_embodiment::embodiment_tags;
use gr00t_embodiment::observation::NoiseSource;
use gr00t_embodiment::EMBODIMENT_TAG;
use rmpv::{Value, ValueRef};

/// The metadata frame, with the fields vLLM-Omni's GR00T deploy config sends.
pub fn metadata(schema: &Schema) -> Vec<u8> {
    let keys = schema.action_keys().map(Value::from).collect();
    let horizon = schema.action_horizon();
    // vLLM-Omni spells the tag as Isaac-GR00T's EmbodimentTag enum name.
    let enum_name = embodiment_tags::ENUM_NAMES
        .iter()
        .find(|(_, tag)| *tag == schema.tag())
        .map_or(schema.tag().to_ascii_uppercase(), |(name, _)| {
            name.to_string()
        });
    let mut fields = vec![
        ("action_horizon", Value::from(horizon as u64)),
        ("action_keys", Value::Array(keys)),
        ("embodiment_tag", Value::from(enum_name)),
        ("needs_session_id", Value::Boolean(true)),
    ];
    // The DROID contract's frames; other embodiments take what their cameras give.
    if schema.tag() == EMBODIMENT_TAG {
        fields.push((
            "image_resolution",
            Value::Array(vec![Value::from(180), Value::from(320)]),
        ));
    }
    pack(&str_map(fields))
}

/// `{"type": "error", "message": ...}`, sent as a binary frame.
pub fn error(message: String) -> Step {
    let v = str_map([
        ("type", Value::from("error")),
        ("message", Value::from(message)),
    ]);
    Step::Send(Message::Binary(pack(&v).into()))
}

/// Answers one binary message; every failure is an error map. Counts, times and logs it
/// unless it was a reset, in the trace of the handshake's `parent`.
pub async fn handle(ctx: &WsContext, bytes: &[u8], parent: Option<TraceParent>) -> Step {
    match recorded(ctx, "vllm-omni", parent, answer(ctx, bytes)).await {
        Ok(v) => Step::Send(Message::Binary(pack(&v).into())),
        Err(r) => error(r.message),
    }
}

/// The reply, and the responses behind it (`None` for a reset).
async fn answer(ctx: &WsContext, bytes: &[u8]) -> Answer<Value> {
    // Read in place: a frame's bytes stay in the message until the frame copies them.
    let v = unpack_ref(bytes)?;
    let ValueRef::Map(m) = &v else {
        return Err(format!("the request must be a dict. Got {}", type_name(&v)).into());
    };
    // vLLM-Omni treats a message without `endpoint` as `infer`.
    let endpoint = match get(m, "endpoint") {
        None => "infer",
        Some(ValueRef::String(s)) => s.as_str().unwrap_or(""),
        Some(e) => {
            return Err(format!("endpoint must be 'infer' or 'reset'. Got {}", type_name(e)).into())
        }
    };
    match endpoint {
        "reset" => Ok((str_map([("status", Value::from("reset successful"))]), None)),
        "infer" => infer_actions(ctx, &v, m).await.map(|(a, r)| (a, Some(r))),
        other => Err(super::unknown_endpoint(other).into()),
    }
}

async fn infer_actions(
    ctx: &WsContext,
    obs: &ValueRef<'_>,
    m: &[(ValueRef<'_>, ValueRef<'_>)],
) -> Result<(Value, Vec<PredictResponse>), Refusal> {
    let mut items = tracing::info_span!("parse")
        .in_scope(|| parse(Some(obs), None, &ctx.schema))?
        .items;
    match get(m, "seed") {
        None | Some(ValueRef::Nil) => {}
        Some(s) => {
            let seed = uint(s)
                .ok_or_else(|| format!("seed must be a non-negative int. Got {}", type_name(s)))?;
            for item in &mut items {
                item.observation.noise = NoiseSource::Seed(seed);
            }
        }
    }
    // One queue entry per batch item, in order, as on the ZMQ door.
    let mut responses = Vec::with_capacity(items.len());
    for item in items {
        responses.push(ctx.worker.infer(item).await.map_err(Refusal::infer)?);
    }
    let actions = action_dict(&responses, &ctx.schema, ArrayForm::Openpi)
        .map_err(|e| Refusal::internal(format!("internal error: {e}")))?;
    Ok((actions, responses))
}
