//! One observation of any embodiment as every door hands it over (views → frames, state keys
//! → values, instruction, noise source) and the field error that refuses one. The bottom of
//! the embodiment layer: the processor and every request parser build on it.

use crate::image::Frame;
use std::fmt;

/// A refused request: the field at fault and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestError {
    /// JSON path of the field, e.g. `state.joint_position` or `images.wrist_image_left[1]`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl RequestError {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> RequestError {
        RequestError {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

impl std::error::Error for RequestError {}

/// Seed used when a request gives neither a seed nor noise.
pub const DEFAULT_SEED: u64 = 42;

/// Where the initial flow-matching noise comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum NoiseSource {
    /// `torch.randn` with this seed.
    Seed(u64),
    /// Explicit `[horizon][action_dim]` values from the client, row-major.
    Client(Vec<f32>),
}

/// One observation of any embodiment, as a client sends it.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// Per view, its frames in `delta_indices` order (oldest first).
    pub images: Vec<(String, Vec<Frame>)>,
    /// Raw state per key (the last time step).
    pub state: Vec<(String, Vec<f32>)>,
    /// The instruction as sent.
    pub instruction: String,
    /// Initial noise.
    pub noise: NoiseSource,
}

impl Observation {
    /// The state as `(key, values)` pairs.
    pub fn raw_state(&self) -> Vec<(&str, &[f32])> {
        self.state
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_slice()))
            .collect()
    }
}
