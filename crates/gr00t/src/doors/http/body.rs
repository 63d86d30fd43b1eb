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
use gr00t_core::{Engine, InferError};
use gr00t_embodiment::embodiment_request::EmbodimentRequest;
use gr00t_embodiment::request::{self, PredictRequest, RequestError};
use gr00t_embodiment::EMBODIMENT_TAG;
use std::time::Instant;

/// Parses and validates one body against the served layouts; the time it took is the
/// request's `decode_ms`.
pub fn request_from_body(body: &[u8], layouts: &Layouts) -> Result<Request, RequestError> {
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
    let (item, return_normalized) = if layouts.droid && spec.tag == EMBODIMENT_TAG {
        if let Some(obj) = value.as_object_mut() {
            obj.remove("embodiment");
        }
        let req = PredictRequest::from_value(&value, horizon, action_dim)?;
        let normalized = req.return_normalized;
        (Item::DroidBody(req), normalized)
    } else {
        let req = EmbodimentRequest::from_value(&value, spec, horizon, action_dim)?;
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
    })
}

/// One body straight through the engine, without the queue (`gr00t predict`, the bench, the
/// warm-up).
pub fn predict_body(engine: &Engine, body: &[u8]) -> Result<PredictResponse, InferError> {
    let request = request_from_body(body, &engine.layouts())?;
    engine.run(request)
}
