//! GFLOP/s of the hand-written AMX and AVX512-BF16 (`--dtype bf16`: activations rounded to
//! bf16, VNNI weight pairs), AVX-512 and AVX2 GEMMs (weights packed at load, as the model keeps them)
//! against the `gemm`-crate path (weights widened per call) on the model's bf16-weight linear
//! shapes, and the int8 kernels (`--dtype int8`: AMX, AVX512-VNNI, AVX-VNNI, AVX2; activations
//! quantised per call, which the figure includes): all alternate in one process; medians of
//! several rounds. Kernels this CPU does not run print as "-".

mod common;

use common::{median, Lcg, SHAPES};
use gr00t_model::cpu_kernel::CpuKernel;
use gr00t_model::int8::{matmul_with as matmul_int8_with, Int8Kernel, PackedI8, LEVELS};
use gr00t_model::linear::{matmul_bf16_with, matmul_packed_with, PackLayout, PackedBf16};
use std::time::Instant;

/// A kernel timed per shape: the f32/bf16 ones of `--cpu-kernel`, or an int8 one.
#[derive(Clone, Copy)]
enum Kernel {
    Float(CpuKernel),
    Int8(Int8Kernel),
}

/// The columns, in print order.
const KERNELS: [(&str, Kernel); 9] = [
    ("amx", Kernel::Float(CpuKernel::Amx)),
    ("bf16", Kernel::Float(CpuKernel::Avx512Bf16)),
    ("avx512", Kernel::Float(CpuKernel::Avx512)),
    ("avx2", Kernel::Float(CpuKernel::Avx2)),
    ("library", Kernel::Float(CpuKernel::Library)),
    ("i8-amx", Kernel::Int8(Int8Kernel::Amx)),
    ("i8-512vnni", Kernel::Int8(Int8Kernel::Avx512Vnni)),
    ("i8-avxvnni", Kernel::Int8(Int8Kernel::AvxVnni)),
    ("i8-avx2", Kernel::Int8(Int8Kernel::Avx2)),
];

/// Ratios printed after the rates: (label, numerator column, denominator column).
const RATIOS: [(&str, usize, usize); 9] = [
    ("amx/bf16", 0, 1),
    ("bf16/512", 1, 2),
    ("512/lib", 2, 4),
    ("avx2/lib", 3, 4),
    ("i8amx/512", 5, 2),
    ("i8amx/i8v", 5, 6),
    ("i8v/512", 6, 2),
    ("i8v/amx", 6, 0),
    ("i8a2/avx2", 8, 3),
];

fn main() {
    common::in_pool(run)
}

/// The timings, on a thread of the pool.
fn run() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    // Optional second argument: only the stages whose name contains it.
    let only = std::env::args().nth(2).unwrap_or_default();
    let mut rnd = Lcg::new(0x9e37_79b9);
    let mut header = format!("{:<12} {:>5} {:>5} {:>5}", "stage", "M", "K", "N");
    for (name, _) in KERNELS {
        header += &format!(" {name:>10}");
    }
    for (name, _, _) in RATIOS {
        header += &format!(" {name:>9}");
    }
    println!("{header}");
    for &(name, m, k, n) in SHAPES.iter().filter(|s| s.0.contains(&only)) {
        let (x, w, b) = rnd.operands(m, k, n);
        let flops = 2.0 * (m * n * k) as f64;
        // Enough repetitions for ~50 ms per timing.
        let reps = (2.5e9 / flops).ceil().max(1.0) as usize;
        let packed = PackedBf16::new(&w, n, k).expect("shape");
        let vnni = PackedBf16::with_layout(&w, n, k, PackLayout::VnniPairs).expect("shape");
        let int8 = PackedI8::from_bf16(&w, n, k, LEVELS).expect("shape");
        // GFLOP/s of one kernel, or None when this CPU does not run it.
        let time = |kernel: Kernel| -> Option<f64> {
            let t = Instant::now();
            for _ in 0..reps {
                let y = match kernel {
                    Kernel::Float(CpuKernel::Library) => {
                        matmul_bf16_with(CpuKernel::Library, &x, m, k, &w, n, Some(&b))
                    }
                    Kernel::Float(kernel @ (CpuKernel::Amx | CpuKernel::Avx512Bf16)) => {
                        matmul_packed_with(kernel, &x, m, k, &vnni, Some(&b))?
                    }
                    Kernel::Float(kernel) => {
                        matmul_packed_with(kernel, &x, m, k, &packed, Some(&b))?
                    }
                    Kernel::Int8(kernel) => matmul_int8_with(kernel, &x, m, k, &int8, Some(&b))?,
                };
                std::hint::black_box(y);
            }
            Some(flops * reps as f64 / t.elapsed().as_secs_f64() / 1e9)
        };
        let mut rates: [Vec<f64>; KERNELS.len()] = Default::default();
        for round in 0..=rounds {
            for ((_, kernel), rates) in KERNELS.iter().zip(&mut rates) {
                // Round 0 warms up.
                if let (Some(r), true) = (time(*kernel), round > 0) {
                    rates.push(r);
                }
            }
        }
        let rates = rates.map(|r| median(&r));
        let mut line = format!("{name:<12} {m:>5} {k:>5} {n:>5}");
        for r in rates {
            line += &format!(" {:>10}", r.map_or("-".into(), |r| format!("{r:.1}")));
        }
        for (_, a, b) in RATIOS {
            let ratio = match (rates[a], rates[b]) {
                (Some(r), Some(l)) => format!("{:.3}", r / l),
                _ => "-".into(),
            };
            line += &format!(" {ratio:>9}");
        }
        println!("{line}");
    }
}
