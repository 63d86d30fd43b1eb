//! The HTTP `/predict` body (docs/API.md) → one checked [`Request`]: DROID's layout unless the
//! body names another `embodiment`. Every layout's `images` and `state` are read against its
//! served layout by one reader; how a refusal reads is table data ([`Wording`]: DROID's
//! contract texts, or the layout's own lists). Frames are decoded last, each size checked from
//! its header first; the door runs this on the blocking pool.
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

/// How a body's refusals of one layout's `images` and `state` read: the entry of
/// [`WORDINGS`] where the serving contract fixes the texts (DROID's, docs/API.md), else the
/// layout's own lists ([`LayoutWording`]). The keys, widths and counts are the layout's.
trait Wording: Sync {
    /// The top-level fields a body of this layout may have.
    fn fields(&self) -> &'static [&'static str];
    /// `images` is not an object (a value of JSON type `kind`).
    fn images_not_object(&self, spec: &EmbodimentSpec, kind: &str) -> String;
    /// `images.{view}` names no view of the layout.
    fn unknown_view(&self, spec: &EmbodimentSpec, view: &str) -> RequestError;
    /// The layout's `images.{view}` was not sent.
    fn missing_view(&self, spec: &EmbodimentSpec, view: &str) -> RequestError;
    /// `images.{view}` is not an array.
    fn frames_not_array(&self, view: &str, kind: &str) -> RequestError;
    /// `images.{view}` holds `count` frames: one per offset, or the one at t in a session.
    fn check_frame_count(
        &self,
        spec: &EmbodimentSpec,
        view: &str,
        count: usize,
        current_only: bool,
    ) -> Result<(), RequestError>;
    /// The base64 text of one frame (`field` is `images.{view}[i]`), moved out of the body.
    fn frame(&self, field: String, v: &mut Value) -> Result<String, RequestError>;
    /// `state` is not an object.
    fn state_not_object(&self, spec: &EmbodimentSpec, kind: &str) -> String;
    /// `state.{key}` names no state key of the layout.
    fn unknown_state_key(&self, spec: &EmbodimentSpec) -> String;
    /// A state key of the layout was not sent.
    fn missing_state_key(&self, spec: &EmbodimentSpec) -> String;
}

/// The tags whose body refusals the contract words; every other layout lists its own keys.
const WORDINGS: &[(&str, &dyn Wording)] = &[(EMBODIMENT_TAG, &DroidWording)];

/// The wording of a body of layout `tag`.
fn wording_of(tag: &str) -> &'static dyn Wording {
    WORDINGS
        .iter()
        .find(|(t, _)| *t == tag)
        .map_or(&LayoutWording, |(_, w)| *w)
}

/// DROID's texts, as docs/API.md fixes them (two cameras `[t-15, t]`, three state keys).
struct DroidWording;

impl Wording for DroidWording {
    fn fields(&self) -> &'static [&'static str] {
        &DROID_FIELDS
    }

    fn images_not_object(&self, _: &EmbodimentSpec, kind: &str) -> String {
        format!("expected an object, got {kind}")
    }

    fn unknown_view(&self, spec: &EmbodimentSpec, view: &str) -> RequestError {
        RequestError::new(
            format!("images.{view}"),
            format!(
                "unknown camera (expected exactly {})",
                spec.views.join(" and ")
            ),
        )
    }

    fn missing_view(&self, _: &EmbodimentSpec, view: &str) -> RequestError {
        RequestError::new(format!("images.{view}"), "camera is missing")
    }

    fn frames_not_array(&self, view: &str, _: &str) -> RequestError {
        RequestError::new(
            format!("images.{view}"),
            "expected an array of two base64 strings [t-15, t]",
        )
    }

    fn check_frame_count(
        &self,
        spec: &EmbodimentSpec,
        view: &str,
        count: usize,
        current_only: bool,
    ) -> Result<(), RequestError> {
        let t = spec.frame_deltas.len();
        if count == t || (current_only && count == 1) {
            return Ok(());
        }
        let or_one = if current_only {
            " (or 1, [t]: the session keeps t-15)"
        } else {
            ""
        };
        Err(RequestError::new(
            format!("images.{view}"),
            format!("expected exactly {t} frames [t-15, t]{or_one}, got {count}"),
        ))
    }

    fn frame(&self, field: String, v: &mut Value) -> Result<String, RequestError> {
        match v {
            Value::String(s) if !s.is_empty() => Ok(std::mem::take(s)),
            _ => Err(RequestError::new(
                field,
                "expected a non-empty base64 string",
            )),
        }
    }

    fn state_not_object(&self, _: &EmbodimentSpec, kind: &str) -> String {
        format!("expected an object, got {kind}")
    }

    fn unknown_state_key(&self, spec: &EmbodimentSpec) -> String {
        let names: Vec<&str> = spec.state.keys().map(|(k, _)| k).collect();
        format!("unknown state key (expected {})", names.join(", "))
    }

    fn missing_state_key(&self, _: &EmbodimentSpec) -> String {
        "is required".into()
    }
}

/// Any other layout: each refusal lists the layout's own views or state keys.
struct LayoutWording;

impl LayoutWording {
    /// What the layout's `state` must hold.
    fn state_hint(spec: &EmbodimentSpec) -> String {
        let list: Vec<String> = spec
            .state
            .keys()
            .map(|(k, d)| format!("{k} [{d}]"))
            .collect();
        format!("{} takes state {{{}}}", spec.tag, list.join(", "))
    }
}

impl Wording for LayoutWording {
    fn fields(&self) -> &'static [&'static str] {
        &LAYOUT_FIELDS
    }

    fn images_not_object(&self, spec: &EmbodimentSpec, kind: &str) -> String {
        format!(
            "expected an object of views, got {kind}; {}",
            spec.views_hint()
        )
    }

    fn unknown_view(&self, spec: &EmbodimentSpec, view: &str) -> RequestError {
        spec.unknown_view(view)
    }

    fn missing_view(&self, spec: &EmbodimentSpec, view: &str) -> RequestError {
        spec.missing_view(view)
    }

    fn frames_not_array(&self, view: &str, kind: &str) -> RequestError {
        RequestError::new(
            format!("images.{view}"),
            format!("expected an array of base64 frames, got {kind}"),
        )
    }

    fn check_frame_count(
        &self,
        spec: &EmbodimentSpec,
        view: &str,
        count: usize,
        current_only: bool,
    ) -> Result<(), RequestError> {
        spec.check_frame_count(view, count, current_only)
    }

    fn frame(&self, field: String, v: &mut Value) -> Result<String, RequestError> {
        match v {
            Value::String(s) => Ok(std::mem::take(s)),
            _ => Err(RequestError::new(
                field,
                format!("expected a base64 PNG/JPEG string, got {}", kind(v)),
            )),
        }
    }

    fn state_not_object(&self, spec: &EmbodimentSpec, kind: &str) -> String {
        format!(
            "expected an object of keys, got {kind}; {}",
            Self::state_hint(spec)
        )
    }

    fn unknown_state_key(&self, spec: &EmbodimentSpec) -> String {
        format!(
            "not a state key of {}; {}",
            spec.tag,
            Self::state_hint(spec)
        )
    }

    fn missing_state_key(&self, spec: &EmbodimentSpec) -> String {
        format!("missing; {}", Self::state_hint(spec))
    }
}

/// `{view: [base64, …]}`: no view the layout lacks, then each of its views in config order
/// with one frame per offset (`current_only`: or the frame at t alone, a session's history
/// has the older ones), checked before any frame is decoded; the texts move out of `v`.
fn images(
    v: &mut Value,
    spec: &EmbodimentSpec,
    wording: &dyn Wording,
    current_only: bool,
) -> Result<Vec<(String, Vec<String>)>, RequestError> {
    let not_object =
        |v: &Value| RequestError::new("images", wording.images_not_object(spec, kind(v)));
    let map: &mut Map<String, Value> = match v {
        Value::Object(map) => map,
        other => return Err(not_object(other)),
    };
    if let Some(view) = map.keys().find(|k| !spec.views.contains(k)) {
        return Err(wording.unknown_view(spec, view));
    }
    spec.views
        .iter()
        .map(|view| {
            let list = map
                .get_mut(view)
                .ok_or_else(|| wording.missing_view(spec, view))?;
            let list = match list {
                Value::Array(list) => list,
                other => return Err(wording.frames_not_array(view, kind(other))),
            };
            wording.check_frame_count(spec, view, list.len(), current_only)?;
            let frames = list
                .iter_mut()
                .enumerate()
                .map(|(i, f)| wording.frame(format!("images.{view}[{i}]"), f))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((view.clone(), frames))
        })
        .collect()
}

/// `{key: [D]}` with exactly the layout's state keys and widths, in model order.
fn state(
    v: &Value,
    spec: &EmbodimentSpec,
    wording: &dyn Wording,
) -> Result<Vec<(String, Vec<f32>)>, RequestError> {
    let map = v
        .as_object()
        .ok_or_else(|| RequestError::new("state", wording.state_not_object(spec, kind(v))))?;
    if let Some(k) = map
        .keys()
        .find(|k| !spec.state.keys().any(|(key, _)| key == *k))
    {
        return Err(RequestError::new(
            format!("state.{k}"),
            wording.unknown_state_key(spec),
        ));
    }
    spec.state
        .keys()
        .map(|(key, dim)| {
            let field = format!("state.{key}");
            let value = map
                .get(key)
                .ok_or_else(|| RequestError::new(&field, wording.missing_state_key(spec)))?;
            Ok((key.to_string(), parse_floats(value, &field, dim)?))
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
    let mut value = parse_body(body, horizon, action_dim)?;
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
    let wording = wording_of(&spec.tag);
    // DROID's body may name its tag; its unknown-field refusal lists DROID's own fields.
    let obj = object_with_fields(&mut value, wording.fields(), &["embodiment"])?;
    let in_session = session.is_some();
    required(obj, "images")?;
    // Its base64 texts move out of the body, not copied.
    let mut sent = obj.get_mut("images").map(Value::take).unwrap_or_default();
    let views = images(&mut sent, spec, wording, in_session)?;
    let state = state(required(obj, "state")?, spec, wording)?;
    let instruction = parse_instruction(obj)?;
    let (noise, return_normalized) = parse_noise_options(obj, horizon, action_dim)?;
    drop(value);
    // The views and counts were checked above; each frame size is checked from its header.
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
        ..Request::new(layout.clone(), observation)
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
