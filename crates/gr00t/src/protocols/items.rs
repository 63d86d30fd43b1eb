//! What the binary doors hand the inference queue: plain data, shared with the fuzzers and the
//! regression tests (which compile the decoders by path without the engine).

use gr00t_embodiment::embodiment::Observation;
use gr00t_embodiment::image::Frame;
use gr00t_embodiment::request::{NoiseSource, RawState, FRAMES_PER_CAMERA};

/// One DROID observation with its frames already decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct RawRequest {
    /// Frames per camera in `CAMERAS` order (exterior, wrist), each `[t−15, t]`.
    pub frames: [[Frame; FRAMES_PER_CAMERA]; 2],
    /// Raw state.
    pub state: RawState,
    /// Instruction as sent.
    pub instruction: String,
    /// Initial noise.
    pub noise: NoiseSource,
}

/// One observation of another served embodiment (the generic layout, any views and keys).
#[derive(Debug, Clone, PartialEq)]
pub struct AnyRequest {
    /// The embodiment tag.
    pub tag: String,
    /// The observation, frames decoded.
    pub observation: Observation,
}

/// What a protocol door hands the queue: DROID's fixed layout, or another embodiment's.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// The DROID layout (its own processor, bit-identical to HTTP's DROID path).
    Droid(RawRequest),
    /// Any other served embodiment.
    Any(AnyRequest),
}
