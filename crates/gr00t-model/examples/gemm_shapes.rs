//! GFLOP/s of the hand-written AMX and AVX512-BF16 (`--dtype bf16`: activations rounded to
//! bf16, VNNI weight pairs), AVX-512 and AVX2 GEMMs (weights packed at load, as the model keeps them)
//! against the `gemm`-crate path (weights widened per call) on the model's bf16-weight linear
//! shapes: all alternate in one process; medians of several rounds. Kernels this CPU does not
//! run print as "-".

mod common;

use common::{median, Lcg, SHAPES};
use gr00t_model::cpu_kernel::CpuKernel;
use gr00t_model::linear::{matmul_bf16_with, matmul_packed_with, PackLayout, PackedBf16};
use std::time::Instant;

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    // Optional second argument: only the stages whose name contains it.
    let only = std::env::args().nth(2).unwrap_or_default();
    let mut rnd = Lcg::new(0x9e37_79b9);
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
        let (x, w, b) = rnd.operands(m, k, n);
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
        let [amx, bf, p512, p2, lib] = rates.map(|r| median(&r));
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
