//! The `/predict` request of the HTTP contract (docs/API.md) and its structural validation.
//!
//! Parsing goes through `serde_json::Value` so that every refusal names the offending field.
//! Checks that need the images or the tokenizer (decodability, aspect ratio, token count)
//! happen in the processor.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub use crate::observation::{NoiseSource, RequestError};
use serde_json::{Map, Value};

/// Camera names of the DROID layout, in model order.
pub const CAMERAS: [&str; 2] = ["exterior_image_1_left", "wrist_image_left"];
/// Frames per camera: t−15 then t.
pub const FRAMES_PER_CAMERA: usize = 2;
/// State keys and widths, in model order.
pub const STATE_KEYS: [(&str, usize); 3] = [
    ("eef_9d", 9),
    ("gripper_position", 1),
    ("joint_position", 7),
];
/// Seed used when the request gives neither `seed` nor `noise`.
pub const DEFAULT_SEED: u64 = 42;

/// Most top-level keys a body may have (duplicates included) before it is parsed.
const MAX_TOP_LEVEL_KEYS: usize = 64;

/// The real-time chunking fields a body may carry beside the observation (read by the HTTP
/// door, not here).
pub const RTC_FIELDS: [&str; 5] = [
    "previous_chunk",
    "action_horizon",
    "rtc_overlap_steps",
    "rtc_frozen_steps",
    "rtc_ramp_rate",
];

/// Top-level fields of the DROID body (`session_id` and `session_token` are read by the HTTP
/// door).
pub(crate) const TOP_LEVEL_FIELDS: [&str; 13] = [
    "images",
    "state",
    "instruction",
    "seed",
    "noise",
    "return_normalized",
    RTC_FIELDS[0],
    RTC_FIELDS[1],
    RTC_FIELDS[2],
    RTC_FIELDS[3],
    RTC_FIELDS[4],
    "session_id",
    "session_token",
];

/// The raw (un-normalised) arm state.
#[derive(Debug, Clone, PartialEq)]
pub struct RawState {
    /// xyz then the first two rows of the rotation matrix.
    pub eef_9d: [f32; 9],
    /// Gripper opening.
    pub gripper_position: [f32; 1],
    /// Seven joint angles.
    pub joint_position: [f32; 7],
}

impl RawState {
    /// The groups as owned `(key, values)` pairs, in model order (an observation's state).
    pub fn to_pairs(&self) -> Vec<(String, Vec<f32>)> {
        self.groups()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_vec()))
            .collect()
    }

    /// The groups by key, in model order.
    pub fn groups(&self) -> [(&'static str, &[f32]); 3] {
        [
            ("eef_9d", &self.eef_9d[..]),
            ("gripper_position", &self.gripper_position[..]),
            ("joint_position", &self.joint_position[..]),
        ]
    }
}

/// A structurally valid `/predict` request.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictRequest {
    /// Base64 frames per camera in [`CAMERAS`] order, each `[t−15, t]` (or `[t]` in a
    /// session, whose history supplies t−15).
    pub images: [Vec<String>; 2],
    /// Raw state.
    pub state: RawState,
    /// The instruction as sent.
    pub instruction: String,
    /// Initial noise.
    pub noise: NoiseSource,
    /// Also return the normalised chunk.
    pub return_normalized: bool,
}

impl PredictRequest {
    /// The body as the generic [`Observation`] of `processor`'s layout: the frames decoded
    /// time-major, each size checked from its header before its pixels are decoded.
    pub fn to_observation(
        &self,
        processor: &crate::embodiment::EmbodimentProcessor,
    ) -> Result<crate::embodiment::Observation, RequestError> {
        let views: Vec<(String, Vec<String>)> = CAMERAS
            .iter()
            .zip(&self.images)
            .map(|(cam, frames)| (cam.to_string(), frames.to_vec()))
            .collect();
        Ok(crate::embodiment::Observation {
            // The counts were checked when the body was parsed.
            images: processor.decode_base64_views(&views, true)?,
            state: self.state.to_pairs(),
            instruction: self.instruction.clone(),
            noise: self.noise.clone(),
        })
    }

    /// Parses and validates a JSON body; `horizon`/`action_dim` fix the noise shape (40 × 132).
    pub fn from_json(
        body: &[u8],
        horizon: usize,
        action_dim: usize,
    ) -> Result<PredictRequest, RequestError> {
        Self::from_value(&parse_body(body, horizon, action_dim)?, horizon, action_dim)
    }

    /// Validates an already parsed JSON value.
    pub fn from_value(
        value: &Value,
        horizon: usize,
        action_dim: usize,
    ) -> Result<PredictRequest, RequestError> {
        Self::from_value_in(value, horizon, action_dim, false)
    }

    /// [`Self::from_value`]; `in_session` also allows the frame at t alone per camera.
    pub fn from_value_in(
        value: &Value,
        horizon: usize,
        action_dim: usize,
        in_session: bool,
    ) -> Result<PredictRequest, RequestError> {
        let obj = object_with_fields(value, &TOP_LEVEL_FIELDS)?;
        let images = parse_images(required(obj, "images")?, in_session)?;
        let state = parse_state(required(obj, "state")?)?;
        let instruction = parse_instruction(obj)?;
        let (noise, return_normalized) = parse_noise_options(obj, horizon, action_dim)?;
        Ok(PredictRequest {
            images,
            state,
            instruction,
            noise,
            return_normalized,
        })
    }
}

/// A body's JSON, after a scan that refuses hostile sizes without allocating (see
/// [`check_value_counts`]); `horizon`/`action_dim` size the largest valid field (`noise`).
pub fn parse_body(body: &[u8], horizon: usize, action_dim: usize) -> Result<Value, RequestError> {
    // `noise` holds horizon × (action_dim + 1) values; no other field comes near.
    let max_values = horizon
        .saturating_mul(action_dim.saturating_add(1))
        .saturating_mul(2)
        .max(1024);
    check_value_counts(body, max_values)?;
    serde_json::from_slice(body)
        .map_err(|e| RequestError::new("body", format!("invalid JSON: {e}")))
}

/// The body as an object whose keys are all in `fields`; the error names the first other key.
pub(crate) fn object_with_fields<'a>(
    value: &'a Value,
    fields: &[&str],
) -> Result<&'a Map<String, Value>, RequestError> {
    let obj = value
        .as_object()
        .ok_or_else(|| RequestError::new("body", "expected a JSON object"))?;
    if let Some(key) = obj.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(RequestError::new(
            key.clone(),
            format!("unknown field (expected one of {})", fields.join(", ")),
        ));
    }
    Ok(obj)
}

/// The non-empty `instruction` string of a request object.
pub(crate) fn parse_instruction(obj: &Map<String, Value>) -> Result<String, RequestError> {
    match required(obj, "instruction")? {
        Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
        Value::String(_) => Err(RequestError::new("instruction", "must not be empty")),
        other => Err(RequestError::new(
            "instruction",
            format!("expected a string, got {}", kind(other)),
        )),
    }
}

/// `seed` | `noise` (default seed 42) and `return_normalized` of a request object.
pub(crate) fn parse_noise_options(
    obj: &Map<String, Value>,
    horizon: usize,
    action_dim: usize,
) -> Result<(NoiseSource, bool), RequestError> {
    let seed = match obj.get("seed") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            RequestError::new(
                "seed",
                format!("expected an unsigned integer, got {}", describe(v)),
            )
        })?),
    };
    let noise = match obj.get("noise") {
        None | Some(Value::Null) => None,
        Some(v) => Some(parse_noise(v, horizon, action_dim)?),
    };
    let noise = match (seed, noise) {
        (Some(_), Some(_)) => {
            return Err(RequestError::new(
                "noise",
                "give either seed or noise, not both",
            ));
        }
        (Some(s), None) => NoiseSource::Seed(s),
        (None, Some(n)) => NoiseSource::Client(n),
        (None, None) => NoiseSource::Seed(DEFAULT_SEED),
    };
    let return_normalized = match obj.get("return_normalized") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(RequestError::new(
                "return_normalized",
                format!("expected a boolean, got {}", kind(v)),
            ))
        }
    };
    Ok((noise, return_normalized))
}

/// Refuses a body with more top-level keys than [`MAX_TOP_LEVEL_KEYS`], or a top-level field
/// holding more than `max` JSON values (counted as the `[`, `{` and `,` in it), by one scan
/// that allocates nothing. Parsing such a body into a `Value` first would cost about 25 times
/// its size in memory and a fraction of a second per megabyte, on the inference thread.
/// Malformed JSON passes: the parser then says what is wrong with it.
fn check_value_counts(body: &[u8], max: usize) -> Result<(), RequestError> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let mut root_object = false;
    let mut expect_key = false;
    let mut string_start = 0;
    let mut key: Option<(usize, usize)> = None;
    let (mut keys, mut values) = (0usize, 0usize);
    let field = |key: Option<(usize, usize)>| match key {
        Some((a, b)) => String::from_utf8_lossy(&body[a..b]).into_owned(),
        None => "body".to_string(),
    };
    for (i, &b) in body.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
                if depth == 1 && expect_key {
                    expect_key = false;
                    key = Some((string_start, i));
                    values = 0;
                    keys += 1;
                    if keys > MAX_TOP_LEVEL_KEYS {
                        return Err(RequestError::new(
                            "body",
                            format!("more than {MAX_TOP_LEVEL_KEYS} top-level fields"),
                        ));
                    }
                }
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                string_start = i + 1;
            }
            b'{' | b'[' => {
                depth += 1;
                if depth == 1 {
                    root_object = b == b'{';
                    expect_key = root_object;
                } else {
                    values += 1;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b',' if depth == 1 && root_object => expect_key = true,
            b',' if depth >= 1 => values += 1,
            _ => {}
        }
        if values > max {
            return Err(RequestError::new(
                field(key),
                format!("holds more than {max} JSON values; no valid request has that many"),
            ));
        }
    }
    Ok(())
}

pub(crate) fn required<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
) -> Result<&'a Value, RequestError> {
    match obj.get(key) {
        Some(Value::Null) | None => Err(RequestError::new(key, "is required")),
        Some(v) => Ok(v),
    }
}

pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::Number(n) => format!("{n}"),
        other => kind(other).to_string(),
    }
}

fn parse_images(v: &Value, current_only: bool) -> Result<[Vec<String>; 2], RequestError> {
    let obj = v.as_object().ok_or_else(|| {
        RequestError::new("images", format!("expected an object, got {}", kind(v)))
    })?;
    for key in obj.keys() {
        if !CAMERAS.contains(&key.as_str()) {
            return Err(RequestError::new(
                format!("images.{key}"),
                format!(
                    "unknown camera (expected exactly {})",
                    CAMERAS.join(" and ")
                ),
            ));
        }
    }
    let mut out: [Vec<String>; 2] = Default::default();
    for (slot, cam) in out.iter_mut().zip(CAMERAS) {
        let field = format!("images.{cam}");
        let frames = obj
            .get(cam)
            .ok_or_else(|| RequestError::new(&field, "camera is missing"))?
            .as_array()
            .ok_or_else(|| {
                RequestError::new(&field, "expected an array of two base64 strings [t-15, t]")
            })?;
        if frames.len() != FRAMES_PER_CAMERA && !(current_only && frames.len() == 1) {
            let or_one = if current_only {
                " (or 1, [t]: the session keeps t-15)"
            } else {
                ""
            };
            return Err(RequestError::new(
                &field,
                format!(
                    "expected exactly {FRAMES_PER_CAMERA} frames [t-15, t]{or_one}, got {}",
                    frames.len()
                ),
            ));
        }
        for (i, f) in frames.iter().enumerate() {
            match f {
                Value::String(s) if !s.is_empty() => slot.push(s.clone()),
                _ => {
                    return Err(RequestError::new(
                        format!("{field}[{i}]"),
                        "expected a non-empty base64 string",
                    ))
                }
            }
        }
    }
    Ok(out)
}

pub(crate) fn parse_floats(v: &Value, field: &str, len: usize) -> Result<Vec<f32>, RequestError> {
    let arr = v.as_array().ok_or_else(|| {
        RequestError::new(
            field,
            format!("expected an array of {len} numbers, got {}", kind(v)),
        )
    })?;
    if arr.len() != len {
        return Err(RequestError::new(
            field,
            format!("expected {len} numbers, got {}", arr.len()),
        ));
    }
    arr.iter()
        .enumerate()
        .map(|(i, x)| {
            let f = x.as_f64().ok_or_else(|| {
                RequestError::new(
                    format!("{field}[{i}]"),
                    format!("expected a number, got {}", kind(x)),
                )
            })? as f32;
            if f.is_finite() {
                Ok(f)
            } else {
                Err(RequestError::new(
                    format!("{field}[{i}]"),
                    "must be finite (as float32)",
                ))
            }
        })
        .collect()
}

fn parse_state(v: &Value) -> Result<RawState, RequestError> {
    let obj = v.as_object().ok_or_else(|| {
        RequestError::new("state", format!("expected an object, got {}", kind(v)))
    })?;
    for key in obj.keys() {
        if !STATE_KEYS.iter().any(|(k, _)| k == key) {
            return Err(RequestError::new(
                format!("state.{key}"),
                "unknown state key (expected eef_9d, gripper_position, joint_position)",
            ));
        }
    }
    let get = |key: &str, len: usize| -> Result<Vec<f32>, RequestError> {
        let field = format!("state.{key}");
        let v = obj
            .get(key)
            .ok_or_else(|| RequestError::new(&field, "is required"))?;
        parse_floats(v, &field, len)
    };
    let mut state = RawState {
        eef_9d: [0.0; 9],
        gripper_position: [0.0; 1],
        joint_position: [0.0; 7],
    };
    state.eef_9d.copy_from_slice(&get("eef_9d", 9)?);
    state
        .gripper_position
        .copy_from_slice(&get("gripper_position", 1)?);
    state
        .joint_position
        .copy_from_slice(&get("joint_position", 7)?);
    Ok(state)
}

fn parse_noise(v: &Value, horizon: usize, action_dim: usize) -> Result<Vec<f32>, RequestError> {
    let rows = v.as_array().ok_or_else(|| {
        RequestError::new(
            "noise",
            format!(
                "expected {horizon} rows of {action_dim} numbers, got {}",
                kind(v)
            ),
        )
    })?;
    if rows.len() != horizon {
        return Err(RequestError::new(
            "noise",
            format!(
                "expected {horizon} rows of {action_dim} numbers, got {} rows",
                rows.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(horizon * action_dim);
    for (i, row) in rows.iter().enumerate() {
        out.extend(parse_floats(row, &format!("noise[{i}]"), action_dim)?);
    }
    Ok(out)
}
