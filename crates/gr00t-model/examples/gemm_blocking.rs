//! Measures the AVX2 kernel's blocks on this CPU: for a few model shapes, the blocks derived
//! from the caches (what the server runs) against each block size halved and doubled, all
//! interleaved in one process round after round (so a noisy machine slows them alike). Prints
//! the best and median GFLOP/s per setting and shape, and each median over the derived one's.
//!
//! `cargo run --release --example gemm_blocking -p gr00t-model [rounds]`

mod common;

use common::{median, Lcg};
use gr00t_model::cpu_caches::{CpuCaches, GemmBlocking};
use gr00t_model::linear::{avx2_blocking, matmul_avx2_blocked, PackedBf16};
use std::time::Instant;

/// The model shapes timed: one per stage and K range.
const STAGES: [&str; 6] = [
    "vision qkv",
    "vision fc2",
    "llm up/gate",
    "llm down",
    "dit ff1",
    "dit ff2",
];

/// Rows per tile and columns per panel of the AVX2 kernel (block sizes are multiples of them).
const MR: usize = 6;
const NR: usize = 32;

fn main() {
    common::in_pool(run)
}

/// The timings, on a thread of the pool.
fn run() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(9);
    let caches = CpuCaches::detected();
    let base = avx2_blocking();
    println!(
        "caches: L1d {} KiB, L2 {} KiB ({}); derived blocks kc {} mc {} nc {}; {} threads",
        caches.l1d >> 10,
        caches.l2 >> 10,
        caches.source,
        base.kc,
        base.mc,
        base.nc,
        rayon::current_num_threads()
    );
    // Half a block, still a whole number of `unit`s.
    let half = |v: usize, unit: usize| (v / 2 / unit).max(1) * unit;
    let make = |kc, mc, nc| GemmBlocking { kc, mc, nc };
    let GemmBlocking { kc, mc, nc } = base;
    let settings = [
        ("derived", base),
        ("kc ×½", make(half(kc, 64), mc, nc)),
        ("kc ×2", make(kc * 2, mc, nc)),
        ("mc ×½", make(kc, half(mc, MR), nc)),
        ("mc ×2", make(kc, mc * 2, nc)),
        ("nc ×½", make(kc, mc, half(nc, NR))),
        ("nc ×2", make(kc, mc, nc * 2)),
    ];
    let mut rnd = Lcg::new(0x2545_f491);
    let shapes: Vec<_> = common::SHAPES
        .iter()
        .filter(|s| STAGES.contains(&s.0))
        .collect();
    assert_eq!(shapes.len(), STAGES.len());
    // rates[setting][shape]: one GFLOP/s per round.
    let mut rates = vec![vec![Vec::new(); shapes.len()]; settings.len()];
    for (si, &&(_, m, k, n)) in shapes.iter().enumerate() {
        let (x, w, b) = rnd.operands(m, k, n);
        let packed = PackedBf16::new(&w, n, k).expect("shape");
        let flops = 2.0 * (m * n * k) as f64;
        // ~0.3 s per timing.
        let reps = (3e10 / flops / 100.0).ceil().max(1.0) as usize;
        for round in 0..=rounds {
            for (ri, (_, blocks)) in settings.iter().enumerate() {
                let t = Instant::now();
                for _ in 0..reps {
                    let y = matmul_avx2_blocked(&x, m, k, &packed, Some(&b), *blocks)
                        .expect("this CPU runs the AVX2 kernel");
                    std::hint::black_box(y);
                }
                // Round 0 warms up.
                if round > 0 {
                    rates[ri][si].push(flops * reps as f64 / t.elapsed().as_secs_f64() / 1e9);
                }
            }
        }
    }
    let median = |v: &[f64]| median(v).expect("timed rounds");
    let best = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
    print!("{:<10} {:>16}", "setting", "kc/mc/nc");
    for (name, ..) in &shapes {
        print!(" {name:>18}");
    }
    println!("   (best/median GFLOP/s, median ÷ derived's)");
    for (ri, (name, blocks)) in settings.iter().enumerate() {
        print!(
            "{name:<10} {:>16}",
            format!("{}/{}/{}", blocks.kc, blocks.mc, blocks.nc)
        );
        for (r, derived) in rates[ri].iter().zip(&rates[0]) {
            let rel = median(r) / median(derived);
            print!(
                " {:>18}",
                format!("{:.0}/{:.0} {:.2}", best(r), median(r), rel)
            );
        }
        println!();
    }
}
