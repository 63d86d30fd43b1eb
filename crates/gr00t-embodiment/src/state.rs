//! State encoding: `StateActionProcessor.apply_state` for one observation (history length 1).
//!
//! Per state key in the modality order, one of (as upstream picks them):
//! 1. sin/cos, when `apply_sincos_state_encoding` and the key is in `sin_cos_embedding_keys`:
//!    `[sin(x₀..x_D), cos(x₀..x_D)]` of the raw float32 values (width 2D, no statistics);
//! 2. mean/std, when the key is in `mean_std_embedding_keys`: `f32((f64(x) − mean)/std)`,
//!    `x` itself where std = 0, never clipped;
//! 3. min-max otherwise: `lo`/`hi` = `q01`/`q99` (`use_percentiles`, else `min`/`max`);
//!    `n1 = f32((f64(x) − lo)/(hi − lo))` (numpy computes in f64 and stores into a float32
//!    array), `n = f32(2·n1 − 1)`, clipped to [−1, 1] when `clip_outliers`; 0 where
//!    `isclose(hi, lo)`.
//!
//! The keys are concatenated and zero-padded to `max_state_dim`. With `exclude_state` the
//! state is zeros (upstream zeroes the raw-width state, so the padded vector is all zeros).
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use gr00t_model::checkpoint::{ProcessorConfig, Statistics};

/// Why a state could not be normalised.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StateError {
    /// The checkpoint's processor config or statistics do not describe this embodiment's state.
    #[error("state config: {0}")]
    Config(String),
    /// A state key the model needs is absent.
    #[error("state key {0:?} is missing")]
    MissingKey(String),
    /// A state key the embodiment does not have.
    #[error("state key {0:?} is not a state of this embodiment")]
    UnknownKey(String),
    /// A key given twice.
    #[error("state key {0:?} is given twice")]
    DuplicateKey(String),
    /// A key has the wrong number of values.
    #[error("state {key:?} has {got} values, expected {expected}")]
    WrongLength {
        /// The key.
        key: String,
        /// Its width in the statistics.
        expected: usize,
        /// What was given.
        got: usize,
    },
    /// A value is NaN or infinite.
    #[error("state {key:?}[{index}] is not a finite number")]
    NonFinite {
        /// The key.
        key: String,
        /// Index within the key.
        index: usize,
    },
}

/// How one state key is encoded.
#[derive(Debug, Clone, PartialEq)]
enum Encoding {
    /// Min-max to [−1, 1] with these bounds.
    MinMax { lo: Vec<f64>, hi: Vec<f64> },
    /// z-score with these moments.
    MeanStd { mean: Vec<f64>, std: Vec<f64> },
    /// `[sin(x), cos(x)]`.
    SinCos,
}

/// One state key: its raw width and encoding.
#[derive(Debug, Clone, PartialEq)]
struct KeySpec {
    key: String,
    dim: usize,
    encoding: Encoding,
}

impl KeySpec {
    /// Width in the model's state vector.
    fn encoded_dim(&self) -> usize {
        match self.encoding {
            Encoding::SinCos => 2 * self.dim,
            _ => self.dim,
        }
    }
}

/// Normalises raw states of one embodiment tag into the model's padded state vector.
#[derive(Debug, Clone, PartialEq)]
pub struct StateNormalizer {
    keys: Vec<KeySpec>,
    clip: bool,
    exclude_state: bool,
    max_state_dim: usize,
}

impl StateNormalizer {
    /// Reads the state keys, widths and encodings of `tag` from the checkpoint's processor
    /// config and statistics.
    pub fn new(
        stats: &Statistics,
        processor: &ProcessorConfig,
        tag: &str,
    ) -> Result<StateNormalizer, StateError> {
        let cfg = StateError::Config;
        let modality = processor
            .modality_configs
            .get(tag)
            .ok_or_else(|| cfg(format!("no modality config for tag {tag:?}")))?;
        let state = &modality.state;
        if state.delta_indices.len() != 1 {
            return Err(cfg(format!(
                "tag {tag:?}: state history of {} steps (delta_indices {:?}) is not supported; \
                 the model takes one",
                state.delta_indices.len(),
                state.delta_indices
            )));
        }
        let mut keys = Vec::new();
        for key in &state.modality_keys {
            let s = stats
                .get(tag, "state", key)
                .map_err(|e| cfg(e.to_string()))?;
            let one_row = |f: &[Vec<f64>], name: &str| -> Result<Vec<f64>, StateError> {
                match f {
                    [row] => Ok(row.clone()),
                    _ => Err(cfg(format!(
                        "state statistics {name} of {key:?} have {} rows; expected one",
                        f.len()
                    ))),
                }
            };
            let encoding = if processor.apply_sincos_state_encoding && state.is_sin_cos(key) {
                Encoding::SinCos
            } else if state.is_mean_std(key) {
                if s.mean.is_empty() || s.std.is_empty() {
                    return Err(cfg(format!(
                        "state {key:?} is a mean/std key but its statistics have no mean/std"
                    )));
                }
                Encoding::MeanStd {
                    mean: one_row(&s.mean, "mean")?,
                    std: one_row(&s.std, "std")?,
                }
            } else if processor.use_percentiles {
                Encoding::MinMax {
                    lo: one_row(&s.q01, "q01")?,
                    hi: one_row(&s.q99, "q99")?,
                }
            } else {
                Encoding::MinMax {
                    lo: one_row(&s.min, "min")?,
                    hi: one_row(&s.max, "max")?,
                }
            };
            keys.push(KeySpec {
                key: key.clone(),
                dim: s.dim(),
                encoding,
            });
        }
        let width: usize = keys.iter().map(KeySpec::encoded_dim).sum();
        if width > processor.max_state_dim {
            return Err(cfg(format!(
                "state keys of {tag:?} are {width} wide encoded, more than max_state_dim {}",
                processor.max_state_dim
            )));
        }
        Ok(StateNormalizer {
            keys,
            clip: processor.clip_outliers,
            exclude_state: processor.exclude_state,
            max_state_dim: processor.max_state_dim,
        })
    }

    /// The state keys in model order with their widths.
    pub fn keys(&self) -> impl Iterator<Item = (&str, usize)> {
        self.keys.iter().map(|k| (k.key.as_str(), k.dim))
    }

    /// Width of the padded state vector.
    pub fn max_state_dim(&self) -> usize {
        self.max_state_dim
    }

    /// Normalises one raw state (`(key, values)` in any order; every key exactly once) into
    /// `max_state_dim` values (`proc.state`).
    pub fn normalize(&self, raw: &[(&str, &[f32])]) -> Result<Vec<f32>, StateError> {
        for (i, (key, _)) in raw.iter().enumerate() {
            if !self.keys.iter().any(|k| k.key == *key) {
                return Err(StateError::UnknownKey(key.to_string()));
            }
            if raw[..i].iter().any(|(k, _)| k == key) {
                return Err(StateError::DuplicateKey(key.to_string()));
            }
        }
        let mut out = Vec::with_capacity(self.max_state_dim);
        for spec in &self.keys {
            let values = raw
                .iter()
                .find(|(k, _)| *k == spec.key)
                .map(|(_, v)| *v)
                .ok_or_else(|| StateError::MissingKey(spec.key.clone()))?;
            if values.len() != spec.dim {
                return Err(StateError::WrongLength {
                    key: spec.key.clone(),
                    expected: spec.dim,
                    got: values.len(),
                });
            }
            if let Some(index) = values.iter().position(|v| !v.is_finite()) {
                return Err(StateError::NonFinite {
                    key: spec.key.clone(),
                    index,
                });
            }
            match &spec.encoding {
                Encoding::MinMax { lo, hi } => out.extend(
                    values
                        .iter()
                        .zip(lo)
                        .zip(hi)
                        .map(|((&x, &lo), &hi)| normalize_value(x, lo, hi, self.clip)),
                ),
                Encoding::MeanStd { mean, std } => out.extend(
                    values
                        .iter()
                        .zip(mean)
                        .zip(std)
                        .map(|((&x, &m), &s)| mean_std_value(x, m, s)),
                ),
                Encoding::SinCos => {
                    out.extend(values.iter().map(|&x| sin_f32(x)));
                    out.extend(values.iter().map(|&x| cos_f32(x)));
                }
            }
        }
        if self.exclude_state {
            out.iter_mut().for_each(|v| *v = 0.0);
        }
        out.resize(self.max_state_dim, 0.0);
        Ok(out)
    }
}

/// `(x − mean)/std` in f64 stored as f32; `x` where std is 0 (numpy's mask).
fn mean_std_value(x: f32, mean: f64, std: f64) -> f32 {
    if std == 0.0 {
        x
    } else {
        ((x as f64 - mean) / std) as f32
    }
}

/// `np.sin` of a float32: the correctly rounded value (through f64).
fn sin_f32(x: f32) -> f32 {
    (x as f64).sin() as f32
}

/// `np.cos` of a float32: the correctly rounded value (through f64).
fn cos_f32(x: f32) -> f32 {
    (x as f64).cos() as f32
}

/// One state value, with numpy's dtypes: f64 division stored as f32, then `2·n − 1` in f32.
fn normalize_value(x: f32, lo: f64, hi: f64, clip: bool) -> f32 {
    if is_close(hi, lo) {
        return 0.0;
    }
    let n1 = ((x as f64 - lo) / (hi - lo)) as f32;
    let n = 2.0 * n1 - 1.0;
    if clip {
        n.clamp(-1.0, 1.0)
    } else {
        n
    }
}

/// `numpy.isclose(a, b)` with its default tolerances (rtol 1e-5, atol 1e-8).
fn is_close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-8 + 1e-5 * b.abs()
}

/// Convenience: builds a [`StateNormalizer`] and normalises one raw state.
pub fn normalize_state(
    raw: &[(&str, &[f32])],
    stats: &Statistics,
    processor: &ProcessorConfig,
    tag: &str,
) -> Result<Vec<f32>, StateError> {
    StateNormalizer::new(stats, processor, tag)?.normalize(raw)
}
