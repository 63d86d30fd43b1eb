//! The action reply of `get_action`: `{key: float32 [B, horizon, D]}` per action key (flat:
//! `action.<key>`) in the array form the request used, and the reply's info entries.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::error::WireError;
use super::msgpack_numpy::{encode_array, ArrayForm};
use super::ndarray::NdArray;
use super::schema::Schema;
use gr00t_core::response::PredictResponse;
use rmpv::Value;

/// `[action_dict, info]`: float32 `[B, horizon, D]` per action key (flat: `action.<key>`),
/// arrays in `form`.
pub fn action_reply(
    responses: &[PredictResponse],
    schema: &Schema,
    form: ArrayForm,
) -> Result<Value, WireError> {
    let actions = action_dict(responses, schema, form)?;
    Ok(Value::Array(vec![
        actions,
        Value::Map(reply_info(responses)),
    ]))
}

/// The reply's info entries: the longest wait and the oldest observation's age over the batch,
/// in ms, and the session's step and token after it (in a session).
pub fn reply_info(responses: &[PredictResponse]) -> Vec<(Value, Value)> {
    let max = |f: fn(&PredictResponse) -> f64| responses.iter().map(f).fold(0.0, f64::max);
    let mut info = vec![
        (Value::from("queue_ms"), Value::F64(max(|r| r.queue_ms))),
        (
            Value::from("observation_age_ms"),
            Value::F64(max(|r| r.observation_age_ms)),
        ),
    ];
    if let Some(s) = responses.last().and_then(|r| r.session.as_ref()) {
        info.push((Value::from("session_step"), Value::from(s.step)));
    }
    if let Some(t) = responses.last().and_then(|r| r.session_token.as_deref()) {
        info.push((Value::from("session_token"), Value::from(t)));
    }
    info
}

/// `{key: float32 [B, horizon, D]}` per action key (flat: `action.<key>`), arrays in `form`.
pub fn action_dict(
    responses: &[PredictResponse],
    schema: &Schema,
    form: ArrayForm,
) -> Result<Value, WireError> {
    let mut actions = Vec::new();
    for key in schema.action_keys() {
        let (mut values, mut horizon, mut dim) = (Vec::new(), 0, 0);
        for r in responses {
            let rows = r
                .actions
                .get(key)
                .ok_or_else(|| WireError::Reply(format!("no actions for key {key:?}")))?;
            (horizon, dim) = (rows.len(), rows.first().map_or(0, Vec::len));
            values.extend(rows.iter().flatten().copied());
        }
        if values.len() != responses.len() * horizon * dim {
            return Err(WireError::Reply(format!("ragged {key} actions")));
        }
        let a = NdArray::from_f32(vec![responses.len(), horizon, dim], &values);
        let name = if schema.flat {
            format!("action.{key}")
        } else {
            key.to_string()
        };
        actions.push((Value::from(name), encode_array(&a, form)));
    }
    Ok(Value::Map(actions))
}
