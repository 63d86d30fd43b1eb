//! GR00T N1.7 model: checkpoint and configuration loading, the initial-noise sampler, and the
//! network (vision tower, LLM, VL adapter, action head). Knows nothing about HTTP or a robot.

pub mod action_head;
pub mod backbone;
pub mod checkpoint;
pub mod config;
pub mod cpu_caches;
pub mod cpu_kernel;
pub(crate) mod cpu_math;
pub(crate) mod cpu_norms;
pub mod error;
pub mod flash;
pub mod flops;
pub(crate) mod gemm;
pub mod hub;
pub mod inputs;
pub mod int8;
pub mod linear;
pub mod model;
pub(crate) mod nn;
pub mod noise;
pub(crate) mod op_inputs;
pub mod rtc;
pub mod smoothing;
pub mod synth;
pub mod taps;
#[cfg(test)]
mod test_rng;
pub mod text;
pub mod vision;
pub mod vision_cache;
pub mod weight_cache;
pub mod weights;

pub use checkpoint::Checkpoint;
pub use config::{BackboneConfig, Gr00tConfig};
pub use error::{Error, Result, SettingError};
pub use inputs::ModelInputs;
pub use model::{Gr00tModel, ModelOutput};
pub use rtc::{Rtc, RtcError, RtcField};
