//! `gr00t`: the command-line entry point of gr00t-rs.

mod allocator;
mod bench;
mod cli;
mod protocols;
mod pull;
mod server;

// The engine and the device options live in the core crate.
use gr00t_core::{device, engine};

fn main() {
    allocator::keep_freed_buffers_mapped();
    std::process::exit(cli::run());
}
