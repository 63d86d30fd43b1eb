//! Action decoding: un-normalisation and relative → absolute conversion.
//!
//! `Gr00tN1d7Processor.decode_action` for one sample. The action keys, their order and their
//! representation come from the processor's action modality config; each key's width from the
//! statistics (DROID: eef_9d [0:9], gripper_position [9:10], joint_position [10:17]).
//! 1. Slice the key's columns of the first `horizon` rows of `action_pred`.
//! 2. `(clip(a, −1, 1) + 1)/2·(hi − lo) + lo` in f64. RELATIVE keys use
//!    `statistics[tag]["relative_action"][key]` `min`/`max` (whatever `use_percentiles` says: the
//!    relative stats replace the action params and the un-normaliser reads min/max); ABSOLUTE
//!    keys use `statistics[tag]["action"][key]` `q01`/`q99` with `use_percentiles`, else min/max.
//!    Relative stats may be flat (`[D]`) or per horizon step (`[horizon][D]`).
//! 3. With `use_relative_action`, relative keys are made absolute against the raw state of their
//!    `state_key`: `DEFAULT` format adds the state; `XYZ_ROT6D` composes poses, `T_abs = T_ref·T_rel`.
//!
//! rot6d layout (checked against the fixtures): the six numbers are the first two **columns** of
//! the rotation matrix, `[R00, R10, R20, R01, R11, R21]`, and the output uses the same layout.
//! The reference runs the Gram–Schmidt of the state's rot6d in f32 (it arrives as float32) and
//! everything else in f64; the result is cast to f32.

use gr00t_model::checkpoint::{ProcessorConfig, Statistics};
use std::fmt;

/// Why an action chunk could not be decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum ActionError {
    /// The checkpoint's processor config or statistics do not describe this embodiment's actions.
    Config(String),
    /// `action_pred` has the wrong size.
    Shape(String),
    /// A state needed for a relative key is absent.
    MissingState(String),
    /// A state has the wrong number of values.
    StateLength {
        /// The state key.
        key: String,
        /// Its expected width.
        expected: usize,
        /// What was given.
        got: usize,
    },
    /// A state value is NaN or infinite.
    NonFiniteState(String),
    /// A rot6d whose two vectors are zero or parallel (no rotation can be built).
    DegenerateRotation(String),
}

impl fmt::Display for ActionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ActionError::Config(m) => write!(f, "action config: {m}"),
            ActionError::Shape(m) => write!(f, "action chunk: {m}"),
            ActionError::MissingState(k) => {
                write!(f, "state {k:?} is needed to make relative actions absolute")
            }
            ActionError::StateLength { key, expected, got } => {
                write!(f, "state {key:?} has {got} values, expected {expected}")
            }
            ActionError::NonFiniteState(k) => write!(f, "state {k:?} has a non-finite value"),
            ActionError::DegenerateRotation(m) => write!(f, "degenerate rot6d: {m}"),
        }
    }
}

impl std::error::Error for ActionError {}

/// How a relative key is turned absolute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelativeFormat {
    /// `abs = state + rel` (`DEFAULT`).
    Delta,
    /// xyz + rot6d pose composition (`XYZ_ROT6D`).
    XyzRot6d,
}

/// Representation of one action key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Representation {
    /// The model predicts the action itself.
    Absolute,
    /// The model predicts a change relative to a state key.
    Relative {
        /// The reference state key.
        state_key: String,
        /// How to apply it.
        format: RelativeFormat,
    },
}

#[derive(Debug, Clone, PartialEq)]
struct GroupSpec {
    key: String,
    offset: usize,
    dim: usize,
    rep: Representation,
    /// One row, or one row per horizon step.
    lo: Vec<Vec<f64>>,
    hi: Vec<Vec<f64>>,
}

impl GroupSpec {
    fn bounds(&self, step: usize) -> (&[f64], &[f64]) {
        let r = if self.lo.len() == 1 { 0 } else { step };
        (&self.lo[r], &self.hi[r])
    }
}

/// One decoded action key, each buffer `[horizon, dim]` row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionGroup {
    /// The action key, e.g. `joint_position`.
    pub key: String,
    /// Its width.
    pub dim: usize,
    /// The model-space chunk of this key before clipping and un-normalisation.
    pub normalized: Vec<f32>,
    /// After clip + un-normalisation, before relative → absolute (`decode.unnormalized.*`).
    pub unnormalized: Vec<f32>,
    /// The final actions (`output.*`).
    pub actions: Vec<f32>,
}

impl ActionGroup {
    /// Final actions as rows of `dim` values, one per horizon step.
    pub fn rows(&self) -> impl Iterator<Item = &[f32]> {
        self.actions.chunks_exact(self.dim)
    }
}

/// A decoded chunk: every action key in model order.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedActions {
    /// Number of steps.
    pub horizon: usize,
    /// The keys in the order of the processor's action modality config.
    pub groups: Vec<ActionGroup>,
}

impl DecodedActions {
    /// The group of an action key.
    pub fn get(&self, key: &str) -> Option<&ActionGroup> {
        self.groups.iter().find(|g| g.key == key)
    }
}

/// Decodes normalised action chunks of one embodiment tag into physical actions.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionDecoder {
    groups: Vec<GroupSpec>,
    horizon: usize,
    max_action_dim: usize,
}

impl ActionDecoder {
    /// Reads keys, representations and bounds of `tag` from the processor config and statistics.
    pub fn new(
        stats: &Statistics,
        processor: &ProcessorConfig,
        tag: &str,
    ) -> Result<ActionDecoder, ActionError> {
        let cfg = |m: String| ActionError::Config(m);
        let modality = processor
            .modality_configs
            .get(tag)
            .ok_or_else(|| cfg(format!("no modality config for tag {tag:?}")))?;
        let action = &modality.action;
        let horizon = action.delta_indices.len();
        if horizon == 0 {
            return Err(cfg("action delta_indices is empty".into()));
        }
        let reps = action.action_configs.as_deref().unwrap_or(&[]);
        if !reps.is_empty() && reps.len() != action.modality_keys.len() {
            return Err(cfg(format!(
                "{} action keys but {} action_configs",
                action.modality_keys.len(),
                reps.len()
            )));
        }
        let mut groups = Vec::new();
        let mut offset = 0;
        for (i, key) in action.modality_keys.iter().enumerate() {
            let rep = match reps.get(i) {
                None => Representation::Absolute,
                Some(c) => match c.rep.as_str() {
                    "ABSOLUTE" => Representation::Absolute,
                    "RELATIVE" => {
                        let format = match (c.kind.as_str(), c.format.as_str()) {
                            ("EEF", "XYZ_ROT6D") => RelativeFormat::XyzRot6d,
                            (_, "DEFAULT") => RelativeFormat::Delta,
                            (kind, format) => {
                                return Err(cfg(format!(
                                    "action {key:?}: relative {kind}/{format} is not supported"
                                )))
                            }
                        };
                        let state_key = c.state_key.clone().unwrap_or_else(|| key.clone());
                        Representation::Relative { state_key, format }
                    }
                    other => return Err(cfg(format!("action {key:?}: unknown rep {other:?}"))),
                },
            };
            let relative = processor.use_relative_action && rep != Representation::Absolute;
            let (group, use_pct) = if relative {
                ("relative_action", false)
            } else {
                ("action", processor.use_percentiles)
            };
            let s = stats.get(tag, group, key).map_err(|e| cfg(e.to_string()))?;
            let (lo, hi) = if use_pct {
                (&s.q01, &s.q99)
            } else {
                (&s.min, &s.max)
            };
            if lo.len() != 1 && lo.len() < horizon {
                return Err(cfg(format!(
                    "{group} statistics of {key:?} have {} rows; expected 1 or {horizon}",
                    lo.len()
                )));
            }
            let dim = s.dim();
            let pose = matches!(
                &rep,
                Representation::Relative {
                    format: RelativeFormat::XyzRot6d,
                    ..
                }
            );
            if relative && pose && dim != 9 {
                return Err(cfg(format!(
                    "XYZ_ROT6D action {key:?} is {dim} wide, not 9"
                )));
            }
            groups.push(GroupSpec {
                key: key.clone(),
                offset,
                dim,
                rep: if relative {
                    rep
                } else {
                    Representation::Absolute
                },
                lo: lo.clone(),
                hi: hi.clone(),
            });
            offset += dim;
        }
        if groups.is_empty() {
            return Err(cfg(format!("tag {tag:?} has no action keys")));
        }
        if offset > processor.max_action_dim {
            return Err(cfg(format!(
                "action keys are {offset} wide, more than max_action_dim {}",
                processor.max_action_dim
            )));
        }
        Ok(ActionDecoder {
            groups,
            horizon,
            max_action_dim: processor.max_action_dim,
        })
    }

    /// Steps per decoded chunk.
    pub fn horizon(&self) -> usize {
        self.horizon
    }

    /// The action keys in model order with their widths and representations.
    pub fn keys(&self) -> impl Iterator<Item = (&str, usize, &Representation)> {
        self.groups.iter().map(|g| (g.key.as_str(), g.dim, &g.rep))
    }

    /// The state keys (and widths) the relative keys need.
    pub fn required_states(&self) -> impl Iterator<Item = (&str, usize)> {
        self.groups.iter().filter_map(|g| match &g.rep {
            Representation::Relative { state_key, .. } => Some((state_key.as_str(), g.dim)),
            Representation::Absolute => None,
        })
    }

    /// Decodes `action_pred` (`[rows, max_action_dim]` row-major, rows ≥ horizon; the model's
    /// `head.action_pred`) against the raw state of the observation (`(key, values)` of its last
    /// time step).
    pub fn decode(
        &self,
        action_pred: &[f32],
        raw_state: &[(&str, &[f32])],
    ) -> Result<DecodedActions, ActionError> {
        let width = self.max_action_dim;
        if !action_pred.len().is_multiple_of(width) || action_pred.len() / width < self.horizon {
            return Err(ActionError::Shape(format!(
                "{} values is not [≥{}, {width}]",
                action_pred.len(),
                self.horizon
            )));
        }
        let mut groups = Vec::with_capacity(self.groups.len());
        for g in &self.groups {
            let mut normalized = Vec::with_capacity(self.horizon * g.dim);
            let mut unnorm = Vec::with_capacity(self.horizon * g.dim);
            for step in 0..self.horizon {
                let row = &action_pred[step * width + g.offset..step * width + g.offset + g.dim];
                let (lo, hi) = g.bounds(step);
                normalized.extend_from_slice(row);
                unnorm.extend(
                    row.iter()
                        .zip(lo)
                        .zip(hi)
                        .map(|((&a, &l), &h)| unnormalize(a, l, h)),
                );
            }
            let absolute = match &g.rep {
                Representation::Absolute => unnorm.clone(),
                Representation::Relative { state_key, format } => {
                    let state = find_state(raw_state, state_key, g.dim)?;
                    match format {
                        RelativeFormat::Delta => unnorm
                            .chunks_exact(g.dim)
                            .flat_map(|r| r.iter().zip(state).map(|(d, &s)| s as f64 + d))
                            .collect(),
                        RelativeFormat::XyzRot6d => compose_poses(state, &unnorm, state_key)?,
                    }
                }
            };
            groups.push(ActionGroup {
                key: g.key.clone(),
                dim: g.dim,
                normalized,
                unnormalized: unnorm.iter().map(|&x| x as f32).collect(),
                actions: absolute.iter().map(|&x| x as f32).collect(),
            });
        }
        Ok(DecodedActions {
            horizon: self.horizon,
            groups,
        })
    }
}

/// `(clip(a, −1, 1) + 1)/2·(hi − lo) + lo`: clip and `+ 1`, `/ 2` in f32 as numpy does on the
/// float32 chunk, then f64 against the float64 statistics.
fn unnormalize(a: f32, lo: f64, hi: f64) -> f64 {
    let half = (a.clamp(-1.0, 1.0) + 1.0) / 2.0;
    half as f64 * (hi - lo) + lo
}

fn find_state<'a>(
    raw: &[(&str, &'a [f32])],
    key: &str,
    dim: usize,
) -> Result<&'a [f32], ActionError> {
    let v = raw
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| *v)
        .ok_or_else(|| ActionError::MissingState(key.to_string()))?;
    if v.len() != dim {
        return Err(ActionError::StateLength {
            key: key.to_string(),
            expected: dim,
            got: v.len(),
        });
    }
    if v.iter().any(|x| !x.is_finite()) {
        return Err(ActionError::NonFiniteState(key.to_string()));
    }
    Ok(v)
}

/// `T_abs = T_ref · T_rel` per step; `reference` is the f32 state, `rel` the `[H, 9]` f64 deltas.
fn compose_poses(reference: &[f32], rel: &[f64], key: &str) -> Result<Vec<f64>, ActionError> {
    let r_ref = rot6d_to_matrix(&reference[3..9])
        .ok_or_else(|| ActionError::DegenerateRotation(format!("state {key:?}")))?;
    let t_ref = [
        reference[0] as f64,
        reference[1] as f64,
        reference[2] as f64,
    ];
    let mut out = Vec::with_capacity(rel.len());
    for (step, r) in rel.chunks_exact(9).enumerate() {
        let r_rel = rot6d_to_matrix(&r[3..9]).ok_or_else(|| {
            ActionError::DegenerateRotation(format!("relative action {key:?} step {step}"))
        })?;
        let r_abs = matmul(&r_ref, &r_rel);
        for (i, t) in t_ref.iter().enumerate() {
            out.push(r_ref[i][0] * r[0] + r_ref[i][1] * r[1] + r_ref[i][2] * r[2] + t);
        }
        out.extend(matrix_to_rot6d(&r_abs));
    }
    Ok(out)
}

type Mat3 = [[f64; 3]; 3];

/// The float operations Gram–Schmidt needs, so it runs in the dtype numpy used.
trait Real:
    Copy
    + PartialOrd
    + Into<f64>
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
{
    const ZERO: Self;
    fn sqrt(self) -> Self;
    fn is_finite(self) -> bool;
}

impl Real for f32 {
    const ZERO: f32 = 0.0;
    fn sqrt(self) -> f32 {
        f32::sqrt(self)
    }
    fn is_finite(self) -> bool {
        f32::is_finite(self)
    }
}

impl Real for f64 {
    const ZERO: f64 = 0.0;
    fn sqrt(self) -> f64 {
        f64::sqrt(self)
    }
    fn is_finite(self) -> bool {
        f64::is_finite(self)
    }
}

/// Gram–Schmidt of a rot6d (two columns) in `T`: f32 for the float32 state (as numpy does),
/// f64 for the un-normalised actions.
fn rot6d_to_matrix<T: Real>(r: &[T]) -> Option<Mat3> {
    let norm = |v: [T; 3]| (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    let a = [r[0], r[1], r[2]];
    let b = [r[3], r[4], r[5]];
    let na = norm(a);
    if !(na > T::ZERO && na.is_finite()) {
        return None;
    }
    let c1 = a.map(|x| x / na);
    let d = c1[0] * b[0] + c1[1] * b[1] + c1[2] * b[2];
    let u = [b[0] - d * c1[0], b[1] - d * c1[1], b[2] - d * c1[2]];
    let nu = norm(u);
    if !(nu > T::ZERO && nu.is_finite()) {
        return None;
    }
    let c2 = u.map(|x| x / nu);
    let c3 = cross(c1, c2);
    Some(from_columns(
        c1.map(Into::into),
        c2.map(Into::into),
        c3.map(Into::into),
    ))
}

fn cross<T: Copy + std::ops::Mul<Output = T> + std::ops::Sub<Output = T>>(
    a: [T; 3],
    b: [T; 3],
) -> [T; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

fn from_columns(c1: [f64; 3], c2: [f64; 3], c3: [f64; 3]) -> Mat3 {
    [
        [c1[0], c2[0], c3[0]],
        [c1[1], c2[1], c3[1]],
        [c1[2], c2[2], c3[2]],
    ]
}

/// The first two columns, column-major: `[R00, R10, R20, R01, R11, R21]`.
fn matrix_to_rot6d(m: &Mat3) -> [f64; 6] {
    [m[0][0], m[1][0], m[2][0], m[0][1], m[1][1], m[2][1]]
}

fn matmul(a: &Mat3, b: &Mat3) -> Mat3 {
    let mut c = [[0.0; 3]; 3];
    for (i, row) in c.iter_mut().enumerate() {
        for (j, v) in row.iter_mut().enumerate() {
            *v = a[i][0] * b[0][j] + a[i][1] * b[1][j] + a[i][2] * b[2][j];
        }
    }
    c
}

/// Convenience: builds an [`ActionDecoder`] and decodes one chunk.
pub fn decode_actions(
    action_pred: &[f32],
    raw_state: &[(&str, &[f32])],
    stats: &Statistics,
    processor: &ProcessorConfig,
    tag: &str,
) -> Result<DecodedActions, ActionError> {
    ActionDecoder::new(stats, processor, tag)?.decode(action_pred, raw_state)
}
