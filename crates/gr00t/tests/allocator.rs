//! The malloc settings keep freed activation buffers mapped: a worker thread that frees a
//! layer's activations and allocates the next layer's takes no new page faults.
//!
//! Runs without libtest's harness so that, as in `gr00t`'s `main`, the settings come before
//! any other thread (threads created earlier keep malloc arenas whose heaps are unmapped when
//! emptied, whatever the settings say).

#[cfg(all(target_os = "linux", target_env = "gnu"))]
use gr00t::allocator;

/// Minor page faults of the calling thread so far (field 10 of its stat file).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    // Fields after the parenthesised command name, which may itself hold spaces.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split(' ').nth(7).unwrap().parse().unwrap()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn main() {
    assert!(
        allocator::keep_freed_buffers_mapped(),
        "mallopt refused the settings"
    );
    // On a worker thread, like the inference worker.
    let faults = std::thread::spawn(|| {
        // A layer's worth of live activations (a vision MLP activation is ~29 MB), freed
        // together and allocated again by the next layer.
        const LEN: usize = 24 << 20;
        const LIVE: usize = 6;
        let layer = || {
            let bufs: Vec<Vec<u8>> = (0..LIVE)
                .map(|_| {
                    let mut v = vec![0u8; LEN];
                    for i in (0..LEN).step_by(4096) {
                        v[i] = 1;
                    }
                    v
                })
                .collect();
            std::hint::black_box(&bufs);
        };
        layer();
        let before = minor_faults();
        for _ in 0..4 {
            layer();
        }
        minor_faults() - before
    })
    .join()
    .unwrap();
    // Unmapped on free, each layer faults in all its 36 864 pages again: ~147 000 in total;
    // kept mapped, none (the bound leaves room for a few stray pages).
    println!("{faults} minor faults on the worker thread for 4 reused layers");
    assert!(faults < 3_000, "{faults} minor faults for 4 reused layers");
    println!("test allocator: ok");
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn main() {
    println!("test allocator: skipped (the settings are glibc's)");
}
