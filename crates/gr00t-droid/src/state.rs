//! State normalisation: min-max to [−1, 1] with q01/q99, clip, pad.
//!
//! `StateActionProcessor.apply_state` for one observation (history length 1): per state key in
//! the modality order, `lo`/`hi` = `q01`/`q99` (`use_percentiles`, else `min`/`max`) of
//! `statistics[tag]["state"][key]`; `n1 = f32((f64(x) − lo)/(hi − lo))` (numpy computes in f64
//! and stores into a float32 array), `n = f32(2·n1 − 1)`, clipped to [−1, 1] when
//! `clip_outliers`; dims where `isclose(hi, lo)` give 0. The keys are concatenated and
//! zero-padded to `max_state_dim`.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use gr00t_model::checkpoint::{ProcessorConfig, Statistics};
use std::fmt;

/// Why a state could not be normalised.
#[derive(Debug, Clone, PartialEq)]
pub enum StateError {
    /// The checkpoint's processor config or statistics do not describe this embodiment's state.
    Config(String),
    /// A state key the model needs is absent.
    MissingKey(String),
    /// A state key the embodiment does not have.
    UnknownKey(String),
    /// A key given twice.
    DuplicateKey(String),
    /// A key has the wrong number of values.
    WrongLength {
        /// The key.
        key: String,
        /// Its width in the statistics.
        expected: usize,
        /// What was given.
        got: usize,
    },
    /// A value is NaN or infinite.
    NonFinite {
        /// The key.
        key: String,
        /// Index within the key.
        index: usize,
    },
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::Config(m) => write!(f, "state config: {m}"),
            StateError::MissingKey(k) => write!(f, "state key {k:?} is missing"),
            StateError::UnknownKey(k) => {
                write!(f, "state key {k:?} is not a state of this embodiment")
            }
            StateError::DuplicateKey(k) => write!(f, "state key {k:?} is given twice"),
            StateError::WrongLength { key, expected, got } => {
                write!(f, "state {key:?} has {got} values, expected {expected}")
            }
            StateError::NonFinite { key, index } => {
                write!(f, "state {key:?}[{index}] is not a finite number")
            }
        }
    }
}

impl std::error::Error for StateError {}

/// Normalisation bounds of one state key.
#[derive(Debug, Clone, PartialEq)]
struct KeyBounds {
    key: String,
    lo: Vec<f64>,
    hi: Vec<f64>,
}

/// Normalises raw states of one embodiment tag into the model's padded state vector.
#[derive(Debug, Clone, PartialEq)]
pub struct StateNormalizer {
    keys: Vec<KeyBounds>,
    clip: bool,
    max_state_dim: usize,
}

impl StateNormalizer {
    /// Reads the state keys, widths and bounds of `tag` from the checkpoint's processor config
    /// and statistics.
    pub fn new(
        stats: &Statistics,
        processor: &ProcessorConfig,
        tag: &str,
    ) -> Result<StateNormalizer, StateError> {
        if processor.exclude_state || processor.apply_sincos_state_encoding {
            return Err(StateError::Config(
                "exclude_state / apply_sincos_state_encoding are not supported".into(),
            ));
        }
        let modality = processor
            .modality_configs
            .get(tag)
            .ok_or_else(|| StateError::Config(format!("no modality config for tag {tag:?}")))?;
        let mut keys = Vec::new();
        let mut width = 0;
        for key in &modality.state.modality_keys {
            let s = stats
                .get(tag, "state", key)
                .map_err(|e| StateError::Config(e.to_string()))?;
            let (lo, hi) = if processor.use_percentiles {
                (&s.q01, &s.q99)
            } else {
                (&s.min, &s.max)
            };
            if lo.len() != 1 || hi.len() != 1 {
                return Err(StateError::Config(format!(
                    "state statistics of {key:?} have {} rows; expected one",
                    lo.len()
                )));
            }
            width += s.dim();
            keys.push(KeyBounds {
                key: key.clone(),
                lo: lo[0].clone(),
                hi: hi[0].clone(),
            });
        }
        if width > processor.max_state_dim {
            return Err(StateError::Config(format!(
                "state keys are {width} wide, more than max_state_dim {}",
                processor.max_state_dim
            )));
        }
        Ok(StateNormalizer {
            keys,
            clip: processor.clip_outliers,
            max_state_dim: processor.max_state_dim,
        })
    }

    /// The state keys in model order with their widths.
    pub fn keys(&self) -> impl Iterator<Item = (&str, usize)> {
        self.keys.iter().map(|k| (k.key.as_str(), k.lo.len()))
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
        for kb in &self.keys {
            let values = raw
                .iter()
                .find(|(k, _)| *k == kb.key)
                .map(|(_, v)| *v)
                .ok_or_else(|| StateError::MissingKey(kb.key.clone()))?;
            if values.len() != kb.lo.len() {
                return Err(StateError::WrongLength {
                    key: kb.key.clone(),
                    expected: kb.lo.len(),
                    got: values.len(),
                });
            }
            if let Some(index) = values.iter().position(|v| !v.is_finite()) {
                return Err(StateError::NonFinite {
                    key: kb.key.clone(),
                    index,
                });
            }
            for ((&x, &lo), &hi) in values.iter().zip(&kb.lo).zip(&kb.hi) {
                out.push(normalize_value(x, lo, hi, self.clip));
            }
        }
        out.resize(self.max_state_dim, 0.0);
        Ok(out)
    }
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
