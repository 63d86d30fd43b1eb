//! openpi's DROID observation (`examples/droid/main.py` keys) → a model request, and the
//! Euler → `eef_9d` conversion.
//!
//! History: the model wants each camera at t−15 and t. A client that sends one frame `[H,W,3]`
//! per camera gets, as t−15, the frame it sent 15 observations earlier in the same session (the
//! connection's, or RoboArena's `session_id`): the core session's frame history supplies it
//! (the oldest one kept until 15 earlier ones exist: the first observation is paired with
//! itself). A client that sends `[2,H,W,3]` (`[t−15, t]`) chooses both frames itself.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use crate::doors::wire::error::WireError;
use crate::doors::wire::msg::{Msg, View};
use crate::doors::wire::msgpack_numpy::{from_openpi_array, get, openpi_view, scalar, type_name};
use crate::doors::wire::ndarray::{DType, Kind};
use gr00t_core::request::Request;
use gr00t_embodiment::droid::{RawState, CAMERAS};
use gr00t_embodiment::embodiment::Observation;
use gr00t_embodiment::encoded_views::ViewDecoder;
use gr00t_embodiment::frame_policy::check_frame_geometry;
use gr00t_embodiment::image::Frame;
use gr00t_embodiment::layout::Layout;
use gr00t_embodiment::observation::{NoiseSource, DEFAULT_SEED};
use gr00t_embodiment::pose;
use std::sync::Arc;

/// How many observations back the t−15 frame is taken from.
pub const HISTORY_STEPS: usize = 15;

/// DROID's egocentric frame correction, post-multiplied after the Euler rotation.
const EEF_ROTATION_CORRECT: [[f64; 3]; 3] = [[0.0, 0.0, -1.0], [-1.0, 0.0, 0.0], [0.0, 1.0, 0.0]];

/// One camera's input: the current frame only, or `[t−15, t]`.
#[derive(Debug, Clone, PartialEq)]
pub enum CameraInput {
    /// `[H, W, 3]`: t−15 comes from the session's frame history.
    Current(Frame),
    /// `[2, H, W, 3]`.
    Pair([Frame; 2]),
}

/// A validated observation before the history is applied.
#[derive(Debug, Clone, PartialEq)]
pub struct DroidObservation {
    /// Per camera in model order.
    pub cameras: [CameraInput; 2],
    /// Raw state.
    pub state: RawState,
    /// `prompt`.
    pub instruction: String,
    /// `__noise_seed__` or the default seed.
    pub noise: NoiseSource,
}

impl DroidObservation {
    /// Checks every frame's size against the served DROID layout's (`frames`: the 16:9 bounds
    /// [`parse`] checked, then the patch grid), so that the engine takes them checked.
    pub fn check_frames(&self, frames: &ViewDecoder) -> Result<(), WireError> {
        for (cam, input) in CAMERAS.iter().zip(&self.cameras) {
            let sent = match input {
                CameraInput::Current(frame) => std::slice::from_ref(frame),
                CameraInput::Pair(pair) => &pair[..],
            };
            for frame in sent {
                let key = camera_key(cam);
                frames
                    .frame_size(frame.width, frame.height)
                    .map_err(|e| WireError::field(&key, format!("{key}: {e}")))?;
            }
        }
        Ok(())
    }

    /// The request of the served DROID `layout`: its generic observation, a camera sent alone
    /// with its one frame (the session's frame history completes it on the inference thread).
    pub fn into_request(self, layout: Arc<Layout>) -> Request {
        let images = CAMERAS
            .iter()
            .zip(self.cameras)
            .map(|(cam, input)| {
                let frames = match input {
                    CameraInput::Current(frame) => vec![frame],
                    CameraInput::Pair(pair) => pair.to_vec(),
                };
                (cam.to_string(), frames)
            })
            .collect();
        Request::new(
            layout,
            Observation {
                images,
                state: self.state.to_pairs(),
                instruction: self.instruction,
                noise: self.noise,
            },
        )
    }
}

/// The observation key of a camera.
pub fn camera_key(cam: &str) -> String {
    format!("observation/{cam}")
}

fn camera<M: Msg>(m: &[(M, M)], cam: &str) -> Result<CameraInput, WireError> {
    let key = camera_key(cam);
    let bad = |message: String| WireError::field(&key, message);
    let v = get(m, &key).ok_or_else(|| bad(format!("{key} is missing")))?;
    // Read in place: each frame's bytes are copied once, from the message into the frame.
    let a = match openpi_view(v) {
        Some(a) => a.map_err(|e| bad(format!("{key}: {e}")))?,
        None => {
            return Err(bad(format!(
                "{key} must be a uint8 numpy array [H, W, 3]. Got {}",
                type_name(v)
            )))
        }
    };
    if a.dtype != DType::U8 {
        return Err(bad(format!(
            "{key} must be a uint8 numpy array [H, W, 3]. Got dtype {}",
            a.dtype.name()
        )));
    }
    let (t, h, w) = match a.shape[..] {
        [h, w, 3] => (1, h, w),
        [2, h, w, 3] => (2, h, w),
        _ => {
            return Err(bad(format!(
                "{key} must have shape (H, W, 3) or (2, H, W, 3) [t-15, t]. Got {}",
                a.shape_text()
            )))
        }
    };
    check_frame_geometry(w, h).map_err(|e| {
        bad(format!(
            "{key}: {e}; send 16:9 frames, e.g. image_tools.resize_with_pad(img, 180, 320)"
        ))
    })?;
    let mut frames = a
        .data
        .chunks_exact(h * w * 3)
        .map(|c| Frame::new(w, h, c.to_vec()).map_err(|e| bad(format!("{key}: {e}"))));
    Ok(if t == 1 {
        CameraInput::Current(frames.next().ok_or("empty frame")??)
    } else {
        let past = frames.next().ok_or("empty frame")??;
        let now = frames.next().ok_or("empty frame")??;
        CameraInput::Pair([past, now])
    })
}

/// `n` values from a numeric array, a numpy scalar, a number or a list; `None` when absent.
fn numbers<M: Msg>(m: &[(M, M)], key: &str, n: usize) -> Result<Option<Vec<f64>>, WireError> {
    let bad = |message: String| WireError::field(key, message);
    let Some(v) = get(m, key) else {
        return Ok(None);
    };
    let values: Vec<f64> = if let Some(a) = from_openpi_array(v) {
        let a = a.map_err(|e| bad(format!("{key}: {e}")))?;
        if a.dtype.kind == Kind::Bool {
            return Err(bad(format!("{key} must be numeric. Got dtype bool")));
        }
        a.to_f64s()
    } else if let Some(x) = scalar(v) {
        vec![x]
    } else if let View::Array(items) = v.view() {
        items
            .iter()
            .map(|x| scalar(x).ok_or_else(|| bad(format!("{key} must hold numbers"))))
            .collect::<Result<_, _>>()?
    } else {
        return Err(bad(format!(
            "{key} must be a numeric array of {n}. Got {}",
            type_name(v)
        )));
    };
    if values.len() != n {
        return Err(bad(format!(
            "{key} must hold {n} values. Got {}",
            values.len()
        )));
    }
    if values.iter().any(|x| !(*x as f32).is_finite()) {
        return Err(bad(format!("{key} must be finite (as float32)")));
    }
    Ok(Some(values))
}

/// The values as float32, as numpy's `astype(np.float32)` rounds them.
fn f32s(values: &[f64]) -> Vec<f32> {
    values.iter().map(|&x| x as f32).collect()
}

/// `eef_9d` from DROID's `cartesian_position` `[x, y, z, rx, ry, rz]`, as NVIDIA's
/// `compute_eef_9d` (`gr00t/data/state_action/droid_frame.py`, shared by its dataset builder
/// and its DROID client `examples/DROID/main_gr00t.py`) runs it:
/// `R = Rotation.from_euler("XYZ", e).as_matrix() @ C`, then xyz and the first two rows of `R`,
/// in f64, cast to f32. scipy's uppercase "XYZ" is *intrinsic* (`R = Rx·Ry·Rz`), whatever that
/// file's docstring says; the code is what the model was trained on.
pub fn eef_9d_from_cartesian(c: &[f64; 6]) -> [f32; 9] {
    let r = pose::euler_xyz_intrinsic_to_matrix([c[3], c[4], c[5]]);
    let m = pose::matmul(&r, &EEF_ROTATION_CORRECT);
    let r6 = pose::matrix_to_rot6d(&m);
    let mut out = [0.0f32; 9];
    for (o, v) in out.iter_mut().zip(c[..3].iter().chain(&r6)) {
        *o = *v as f32;
    }
    out
}

/// Validates one openpi DROID observation map.
pub fn parse<M: Msg>(m: &[(M, M)]) -> Result<DroidObservation, WireError> {
    let cameras = [camera(m, CAMERAS[0])?, camera(m, CAMERAS[1])?];
    let need = |key: &str, n: usize| -> Result<Vec<f32>, WireError> {
        let missing = || WireError::field(key, format!("{key} is missing"));
        let v = numbers(m, key, n)?.ok_or_else(missing)?;
        Ok(f32s(&v))
    };
    let joint = need("observation/joint_position", 7)?;
    let gripper = need("observation/gripper_position", 1)?;
    let eef = match numbers(m, "observation/eef_9d", 9)? {
        Some(e) => f32s(&e),
        None => match numbers(m, "observation/cartesian_position", 6)? {
            Some(c) => {
                let mut arr = [0.0; 6];
                arr.copy_from_slice(&c);
                eef_9d_from_cartesian(&arr).to_vec()
            }
            None => {
                return Err(WireError::field(
                    "observation/eef_9d",
                    "observation/eef_9d (xyz + rot6d) or observation/cartesian_position \
                     (xyz + intrinsic XYZ Euler, as DROID records it) is required",
                ))
            }
        },
    };
    let instruction = match get(m, "prompt").map(|v| (v, v.view())) {
        Some((_, View::String(_, s))) => s.map(str::to_string),
        Some((_, View::Binary(b))) => String::from_utf8(b.to_vec()).ok(),
        None => return Err(WireError::field("prompt", "prompt is missing")),
        Some((v, _)) => {
            let got = format!("prompt must be a str. Got {}", type_name(v));
            return Err(WireError::field("prompt", got));
        }
    }
    .ok_or_else(|| WireError::field("prompt", "prompt is not valid UTF-8"))?;
    if instruction.trim().is_empty() {
        return Err(WireError::field("prompt", "prompt must not be empty"));
    }
    let noise = match get(m, "__noise_seed__").filter(|v| !v.is_nil()) {
        None => NoiseSource::Seed(DEFAULT_SEED),
        Some(v) => {
            let seed = match v.view() {
                View::Integer(i) => i.as_u64(),
                View::Map(_) => scalar(v)
                    .filter(|x| x.fract() == 0.0 && *x >= 0.0 && *x < 2f64.powi(53))
                    .map(|x| x as u64),
                _ => None,
            };
            NoiseSource::Seed(seed.ok_or_else(|| {
                WireError::field(
                    "__noise_seed__",
                    format!(
                        "__noise_seed__ must be a non-negative int. Got {}",
                        type_name(v)
                    ),
                )
            })?)
        }
    };
    let mut state = RawState {
        eef_9d: [0.0; 9],
        gripper_position: [0.0; 1],
        joint_position: [0.0; 7],
    };
    state.eef_9d.copy_from_slice(&eef);
    state.gripper_position.copy_from_slice(&gripper);
    state.joint_position.copy_from_slice(&joint);
    Ok(DroidObservation {
        cameras,
        state,
        instruction,
        noise,
    })
}
