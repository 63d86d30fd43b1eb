//! The JSON helpers of the `/predict` body (docs/API.md): a size scan before parsing, and typed
//! reads of the fields every layout shares (instruction, seed | noise, `return_normalized`),
//! each refusal naming the field.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use gr00t_embodiment::observation::{NoiseSource, RequestError, DEFAULT_SEED};
use serde_json::{Map, Value};

/// Most top-level keys a body may have (duplicates included) before it is parsed.
const MAX_TOP_LEVEL_KEYS: usize = 64;

/// A body's JSON, after a scan that refuses hostile sizes without allocating (see
/// [`check_value_counts`]); `horizon`/`action_dim` size the largest valid field (`noise`).
pub(super) fn parse_body(
    body: &[u8],
    horizon: usize,
    action_dim: usize,
) -> Result<Value, RequestError> {
    // `noise` holds horizon × (action_dim + 1) values; no other field comes near.
    let max_values = horizon
        .saturating_mul(action_dim.saturating_add(1))
        .saturating_mul(2)
        .max(1024);
    check_value_counts(body, max_values)?;
    serde_json::from_slice(body)
        .map_err(|e| RequestError::new("body", format!("invalid JSON: {e}")))
}

/// The body as an object whose keys are all in `fields` or `unlisted`; the error names the
/// first other key and lists `fields`. Mutable, so that its frames can be moved out.
pub(super) fn object_with_fields<'a>(
    value: &'a mut Value,
    fields: &[&str],
    unlisted: &[&str],
) -> Result<&'a mut Map<String, Value>, RequestError> {
    let obj = value
        .as_object_mut()
        .ok_or_else(|| RequestError::new("body", "expected a JSON object"))?;
    let known = |k: &str| fields.contains(&k) || unlisted.contains(&k);
    if let Some(key) = obj.keys().find(|k| !known(k.as_str())) {
        return Err(RequestError::new(
            key.clone(),
            format!("unknown field (expected one of {})", fields.join(", ")),
        ));
    }
    Ok(obj)
}

/// The non-empty `instruction` string of a request object.
pub(super) fn parse_instruction(obj: &Map<String, Value>) -> Result<String, RequestError> {
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
pub(super) fn parse_noise_options(
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

pub(super) fn required<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
) -> Result<&'a Value, RequestError> {
    match obj.get(key) {
        Some(Value::Null) | None => Err(RequestError::new(key, "is required")),
        Some(v) => Ok(v),
    }
}

pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(super) fn describe(v: &Value) -> String {
    match v {
        Value::Number(n) => format!("{n}"),
        other => kind(other).to_string(),
    }
}

pub(super) fn parse_floats(v: &Value, field: &str, len: usize) -> Result<Vec<f32>, RequestError> {
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
