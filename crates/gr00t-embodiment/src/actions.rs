//! Action decoding: un-normalisation and relative → absolute conversion.
//!
//! `Gr00tN1d7Processor.decode_action` for one sample. The action keys, their order and their
//! representation come from the processor's action modality config; each key's width from
//! `statistics[tag]["action"][key]` (DROID: eef_9d [0:9], gripper_position [9:10],
//! joint_position [10:17]).
//! 1. Slice the key's columns of the first `horizon` rows of `action_pred`.
//! 2. Un-normalise. Keys in the action `mean_std_embedding_keys`: `x·std + mean` (x where std is
//!    0), never clipped. Others: `(clip(a, −1, 1) + 1)/2·(hi − lo) + lo`. RELATIVE keys (with
//!    `use_relative_action`) take their parameters from `statistics[tag]["relative_action"]`,
//!    and their min-max reads `min`/`max` whatever `use_percentiles` says (the relative stats
//!    replace the action params and the un-normaliser reads min/max); ABSOLUTE keys use
//!    `statistics[tag]["action"]` `q01`/`q99` with `use_percentiles`, else min/max. Relative
//!    stats are flat (`[D]`) or per horizon step (exactly `[horizon][D]`).
//! 3. With `use_relative_action`, RELATIVE keys are made absolute against the raw state of their
//!    `state_key` (last row): NON_EEF/`DEFAULT` adds it; EEF composes poses, `T_abs = T_ref·T_rel`,
//!    in `XYZ_ROT6D`, `XYZ_ROTVEC` or `DEFAULT` (flat 4×4 homogeneous) form. `DELTA` keys are
//!    served like ABSOLUTE ones, as upstream does (it has no DELTA decode). Zero-width keys give
//!    `[horizon, 0]` and skip the conversion (upstream cannot decode them; LeRobot skips them).
//!
//! rot6d layout (NVIDIA's `pose.py`, checked against the fixtures): the first two **rows** of the
//! rotation matrix, `[R00, R01, R02, R10, R11, R12]`, for the state and the output alike (see
//! [`crate::pose`]). The reference runs the Gram–Schmidt of the state's rot6d in f32 (it arrives
//! as float32) and everything else in f64; the result is cast to f32.

use crate::pose::{self, Pose};
use gr00t_model::checkpoint::{ActionConfig, ProcessorConfig, Statistics};

/// Why an action chunk could not be decoded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ActionError {
    /// The checkpoint's processor config or statistics do not describe this embodiment's actions.
    #[error("action config: {0}")]
    Config(String),
    /// `action_pred` has the wrong size.
    #[error("action chunk: {0}")]
    Shape(String),
    /// A state needed for a relative key is absent.
    #[error("state {0:?} is needed to make relative actions absolute")]
    MissingState(String),
    /// A state has the wrong number of values.
    #[error("state {key:?} has {got} values, expected {expected}")]
    StateLength {
        /// The state key.
        key: String,
        /// Its expected width.
        expected: usize,
        /// What was given.
        got: usize,
    },
    /// A state value is NaN or infinite.
    #[error("state {0:?} has a non-finite value")]
    NonFiniteState(String),
    /// A rot6d whose two vectors are zero or parallel, or a 4×4 pose whose rotation block has a
    /// non-positive determinant (no rotation can be built; scipy refuses it too).
    #[error("degenerate rotation: {0}")]
    DegenerateRotation(String),
}

/// How a relative key is turned absolute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelativeFormat {
    /// `abs = state + rel` (NON_EEF / `DEFAULT`).
    Delta,
    /// xyz + rot6d pose composition (EEF / `XYZ_ROT6D`).
    XyzRot6d,
    /// xyz + rotation vector pose composition (EEF / `XYZ_ROTVEC`).
    XyzRotvec,
    /// Flat row-major 4×4 homogeneous transforms (EEF / `DEFAULT`).
    Homogeneous,
}

impl RelativeFormat {
    /// The width a key of this format must have.
    fn width(self) -> Option<usize> {
        match self {
            RelativeFormat::Delta => None,
            RelativeFormat::XyzRot6d => Some(9),
            RelativeFormat::XyzRotvec => Some(6),
            RelativeFormat::Homogeneous => Some(16),
        }
    }
}

/// An enum value as `processor_config.json` writes it: by NAME (`XYZ_ROT6D`) or by value
/// (`xyz+rot6d`), in any case.
fn enum_name(s: &str) -> String {
    s.trim().to_ascii_uppercase().replace('+', "_")
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

/// How a key's model values are un-normalised (one row, or one row per horizon step).
#[derive(Debug, Clone, PartialEq)]
enum Unnormalize {
    /// `(clip(a) + 1)/2·(hi − lo) + lo`.
    MinMax {
        lo: Vec<Vec<f64>>,
        hi: Vec<Vec<f64>>,
    },
    /// `a·std + mean`, `a` where std is 0.
    MeanStd {
        mean: Vec<Vec<f64>>,
        std: Vec<Vec<f64>>,
    },
}

impl Unnormalize {
    /// Physical value of dimension `i` of horizon step `step`.
    fn value(&self, step: usize, i: usize, a: f32) -> f64 {
        let row = |rows: &[Vec<f64>]| if rows.len() == 1 { 0 } else { step };
        match self {
            Unnormalize::MinMax { lo, hi } => unnormalize(a, lo[row(lo)][i], hi[row(hi)][i]),
            Unnormalize::MeanStd { mean, std } => {
                unnormalize_mean_std(a, mean[row(mean)][i], std[row(std)][i])
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
struct GroupSpec {
    key: String,
    offset: usize,
    dim: usize,
    rep: Representation,
    unnorm: Unnormalize,
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
        if horizon > processor.max_action_horizon {
            return Err(cfg(format!(
                "action horizon {horizon} is longer than max_action_horizon {}",
                processor.max_action_horizon
            )));
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
                Some(c) => parse_representation(key, c)?,
            };
            let relative = processor.use_relative_action && rep != Representation::Absolute;
            // The width always comes from the action statistics, relative keys included.
            let dim = stats
                .get(tag, "action", key)
                .map_err(|e| cfg(e.to_string()))?
                .dim();
            let (group, use_pct) = if relative {
                ("relative_action", false)
            } else {
                ("action", processor.use_percentiles)
            };
            let s = stats.get(tag, group, key).map_err(|e| cfg(e.to_string()))?;
            let mean_std = action.is_mean_std(key);
            let (p, q) = if mean_std {
                (&s.mean, &s.std)
            } else if use_pct {
                (&s.q01, &s.q99)
            } else {
                (&s.min, &s.max)
            };
            let rows = p.len();
            let fits = |f: &Vec<Vec<f64>>| f.len() == rows && f.iter().all(|r| r.len() == dim);
            if dim > 0 && !(fits(p) && fits(q) && (rows == 1 || rows == horizon)) {
                return Err(cfg(format!(
                    "{group} statistics of {key:?} are {rows} × {} for a {dim}-wide key; \
                     expected 1 or {horizon} rows of {dim}{}",
                    p.first().map_or(0, Vec::len),
                    if mean_std { " (mean/std)" } else { "" }
                )));
            }
            if let Representation::Relative { format, .. } = &rep {
                if let Some(w) = format.width().filter(|&w| relative && dim > 0 && dim != w) {
                    return Err(cfg(format!(
                        "action {key:?} is {dim} wide; its format takes {w} values"
                    )));
                }
            }
            let unnorm = if mean_std {
                Unnormalize::MeanStd {
                    mean: p.clone(),
                    std: q.clone(),
                }
            } else {
                Unnormalize::MinMax {
                    lo: p.clone(),
                    hi: q.clone(),
                }
            };
            groups.push(GroupSpec {
                key: key.clone(),
                offset,
                dim,
                rep: if relative && dim > 0 {
                    rep
                } else {
                    Representation::Absolute
                },
                unnorm,
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

    /// Checks, before inference, that every relative EEF key's reference state makes a pose
    /// (upstream fails in decode, after inference). Errs with the state key at fault.
    pub fn check_references(
        &self,
        raw_state: &[(&str, &[f32])],
    ) -> Result<(), (String, ActionError)> {
        for g in &self.groups {
            if let Representation::Relative { state_key, format } = &g.rep {
                if *format == RelativeFormat::Delta {
                    continue;
                }
                let state =
                    find_state(raw_state, state_key, g.dim).map_err(|e| (state_key.clone(), e))?;
                reference_pose(state, state_key, *format).map_err(|e| (state_key.clone(), e))?;
            }
        }
        Ok(())
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
                normalized.extend_from_slice(row);
                unnorm.extend(
                    row.iter()
                        .enumerate()
                        .map(|(i, &a)| g.unnorm.value(step, i, a)),
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
                        RelativeFormat::XyzRot6d
                        | RelativeFormat::XyzRotvec
                        | RelativeFormat::Homogeneous => {
                            compose_poses(state, &unnorm, state_key, *format)?
                        }
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

/// `a·std + mean` in f64 (float32 chunk times float64 statistics); `a` where std is 0.
fn unnormalize_mean_std(a: f32, mean: f64, std: f64) -> f64 {
    if std == 0.0 {
        a as f64
    } else {
        a as f64 * std + mean
    }
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

/// `T_abs = T_ref · T_rel` per step; `reference` is the f32 state, `rel` the `[H, D]` f64
/// deltas, both in `format`.
fn compose_poses(
    reference: &[f32],
    rel: &[f64],
    key: &str,
    format: RelativeFormat,
) -> Result<Vec<f64>, ActionError> {
    let degenerate = |what: String| ActionError::DegenerateRotation(what);
    let t_ref = reference_pose(reference, key, format)?;
    let dim = reference.len();
    let mut out = Vec::with_capacity(rel.len());
    for (step, r) in rel.chunks_exact(dim).enumerate() {
        let t_rel = match format {
            RelativeFormat::XyzRot6d => Pose {
                rotation: pose::rot6d_to_matrix(&r[3..9])
                    .ok_or_else(|| degenerate(format!("relative action {key:?} step {step}")))?,
                translation: [r[0], r[1], r[2]],
            },
            _ => pose_from(r, format)
                .ok_or_else(|| degenerate(format!("relative action {key:?} step {step}")))?,
        };
        let t_abs = t_ref.compose(&t_rel);
        match format {
            RelativeFormat::XyzRotvec => {
                out.extend(t_abs.translation);
                out.extend(pose::matrix_to_rotvec(&t_abs.rotation));
            }
            RelativeFormat::Homogeneous => out.extend(t_abs.to_homogeneous()),
            _ => out.extend(t_abs.to_xyz_rot6d()),
        }
    }
    Ok(out)
}

/// The reference pose of a relative EEF key from its f32 state (`key` names it in errors).
fn reference_pose(
    reference: &[f32],
    key: &str,
    format: RelativeFormat,
) -> Result<Pose, ActionError> {
    let degenerate = || ActionError::DegenerateRotation(format!("state {key:?}"));
    match format {
        RelativeFormat::XyzRot6d => Ok(Pose {
            rotation: pose::rot6d_to_matrix(&reference[3..9]).ok_or_else(degenerate)?,
            translation: [0, 1, 2].map(|i| reference[i] as f64),
        }),
        _ => {
            let r: Vec<f64> = reference.iter().map(|&x| x as f64).collect();
            pose_from(&r, format).ok_or_else(degenerate)
        }
    }
}

/// A pose from xyz + rotvec (6 values) or a flat row-major 4×4 transform (16 values; its
/// 3×3 block goes through scipy's `Rotation.from_matrix` projection, as upstream's
/// `EndEffectorPose(homogeneous=…)` does, and its bottom row is ignored). `None` when that
/// block has a non-positive determinant (scipy refuses it).
fn pose_from(v: &[f64], format: RelativeFormat) -> Option<Pose> {
    match format {
        RelativeFormat::XyzRotvec => Some(Pose {
            rotation: pose::rotvec_to_matrix([v[3], v[4], v[5]]),
            translation: [v[0], v[1], v[2]],
        }),
        _ => Some(Pose {
            rotation: pose::nearest_rotation(
                &[0, 1, 2].map(|i| [v[4 * i], v[4 * i + 1], v[4 * i + 2]]),
            )?,
            translation: [v[3], v[7], v[11]],
        }),
    }
}

/// A key's representation from its `action_configs` entry (enum names or values, any case).
fn parse_representation(key: &str, c: &ActionConfig) -> Result<Representation, ActionError> {
    let cfg = ActionError::Config;
    let (rep, kind, format) = (enum_name(&c.rep), enum_name(&c.kind), enum_name(&c.format));
    if !matches!(kind.as_str(), "EEF" | "NON_EEF") {
        return Err(cfg(format!("action {key:?}: unknown type {:?}", c.kind)));
    }
    let format = match (kind.as_str(), format.as_str()) {
        ("NON_EEF", "DEFAULT") => RelativeFormat::Delta,
        ("EEF", "DEFAULT") => RelativeFormat::Homogeneous,
        ("EEF", "XYZ_ROT6D") => RelativeFormat::XyzRot6d,
        ("EEF", "XYZ_ROTVEC") => RelativeFormat::XyzRotvec,
        ("NON_EEF", "XYZ_ROT6D" | "XYZ_ROTVEC") => {
            return Err(cfg(format!(
                "action {key:?}: format {:?} needs type EEF (upstream refuses NON_EEF poses)",
                c.format
            )))
        }
        _ => {
            return Err(cfg(format!(
                "action {key:?}: unknown format {:?}",
                c.format
            )))
        }
    };
    match rep.as_str() {
        "ABSOLUTE" => Ok(Representation::Absolute),
        "DELTA" => {
            tracing::warn!(
                "action {key:?} is DELTA: served as absolute, as upstream does (it has no DELTA decode)"
            );
            Ok(Representation::Absolute)
        }
        "RELATIVE" => Ok(Representation::Relative {
            state_key: c.state_key.clone().unwrap_or_else(|| key.to_string()),
            format,
        }),
        _ => Err(cfg(format!("action {key:?}: unknown rep {:?}", c.rep))),
    }
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
