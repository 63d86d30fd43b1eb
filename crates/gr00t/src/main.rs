//! `gr00t`: the command-line entry point of gr00t-rs: parse the command line, run it in the
//! library.

fn main() {
    // Before any other thread exists (see `allocator`).
    gr00t::allocator::keep_freed_buffers_mapped();
    let cli = gr00t::cli::parse();
    std::process::exit(gr00t::cli::run(cli));
}
