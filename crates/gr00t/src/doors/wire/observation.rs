//! Decoding Isaac-GR00T's policy observation (`Gr00tPolicy.check_observation` /
//! `_get_action` and `Gr00tSimPolicyWrapper`) for every served embodiment:
//!
//! - nested: `{"video": {cam: uint8 [B,T,H,W,3]}, "state": {key: float32 [B,T,D]},
//!   "language": {lang_key: [[str]] * B}}`, actions `{key: float32 [B,H,D]}`;
//! - flat (`--use-sim-policy-wrapper`): `{"video.<cam>": .., "state.<key>": .., lang_key:
//!   [str] * B}`, actions `{"action.<key>": ..}`.
//!
//! The openpi websocket door takes the nested form too (`parse_openpi`), for any embodiment.
//!
//! Arrays may come in any of the peers' forms (`msgpack_numpy::decode_array`); the parse says
//! which one the message used, so that the reply (`super::reply`) can use it too. Refusals
//! reuse upstream's assertion texts so clients see the messages they know.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::error::WireError;
use super::msg::{Msg, View};
use super::msgpack_numpy::{array_view, decode_array, get, scalar, type_name, uint};
use super::msgpack_numpy::{ArrayForm, FormsSeen};
use super::ndarray::{ArrayView, DType, Kind, NdArray};
use super::schema::Schema;
use super::session::{session_id, session_token};
use gr00t_core::request::Request;
use gr00t_core::rtc::{Chunk, RtcOptions, RtcPlan};
use gr00t_core::session::SessionKey;
use gr00t_embodiment::embodiment::Observation;
use gr00t_embodiment::encoded_views::ViewDecoder;
use gr00t_embodiment::image::Frame;
use gr00t_embodiment::observation::{NoiseSource, DEFAULT_SEED};

/// The array under `key`, read in place (its form noted in `forms`), or the upstream-style
/// refusal.
fn array<'a, M: Msg>(
    v: Option<&'a M>,
    what: &str,
    key: &str,
    forms: &mut FormsSeen,
) -> Result<ArrayView<'a>, WireError> {
    let v = v.ok_or_else(|| {
        WireError::field(key, format!("{what} key '{key}' must be in observation"))
    })?;
    match array_view(v) {
        Some((form, a)) => {
            forms.note(form);
            a.map_err(|e| WireError::field(key, format!("{what} key '{key}': {e}")))
        }
        None => Err(WireError::field(
            key,
            format!(
                "{what} key '{key}' must be a numpy array. Got {}",
                type_name(v)
            ),
        )),
    }
}

/// One camera's frames `[B][T]`.
type CameraFrames = Vec<Vec<Frame>>;

/// Checks a video array like `check_observation` and cuts it into frames; the frame size is
/// checked against the layout's (`frames`: DROID's 16:9 bounds and patch grid, any tag's
/// geometry) before any frame is made, so the engine takes them checked. Each frame's bytes
/// are copied once, from the message into the frame.
fn video(
    a: ArrayView<'_>,
    key: &str,
    t: usize,
    frames: &ViewDecoder,
    door: Door,
    in_session: bool,
) -> Result<CameraFrames, WireError> {
    if a.dtype != DType::U8 {
        return Err(WireError::field(
            key,
            format!(
                "Video key '{key}' must be a numpy array of type np.uint8. Got {}",
                a.dtype.name()
            ),
        ));
    }
    let [b, tt, h, w, c] = a.shape[..] else {
        return Err(WireError::field(
            key,
            format!(
                "Video key '{key}' must be a numpy array of shape {}(B, T, H, W, C), got {}",
                door.unbatched_text("(T, H, W, C)"),
                a.shape_text()
            ),
        ));
    };
    // In a session a camera may send its frame at t alone; the openpi door's connection is
    // the session of a batch of one.
    let current_only = in_session || (door == Door::Openpi && b == 1);
    if tt != t && !(current_only && tt == 1) {
        let or_one = if current_only {
            " (or 1: the session keeps the older frames)"
        } else {
            ""
        };
        return Err(WireError::field(
            key,
            format!("Video key '{key}'s horizon must be {t}{or_one}. Got {tt}"),
        ));
    }
    if c != 3 {
        return Err(WireError::field(
            key,
            format!("Video key '{key}'s channel 'C' must be 3. Got {c}"),
        ));
    }
    frames
        .frame_size(w, h)
        .map_err(|e| WireError::field(key, format!("Video key '{key}': {e}")))?;
    let frame_len = h * w * 3;
    let n = b * tt;
    if n > 0 && (frame_len == 0 || a.data.len() < n * frame_len) {
        return Err(WireError::field(key, "video data is short"));
    }
    // Frame i of the array (item-major, then time).
    let frame = |i: usize| {
        Frame::new(w, h, a.data[i * frame_len..(i + 1) * frame_len].to_vec())
            .map_err(|e| WireError::field(key, format!("Video key '{key}': {e}")))
    };
    (0..b)
        .map(|item| (0..tt).map(|t| frame(item * tt + t)).collect())
        .collect()
}

/// Checks a state array like `check_observation`; returns each item's last step.
fn state(
    a: &NdArray,
    key: &str,
    t: usize,
    dim: usize,
    door: Door,
) -> Result<Vec<Vec<f32>>, WireError> {
    if a.dtype != DType::F32 {
        return Err(WireError::field(
            key,
            format!(
                "State key '{key}' must be a numpy array of type np.float32. Got {}",
                a.dtype.name()
            ),
        ));
    }
    let [b, tt, d] = a.shape[..] else {
        return Err(WireError::field(
            key,
            format!(
                "State key '{key}' must be a numpy array of shape {}(B, T, D), got {}",
                door.unbatched_text("(T, D)"),
                a.shape_text()
            ),
        ));
    };
    if tt != t {
        return Err(WireError::field(
            key,
            format!("State key '{key}'s horizon must be {t}. Got {tt}"),
        ));
    }
    if d != dim {
        return Err(WireError::field(
            key,
            format!("State key '{key}' must have {dim} values (D). Got {d}"),
        ));
    }
    let values = a.to_f32s();
    if values.iter().any(|v| !v.is_finite()) {
        return Err(WireError::field(
            key,
            format!("State key '{key}' must be finite"),
        ));
    }
    // The state delta is [0]: the current step is the last one sent.
    Ok((0..b)
        .map(|i| values[(i * t + t - 1) * d..(i * t + t) * d].to_vec())
        .collect())
}

fn check_batch(bs: &mut Option<usize>, n: usize, what: &str, key: &str) -> Result<(), WireError> {
    match *bs {
        None if n == 0 => Err(WireError::field(
            key,
            format!("{what} key '{key}' has batch size 0"),
        )),
        None => {
            *bs = Some(n);
            Ok(())
        }
        Some(b) if b != n => Err(WireError::field(
            key,
            format!("{what} key '{key}' must have batch size {b}. Got {n}"),
        )),
        Some(_) => Ok(()),
    }
}

fn dict<'a, M: Msg>(obs: &'a [(M, M)], modality: &str) -> Result<&'a [(M, M)], WireError> {
    let v = get(obs, modality).ok_or_else(|| {
        WireError::field(
            modality,
            format!("Observation must contain a '{modality}' key"),
        )
    })?;
    v.as_map().ok_or_else(|| {
        WireError::field(
            modality,
            format!(
                "Observation '{modality}' must be a dictionary. Got {}",
                type_name(v)
            ),
        )
    })
}

/// The instructions of a language entry: `[[str]] * B` nested, `[str] * B` flat.
fn language<M: Msg>(v: Option<&M>, key: &str, flat: bool) -> Result<Vec<String>, WireError> {
    let v = v.ok_or_else(|| {
        WireError::field(key, format!("Language key '{key}' must be in observation"))
    })?;
    let View::Array(items) = v.view() else {
        return Err(WireError::field(
            key,
            format!("Language key '{key}' must be a list. Got {}", type_name(v)),
        ));
    };
    items
        .iter()
        .map(|item| {
            let s = if flat {
                item
            } else {
                match item.view() {
                    View::Array(inner) if inner.len() == 1 => &inner[0],
                    View::Array(inner) => {
                        return Err(WireError::field(
                            key,
                            format!(
                                "Language batch item must have exactly one item. Got {}",
                                inner.len()
                            ),
                        ))
                    }
                    _ => {
                        return Err(WireError::field(
                            key,
                            format!(
                                "Language batch item must be a list. Got {}",
                                type_name(item)
                            ),
                        ))
                    }
                }
            };
            match s.view() {
                View::String(_, text) => text
                    .map(str::to_string)
                    .ok_or_else(|| WireError::field(key, "Language batch item is not valid UTF-8")),
                _ => Err(WireError::field(
                    key,
                    format!("Language batch item must be a string. Got {}", type_name(s)),
                )),
            }
        })
        .collect()
}

/// The noise of `options`: `seed` (int) or `noise` (float [H, A] or [B, H, A]); the default
/// seed otherwise. One entry per batch item.
fn noise<M: Msg>(
    options: Option<&M>,
    schema: &Schema,
    b: usize,
    forms: &mut FormsSeen,
    door: Door,
) -> Result<Vec<NoiseSource>, WireError> {
    let field = door.options_prefix();
    let (seed_field, noise_field) = (format!("{field}seed"), format!("{field}noise"));
    let opts = match options.filter(|v| !v.is_nil()) {
        None => return Ok(vec![NoiseSource::Seed(DEFAULT_SEED); b]),
        Some(v) => v.as_map().ok_or_else(|| {
            WireError::field(
                "options",
                format!("options must be a dict or None. Got {}", type_name(v)),
            )
        })?,
    };
    let seed = get(opts, "seed").filter(|v| !v.is_nil());
    let noise = get(opts, "noise").filter(|v| !v.is_nil());
    match (seed, noise) {
        (Some(_), Some(_)) => Err(WireError::field(
            &seed_field,
            format!(
                "{}give either seed or noise, not both",
                if field.is_empty() { "" } else { "options: " }
            ),
        )),
        (Some(s), None) => {
            let s = uint(s).ok_or_else(|| {
                WireError::field(
                    &seed_field,
                    format!("{field}seed must be a non-negative int. Got {s}"),
                )
            })?;
            Ok(vec![NoiseSource::Seed(s); b])
        }
        (None, Some(n)) => {
            let a = match decode_array(n) {
                Some((form, a)) => {
                    forms.note(form);
                    a.map_err(|e| WireError::field(&noise_field, format!("{field}noise: {e}")))?
                }
                // Plain msgpack clients send `noise.tolist()`.
                None => nested_floats(n).ok_or_else(|| {
                    WireError::field(
                        &noise_field,
                        format!(
                            "{field}noise must be a numpy array or nested lists of numbers. Got {}",
                            type_name(n)
                        ),
                    )
                })?,
            };
            let (h, d) = (schema.horizon, schema.action_dim);
            let per_item = match a.shape[..] {
                [hh, dd] if hh == h && dd == d => false,
                [bb, hh, dd] if (bb == b || bb == 1) && hh == h && dd == d => bb == b && b > 1,
                _ => {
                    return Err(WireError::field(
                        &noise_field,
                        format!(
                            "{field}noise must have shape ({h}, {d}) or (B, {h}, {d}). Got {}",
                            a.shape_text()
                        ),
                    ))
                }
            };
            if a.dtype.kind != Kind::Float {
                return Err(WireError::field(
                    &noise_field,
                    format!("{field}noise must be a float array. Got {}", a.dtype.name()),
                ));
            }
            let values = a.to_f32s();
            if values.iter().any(|v| !v.is_finite()) {
                return Err(WireError::field(
                    &noise_field,
                    format!("{field}noise must be finite (as float32)"),
                ));
            }
            Ok((0..b)
                .map(|i| {
                    let at = if per_item { i * h * d } else { 0 };
                    NoiseSource::Client(values[at..at + h * d].to_vec())
                })
                .collect())
        }
        (None, None) => Ok(vec![NoiseSource::Seed(DEFAULT_SEED); b]),
    }
}

/// Nested lists of numbers with a rectangular shape (`ndarray.tolist()`), as float32; `None`
/// for anything else. The message's size was bounded when it was unpacked.
fn nested_floats<M: Msg>(v: &M) -> Option<NdArray> {
    let mut shape = Vec::new();
    let mut level = v;
    while let View::Array(items) = level.view() {
        shape.push(items.len());
        level = items.first()?;
    }
    if shape.is_empty() {
        return None;
    }
    let mut values = Vec::with_capacity(shape.iter().product());
    flatten(v, &shape, &mut values).then(|| NdArray::from_f32(shape, &values))
}

/// Appends the numbers of `v` (of `shape`) to `out`; whether it was rectangular and numeric.
fn flatten<M: Msg>(v: &M, shape: &[usize], out: &mut Vec<f32>) -> bool {
    match (v.view(), shape.split_first()) {
        (View::Array(items), Some((&n, rest))) => {
            items.len() == n && items.iter().all(|x| flatten(x, rest, out))
        }
        (View::F64(x), None) => {
            out.push(x as f32);
            true
        }
        (View::F32(x), None) => {
            out.push(x);
            true
        }
        (View::Integer(i), None) => match i.as_f64() {
            Some(x) => {
                out.push(x as f32);
                true
            }
            None => false,
        },
        _ => false,
    }
}

/// A parsed `get_action`: one request per batch item, and the array form to answer in.
#[derive(Debug)]
pub struct Parsed {
    /// The batch, in order.
    pub items: Vec<Request>,
    /// The form the message's arrays used (`FormsSeen::reply_form`).
    pub form: ArrayForm,
    /// Real-time chunking, one plan for every batch item.
    pub rtc: Option<RtcPlan>,
    /// The session the message names (`options.session_id`; `session_id` on the openpi door).
    pub session: Option<String>,
    /// The session token it echoes (`options.session_token`; `session_token` on the openpi
    /// door).
    pub session_token: Option<String>,
}

impl Parsed {
    /// Each batch item's request, in order, with the message's RTC plan and session token, in
    /// `session` (the door's key for it); the items move out, their frames are not copied.
    pub fn into_requests(self, session: Option<SessionKey>) -> Vec<Request> {
        let (rtc, token) = (self.rtc, self.session_token);
        self.items
            .into_iter()
            .map(|item| {
                item.with_rtc_plan(rtc.clone())
                    .in_session(session.clone())
                    .with_session_token(token.clone())
            })
            .collect()
    }
}

/// Which door a message came through: where its messages differ from upstream's `get_action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Door {
    /// ZMQ / vLLM-Omni: upstream's batched arrays, noise under `options`.
    Upstream,
    /// The openpi websocket: one message is the observation with `seed` / `noise` beside it,
    /// and an unbatched video `[T,H,W,3]` / state `[T,D]` is a batch of one.
    Openpi,
}

impl Door {
    fn unbatched_text(self, shape: &str) -> String {
        match self {
            Door::Upstream => String::new(),
            Door::Openpi => format!("{shape} or "),
        }
    }

    fn options_prefix(self) -> &'static str {
        match self {
            Door::Upstream => "options.",
            Door::Openpi => "",
        }
    }

    /// Lifts an unbatched array (`rank - 1` dimensions) to a batch of one where the door
    /// allows it.
    fn batched(self, mut a: ArrayView<'_>, rank: usize) -> ArrayView<'_> {
        if self == Door::Openpi && a.shape.len() + 1 == rank {
            a.shape.insert(0, 1);
        }
        a
    }
}

/// Turns `get_action`'s `observation` and `options` into one request per batch item.
pub fn parse<M: Msg>(
    observation: Option<&M>,
    options: Option<&M>,
    schema: &Schema,
) -> Result<Parsed, WireError> {
    parse_for(observation, options, schema, Door::Upstream)
}

/// Turns an openpi websocket message carrying the nested observation into one request per
/// batch item: `seed` / `noise` sit beside `video` / `state` / `language`, and video
/// `[T,H,W,3]` / state `[T,D]` count as a batch of one.
pub fn parse_openpi<M: Msg>(message: &M, schema: &Schema) -> Result<Parsed, WireError> {
    parse_for(Some(message), Some(message), schema, Door::Openpi)
}

fn parse_for<M: Msg>(
    observation: Option<&M>,
    options: Option<&M>,
    schema: &Schema,
    door: Door,
) -> Result<Parsed, WireError> {
    let obs = match observation {
        Some(v) => v.as_map().ok_or_else(|| {
            WireError::field(
                "observation",
                format!("observation must be a dict. Got {}", type_name(v)),
            )
        })?,
        None => {
            return Err(WireError::field(
                "observation",
                "get_action needs data {'observation': ..., 'options': ...}",
            ))
        }
    };
    // Upstream checks the three modalities in this order: video, state, language.
    let (videos, states, langs) = if schema.flat {
        (obs, obs, obs)
    } else {
        if get(obs, "video").is_none() && obs.iter().any(|(k, _)| is_flat_key(k)) {
            return Err(WireError::field(
                "video",
                "Observation must contain a 'video' key (this is the flat 'video.<camera>' \
                 form: start the server with --use-sim-policy-wrapper)",
            ));
        }
        (
            dict(obs, "video")?,
            dict(obs, "state")?,
            dict(obs, "language")?,
        )
    };
    let mut bs = None;
    let mut forms = FormsSeen::default();
    let mut cams: Vec<CameraFrames> = Vec::new();
    let mut state_rows: Vec<Vec<Vec<f32>>> = Vec::new();
    let prefix = |modality: &str, key: &str| {
        if schema.flat {
            format!("{modality}.{key}")
        } else {
            key.to_string()
        }
    };
    let named_session = match options.and_then(Msg::as_map) {
        Some(m) => session_id(m, door.options_prefix())?,
        None => None,
    };
    // One key's array, shaped for the door (`rank` dims with the batch), its batch checked.
    let mut batched = |map, what: &str, key: &str, rank: usize| -> Result<ArrayView, WireError> {
        let a = door.batched(array(get(map, key), what, key, &mut forms)?, rank);
        check_batch(&mut bs, a.shape.first().copied().unwrap_or(0), what, key)?;
        Ok(a)
    };
    for cam in schema.views() {
        let key = prefix("video", cam);
        let a = batched(videos, "Video", &key, 5)?;
        cams.push(video(
            a,
            &key,
            schema.video_t(),
            &schema.layout.frames,
            door,
            named_session.is_some(),
        )?);
    }
    for (name, dim) in schema.state_keys() {
        let key = prefix("state", name);
        let a = batched(states, "State", &key, 3)?;
        state_rows.push(state(&a.into_owned(), &key, schema.state_t(), dim, door)?);
    }
    let key = schema.language_key();
    let lang = language(get(langs, key), key, schema.flat)?;
    let b = bs.unwrap_or(0);
    check_batch(&mut bs, lang.len(), "Language", key)?;
    let noises = noise(options, schema, b, &mut forms, door)?;
    let (rtc, session, session_token) = match options.and_then(Msg::as_map) {
        Some(m) => {
            let session = named_session;
            if session.is_some() && b != 1 {
                return Err(WireError::field(
                    format!("{}session_id", door.options_prefix()),
                    format!(
                        "{}session_id: a session is one robot, so the batch must be 1. Got {b}",
                        door.options_prefix()
                    ),
                ));
            }
            let token = session_token(m, door.options_prefix(), session.is_some())?;
            // The openpi door's connection is the session of a batch of one.
            let in_session = session.is_some() || (door == Door::Openpi && b == 1);
            (
                rtc(m, schema, door.options_prefix(), in_session)?,
                session,
                token,
            )
        }
        _ => (None, None, None),
    };
    let mut out = Vec::with_capacity(b);
    for (i, (instruction, noise)) in lang.into_iter().zip(noises).enumerate() {
        let images = schema
            .views()
            .iter()
            .zip(&cams)
            .map(|(view, c)| (view.clone(), c[i].clone()))
            .collect();
        let state = schema
            .state_keys()
            .zip(&state_rows)
            .map(|((key, _), rows)| (key.to_string(), rows[i].clone()))
            .collect();
        out.push(Request::new(
            schema.layout.clone(),
            Observation {
                images,
                state,
                instruction,
                noise,
            },
        ));
    }
    Ok(Parsed {
        items: out,
        form: forms.reply_form(),
        rtc,
        session,
        session_token,
    })
}

/// The RTC options among a message's keys (`previous_chunk` a float array `[rows, width]` or
/// `[1, rows, width]` in any form the door decodes, the steps non-negative ints, the rate a
/// number), checked against the schema's model and embodiment; errors name `prefix` + key.
pub fn rtc<M: Msg>(
    m: &[(M, M)],
    schema: &Schema,
    prefix: &str,
    in_session: bool,
) -> Result<Option<RtcPlan>, WireError> {
    let at = |k: &str| get(m, k).filter(|v| !v.is_nil());
    let steps = |k: &str| -> Result<Option<u64>, WireError> {
        at(k)
            .map(|v| {
                uint(v).ok_or_else(|| {
                    WireError::field(
                        format!("{prefix}{k}"),
                        format!("{prefix}{k} must be a non-negative int. Got {v}"),
                    )
                })
            })
            .transpose()
    };
    let ramp_rate = at("rtc_ramp_rate")
        .map(|v| {
            scalar(v)
                .filter(|_| !matches!(v.view(), View::Boolean(_)))
                .ok_or_else(|| {
                    WireError::field(
                        format!("{prefix}rtc_ramp_rate"),
                        format!("{prefix}rtc_ramp_rate must be a number. Got {v}"),
                    )
                })
        })
        .transpose()?;
    let previous_chunk = at("previous_chunk").map(|v| chunk(v, prefix)).transpose()?;
    let opts = RtcOptions {
        previous_chunk,
        action_horizon: steps("action_horizon")?,
        overlap_steps: steps("rtc_overlap_steps")?,
        frozen_steps: steps("rtc_frozen_steps")?,
        ramp_rate,
    };
    opts.plan(
        prefix,
        schema.horizon,
        schema.action_dim,
        schema.action_width(),
        in_session,
    )
    .map_err(WireError::from)
}

/// `previous_chunk`: a float array `[rows, width]` or `[1, rows, width]`.
fn chunk<M: Msg>(v: &M, prefix: &str) -> Result<Chunk, WireError> {
    let field = format!("{prefix}previous_chunk");
    let a = match decode_array(v) {
        Some((_, a)) => a.map_err(|e| WireError::field(&field, format!("{field}: {e}")))?,
        None => {
            return Err(WireError::field(
                &field,
                format!("{field} must be a numpy array. Got {}", type_name(v)),
            ))
        }
    };
    if a.dtype.kind != Kind::Float {
        return Err(WireError::field(
            &field,
            format!("{field} must be a float array. Got {}", a.dtype.name()),
        ));
    }
    let (rows, width) = match a.shape[..] {
        [r, w] | [1, r, w] => (r, w),
        _ => {
            return Err(WireError::field(
                &field,
                format!(
                    "{field} must have shape (rows, width) or (1, rows, width). Got {}",
                    a.shape_text()
                ),
            ))
        }
    };
    Ok(Chunk {
        rows,
        width,
        values: a.to_f32s(),
    })
}

fn is_flat_key<M: Msg>(k: &M) -> bool {
    super::msgpack_numpy::key_bytes(k).is_some_and(|b| b.starts_with(b"video."))
}
