//! The activations of an int8 product, quantised per call: each row to s8 by its own absolute
//! maximum (per token), k padded with zero to a multiple of 4.

use super::pack::{quantize_value, row_scale, LEVELS};
use rayon::prelude::*;

/// How a kernel reads the quantised activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// s8 `q` (AVX2's `vpsignb`/`vpmaddubsw`, the scalar reference).
    Signed,
    /// u8 `q + 128` (`vpdpbusd` multiplies u8 by s8; the weight's offset sums take it back).
    Offset,
}

/// `m` rows of quantised activations at row stride `ld` bytes, with one scale per row.
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
/// `max|x_i|/127` (see [`row_scale`]), stored in `encoding`.
pub(crate) fn quantize_rows(a: &[f32], m: usize, k: usize, encoding: Encoding) -> QuantRows {
    let ld = k.div_ceil(4) * 4;
    let pad = match encoding {
        Encoding::Signed => 0u8,
        Encoding::Offset => 0x80,
    };
    let mut data = vec![pad; m * ld];
    let mut scales = vec![0f32; m];
    if k > 0 {
        let one = |((row, out), scale): ((&[f32], &mut [u8]), &mut f32)| {
            let (s, inv) = row_scale(row, LEVELS);
            *scale = s;
            quantize_row(row, inv, pad, &mut out[..k]);
        };
        if m * k >= 1 << 16 {
            a.par_chunks(k)
                .zip(data.par_chunks_mut(ld))
                .zip(scales.par_iter_mut())
                .for_each(one);
        } else {
            a.chunks(k)
                .zip(data.chunks_mut(ld))
                .zip(scales.iter_mut())
                .for_each(one);
        }
    }
    QuantRows { data, ld, scales }
}

/// One row's bytes: the same values on every path (the vectorised one rounds with the same
/// round-to-nearest-even).
fn quantize_row(x: &[f32], inv: f32, flip: u8, out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected.
        return unsafe { quantize_row_avx2(x, inv, flip, out) };
    }
    quantize_row_plain(x, inv, flip, out)
}

#[inline(always)]
fn quantize_row_plain(x: &[f32], inv: f32, flip: u8, out: &mut [u8]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (quantize_value(v, inv, LEVELS) as u8) ^ flip;
    }
}

/// [`quantize_row_plain`] compiled for AVX2 (vectorised by the compiler).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn quantize_row_avx2(x: &[f32], inv: f32, flip: u8, out: &mut [u8]) {
    quantize_row_plain(x, inv, flip, out)
}
