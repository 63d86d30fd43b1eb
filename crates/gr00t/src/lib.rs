//! gr00t-rs, the server and CLI around the core: `serve` wires `Engine::load` → the queue →
//! the doors; `doors` holds the HTTP, ZMQ and websocket doors and their shared wire encodings;
//! `cli` runs the subcommands (`main.rs` parses the command line and calls it).

pub mod allocator;
pub mod bench;
pub mod check_dtype;
pub mod cli;
pub mod device_args;
pub mod doors;
pub mod episode_bodies;
pub mod logging;
pub mod otlp;
pub mod pull;
pub mod serve;
mod shutdown;

/// The documented `/predict` JSON body (docs/API.md) → a typed request, and one body straight
/// through an engine: the contract every client of the library and the bench build on.
pub use doors::http::body::{predict_body, request_from_body};

// The engine and the device options live in the core crate.
use gr00t_core::{device, engine};
