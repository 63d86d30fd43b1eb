//! What the GEMM examples share: the model's bf16-weight linear shapes and the random operands
//! they time.

use half::bf16;

/// (stage, rows M, in K, out N) of the model's linears.
pub const SHAPES: &[(&str, usize, usize, usize)] = &[
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

/// A linear congruential generator of values in [-0.5, 0.5).
pub struct Lcg(u32);

impl Lcg {
    pub fn new(seed: u32) -> Lcg {
        Lcg(seed)
    }

    pub fn draw(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (self.0 >> 8) as f32 / (1u32 << 24) as f32 - 0.5
    }

    /// Activations `[m × k]`, bf16 weights `[n × k]` and a bias `[n]`, drawn in that order.
    pub fn operands(&mut self, m: usize, k: usize, n: usize) -> (Vec<f32>, Vec<bf16>, Vec<f32>) {
        let x = (0..m * k).map(|_| self.draw()).collect();
        let w = (0..n * k).map(|_| bf16::from_f32(self.draw())).collect();
        let b = (0..n).map(|_| self.draw()).collect();
        (x, w, b)
    }
}

/// The median of `v` (the upper one of an even count); `None` when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// Runs `f` on a thread of a fresh rayon pool (`RAYON_NUM_THREADS` threads, else one per
/// core), as the model runs each request (`Gr00tModel::run`): called from outside the pool,
/// every parallel product is handed in from outside, which wakes a worker and puts the caller
/// to sleep each time, and small products (the DiT's) then time 1.3–1.5× slower than in the
/// model.
pub fn in_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .build()
        .expect("a rayon pool")
        .install(f)
}
