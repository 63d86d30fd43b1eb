//! `gr00t`: the command-line entry point of gr00t-rs.

mod bench;
mod cli;
mod device;
mod engine;
mod protocols;
mod pull;
mod server;

fn main() {
    std::process::exit(cli::run());
}
