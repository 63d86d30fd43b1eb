//! Quantisation to int8: the grid ([`LEVELS`]), a row's scale and one value's rounding (the
//! weights' at load and the activations' per call), and the activations of an int8 product,
//! quantised per call: each row to s8 by its own absolute maximum (per token), k padded with
//! zero to a multiple of 4.

use crate::gemm::out_ptr::{par_fresh, OutPtr};

/// The quantisation grid of a full int8: values `-127..=127` (the symmetric range, so that
/// negating a weight never overflows and `vpsignb` stays exact).
pub const LEVELS: i32 = 127;

/// How a kernel reads the quantised activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// s8 `q` (AVX2's `vpsignb`/`vpmaddubsw`, the scalar reference).
    Signed,
    /// u8 `q + 128` (`vpdpbusd` multiplies u8 by s8; the weight's offset sums take it back).
    Offset,
}

/// `m` rows of quantised activations at row stride `ld` bytes, with one scale per row (rows
/// past `m`, up to a kernel's multiple, hold the padding byte and scale 0).
pub(crate) struct QuantRows {
    pub(crate) data: Vec<u8>,
    pub(crate) ld: usize,
    pub(crate) scales: Vec<f32>,
}

impl QuantRows {
    /// Row i's `q` as s8 (whatever the encoding it was stored in).
    #[cfg(test)]
    pub(crate) fn signed(&self, i: usize, kk: usize, encoding: Encoding) -> i8 {
        let b = self.data[i * self.ld + kk];
        match encoding {
            Encoding::Signed => b as i8,
            Encoding::Offset => (b ^ 0x80) as i8,
        }
    }
}

/// Quantises the rows of `a` `[m, k]`: `q = round_ties_even(x·127/max|x_i|)`, scale
/// `max|x_i|/127` (see [`row_scale`]), stored in `encoding`, the rows padded to a multiple of
/// `row_multiple` and `gap` bytes apart past their k (padded to 4).
#[cfg(test)]
pub(crate) fn quantize_rows(
    a: &[f32],
    m: usize,
    k: usize,
    encoding: Encoding,
    row_multiple: usize,
    gap: usize,
) -> QuantRows {
    quantize_scaled_rows(a, m, k, None, encoding, row_multiple, gap)
}

/// [`quantize_rows`] of `a` with column j multiplied by `col_scale[j]` first (SmoothQuant's
/// `1/s_j`), each row scaled into a buffer of one row that stays in the L1.
pub(crate) fn quantize_scaled_rows(
    a: &[f32],
    m: usize,
    k: usize,
    col_scale: Option<&[f32]>,
    encoding: Encoding,
    row_multiple: usize,
    gap: usize,
) -> QuantRows {
    let ld = k.div_ceil(4) * 4 + gap;
    let rows = m.next_multiple_of(row_multiple.max(1));
    let pad = match encoding {
        Encoding::Signed => 0u8,
        Encoding::Offset => 0x80,
    };
    if k == 0 {
        return QuantRows {
            data: vec![pad; rows * ld],
            ld,
            scales: vec![0.0; rows],
        };
    }
    // The bytes are written chunk by chunk on the pool (no serial memset of the whole
    // buffer first); each task sets its rows' scales.
    let mut scales = vec![0f32; rows];
    let scale_at = OutPtr(scales.as_mut_ptr());
    let rows_per_task = if m * k >= 1 << 16 {
        ((1 << 16) / ld).max(1)
    } else {
        m.max(1)
    };
    let data = par_fresh(rows * ld, rows_per_task * ld, pad, |start, part| {
        let r0 = start / ld;
        if r0 >= m {
            return;
        }
        let mut scaled = vec![0f32; if col_scale.is_some() { k } else { 0 }];
        for (i, (out, row)) in part
            .chunks_exact_mut(ld)
            .zip(a[r0 * k..].chunks(k))
            .enumerate()
        {
            let row = match col_scale {
                Some(c) => {
                    for ((d, &x), &c) in scaled.iter_mut().zip(row).zip(c) {
                        *d = x * c;
                    }
                    &scaled[..]
                }
                None => row,
            };
            let (s, inv) = row_scale(row, LEVELS);
            // SAFETY: row r0 + i < m is this task's own; nothing else writes its scale.
            unsafe { *scale_at.add(r0 + i) = s };
            quantize_row(row, inv, LEVELS, pad, &mut out[..k]);
        }
    });
    QuantRows { data, ld, scales }
}

/// One row's bytes `quantize_value(x, inv, levels) ^ flip`: the same values on every path (the
/// vectorised one rounds to nearest even as [`quantize_value`] does).
pub(crate) fn quantize_row(x: &[f32], inv: f32, levels: i32, flip: u8, out: &mut [u8]) {
    if inv == 0.0 {
        // A zero or non-finite row: every value quantises to 0 (`x·0` is 0 or NaN, and NaN
        // casts to 0); its scale makes the products 0 or NaN.
        out.fill(flip);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512F was detected.
        return unsafe { quantize_row_avx512(x, inv, levels, flip, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected.
        return unsafe { quantize_row_avx2(x, inv, levels, flip, out) };
    }
    quantize_row_plain(x, inv, levels, flip, out)
}

pub(super) fn quantize_row_plain(x: &[f32], inv: f32, levels: i32, flip: u8, out: &mut [u8]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (quantize_value(v, inv, levels) as u8) ^ flip;
    }
}

/// [`quantize_row_plain`] 32 values at a time: `vmulps`, `vroundps` to nearest even, clamp,
/// convert (exact: the values are whole), pack to bytes with signed saturation (never reached)
/// and put the lanes back in order. `inv` finite and the row finite (its scale is), so no NaN.
///
/// # Safety
/// AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn quantize_row_avx2(x: &[f32], inv: f32, levels: i32, flip: u8, out: &mut [u8]) {
    use std::arch::x86_64::*;
    let n = x.len().min(out.len());
    let whole = n / 32 * 32;
    // SAFETY: every load reads x[i..i + 32] and every store writes out[i..i + 32], i + 32 ≤ n.
    unsafe {
        let inv = _mm256_set1_ps(inv);
        let hi = _mm256_set1_ps(levels as f32);
        let lo = _mm256_set1_ps(-levels as f32);
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let flip = _mm256_set1_epi8(flip as i8);
        let q = |p: *const f32| {
            let v = _mm256_mul_ps(_mm256_loadu_ps(p), inv);
            let v = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
            _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(v, hi), lo))
        };
        for i in (0..whole).step_by(32) {
            let p = x.as_ptr().add(i);
            let (a, b, c, d) = (q(p), q(p.add(8)), q(p.add(16)), q(p.add(24)));
            // packs work within 128-bit lanes: a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7.
            let bytes = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
            let bytes = _mm256_permutevar8x32_epi32(bytes, order);
            _mm256_storeu_si256(
                out.as_mut_ptr().add(i).cast(),
                _mm256_xor_si256(bytes, flip),
            );
        }
    }
    quantize_row_plain(&x[whole..n], inv, levels, flip, &mut out[whole..n]);
}

/// [`quantize_row_avx2`] on 16 lanes: `vrndscaleps` to nearest even, clamp, convert, and
/// `vpmovsdb` narrows the lanes to bytes in order (saturation never reached).
///
/// # Safety
/// AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn quantize_row_avx512(
    x: &[f32],
    inv: f32,
    levels: i32,
    flip: u8,
    out: &mut [u8],
) {
    use std::arch::x86_64::*;
    let n = x.len().min(out.len());
    let whole = n / 16 * 16;
    // SAFETY: every load reads x[i..i + 16] and every store writes out[i..i + 16], i + 16 ≤ n.
    unsafe {
        let inv = _mm512_set1_ps(inv);
        let hi = _mm512_set1_ps(levels as f32);
        let lo = _mm512_set1_ps(-levels as f32);
        let flip = _mm_set1_epi8(flip as i8);
        for i in (0..whole).step_by(16) {
            let v = _mm512_mul_ps(_mm512_loadu_ps(x.as_ptr().add(i)), inv);
            let v = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
            let v = _mm512_cvtps_epi32(_mm512_max_ps(_mm512_min_ps(v, hi), lo));
            let bytes = _mm_xor_si128(_mm512_cvtsepi32_epi8(v), flip);
            _mm_storeu_si128(out.as_mut_ptr().add(i).cast(), bytes);
        }
    }
    quantize_row_plain(&x[whole..n], inv, levels, flip, &mut out[whole..n]);
}

/// `(max|x|/levels, levels/max|x|)` of a row: `(0, 0)` for an all-zero row, NaN scale for a
/// row holding a NaN or infinity.
pub(crate) fn row_scale(x: &[f32], levels: i32) -> (f32, f32) {
    let amax = abs_max_bits(x);
    if amax >= f32::INFINITY.to_bits() {
        (f32::NAN, 0.0)
    } else if amax == 0 {
        (0.0, 0.0)
    } else {
        let amax = f32::from_bits(amax);
        (amax / levels as f32, levels as f32 / amax)
    }
}

/// The bits of `max|x|`: on sign-cleared bits integer order is float order, and a NaN or an
/// infinity compares at or above the infinity's bits (an integer max vectorises; a float one
/// with NaN rules does not).
fn abs_max_bits(x: &[f32]) -> u32 {
    #[inline(always)]
    fn plain(x: &[f32]) -> u32 {
        x.iter().fold(0, |m, v| m.max(v.to_bits() & 0x7fff_ffff))
    }
    /// [`plain`] compiled for AVX-512 (vectorised by the compiler).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn avx512(x: &[f32]) -> u32 {
        plain(x)
    }
    /// [`plain`] compiled for AVX2 (vectorised by the compiler).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn avx2(x: &[f32]) -> u32 {
        plain(x)
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512F was detected.
        return unsafe { avx512(x) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected.
        return unsafe { avx2(x) };
    }
    plain(x)
}

/// `round_ties_even(v·inv)` clamped to `±levels`.
#[inline(always)]
pub(crate) fn quantize_value(v: f32, inv: f32, levels: i32) -> i8 {
    let l = levels as f32;
    (v * inv).round_ties_even().clamp(-l, l) as i8
}
