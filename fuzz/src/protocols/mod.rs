//! The ZMQ / websocket decoders of `crates/gr00t/src/protocols`, included file by file so the
//! fuzzers run the exact code the server runs (the `gr00t` crate has no library target).
//! Their request types come from `gr00t-core` (the real `protocols` module pulls in
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
