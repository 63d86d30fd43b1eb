//! gr00t-rs, the server and CLI around the core: `serve` wires `Engine::load` → the queue →
//! the doors; `doors` holds the HTTP, ZMQ and websocket doors and their shared wire encodings;
//! `cli` runs the subcommands (`main.rs` parses the command line and calls it).

pub mod allocator;
pub mod bench;
pub mod cli;
pub mod doors;
pub mod otlp;
pub mod pull;
pub mod serve;
mod shutdown;

// The engine and the device options live in the core crate.
use gr00t_core::{device, engine};
