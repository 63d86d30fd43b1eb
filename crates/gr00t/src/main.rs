//! `gr00t`: the command-line entry point of gr00t-rs.

mod allocator;
mod bench;
mod cli;
mod device;
mod engine;
mod protocols;
mod pull;
mod server;

fn main() {
    allocator::keep_freed_buffers_mapped();
    std::process::exit(cli::run());
}
