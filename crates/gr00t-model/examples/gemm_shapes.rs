//! GFLOP/s of the hand-written AMX and AVX512-BF16 (`--dtype bf16`: activations rounded to
//! bf16, VNNI weight pairs), AVX-512 and AVX2 GEMMs (weights packed at load, as the model keeps them)
//! against the `gemm`-crate path (weights widened per call) on the model's bf16-weight linear
//! shapes: all alternate in one process; medians of several rounds. Kernels this CPU does not
//! run print as "-".

use gr00t_model::cpu_kernel::CpuKernel;
use gr00t_model::linear::{matmul_bf16_with, matmul_packed_with, PackLayout, PackedBf16};
use half::bf16;
use std::time::Instant;

/// (stage, rows M, in K, out N) of the model's linears.
const SHAPES: &[(&str, usize, usize, usize)] = &[
    ("vision qkv", 1792, 1024, 3072),
    ("vision proj", 1792, 1024, 1024),
    ("vision fc1", 1792, 1024, 4096),
    ("vision fc2", 1792, 4096, 1024),
    ("llm q/o", 469, 2048, 2048),
    ("llm k/v", 469, 2048, 1024),
    ("llm up/gate", 469, 2048, 6144),
    ("llm down", 469, 6144, 2048),
    ("adapter", 469, 2048, 1536),
    ("dit attn", 41, 1536, 1536),
    ("dit ff1", 41, 1536, 6144),
    ("dit 2x", 41, 1536, 3072),
    ("dit ff2", 41, 6144, 1536),
];

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    // Optional second argument: only the stages whose name contains it.
    let only = std::env::args().nth(2).unwrap_or_default();
    let mut seed = 0x9e37_79b9u32;
    let mut rnd = move || {
        seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
    };
    println!(
        "{:<12} {:>5} {:>5} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>7} {:>7}",
        "stage",
        "M",
        "K",
        "N",
        "amx",
        "bf16",
        "avx512",
        "avx2",
        "library",
        "amx/bf16",
        "bf16/512",
        "512/lib",
        "avx2/lib"
    );
    let kernels = [
        CpuKernel::Amx,
        CpuKernel::Avx512Bf16,
        CpuKernel::Avx512,
        CpuKernel::Avx2,
        CpuKernel::Library,
    ];
    for &(name, m, k, n) in SHAPES.iter().filter(|s| s.0.contains(&only)) {
        let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
        let w: Vec<bf16> = (0..n * k).map(|_| bf16::from_f32(rnd())).collect();
        let b: Vec<f32> = (0..n).map(|_| rnd()).collect();
        let flops = 2.0 * (m * n * k) as f64;
        // Enough repetitions for ~50 ms per timing.
        let reps = (2.5e9 / flops).ceil().max(1.0) as usize;
        let packed = PackedBf16::new(&w, n, k).expect("shape");
        let vnni = PackedBf16::with_layout(&w, n, k, PackLayout::VnniPairs).expect("shape");
        // GFLOP/s of one kernel, or None when this CPU does not run it.
        let time = |kernel: CpuKernel| -> Option<f64> {
            let t = Instant::now();
            for _ in 0..reps {
                let y = match kernel {
                    CpuKernel::Library => matmul_bf16_with(kernel, &x, m, k, &w, n, Some(&b)),
                    CpuKernel::Amx | CpuKernel::Avx512Bf16 => {
                        matmul_packed_with(kernel, &x, m, k, &vnni, Some(&b))?
                    }
                    _ => matmul_packed_with(kernel, &x, m, k, &packed, Some(&b))?,
                };
                std::hint::black_box(y);
            }
            Some(flops * reps as f64 / t.elapsed().as_secs_f64() / 1e9)
        };
        let mut rates: [Vec<f64>; 5] = Default::default();
        for round in 0..=rounds {
            for (kernel, rates) in kernels.iter().zip(&mut rates) {
                // Round 0 warms up.
                if let (Some(r), true) = (time(*kernel), round > 0) {
                    rates.push(r);
                }
            }
        }
        let median = |mut v: Vec<f64>| -> Option<f64> {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied()
        };
        let [amx, bf, p512, p2, lib] = rates.map(median);
        let show = |r: Option<f64>| r.map_or("-".into(), |r| format!("{r:.1}"));
        let ratio = |r: Option<f64>, base: Option<f64>| match (r, base) {
            (Some(r), Some(l)) => format!("{:.3}", r / l),
            _ => "-".into(),
        };
        println!(
            "{name:<12} {m:>5} {k:>5} {n:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>7} {:>7}",
            show(amx),
            show(bf),
            show(p512),
            show(p2),
            show(lib),
            ratio(amx, bf),
            ratio(bf, p512),
            ratio(p512, lib),
            ratio(p2, lib)
        );
    }
}
