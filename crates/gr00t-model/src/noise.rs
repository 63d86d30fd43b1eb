//! Initial flow-matching noise: PyTorch's CPU `torch.randn` reproduced from a seed.
//!
//! `torch.randn(shape, generator=torch.Generator("cpu").manual_seed(seed))` for float32 tensors
//! of at least 16 elements (ATen `normal_fill_AVX2`, `DistributionTemplates.h`):
//! 1. MT19937 seeded with `init_genrand(seed & 0xFFFF_FFFF)` (torch's `mt19937(uint64_t)` keeps
//!    the low 32 bits), one 32-bit draw per element: `u = (r & 0xFF_FFFF)·2⁻²⁴` (exact in f32).
//! 2. Box–Muller per block of 16: `out[j] = r·cos θ`, `out[j+8] = r·sin θ` for j < 8 with
//!    `r = sqrt(−2·ln(1 − u[j]))`, `θ = f32(2π)·u[j+8]`, all in f32.
//! 3. When `n % 16 != 0`, 16 fresh uniforms overwrite the last 16 slots and that block is
//!    transformed again.
//!
//! ln/sin/cos are a scalar port of the Cephes polynomials in ATen's `avx_mathfun.h` (what the
//! x86 AVX2 kernel calls), with the multiply-adds fused where GCC contracts them in torch's
//! build. That reproduces torch 2.7.1 on x86 bit for bit; a libm-based Box–Muller is off by up
//! to 3 ulp in ~17 % of the values. torch builds without AVX2 (e.g. ARM) use libm instead and
//! their noise differs from this by a few ulp.

use crate::error::{Error, Result};

/// Smallest tensor size that takes torch's vectorised Box–Muller path.
pub const MIN_NOISE_LEN: usize = 16;

/// `torch.rand(n, generator=torch.Generator("cpu").manual_seed(seed))` for float32.
pub fn torch_rand(seed: u64, n: usize) -> Vec<f32> {
    let mut mt = Mt19937::new(seed);
    (0..n).map(|_| mt.next_uniform_f32()).collect()
}

/// `torch.randn(n, generator=torch.Generator("cpu").manual_seed(seed))` for float32, flat.
///
/// Sizes below 16 take torch's scalar double-precision path, which is not reproduced here:
/// they are an error.
pub fn torch_randn(seed: u64, n: usize) -> Result<Vec<f32>> {
    if n < MIN_NOISE_LEN {
        return Err(Error::Input(format!(
            "noise of {n} values requested; torch's sampler is reproduced only for {MIN_NOISE_LEN} or more"
        )));
    }
    let mut mt = Mt19937::new(seed);
    let mut data: Vec<f32> = (0..n).map(|_| mt.next_uniform_f32()).collect();
    for block in data.chunks_exact_mut(16) {
        box_muller_16(block);
    }
    if !n.is_multiple_of(16) {
        // torch redraws the last 16 slots (overlapping the previous full block) and transforms them.
        let tail = &mut data[n - 16..];
        for v in tail.iter_mut() {
            *v = mt.next_uniform_f32();
        }
        box_muller_16(tail);
    }
    Ok(data)
}

/// The initial actions x₀ of the flow, `[horizon, dim]` row-major, as `torch.randn((1, horizon,
/// dim))` draws them from a fresh generator seeded with `seed`.
pub fn initial_noise(seed: u64, horizon: usize, dim: usize) -> Result<Vec<f32>> {
    let n = horizon
        .checked_mul(dim)
        .ok_or_else(|| Error::Input(format!("noise shape {horizon}x{dim} overflows")))?;
    torch_randn(seed, n)
}

/// Box–Muller on one block of 16 uniforms, in place (`normal_fill_16_AVX2` with mean 0, std 1).
fn box_muller_16(block: &mut [f32]) {
    // f32(2π) as `_mm256_set1_ps(2.0f * c10::pi<double>)` builds it.
    let two_pi = (2.0 * std::f64::consts::PI) as f32;
    for j in 0..8 {
        let u1 = 1.0f32 - block[j];
        let u2 = block[j + 8];
        let radius = (-2.0f32 * cephes_logf(u1)).sqrt();
        let (s, c) = cephes_sincosf(two_pi * u2);
        block[j] = radius * c;
        block[j + 8] = radius * s;
    }
}

/// Natural log as torch's `log256_ps` computes it: Cephes polynomial in f32, with the
/// multiply-adds fused the way GCC contracts the intrinsics (`-mfma`, `-ffp-contract=fast`).
fn cephes_logf(x: f32) -> f32 {
    // Constants as in avx_mathfun.h: double literals rounded to f32.
    const SQRTHF: f32 = 0.707_106_781_186_547_5_f64 as f32;
    const P: [f64; 9] = [
        7.037_683_629_2E-2,
        -1.151_461_031_0E-1,
        1.167_699_874_0E-1,
        -1.242_014_084_6E-1,
        1.424_932_278_7E-1,
        -1.666_805_766_5E-1,
        2.000_071_476_5E-1,
        -2.499_999_399_3E-1,
        3.333_333_117_4E-1,
    ];
    const Q1: f32 = -2.121_944_4E-4_f64 as f32;
    const Q2: f32 = 0.693_359_375_f64 as f32;
    if x.is_nan() || x <= 0.0 {
        return f32::NAN;
    }
    let x = x.max(f32::MIN_POSITIVE);
    let bits = x.to_bits();
    let mut e = ((bits >> 23) as i32 - 0x7f) as f32 + 1.0;
    // Mantissa in [0.5, 1); below √½ it is doubled and the exponent lowered.
    let mut m = f32::from_bits((bits & !0x7f80_0000) | 0.5f32.to_bits());
    if m < SQRTHF {
        e -= 1.0;
        m = (m - 1.0) + m;
    } else {
        m -= 1.0;
    }
    let z = m * m;
    let mut y = P[0] as f32;
    for &p in &P[1..] {
        y = y.mul_add(m, p as f32);
    }
    y *= m;
    // GCC fuses the first product of `y*z + e*Q1` (statement order), then `- z*0.5`.
    y = y.mul_add(z, e * Q1);
    y = (-z).mul_add(0.5, y);
    e.mul_add(Q2, m + y)
}

/// `(sin x, cos x)` as torch's `sincos256_ps` computes them (Cephes, f32, FMA-contracted like
/// [`cephes_logf`]); accurate for |x| < 8192, which covers θ ∈ [0, 2π).
fn cephes_sincosf(x: f32) -> (f32, f32) {
    const FOPI: f32 = 1.273_239_544_735_16_f64 as f32;
    const DP1: f32 = -0.785_156_25;
    const DP2: f32 = -2.418_756_484_985_351_6E-4_f64 as f32;
    const DP3: f32 = -3.774_894_977_445_941E-8_f64 as f32;
    const SIN_P: [f64; 3] = [-1.951_529_589_1E-4, 8.332_160_873_6E-3, -1.666_665_461_1E-1];
    const COS_P: [f64; 3] = [
        2.443_315_711_809_948E-5,
        -1.388_731_625_493_765E-3,
        4.166_664_568_298_827E-2,
    ];
    let sign_sin = x.is_sign_negative();
    let ax = x.abs();
    // Octant index rounded up to even (Cephes `j = (j + 1) & ~1`); truncation like cvttps.
    let j = ((ax * FOPI) as i32).wrapping_add(1) & !1;
    let y = j as f32;
    let swap_sin = j & 4 != 0;
    let swap_polys = j & 2 != 0;
    let flip_cos = (j.wrapping_sub(2) & 4) == 0;
    // Extended-precision reduction x − y·π/4 in three parts.
    let r = y.mul_add(DP3, y.mul_add(DP2, y.mul_add(DP1, ax)));
    let z = r * r;
    let mut yc = COS_P[0] as f32;
    yc = yc.mul_add(z, COS_P[1] as f32);
    yc = yc.mul_add(z, COS_P[2] as f32);
    yc *= z;
    yc = yc.mul_add(z, -(z * 0.5));
    yc += 1.0;
    let mut ys = SIN_P[0] as f32;
    ys = ys.mul_add(z, SIN_P[1] as f32);
    ys = ys.mul_add(z, SIN_P[2] as f32);
    ys *= z;
    ys = ys.mul_add(r, r);
    let (s, c) = if swap_polys { (yc, ys) } else { (ys, yc) };
    let s = if sign_sin ^ swap_sin { -s } else { s };
    let c = if flip_cos { -c } else { c };
    (s, c)
}

/// The Mersenne Twister MT19937 as torch's CPU generator runs it.
struct Mt19937 {
    state: [u32; 624],
    index: usize,
}

impl Mt19937 {
    fn new(seed: u64) -> Mt19937 {
        let mut state = [0u32; 624];
        state[0] = seed as u32;
        for i in 1..624 {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        Mt19937 { state, index: 624 }
    }

    fn next_u32(&mut self) -> u32 {
        if self.index >= 624 {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    fn twist(&mut self) {
        for i in 0..624 {
            let y = (self.state[i] & 0x8000_0000) | (self.state[(i + 1) % 624] & 0x7fff_ffff);
            let mut v = self.state[(i + 397) % 624] ^ (y >> 1);
            if y & 1 != 0 {
                v ^= 0x9908_b0df;
            }
            self.state[i] = v;
        }
        self.index = 0;
    }

    /// `uniform_real_distribution<float>(0, 1)`: 24 random bits scaled by 2⁻²⁴.
    fn next_uniform_f32(&mut self) -> f32 {
        (self.next_u32() & 0x00ff_ffff) as f32 * (1.0 / 16_777_216.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mt19937_reference_sequence() {
        // The 10000th output of the default-seeded (5489) MT19937 is 4123659995 (C++ standard).
        let mut mt = Mt19937::new(5489);
        let mut last = 0;
        for _ in 0..10_000 {
            last = mt.next_u32();
        }
        assert_eq!(last, 4_123_659_995);
    }

    #[test]
    fn cephes_functions_are_accurate() {
        for i in 1..2000 {
            let x = i as f32 / 2000.0;
            assert!(
                (cephes_logf(x) as f64 - (x as f64).ln()).abs()
                    < 3e-7 * (1.0 + (x as f64).ln().abs())
            );
            let t = x * 6.283_185_5;
            let (s, c) = cephes_sincosf(t);
            assert!((s as f64 - (t as f64).sin()).abs() < 3e-7);
            assert!((c as f64 - (t as f64).cos()).abs() < 3e-7);
        }
    }
}
