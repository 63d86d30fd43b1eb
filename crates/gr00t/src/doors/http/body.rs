//! The HTTP `/predict` body (docs/API.md) → one typed [`Request`]: DROID's layout unless the
//! body names another `embodiment`. The HTTP door queues this as the job's decoding step, so it
//! runs on the inference thread as the body parsing always has.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use gr00t_core::engine::Layouts;
use gr00t_core::request::{AnyRequest, Item, Request};
use gr00t_core::response::PredictResponse;
use gr00t_core::rtc::{valid_action_width, Chunk, RtcOptions};
use gr00t_core::session::{check_session_id, SessionKey};
use gr00t_core::{Engine, InferError};
use gr00t_embodiment::embodiment_request::EmbodimentRequest;
use gr00t_embodiment::request::{self, PredictRequest, RequestError};
use gr00t_embodiment::EMBODIMENT_TAG;
use serde_json::{Map, Value};
use std::time::Instant;

/// Parses and validates one body against the served layouts, in the session the body or the
/// `X-Session-Id` header (`header_session`) names; the time it took is the request's
/// `decode_ms`.
pub fn request_from_body(
    body: &[u8],
    layouts: &Layouts,
    header_session: Option<String>,
) -> Result<Request, RequestError> {
    let t0 = Instant::now();
    let (horizon, action_dim) = (layouts.horizon, layouts.action_dim);
    let mut value = request::parse_body(body, horizon, action_dim)?;
    let named = match value.get("embodiment") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(v) => {
            return Err(RequestError::new(
                "embodiment",
                format!("expected a tag string, got {v}"),
            ))
        }
    };
    let spec = match &named {
        None => layouts.specs.first().ok_or_else(|| {
            RequestError::new("embodiment", "no embodiment is served".to_string())
        })?,
        Some(name) => layouts.resolve(name).ok_or_else(|| {
            RequestError::new(
                "embodiment",
                format!("{name:?} is not served here; served: {:?}", layouts.tags()),
            )
        })?,
    };
    let session = session_of(&value, header_session)?;
    let session_token = session_token_of(&value, session.is_some())?;
    let rtc = match value.as_object() {
        Some(obj) => rtc_options(obj)?.plan(
            "",
            horizon,
            action_dim,
            valid_action_width(spec),
            session.is_some(),
        )?,
        None => None,
    };
    let (item, return_normalized) = if layouts.droid && spec.tag == EMBODIMENT_TAG {
        if let Some(obj) = value.as_object_mut() {
            obj.remove("embodiment");
        }
        let req = PredictRequest::from_value_in(&value, horizon, action_dim, session.is_some())?;
        let normalized = req.return_normalized;
        (Item::DroidBody(req), normalized)
    } else {
        let req =
            EmbodimentRequest::from_value_in(&value, spec, horizon, action_dim, session.is_some())?;
        drop(value);
        let item = Item::Any(AnyRequest {
            tag: spec.tag.clone(),
            observation: req.observation,
        });
        (item, req.return_normalized)
    };
    Ok(Request {
        item,
        return_normalized,
        decode_ms: t0.elapsed().as_secs_f64() * 1e3,
        rtc,
        session: session.map(|id| session_key(&id)),
        session_token,
    })
}

/// The namespace of the sessions HTTP clients name: apart from every other door's.
const SESSIONS: &str = "http";

/// The table key of the session an HTTP client names `id`.
pub fn session_key(id: &str) -> SessionKey {
    SessionKey::named(SESSIONS, id)
}

/// The body's `session_token` (null counting as absent): only beside a session.
fn session_token_of(value: &Value, in_session: bool) -> Result<Option<String>, RequestError> {
    match value.get("session_token") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(_)) if !in_session => Err(RequestError::new(
            "session_token",
            "names a session's incarnation: send it with session_id (or X-Session-Id)",
        )),
        Some(Value::String(s)) => {
            check_session_id(s).map_err(|m| RequestError::new("session_token", m))?;
            Ok(Some(s.clone()))
        }
        Some(v) => Err(RequestError::new(
            "session_token",
            format!("expected a string, got {v}"),
        )),
    }
}

/// The session a body names (`session_id`, null counting as absent) or the `X-Session-Id`
/// header's; both given, they must agree.
pub fn session_of(
    value: &Value,
    header_session: Option<String>,
) -> Result<Option<String>, RequestError> {
    let named = match value.get("session_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => {
            check_session_id(s).map_err(|m| RequestError::new("session_id", m))?;
            Some(s.clone())
        }
        Some(v) => {
            return Err(RequestError::new(
                "session_id",
                format!("expected a string, got {v}"),
            ))
        }
    };
    match (named, header_session) {
        (Some(b), Some(h)) if b != h => Err(RequestError::new(
            "session_id",
            format!("{b:?} differs from the X-Session-Id header {h:?}"),
        )),
        (b, h) => Ok(b.or(h)),
    }
}

/// The body's RTC fields (`previous_chunk` rows of numbers, the integer steps, the rate);
/// null counts as absent. Their checks against the model are [`RtcOptions::resolve`]'s.
fn rtc_options(obj: &Map<String, Value>) -> Result<RtcOptions, RequestError> {
    let get = |k: &str| obj.get(k).filter(|v| !v.is_null());
    let steps = |k: &str| -> Result<Option<u64>, RequestError> {
        get(k)
            .map(|v| {
                v.as_u64().ok_or_else(|| {
                    RequestError::new(k, format!("expected a non-negative integer, got {v}"))
                })
            })
            .transpose()
    };
    let ramp_rate = get("rtc_ramp_rate")
        .map(|v| {
            v.as_f64().ok_or_else(|| {
                RequestError::new("rtc_ramp_rate", format!("expected a number, got {v}"))
            })
        })
        .transpose()?;
    let previous_chunk = get("previous_chunk").map(chunk).transpose()?;
    Ok(RtcOptions {
        previous_chunk,
        action_horizon: steps("action_horizon")?,
        overlap_steps: steps("rtc_overlap_steps")?,
        frozen_steps: steps("rtc_frozen_steps")?,
        ramp_rate,
    })
}

/// `previous_chunk`: rows of equally many numbers.
fn chunk(v: &Value) -> Result<Chunk, RequestError> {
    let expected = "expected rows of numbers (actions_normalized's rows, keys concatenated)";
    let rows = v
        .as_array()
        .ok_or_else(|| RequestError::new("previous_chunk", expected))?;
    let width = rows.first().and_then(Value::as_array).map_or(0, Vec::len);
    let mut values = Vec::with_capacity(rows.len() * width);
    for (i, row) in rows.iter().enumerate() {
        let field = format!("previous_chunk[{i}]");
        let row = row
            .as_array()
            .ok_or_else(|| RequestError::new(&field, expected))?;
        if row.len() != width {
            return Err(RequestError::new(
                &field,
                format!("has {} values, row 0 has {width}", row.len()),
            ));
        }
        for (j, x) in row.iter().enumerate() {
            let x = x
                .as_f64()
                .ok_or_else(|| RequestError::new(format!("{field}[{j}]"), "expected a number"))?;
            values.push(x as f32);
        }
    }
    Ok(Chunk {
        rows: rows.len(),
        width,
        values,
    })
}

/// One body straight through the engine, without the queue (`gr00t predict`, the bench, the
/// warm-up).
pub fn predict_body(engine: &Engine, body: &[u8]) -> Result<PredictResponse, InferError> {
    let request = request_from_body(body, &engine.layouts(), None)?;
    engine.run(request)
}
