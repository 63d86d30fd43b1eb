//! The HTTP `/predict` body (docs/API.md) → one typed [`Request`]: DROID's layout unless the
//! body names another `embodiment`. Every layout's `images` and `state` are read from its key
//! table ([`Keys`]): DROID's contract names ([`droid`]) or the checkpoint's layout. Frames are
//! decoded last, each size checked from its header first; the door runs this on the blocking
//! pool.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::json::{kind, object_with_fields, parse_body, parse_floats};
use super::json::{parse_instruction, parse_noise_options, required};
use gr00t_core::layouts::Layouts;
use gr00t_core::request::Request;
use gr00t_core::response::PredictResponse;
use gr00t_core::rtc::{valid_action_width, Chunk, RtcOptions, RTC_KEYS};
use gr00t_core::session::{check_session_id, SessionKey};
use gr00t_core::{Engine, InferError};
use gr00t_embodiment::droid;
use gr00t_embodiment::layout::EmbodimentSpec;
use gr00t_embodiment::observation::{Observation, RequestError};
use gr00t_embodiment::EMBODIMENT_TAG;
use serde_json::{Map, Value};
use std::time::Instant;

/// Top-level fields of the DROID body (`session_id` and `session_token` name the session).
const DROID_FIELDS: [&str; 13] = [
    "images",
    "state",
    "instruction",
    "seed",
    "noise",
    "return_normalized",
    RTC_KEYS[0],
    RTC_KEYS[1],
    RTC_KEYS[2],
    RTC_KEYS[3],
    RTC_KEYS[4],
    "session_id",
    "session_token",
];

/// Top-level fields of any other layout's body: `embodiment` plus DROID's.
const LAYOUT_FIELDS: [&str; DROID_FIELDS.len() + 1] = {
    let mut fields = ["embodiment"; DROID_FIELDS.len() + 1];
    let mut i = 0;
    while i < DROID_FIELDS.len() {
        fields[i + 1] = DROID_FIELDS[i];
        i += 1;
    }
    fields
};

/// The keys a body's `images` and `state` must have, and how a refusal words them: DROID's
/// contract keeps the texts docs/API.md fixed; every other layout lists its own keys.
#[derive(Clone, Copy)]
enum Keys<'a> {
    /// [`droid::CAMERAS`] × [`droid::FRAMES_PER_CAMERA`], [`droid::STATE_KEYS`].
    Droid,
    /// The layout's views × frame offsets and state keys.
    Layout(&'a EmbodimentSpec),
}

impl Keys<'_> {
    /// The top-level fields a body may have.
    fn fields(self) -> &'static [&'static str] {
        match self {
            Keys::Droid => &DROID_FIELDS,
            Keys::Layout(_) => &LAYOUT_FIELDS,
        }
    }

    /// `{view: [base64, …]}`, views and frame counts checked; `current_only` also allows the
    /// frame at t alone (a session's history has the older ones).
    fn images(
        self,
        v: &Value,
        current_only: bool,
    ) -> Result<Vec<(String, Vec<String>)>, RequestError> {
        match self {
            Keys::Droid => droid_images(v, current_only),
            Keys::Layout(spec) => layout_images(v, spec, current_only),
        }
    }

    /// `{key: [D]}` with exactly the table's keys and widths, in model order.
    fn state(self, v: &Value) -> Result<Vec<(String, Vec<f32>)>, RequestError> {
        let keys: Vec<(&str, usize)> = match self {
            Keys::Droid => droid::STATE_KEYS.to_vec(),
            Keys::Layout(spec) => spec.state.keys().collect(),
        };
        let wording = match self {
            Keys::Droid => None,
            Keys::Layout(spec) => {
                let list: Vec<String> = keys.iter().map(|(k, d)| format!("{k} [{d}]")).collect();
                Some(format!("{} takes state {{{}}}", spec.tag, list.join(", ")))
            }
        };
        let map = v.as_object().ok_or_else(|| {
            let msg = match &wording {
                None => format!("expected an object, got {}", kind(v)),
                Some(w) => format!("expected an object of keys, got {}; {w}", kind(v)),
            };
            RequestError::new("state", msg)
        })?;
        if let Some(k) = map.keys().find(|k| !keys.iter().any(|(key, _)| key == k)) {
            let msg = match (&wording, self) {
                (Some(w), Keys::Layout(spec)) => format!("not a state key of {}; {w}", spec.tag),
                _ => {
                    let names: Vec<&str> = keys.iter().map(|(k, _)| *k).collect();
                    format!("unknown state key (expected {})", names.join(", "))
                }
            };
            return Err(RequestError::new(format!("state.{k}"), msg));
        }
        keys.iter()
            .map(|&(key, dim)| {
                let field = format!("state.{key}");
                let missing = match &wording {
                    None => "is required".to_string(),
                    Some(w) => format!("missing; {w}"),
                };
                let value = map
                    .get(key)
                    .ok_or_else(|| RequestError::new(&field, missing))?;
                Ok((key.to_string(), parse_floats(value, &field, dim)?))
            })
            .collect()
    }
}

/// DROID's `images`: exactly its two cameras, each `[t-15, t]` (or `[t]` in a session).
fn droid_images(v: &Value, current_only: bool) -> Result<Vec<(String, Vec<String>)>, RequestError> {
    let obj = v.as_object().ok_or_else(|| {
        RequestError::new("images", format!("expected an object, got {}", kind(v)))
    })?;
    let cameras = droid::CAMERAS;
    if let Some(key) = obj.keys().find(|k| !cameras.contains(&k.as_str())) {
        return Err(RequestError::new(
            format!("images.{key}"),
            format!(
                "unknown camera (expected exactly {})",
                cameras.join(" and ")
            ),
        ));
    }
    let count = droid::FRAMES_PER_CAMERA;
    cameras
        .iter()
        .map(|cam| {
            let field = format!("images.{cam}");
            let frames = obj
                .get(*cam)
                .ok_or_else(|| RequestError::new(&field, "camera is missing"))?
                .as_array()
                .ok_or_else(|| {
                    RequestError::new(&field, "expected an array of two base64 strings [t-15, t]")
                })?;
            if frames.len() != count && !(current_only && frames.len() == 1) {
                let or_one = if current_only {
                    " (or 1, [t]: the session keeps t-15)"
                } else {
                    ""
                };
                return Err(RequestError::new(
                    &field,
                    format!(
                        "expected exactly {count} frames [t-15, t]{or_one}, got {}",
                        frames.len()
                    ),
                ));
            }
            let frames = frames
                .iter()
                .enumerate()
                .map(|(i, f)| match f {
                    Value::String(s) if !s.is_empty() => Ok(s.clone()),
                    _ => Err(RequestError::new(
                        format!("{field}[{i}]"),
                        "expected a non-empty base64 string",
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((cam.to_string(), frames))
        })
        .collect()
}

/// Any layout's `images`: its views, one frame per offset each, checked before any frame is
/// read.
fn layout_images(
    v: &Value,
    spec: &EmbodimentSpec,
    current_only: bool,
) -> Result<Vec<(String, Vec<String>)>, RequestError> {
    let map: &Map<String, Value> = v.as_object().ok_or_else(|| {
        RequestError::new(
            "images",
            format!(
                "expected an object of views, got {}; {} takes views {:?}, {} frame(s) each (offsets {:?}, oldest first)",
                kind(v),
                spec.tag,
                spec.views,
                spec.frame_deltas.len(),
                spec.frame_deltas
            ),
        )
    })?;
    let mut lists = Vec::with_capacity(map.len());
    for (view, frames) in map {
        let list = frames.as_array().ok_or_else(|| {
            RequestError::new(
                format!("images.{view}"),
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
                    f.as_str().map(str::to_string).ok_or_else(|| {
                        RequestError::new(
                            format!("images.{view}[{i}]"),
                            format!("expected a base64 PNG/JPEG string, got {}", kind(f)),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((view.to_string(), frames))
        })
        .collect()
}

/// Parses and validates one body against the served layouts, in the session the body or the
/// `X-Session-Id` header (`header_session`) names; the time it took, frames decoded, is the
/// request's `decode_ms`.
pub fn request_from_body(
    body: &[u8],
    layouts: &Layouts,
    header_session: Option<String>,
) -> Result<Request, RequestError> {
    let t0 = Instant::now();
    let (horizon, action_dim) = (layouts.horizon, layouts.action_dim);
    let value = parse_body(body, horizon, action_dim)?;
    let named = match value.get("embodiment") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => {
            return Err(RequestError::new(
                "embodiment",
                format!("expected a tag string, got {v}"),
            ))
        }
    };
    let layout = match &named {
        None => layouts.default_layout().ok_or_else(|| {
            RequestError::new("embodiment", "no embodiment is served".to_string())
        })?,
        Some(name) => layouts.resolve(name).ok_or_else(|| {
            let name = crate::doors::excerpt::excerpt(name);
            gr00t_core::error::not_served(&name, layouts.tags())
        })?,
    };
    let (spec, frames) = (&layout.spec, &layout.frames);
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
    let keys = if spec.tag == EMBODIMENT_TAG {
        Keys::Droid
    } else {
        Keys::Layout(spec)
    };
    // DROID's body may name its tag; its unknown-field refusal lists DROID's own fields.
    let obj = object_with_fields(&value, keys.fields(), &["embodiment"])?;
    let in_session = session.is_some();
    let views = keys.images(required(obj, "images")?, in_session)?;
    let state = keys.state(required(obj, "state")?)?;
    let instruction = parse_instruction(obj)?;
    let (noise, return_normalized) = parse_noise_options(obj, horizon, action_dim)?;
    drop(value);
    // The views and counts were checked with the key table.
    let images = frames.decode(&views)?;
    let observation = Observation {
        images,
        state,
        instruction,
        noise,
    };
    Ok(Request {
        return_normalized,
        decode_ms: t0.elapsed().as_secs_f64() * 1e3,
        rtc,
        session: session.map(|id| session_key(&id)),
        session_token,
        ..Request::new(spec.tag.clone(), observation)
    })
}

/// The namespace of the sessions HTTP clients name: apart from every other door's.
const SESSIONS: &str = "http";

/// The table key of the session an HTTP client names `id`.
pub fn session_key(id: &str) -> SessionKey {
    SessionKey::named(SESSIONS, id)
}

/// The body's `session_token` (null counting as absent): only beside a session.
pub(crate) fn session_token_of(
    value: &Value,
    in_session: bool,
) -> Result<Option<String>, RequestError> {
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
    let request = request_from_body(body, engine.layouts(), None)?;
    engine.run(request)
}
