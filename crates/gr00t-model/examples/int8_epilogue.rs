//! The int8 products' fused epilogue (`Linear::forward_then`: the tanh GELU runs on each tile
//! while it is in the L1) against the same GELU after the product (a pass over the whole
//! output), on the model's shapes followed by a GELU; both alternate in one process, medians
//! of several rounds. The same bits either way (checked here too).

mod common;

use candle_core::{Device, Tensor};
use common::{median, Lcg, SHAPES};
use gr00t_model::linear::{Linear, Products, Then};
use std::time::Instant;

/// The model's int8 products that a tanh GELU follows.
const GELU_AFTER: [&str; 2] = ["vision fc1", "dit ff1"];

fn main() -> candle_core::Result<()> {
    common::in_pool(run)
}

/// The timings, on a thread of the pool.
fn run() -> candle_core::Result<()> {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(9);
    let dev = Device::Cpu;
    let mut rnd = Lcg::new(0x5eed);
    println!(
        "{:<16} {:>5} {:>5} {:>5} {:>10} {:>10} {:>7}",
        "layer", "M", "K", "N", "after ms", "fused ms", "ratio"
    );
    for &(name, m, k, n) in SHAPES.iter().filter(|s| GELU_AFTER.contains(&s.0)) {
        let (x, w, b) = rnd.operands(m, k, n);
        let x = Tensor::from_vec(x, (m, k), &dev)?;
        let w = Tensor::from_vec(w, (n, k), &dev)?;
        let b = Tensor::from_vec(b, n, &dev)?;
        let layer = Linear::new_for_cpu(w, Some(b), Products::Int8)?;
        let then = Then::GeluTanh;
        let after = || -> candle_core::Result<Tensor> {
            then.apply(&candle_core::Module::forward(&layer, &x)?)
        };
        let fused = || layer.forward_then(&x, then);
        let (a, f) = (after()?, fused()?);
        let bits = |t: &Tensor| -> candle_core::Result<Vec<u32>> {
            Ok(t.flatten_all()?
                .to_vec1::<f32>()?
                .iter()
                .map(|v| v.to_bits())
                .collect())
        };
        assert_eq!(bits(&a)?, bits(&f)?, "{name}: the fused step changed bits");
        // Enough repetitions for ~40 ms per timing.
        let reps = (2e9 / (2.0 * (m * n * k) as f64)).ceil().max(1.0) as usize;
        let (mut ta, mut tf) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            for (times, run) in [(&mut ta, &after as &dyn Fn() -> _), (&mut tf, &fused)] {
                let t = Instant::now();
                for _ in 0..reps {
                    std::hint::black_box(run()?);
                }
                times.push(t.elapsed().as_secs_f64() * 1e3 / reps as f64);
            }
        }
        let (ma, mf) = (median(&ta).unwrap_or(0.0), median(&tf).unwrap_or(0.0));
        println!(
            "{name:<16} {m:>5} {k:>5} {n:>5} {ma:>10.3} {mf:>10.3} {:>7.3}",
            mf / ma
        );
    }
    Ok(())
}
