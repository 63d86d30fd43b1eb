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
//! rot6d layout (NVIDIA's `pose.py`, checked against the fixtures): the first two **rows** of the
//! rotation matrix, `[R00, R01, R02, R10, R11, R12]`, for the state and the output alike (see
//! [`crate::pose`]). The reference runs the Gram–Schmidt of the state's rot6d in f32 (it arrives
//! as float32) and everything else in f64; the result is cast to f32.

use crate::pose::{self, Pose};
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
    let t_ref = Pose {
        rotation: pose::rot6d_to_matrix(&reference[3..9])
            .ok_or_else(|| ActionError::DegenerateRotation(format!("state {key:?}")))?,
        translation: [0, 1, 2].map(|i| reference[i] as f64),
    };
    let mut out = Vec::with_capacity(rel.len());
    for (step, r) in rel.chunks_exact(9).enumerate() {
        let t_rel = Pose {
            rotation: pose::rot6d_to_matrix(&r[3..9]).ok_or_else(|| {
                ActionError::DegenerateRotation(format!("relative action {key:?} step {step}"))
            })?,
            translation: [r[0], r[1], r[2]],
        };
        out.extend(t_ref.compose(&t_rel).to_xyz_rot6d());
    }
    Ok(out)
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
