//! An int8 weight: an `[N, K]` matrix quantised once at load to s8, symmetric per output
//! channel, and laid out for `vpdpbusd` and `vpmaddubsw`: panels of [`NP`] columns, each
//! `[⌈K/4⌉][NP][4]` (four consecutive k of a column in one 32-bit lane), k and the columns
//! past N padded with zero.

use super::quant::{quantize_row, row_scale, LEVELS};
use crate::gemm::elements::Elements;
use rayon::prelude::*;

/// Columns of a panel: one AVX-512 vector of i32 sums, two AVX2 ones.
pub(crate) const NP: usize = 16;

/// Columns the stored scales and sums cover: whole AVX-512 tiles of two panels.
const N_ALIGN: usize = 2 * NP;

/// Panels of an n-column weight: whole AVX-512 tiles of two.
fn panels_for(n: usize) -> usize {
    n.div_ceil(N_ALIGN) * N_ALIGN / NP
}

/// An `[N, K]` weight as s8 panels with one f32 scale per column (row of the weight).
#[derive(Debug)]
pub struct PackedI8 {
    n: usize,
    k: usize,
    /// The panels, at a 64-byte boundary.
    elements: Elements<i8>,
    /// `max|w[j]| / levels` per column, zero past N.
    scales: Vec<f32>,
    /// `128·Σ_k q[j, k]` per column: what u8 activations offset by 128 add to a sum.
    offset_sums: Vec<i32>,
    /// SmoothQuant's `1/s_k` per input channel, which the activations are multiplied by
    /// before they are quantised (the weight's column k was multiplied by `s_k`); `None`:
    /// the activations as they come.
    input_scale: Option<Vec<f32>>,
}

impl PackedI8 {
    /// Quantises the row-major `[n, k]` matrix whose row j `row(j, buf)` writes into `buf`
    /// (length k): `q = round_ties_even(w·levels/max|w_j|)` clamped to `±levels`, scale
    /// `max|w_j|/levels` (0 for an all-zero row; NaN when the row holds a NaN or infinity, so
    /// its products are NaN as the f32 ones would be). `levels` is [`LEVELS`] except in tests
    /// that break the quantisation on purpose.
    pub fn quantize(
        n: usize,
        k: usize,
        levels: i32,
        row: impl Fn(usize, &mut [f32]) + Sync,
    ) -> PackedI8 {
        let levels = levels.clamp(1, LEVELS);
        let k4 = k.div_ceil(4);
        let panels = panels_for(n);
        let panel_len = k4 * 4 * NP;
        let mut elements = Elements::zeroed(panels * panel_len);
        let n_pad = panels * NP;
        let mut scales = vec![0f32; n_pad];
        let mut offset_sums = vec![0i32; n_pad];
        elements
            .as_mut_slice()
            .expect("fresh elements are owned")
            .par_chunks_mut(panel_len.max(1))
            .zip(scales.par_chunks_mut(NP))
            .zip(offset_sums.par_chunks_mut(NP))
            .enumerate()
            .for_each(|(p, ((panel, scales), sums))| {
                let mut buf = vec![0f32; k];
                let mut qs = vec![0u8; k];
                for c in 0..NP {
                    let j = p * NP + c;
                    if j >= n {
                        break;
                    }
                    row(j, &mut buf);
                    let (scale, inv) = row_scale(&buf, levels);
                    scales[c] = scale;
                    quantize_row(&buf, inv, levels, 0, &mut qs);
                    let mut sum = 0i32;
                    for (kk, &q) in qs.iter().enumerate() {
                        let q = q as i8;
                        sum += i32::from(q);
                        panel[(kk / 4) * 4 * NP + c * 4 + kk % 4] = q;
                    }
                    sums[c] = 128 * sum;
                }
            });
        PackedI8 {
            n,
            k,
            elements,
            scales,
            offset_sums,
            input_scale: None,
        }
    }

    /// An `[n, k]` weight from its parts as [`PackedI8::quantize`] lays them out (the
    /// packed-weight cache's): `None` unless every length is the shape's.
    pub(crate) fn from_parts(
        n: usize,
        k: usize,
        elements: Elements<i8>,
        scales: Vec<f32>,
        offset_sums: Vec<i32>,
    ) -> Option<PackedI8> {
        let panels = panels_for(n);
        let fits = elements.as_slice().len() == panels * k.div_ceil(4) * 4 * NP
            && scales.len() == panels * NP
            && offset_sums.len() == panels * NP;
        fits.then_some(PackedI8 {
            n,
            k,
            elements,
            scales,
            offset_sums,
            input_scale: None,
        })
    }

    /// The panels' storage (what the packed-weight cache writes, or maps).
    pub(crate) fn elements(&self) -> &Elements<i8> {
        &self.elements
    }

    /// This weight for activations multiplied by `scale` (length k) per input channel before
    /// they are quantised (`None` when the length does not match).
    pub fn with_input_scale(mut self, scale: Vec<f32>) -> Option<PackedI8> {
        (scale.len() == self.k).then(|| {
            self.input_scale = Some(scale);
            self
        })
    }

    /// The per-input-channel multiplier of the activations, if the weight was smoothed.
    pub fn input_scale(&self) -> Option<&[f32]> {
        self.input_scale.as_deref()
    }

    /// [`PackedI8::quantize`] of a row-major `[n, k]` f32 matrix (`None` when the length does
    /// not match).
    pub fn from_f32(w: &[f32], n: usize, k: usize, levels: i32) -> Option<PackedI8> {
        (w.len() == n * k).then(|| {
            PackedI8::quantize(n, k, levels, |j, buf| buf.copy_from_slice(&w[j * k..][..k]))
        })
    }

    /// [`PackedI8::quantize`] of a row-major `[n, k]` bf16 matrix (`None` when the length does
    /// not match).
    pub fn from_bf16(w: &[half::bf16], n: usize, k: usize, levels: i32) -> Option<PackedI8> {
        (w.len() == n * k).then(|| {
            PackedI8::quantize(n, k, levels, |j, buf| {
                for (d, s) in buf.iter_mut().zip(&w[j * k..][..k]) {
                    *d = s.to_f32();
                }
            })
        })
    }

    /// `(n, k)` of the logical matrix.
    pub fn dims(&self) -> (usize, usize) {
        (self.n, self.k)
    }

    /// Groups of four k per column (k padded with zero to a multiple of 4).
    pub(crate) fn k4(&self) -> usize {
        self.k.div_ceil(4)
    }

    /// Bytes of one panel.
    fn panel_len(&self) -> usize {
        self.k4() * 4 * NP
    }

    /// Panel `p` (columns `p·NP..`), `[k4][NP][4]`.
    pub(crate) fn panel(&self, p: usize) -> &[i8] {
        let len = self.panel_len();
        &self.elements.as_slice()[p * len..][..len]
    }

    /// The quantised weight `q[j, kk]` (j < n, kk < k).
    pub(crate) fn q(&self, j: usize, kk: usize) -> i8 {
        self.panel(j / NP)[(kk / 4) * 4 * NP + (j % NP) * 4 + kk % 4]
    }

    /// The per-column scales, padded with zero to whole tiles of 32 columns.
    pub(crate) fn scales(&self) -> &[f32] {
        &self.scales
    }

    /// `128·Σ_k q[j, k]` per column, padded like [`PackedI8::scales`].
    pub(crate) fn offset_sums(&self) -> &[i32] {
        &self.offset_sums
    }

    /// The dequantised weight `q[j, kk]·scale[j]` (what the products multiply by).
    pub fn dequantized(&self, j: usize, kk: usize) -> f32 {
        f32::from(self.q(j, kk)) * self.scales[j]
    }

    /// Bytes held (panels, scales, sums and the input scale).
    pub fn bytes(&self) -> usize {
        self.elements.owned_bytes()
            + 8 * self.scales.len()
            + 4 * self.input_scale.as_ref().map_or(0, Vec::len)
    }
}
