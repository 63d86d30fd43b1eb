//! The ZMQ / websocket decoders of `crates/gr00t/src/protocols`, included file by file so the
//! fuzzers run the exact code the server runs (the `gr00t` crate has no library target).
//! `engine_ext` is replaced by the one type the decoders need from it (the real module pulls in
//! the engine and the HTTP server).
#[path = "../../../crates/gr00t/src/protocols/droid_obs.rs"]
pub mod droid_obs;
#[path = "../../../crates/gr00t/src/protocols/msgpack_numpy.rs"]
pub mod msgpack_numpy;
#[path = "../../../crates/gr00t/src/protocols/ndarray.rs"]
pub mod ndarray;
#[path = "../../../crates/gr00t/src/protocols/npy.rs"]
pub mod npy;
#[path = "../../../crates/gr00t/src/protocols/observation.rs"]
pub mod observation;

/// Stand-in for `engine_ext`: only `RawRequest`, with the same fields.
pub mod engine_ext {
    use gr00t_droid::image::Frame;
    use gr00t_droid::request::{NoiseSource, RawState, FRAMES_PER_CAMERA};

    /// One DROID observation with its frames decoded (mirror of the server's type).
    #[derive(Debug, Clone, PartialEq)]
    pub struct RawRequest {
        /// Frames per camera, each `[t−15, t]`.
        pub frames: [[Frame; FRAMES_PER_CAMERA]; 2],
        /// Raw state.
        pub state: RawState,
        /// Instruction.
        pub instruction: String,
        /// Initial noise.
        pub noise: NoiseSource,
    }
}
