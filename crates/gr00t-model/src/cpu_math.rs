//! Vectorised f32 elementwise kernels for the CPU path: `exp` (softmax), the GELUs, SiLU,
//! rope and residual adds (the row norms are in `cpu_norms`).
//! Plain Rust loops compiled a second time with AVX-512 / AVX2+FMA enabled and picked at run
//! time, so they vectorise whatever the build's target CPU.

use crate::gemm::out_ptr::par_fresh;
use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Storage, Tensor};

/// Elements per parallel task of an elementwise op (large enough to amortise the scheduling).
pub(crate) const CHUNK: usize = 1 << 16;

/// `e^x`, within 2 ulp of the correctly rounded value over the f32 range; exactly 0 below
/// −87.3 (so −∞ gives 0), +∞ above 88, NaN for NaN.
#[inline(always)]
fn exp(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Adding and removing 1.5·2²³ rounds to the nearest integer without a rounding instruction.
    const ROUND: f32 = 12_582_912.0;
    let xc = x.clamp(-87.336_55, 88.0);
    let t = xc * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    // n as an integer straight from t's bits (t lies in [2²³, 2²⁴), one unit per ulp): an
    // `as i32` cast would be a saturating conversion, which does not vectorise.
    let ni = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    // Fused multiply-adds: half the instructions of separate ones in the AVX2 / AVX-512
    // copies below (in the plain copy, which only x86 CPUs without AVX2 run, a libm call).
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, xc));
    // Taylor series to r⁷/7! for |r| ≤ ln2/2 (truncation below 2⁻²⁸ relative).
    let p = 1.0 / 5040.0f32;
    let p = p.mul_add(r, 1.0 / 720.0);
    let p = p.mul_add(r, 1.0 / 120.0);
    let p = p.mul_add(r, 1.0 / 24.0);
    let p = p.mul_add(r, 1.0 / 6.0);
    let p = p.mul_add(r, 0.5);
    let p = p.mul_add(r, 1.0);
    let p = p.mul_add(r, 1.0);
    let scale = f32::from_bits(((ni + 127) as u32) << 23);
    let y = p * scale;
    if x < -87.336_55 {
        0.0
    } else if x > 88.0 {
        f32::INFINITY
    } else {
        y
    }
}

/// `0.5·x·(1 + tanh(u))`, `u = √(2/π)·(x + 0.044715·x³)`, written as `x / (1 + e^(−2u))`
/// (the same function; it also avoids the cancellation of `1 + tanh(u)` for negative x).
#[inline(always)]
fn gelu_tanh_one(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    let u = SQRT_2_OVER_PI * x * (1.0 + 0.044_715 * x * x);
    x / (1.0 + exp(-2.0 * u))
}

/// The exact GELU `0.5·x·(1 + erf(x/√2))`, written `0.5·x·erfc(−x/√2)` (no cancellation for
/// negative x) with Numerical Recipes' `erfcc` (a Chebyshev fit, fractional error below
/// 1.2·10⁻⁷), so that it vectorises: candle's `gelu_erf` calls a scalar `erff` per element.
#[inline(always)]
fn gelu_erf_one(x: f32) -> f32 {
    let z = -x * std::f32::consts::FRAC_1_SQRT_2;
    let a = z.abs();
    let t = 1.0 / (1.0 + 0.5 * a);
    let p = 0.170_872_77f32;
    let p = p.mul_add(t, -0.822_152_23);
    let p = p.mul_add(t, 1.488_515_9);
    let p = p.mul_add(t, -1.135_204);
    let p = p.mul_add(t, 0.278_868_07);
    let p = p.mul_add(t, -0.186_288_06);
    let p = p.mul_add(t, 0.096_784_18);
    let p = p.mul_add(t, 0.374_091_96);
    let p = p.mul_add(t, 1.000_023_7);
    let p = p.mul_add(t, -1.265_512_2);
    let e = t * exp((-a).mul_add(a, p));
    let erfc = if z >= 0.0 { e } else { 2.0 - e };
    0.5 * x * erfc
}

macro_rules! dispatch {
    ($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*) $body:block) => {
        dispatch! { $(#[$doc])* $name($($arg: $ty),*) -> () $body }
    };
    ($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty $body:block) => {
        $(#[$doc])*
        pub(crate) fn $name($($arg: $ty),*) -> $ret {
            #[inline(always)]
            fn generic($($arg: $ty),*) -> $ret $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                unsafe fn avx512($($arg: $ty),*) -> $ret { generic($($arg),*) }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) -> $ret { generic($($arg),*) }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F.
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: the CPU has AVX2 and FMA.
                    return unsafe { avx2($($arg),*) };
                }
            }
            generic($($arg),*)
        }
    };
}
pub(crate) use dispatch;

/// What a row of raw attention scores still needs before its exponentials: a scale (when the
/// product did not apply it) and an additive mask row read at a stride (0 = broadcast).
#[derive(Clone, Copy)]
pub(crate) struct ScoreTerms<'a> {
    /// Multiplies every score first.
    pub(crate) scale: Option<f32>,
    /// Added after the scale: element j is `mask.0[j · mask.1]`.
    pub(crate) mask: Option<(&'a [f32], usize)>,
}

dispatch! {
    /// A softmax's numerators of one row of scores, in place, returning their sum (attention
    /// divides its output rows instead, dh values rather than Lk): the `terms` applied
    /// (`x·scale`, then `+ mask`, two roundings), then `e^(x − max)`, rounded to bf16 when
    /// `round` (weights entering a bf16 product, summed as rounded: normalised by what is
    /// multiplied). Two passes over the row whatever the terms.
    softmax_numerators(row: &mut [f32], terms: ScoreTerms, round: bool) -> f32 {
        let max = match terms {
            ScoreTerms { scale: None, mask: None } => lane_max(row),
            ScoreTerms { scale: Some(s), mask: None } => map_max(row, |v| v * s),
            ScoreTerms { scale: None, mask: Some((m, 0)) } => map_max(row, |v| v + m[0]),
            ScoreTerms { scale: Some(s), mask: Some((m, 0)) } => map_max(row, |v| v * s + m[0]),
            ScoreTerms { scale: None, mask: Some((m, 1)) } => map2_max(row, m, |v, m| v + m),
            ScoreTerms { scale: Some(s), mask: Some((m, 1)) } => {
                map2_max(row, m, |v, m| v * s + m)
            }
            // A mask view strided along the keys (rare): terms and max in one scalar pass.
            ScoreTerms { scale, mask: Some((m, st)) } => {
                row.iter_mut().enumerate().fold(f32::NEG_INFINITY, |max, (j, v)| {
                    *v = scale.map_or(*v, |s| *v * s) + m[j * st];
                    max.max(*v)
                })
            }
        };
        // One pass: exponentials written and summed together.
        if round {
            map_sum(row, |v| round_bf16(exp(v - max)))
        } else {
            map_sum(row, |v| exp(v - max))
        }
    }
}

/// Replaces each value by `f` of it and returns their maximum, over LANES interleaved partial
/// maxima (so that the loop vectorises).
#[inline(always)]
fn map_max(row: &mut [f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut chunks = row.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for (l, v) in lanes.iter_mut().zip(c) {
            *v = f(*v);
            *l = if *v > *l { *v } else { *l };
        }
    }
    let tail = chunks.into_remainder();
    tail.iter_mut().for_each(|v| *v = f(*v));
    max_of_lanes_and(&lanes, tail)
}

/// The maximum of a row left as it is (read only), over LANES interleaved partial maxima.
#[inline(always)]
fn lane_max(row: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for c in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = if v > *l { v } else { *l };
        }
    }
    max_of_lanes_and(&lanes, chunks.remainder())
}

/// The partial maxima and the row's tail folded in order (NaN ignored, as `f32::max`).
#[inline(always)]
fn max_of_lanes_and(lanes: &[f32; LANES], tail: &[f32]) -> f32 {
    lanes
        .iter()
        .chain(tail)
        .fold(f32::NEG_INFINITY, |m, &v| m.max(v))
}

/// [`map_max`] of `f(value, other[j])` (`other` at least as long as the row).
#[inline(always)]
fn map2_max(row: &mut [f32], other: &[f32], f: impl Fn(f32, f32) -> f32) -> f32 {
    let other = &other[..row.len()];
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut chunks = row.chunks_exact_mut(LANES);
    let mut others = other.chunks_exact(LANES);
    for (c, o) in (&mut chunks).zip(&mut others) {
        for ((l, v), &o) in lanes.iter_mut().zip(c).zip(o) {
            *v = f(*v, o);
            *l = if *v > *l { *v } else { *l };
        }
    }
    let tail = chunks.into_remainder();
    for (v, &o) in tail.iter_mut().zip(others.remainder()) {
        *v = f(*v, o);
    }
    max_of_lanes_and(&lanes, tail)
}

/// Replaces each value by `f` of it and returns the sum of the new values, over LANES
/// interleaved partial sums (so that the loop vectorises) in a fixed order.
#[inline(always)]
fn map_sum(row: &mut [f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut sums = [0f32; LANES];
    let mut chunks = row.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for (s, v) in sums.iter_mut().zip(c) {
            *v = f(*v);
            *s += *v;
        }
    }
    let mut tail = 0f32;
    for v in chunks.into_remainder() {
        *v = f(*v);
        tail += *v;
    }
    sums.iter().sum::<f32>() + tail
}

/// `x` rounded to bf16 (round to nearest even; NaN stays NaN), kept as f32.
#[inline(always)]
pub(crate) fn round_bf16(x: f32) -> f32 {
    let b = x.to_bits();
    let r = b.wrapping_add(0x7fff + ((b >> 16) & 1)) & 0xffff_0000;
    if x.is_nan() {
        x
    } else {
        f32::from_bits(r)
    }
}

/// Width of the partial max/sum arrays (one AVX-512 register).
pub(crate) const LANES: usize = 16;

/// `Σ x` as LANES interleaved partial sums, then the partials and the tail in order.
#[inline(always)]
pub(crate) fn lane_sum(x: &[f32]) -> f32 {
    let mut lanes = [0f32; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += v;
        }
    }
    lanes.iter().chain(chunks.remainder()).sum()
}

dispatch! {
    /// `a + b` elementwise into `dst` (equal lengths).
    add_slice(a: &[f32], b: &[f32], dst: &mut [f32]) {
        for ((d, &x), &y) in dst.iter_mut().zip(a).zip(b) {
            *d = x + y;
        }
    }
}

/// Whether `t` is a CPU f32 tensor.
fn cpu_f32(t: &Tensor) -> bool {
    t.device().is_cpu() && t.dtype() == DType::F32
}

/// `f` of the values of two contiguous CPU f32 tensors.
pub(crate) fn with_values<R>(
    a: &Tensor,
    b: &Tensor,
    f: impl FnOnce(&[f32], &[f32]) -> R,
) -> candle_core::Result<R> {
    let (ga, la) = a.storage_and_layout();
    let (gb, lb) = b.storage_and_layout();
    match (&*ga, &*gb, la.contiguous_offsets(), lb.contiguous_offsets()) {
        (
            Storage::Cpu(CpuStorage::F32(a)),
            Storage::Cpu(CpuStorage::F32(b)),
            Some((a0, a1)),
            Some((b0, b1)),
        ) => Ok(f(&a[a0..a1], &b[b0..b1])),
        _ => candle_core::bail!("expected contiguous CPU f32 tensors"),
    }
}

/// `x + h` (a residual add): on the CPU in f32 one pass split over the rayon pool (candle's add
/// runs on threads of its own, which compete with the pool's for the cores); elsewhere, or
/// for shapes that differ (an error), candle's add. The same bits either way.
pub(crate) fn residual_add(x: &Tensor, h: &Tensor) -> candle_core::Result<Tensor> {
    if !cpu_f32_pair(x, h) {
        return x + h;
    }
    zip_map(x, h, add_slice)
}

/// `kernel(a, b, dst)` over equal chunks of two CPU f32 tensors of one shape into a fresh one,
/// chunks in parallel.
fn zip_map(
    x: &Tensor,
    h: &Tensor,
    kernel: fn(&[f32], &[f32], &mut [f32]),
) -> candle_core::Result<Tensor> {
    let (x, h) = (x.contiguous()?, h.contiguous()?);
    let out = with_values(&x, &h, |a, b| {
        par_fresh(a.len(), CHUNK, 0.0, |start, d| {
            let end = start + d.len();
            kernel(&a[start..end], &b[start..end], d)
        })
    })?;
    Tensor::from_vec(out, x.shape(), &candle_core::Device::Cpu)
}

/// Whether `x` and `h` are CPU f32 tensors of one shape (what this module's two-operand ops
/// take; candle's run otherwise).
pub(crate) fn cpu_f32_pair(x: &Tensor, h: &Tensor) -> bool {
    cpu_f32(x) && cpu_f32(h) && x.shape() == h.shape()
}

dispatch! {
    /// Tanh GELU of each value, in place.
    gelu_tanh_in_place(x: &mut [f32]) {
        for v in x.iter_mut() {
            *v = gelu_tanh_one(*v);
        }
    }
}

dispatch! {
    /// Exact (erf) GELU of each value, in place.
    gelu_erf_in_place(x: &mut [f32]) {
        for v in x.iter_mut() {
            *v = gelu_erf_one(*v);
        }
    }
}

/// An elementwise step after a linear layer's product
/// ([`crate::linear::Linear::forward_then`]): the int8 products run it on each tile while it
/// is in the L1 (no pass over the whole output), the others after the product; the same bits
/// either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// The tanh GELU of each element ([`gelu_tanh`]).
    GeluTanh,
    /// The exact (erf) GELU of each element ([`gelu_erf`]).
    GeluErf,
}

impl Then {
    /// The step on a finished product `y`.
    pub fn apply(self, y: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Then::GeluTanh => gelu_tanh(y),
            Then::GeluErf => gelu_erf(y),
        }
    }

    /// The step on a run of an output row, in place (the bits [`Then::apply`] gives).
    pub(crate) fn apply_in_place(self, values: &mut [f32]) {
        match self {
            Then::GeluTanh => gelu_tanh_in_place(values),
            Then::GeluErf => gelu_erf_in_place(values),
        }
    }
}

/// The tanh-approximated GELU (`gelu_pytorch_tanh`, candle's `gelu`): on the CPU in f32 a
/// vectorised, multi-threaded kernel; elsewhere candle's op.
pub(crate) fn gelu_tanh(x: &Tensor) -> candle_core::Result<Tensor> {
    if x.device().is_cpu() && x.dtype() == DType::F32 {
        x.apply_op1_no_bwd(&StepOp(Then::GeluTanh))
    } else {
        x.gelu()
    }
}

/// The exact GELU (`gelu`, candle's `gelu_erf`): on the CPU in f32 a vectorised,
/// multi-threaded kernel ([`gelu_erf_one`]); elsewhere candle's op.
pub(crate) fn gelu_erf(x: &Tensor) -> candle_core::Result<Tensor> {
    if x.device().is_cpu() && x.dtype() == DType::F32 {
        x.apply_op1_no_bwd(&StepOp(Then::GeluErf))
    } else {
        x.gelu_erf()
    }
}

/// A [`Then`] step over a CPU f32 tensor, chunks in parallel.
struct StepOp(Then);

impl CustomOp1 for StepOp {
    fn name(&self) -> &'static str {
        match self.0 {
            Then::GeluTanh => "gelu-tanh-f32",
            Then::GeluErf => "gelu-erf-f32",
        }
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let src = match (s, l.contiguous_offsets()) {
            (CpuStorage::F32(v), Some((a, b))) => &v[a..b],
            (CpuStorage::F32(_), None) => candle_core::bail!("gelu: input must be contiguous"),
            _ => candle_core::bail!("gelu: input must be f32"),
        };
        let dst = par_fresh(src.len(), CHUNK, 0.0, |start, d| {
            d.copy_from_slice(&src[start..start + d.len()]);
            self.0.apply_in_place(d)
        });
        Ok((CpuStorage::F32(dst), l.shape().clone()))
    }
}

dispatch! {
    /// `silu(g)·u = g / (1 + e^(−g)) · u`, elementwise over equal-length slices.
    silu_mul_slice(gate: &[f32], up: &[f32], dst: &mut [f32]) {
        for ((d, &g), &u) in dst.iter_mut().zip(gate).zip(up) {
            *d = g / (1.0 + exp(-g)) * u;
        }
    }
}

/// `silu(gate) · up` (the SwiGLU of the LLM's MLP): on the CPU in f32 one vectorised,
/// multi-threaded pass; elsewhere candle's two ops.
pub(crate) fn silu_mul(gate: &Tensor, up: &Tensor) -> candle_core::Result<Tensor> {
    if !cpu_f32_pair(gate, up) {
        return gate.silu()? * up;
    }
    zip_map(gate, up, silu_mul_slice)
}

dispatch! {
    /// One half-split rotated row: `x1·cos − x2·sin`, then `x1·sin + x2·cos` (`x1`, `x2` the
    /// halves of `x`; candle's `rope` arithmetic, in its order).
    rope_row(x: &[f32], cos: &[f32], sin: &[f32], out: &mut [f32]) {
        let half = cos.len();
        let (x1, x2) = x.split_at(half);
        let (o1, o2) = out.split_at_mut(half);
        for ((((o1, o2), (&a, &b)), &c), &s) in
            o1.iter_mut().zip(o2).zip(x1.iter().zip(x2)).zip(cos).zip(sin)
        {
            *o1 = a * c - b * s;
            *o2 = a * s + b * c;
        }
    }
}

/// Half-split rotary embedding of a CPU f32 `x` `[B, H, T, D]` read in place (any strides with
/// a contiguous last dimension, so a head-split projection needs no copy first) into a fresh
/// contiguous tensor; `cos`/`sin` are `[S ≥ T, D/2]` (row t for position t of every batch) or
/// `[B, T, D/2]` (each batch its own rows), as candle's `rope` takes them, with the same
/// arithmetic.
pub(crate) fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
    let (b, h, t, d) = x.dims4()?;
    let half = d / 2;
    let x = if x.stride()[3] == 1 {
        x.clone()
    } else {
        x.contiguous()?
    };
    // The tables read in place (no per-call copy): contiguous, as candle's `rope` wants them.
    let table = |c: &Tensor| -> candle_core::Result<usize> {
        let per_batch = match *c.dims() {
            [s, w] if s >= t && w == half => 0,
            [cb, ct, w] if cb == b && ct == t && w == half => t * half,
            _ => candle_core::bail!(
                "rope: tables {:?} do not fit {:?} (want [S >= {t}, {half}] or [{b}, {t}, {half}])",
                c.dims(),
                x.dims()
            ),
        };
        if !c.is_contiguous() {
            candle_core::bail!("rope: tables must be contiguous");
        }
        Ok(per_batch)
    };
    let (cos_batch, _) = (table(cos)?, table(sin)?);
    let (cos_guard, cos_layout) = cos.storage_and_layout();
    let (sin_guard, sin_layout) = sin.storage_and_layout();
    let (cos, sin) = match (&*cos_guard, &*sin_guard) {
        (Storage::Cpu(CpuStorage::F32(c)), Storage::Cpu(CpuStorage::F32(s))) => (
            &c[cos_layout.start_offset()..],
            &s[sin_layout.start_offset()..],
        ),
        _ => candle_core::bail!("rope: tables must be CPU f32 tensors"),
    };
    if d % 2 != 0 {
        candle_core::bail!("rope: odd head dim {d}");
    }
    let (guard, layout) = x.storage_and_layout();
    let (src, st) = match (&*guard, layout.stride()) {
        (Storage::Cpu(CpuStorage::F32(v)), &[s0, s1, s2, _]) => (v, [s0, s1, s2]),
        _ => candle_core::bail!("rope: input must be a CPU f32 tensor"),
    };
    let off = layout.start_offset();
    let out = match CHUNK.checked_div(d) {
        Some(per_task) => par_fresh(b * h * t * d, per_task.max(1) * d, 0.0, |start, o| {
            for (r, o) in (start / d..).zip(o.chunks_exact_mut(d)) {
                let (bh, ti) = (r / t, r % t);
                let (bi, hi) = (bh / h, bh % h);
                let at = off + bi * st[0] + hi * st[1] + ti * st[2];
                let cs = bi * cos_batch + ti * half;
                rope_row(
                    &src[at..at + d],
                    &cos[cs..cs + half],
                    &sin[cs..cs + half],
                    o,
                );
            }
        }),
        None => Vec::new(),
    };
    drop((guard, cos_guard, sin_guard));
    Tensor::from_vec(out, (b, h, t, d), &candle_core::Device::Cpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place between two finite f32 of the same sign.
    fn ulps(a: f32, b: f32) -> u32 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
    }

    #[test]
    fn exp_is_within_two_ulp_of_f64_exp() {
        let mut worst = 0;
        let mut x = -87.0f32;
        while x < 88.0 {
            let want = (x as f64).exp() as f32;
            worst = worst.max(ulps(exp(x), want));
            x += 0.001_3;
        }
        assert!(worst <= 2, "worst {worst} ulp");
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
    }

    #[test]
    fn gelu_matches_the_tanh_formula() {
        let mut worst = 0f64;
        for i in -4000..4000 {
            let x = i as f32 * 0.003;
            let xd = x as f64;
            let u = (2.0 / std::f64::consts::PI).sqrt() * (xd + 0.044715 * xd.powi(3));
            let want = 0.5 * xd * (1.0 + u.tanh());
            let mut out = [x];
            gelu_tanh_in_place(&mut out);
            worst = worst.max((out[0] as f64 - want).abs() / want.abs().max(1e-3));
        }
        assert!(worst < 1e-6, "worst relative error {worst}");
    }

    #[test]
    fn the_erf_gelu_matches_candles_op_and_the_step_on_the_tiles() {
        let dev = candle_core::Device::Cpu;
        let x: Vec<f32> = (0..40_001)
            .map(|i| (i as f32 - 20_000.0) / 1_500.0)
            .collect();
        let xt = Tensor::new(&x[..], &dev).unwrap();
        let ours = gelu_erf(&xt).unwrap().to_vec1::<f32>().unwrap();
        // candle's is x·(1 + erff(x/√2))/2 with a scalar erff: its `1 + erf` for negative x
        // is a multiple of 2⁻²⁴ (0 below x ≈ −5.9), where ours keeps the tail; hence the
        // absolute slack of half a step of that sum times |x|/2.
        let theirs = xt.gelu_erf().unwrap().to_vec1::<f32>().unwrap();
        for ((&x, &a), &b) in x.iter().zip(&ours).zip(&theirs) {
            let slack = 1e-6 * (b as f64).abs() + 3e-8 * (x as f64).abs();
            let diff = (a as f64 - b as f64).abs();
            assert!(diff <= slack, "gelu_erf({x}) = {a}, candle {b}");
        }
        // The in-place step (what the int8 tiles run) gives the tensor op's bits.
        let mut inplace = x.clone();
        Then::GeluErf.apply_in_place(&mut inplace);
        assert_eq!(inplace, ours);
    }

    #[test]
    fn silu_mul_matches_the_f64_formula_and_candle() {
        let gate: Vec<f32> = (-3000..3000).map(|i| i as f32 * 0.01).collect();
        let up: Vec<f32> = gate.iter().map(|g| 1.5 - g * 0.25).collect();
        let mut out = vec![0f32; gate.len()];
        silu_mul_slice(&gate, &up, &mut out);
        for ((&o, &g), &u) in out.iter().zip(&gate).zip(&up) {
            let want = g as f64 / (1.0 + (-(g as f64)).exp()) * u as f64;
            assert!(
                (o as f64 - want).abs() <= 1e-6 * want.abs().max(1e-3),
                "{g}: {o} vs {want}"
            );
        }
        let dev = candle_core::Device::Cpu;
        let (g, u) = (
            Tensor::from_vec(gate, (60, 100), &dev).unwrap(),
            Tensor::from_vec(up, (60, 100), &dev).unwrap(),
        );
        let ours = silu_mul(&g, &u).unwrap();
        let theirs = (g.silu().unwrap() * &u).unwrap();
        let diff = (ours - theirs)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(diff < 1e-5, "max |Δ| vs candle {diff}");
    }

    #[test]
    fn bf16_rounding_is_half_s_round_to_nearest_even() {
        let mut rnd = crate::test_rng::xorshift(99u32);
        let mut row: Vec<f32> = (0..37).map(|_| rnd() * 1e3).collect();
        // Ties both ways, NaN, infinities, a denormal, the largest finite.
        row.extend([
            f32::from_bits(0x3f80_8000),
            f32::from_bits(0x3f81_8000),
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::from_bits(0x0000_8001),
            f32::MAX,
        ]);
        for &x in &row {
            let (got, want) = (round_bf16(x), half::bf16::from_f32(x).to_f32());
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{x:e}: {got:e} vs {want:e}"
            );
        }
    }

    /// 37 scores (two full lanes of 16 and a tail of 5), one of them −∞, and a mask row of 74.
    fn scores_and_mask() -> (Vec<f32>, Vec<f32>) {
        let mut row: Vec<f32> = (0..37).map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.7).collect();
        row[3] = f32::NEG_INFINITY;
        let mut mask: Vec<f32> = (0..74).map(|i| (i % 5) as f32 * -0.3).collect();
        mask[8] = f32::NEG_INFINITY;
        (row, mask)
    }

    /// Every kind of terms: none, scale, a mask row (stride 1), a broadcast value (stride 0),
    /// a strided mask, and the scale with each mask.
    fn every_terms(mask: &[f32]) -> Vec<ScoreTerms<'_>> {
        let mut all = Vec::new();
        for scale in [None, Some(0.125f32)] {
            for m in [
                None,
                Some((mask, 1)),
                Some((&mask[5..], 0)),
                Some((mask, 2)),
            ] {
                all.push(ScoreTerms { scale, mask: m });
            }
        }
        all
    }

    #[test]
    fn softmax_numerators_match_f64_with_every_kind_of_terms() {
        let (row, mask) = scores_and_mask();
        for terms in every_terms(&mask) {
            // The terms in f32 by their definition, then the exponentials in f64.
            let t: Vec<f32> = (0..row.len())
                .map(|j| {
                    let x = terms.scale.map_or(row[j], |s| row[j] * s);
                    terms.mask.map_or(x, |(m, st)| x + m[j * st])
                })
                .collect();
            let max = t.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
            let want: Vec<f64> = t.iter().map(|&v| (v as f64 - max).exp()).collect();
            let mut got = row.clone();
            let sum = softmax_numerators(&mut got, terms, false);
            for (j, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!((*g as f64 - w).abs() <= 8e-7 * w, "{j}: {g} vs {w}");
            }
            assert_eq!(got[3], 0.0, "a −∞ score has no weight");
            let total: f64 = want.iter().sum();
            assert!(
                (sum as f64 - total).abs() <= 1e-6 * total,
                "{sum} vs {total}"
            );
        }
    }

    #[test]
    fn softmax_terms_and_rounding_in_the_pass_give_the_bits_of_separate_passes() {
        let (row, mask) = scores_and_mask();
        for terms in every_terms(&mask) {
            // The terms applied first by hand, then the plain numerators.
            let mut by_hand: Vec<f32> = (0..row.len())
                .map(|j| {
                    let x = terms.scale.map_or(row[j], |s| row[j] * s);
                    terms.mask.map_or(x, |(m, st)| x + m[j * st])
                })
                .collect();
            let plain = ScoreTerms {
                scale: None,
                mask: None,
            };
            let sum_by_hand = softmax_numerators(&mut by_hand, plain, false);
            let mut fused = row.clone();
            let sum = softmax_numerators(&mut fused, terms, false);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fused), bits(&by_hand));
            assert_eq!(sum.to_bits(), sum_by_hand.to_bits());
            // Rounded: each weight is the rounded exponential; the sum is of the rounded ones.
            let mut rounded = row.clone();
            let sum_rounded = softmax_numerators(&mut rounded, terms, true);
            let want: Vec<f32> = by_hand.iter().map(|&x| round_bf16(x)).collect();
            assert_eq!(bits(&rounded), bits(&want));
            let total: f64 = want.iter().map(|&x| x as f64).sum();
            assert!((sum_rounded as f64 - total).abs() <= 1e-6 * total);
            assert_ne!(
                sum_rounded.to_bits(),
                sum.to_bits(),
                "rounding changed nothing"
            );
        }
    }

    #[test]
    fn rope_of_a_strided_view_has_the_bits_of_candles_rope() {
        let dev = candle_core::Device::Cpu;
        let mut next = crate::test_rng::xorshift(11);
        // [c, len, 3, heads, hd] as the vision projection is split: q a strided view.
        let (c, len, heads, hd) = (3, 37, 5, 24);
        let data: Vec<f32> = (0..c * len * 3 * heads * hd)
            .map(|_| next() * 4.0)
            .collect();
        let qkv = Tensor::from_vec(data, (c, len, 3, heads, hd), &dev).unwrap();
        let q = qkv
            .narrow(2, 0, 1)
            .unwrap()
            .squeeze(2)
            .unwrap()
            .transpose(1, 2)
            .unwrap();
        assert!(!q.is_contiguous());
        let table = |n: usize, f: f32| {
            let v: Vec<f32> = (0..n * hd / 2).map(|i| (i as f32 * f).sin()).collect();
            Tensor::from_vec(v, (n, hd / 2), &dev).unwrap()
        };
        let bits = |t: &Tensor| -> Vec<u32> {
            let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            v.iter().map(|x| x.to_bits()).collect()
        };
        // Shared rows (more rows than positions), and each batch its own rows.
        let shared = (table(len + 4, 0.37), table(len + 4, 0.91));
        let per_batch = (
            table(c * len, 0.37).reshape((c, len, hd / 2)).unwrap(),
            table(c * len, 0.91).reshape((c, len, hd / 2)).unwrap(),
        );
        for (cos, sin) in [shared, per_batch] {
            let ours = rope(&q, &cos, &sin).unwrap();
            assert!(ours.is_contiguous());
            let theirs = candle_nn::rotary_emb::rope(&q.contiguous().unwrap(), &cos, &sin).unwrap();
            assert_eq!(ours.dims(), theirs.dims());
            assert_eq!(bits(&ours), bits(&theirs), "tables {:?}", cos.dims());
        }
        // Tables that do not fit are refused, not read out of bounds.
        assert!(rope(&q, &table(len - 1, 0.3), &table(len - 1, 0.3)).is_err());
    }
}
