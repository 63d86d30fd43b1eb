//! The `/predict` body for any embodiment (docs/API.md, "Beyond DROID"): `embodiment`,
//! `images {view: [base64 frame per delta index, oldest first]}`, `state {key: [D]}`,
//! `instruction`, `seed` | `noise`, `return_normalized`. Every refusal names the field and,
//! where keys are at fault, lists the expected keys and widths.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use crate::embodiment::{EmbodimentSpec, Observation};
use crate::image::decode_base64_frame;
use crate::request::RequestError;
use crate::request::{kind, object_with_fields, parse_floats, parse_instruction};
use crate::request::{parse_noise_options, required, TOP_LEVEL_FIELDS};
use serde_json::{Map, Value};

/// Top-level fields of the generic body: `embodiment` plus the DROID body's.
const FIELDS: [&str; TOP_LEVEL_FIELDS.len() + 1] = {
    let mut fields = ["embodiment"; TOP_LEVEL_FIELDS.len() + 1];
    let mut i = 0;
    while i < TOP_LEVEL_FIELDS.len() {
        fields[i + 1] = TOP_LEVEL_FIELDS[i];
        i += 1;
    }
    fields
};

/// A validated generic request.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbodimentRequest {
    /// The observation, frames decoded.
    pub observation: Observation,
    /// Also return the normalised chunk.
    pub return_normalized: bool,
}

impl EmbodimentRequest {
    /// Validates a parsed body against one embodiment's layout; `horizon`/`action_dim` fix the
    /// noise shape (40 × 132).
    pub fn from_value(
        value: &Value,
        spec: &EmbodimentSpec,
        horizon: usize,
        action_dim: usize,
    ) -> Result<EmbodimentRequest, RequestError> {
        Self::from_value_in(value, spec, horizon, action_dim, false)
    }

    /// [`Self::from_value`]; `in_session` also allows the frame at t alone per view.
    pub fn from_value_in(
        value: &Value,
        spec: &EmbodimentSpec,
        horizon: usize,
        action_dim: usize,
        in_session: bool,
    ) -> Result<EmbodimentRequest, RequestError> {
        let obj = object_with_fields(value, &FIELDS)?;
        let images = parse_images(required(obj, "images")?, spec, in_session)?;
        let state = parse_state(required(obj, "state")?, spec)?;
        let instruction = parse_instruction(obj)?;
        let (noise, return_normalized) = parse_noise_options(obj, horizon, action_dim)?;
        Ok(EmbodimentRequest {
            observation: Observation {
                images,
                state,
                instruction,
                noise,
            },
            return_normalized,
        })
    }
}

/// `{view: [base64, …]}`: views and frame counts checked before any frame is decoded.
fn parse_images(
    v: &Value,
    spec: &EmbodimentSpec,
    current_only: bool,
) -> Result<Vec<(String, Vec<crate::image::Frame>)>, RequestError> {
    let expected = || {
        format!(
            "{} takes views {:?}, {} frame(s) each (offsets {:?}, oldest first)",
            spec.tag,
            spec.views,
            spec.frame_deltas.len(),
            spec.frame_deltas
        )
    };
    let map: &Map<String, Value> = v.as_object().ok_or_else(|| {
        RequestError::new(
            "images",
            format!(
                "expected an object of views, got {}; {}",
                kind(v),
                expected()
            ),
        )
    })?;
    let mut lists = Vec::with_capacity(map.len());
    for (view, frames) in map {
        let field = format!("images.{view}");
        let list = frames.as_array().ok_or_else(|| {
            RequestError::new(
                &field,
                format!("expected an array of base64 frames, got {}", kind(frames)),
            )
        })?;
        lists.push((view.as_str(), list));
    }
    spec.check_sent_views(lists.iter().map(|(v, l)| (*v, l.len())), current_only)?;
    lists
        .into_iter()
        .map(|(view, list)| {
            let frames = list
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let field = format!("images.{view}[{i}]");
                    let s = f.as_str().ok_or_else(|| {
                        RequestError::new(
                            &field,
                            format!("expected a base64 PNG/JPEG string, got {}", kind(f)),
                        )
                    })?;
                    decode_base64_frame(s).map_err(|e| RequestError::new(&field, e.to_string()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((view.to_string(), frames))
        })
        .collect()
}

/// `{key: [D]}` with exactly the embodiment's state keys and widths.
fn parse_state(v: &Value, spec: &EmbodimentSpec) -> Result<Vec<(String, Vec<f32>)>, RequestError> {
    let keys: Vec<(&str, usize)> = spec.state.keys().collect();
    let expected = || {
        let list: Vec<String> = keys.iter().map(|(k, d)| format!("{k} [{d}]")).collect();
        format!("{} takes state {{{}}}", spec.tag, list.join(", "))
    };
    let map = v.as_object().ok_or_else(|| {
        RequestError::new(
            "state",
            format!(
                "expected an object of keys, got {}; {}",
                kind(v),
                expected()
            ),
        )
    })?;
    if let Some(k) = map.keys().find(|k| !keys.iter().any(|(key, _)| key == k)) {
        return Err(RequestError::new(
            format!("state.{k}"),
            format!("not a state key of {}; {}", spec.tag, expected()),
        ));
    }
    keys.iter()
        .map(|&(key, dim)| {
            let field = format!("state.{key}");
            let value = map
                .get(key)
                .ok_or_else(|| RequestError::new(&field, format!("missing; {}", expected())))?;
            Ok((key.to_string(), parse_floats(value, &field, dim)?))
        })
        .collect()
}
