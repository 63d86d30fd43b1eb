//! The 256-bit tiles: AVX-VNNI (6 rows × 16 columns, `vpdpbusd` on u8 activations offset by
//! 128, sums seeded with the weight's `−128·Σq`) and AVX2 (4 × 16: `|a|` times `sign(a)·w`
//! by `vpmaddubsw`, exact because both are within ±127, widened by `vpmaddwd` with ones). Each
//! k step also pulls one line of the [`Tile`]'s prefetch panel into the L2.

use super::{Tile, NP};
use std::arch::x86_64::*;

/// Rows of an AVX-VNNI tile (12 sums, two weight vectors and a broadcast: 15 registers).
const MR_VNNI: usize = 6;
/// Rows of an AVX2 tile (8 sums, two weight vectors, ones, a broadcast, its magnitude and two
/// temporaries).
const MR_AVX2: usize = 4;

/// The tile's row pointers, rows past its `rows` repeating the last one (computed, never
/// stored).
#[inline(always)]
fn row_pointers<const R: usize>(t: &Tile) -> [*const u8; R] {
    std::array::from_fn(|r| t.a.wrapping_add(r.min(t.rows - 1) * t.lda))
}

/// A 6×16 AVX-VNNI tile.
///
/// # Safety
/// AVX2, FMA and AVX-VNNI; the [`Tile`] as its docs say, with u8 activations
/// ([`super::Encoding::Offset`]).
#[target_feature(enable = "avx2,fma,avxvnni")]
pub(crate) unsafe fn tile_vnni(t: &Tile) {
    // SAFETY: every pointer stays inside the extents the tile describes (contract).
    unsafe {
        let zero = _mm256_setzero_si256();
        let seed = [
            _mm256_sub_epi32(zero, _mm256_loadu_si256(t.sums.cast())),
            _mm256_sub_epi32(zero, _mm256_loadu_si256(t.sums.add(8).cast())),
        ];
        let mut acc = [seed; MR_VNNI];
        let rows = row_pointers::<MR_VNNI>(t);
        for g in 0..t.k4 {
            _mm_prefetch::<_MM_HINT_T1>(t.prefetch.wrapping_add(g * 4 * NP).cast());
            let w0 = _mm256_loadu_si256(t.panel.add(g * 4 * NP).cast());
            let w1 = _mm256_loadu_si256(t.panel.add(g * 4 * NP + 32).cast());
            for r in 0..MR_VNNI {
                let x = _mm256_set1_epi32(rows[r].add(4 * g).cast::<i32>().read_unaligned());
                acc[r][0] = _mm256_dpbusd_avx_epi32(acc[r][0], x, w0);
                acc[r][1] = _mm256_dpbusd_avx_epi32(acc[r][1], x, w1);
            }
        }
        store(t, &acc);
    }
}

/// A 4×16 AVX2 tile.
///
/// # Safety
/// AVX2 and FMA; the [`Tile`] as its docs say, with s8 activations
/// ([`super::Encoding::Signed`]).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn tile_avx2(t: &Tile) {
    // SAFETY: every pointer stays inside the extents the tile describes (contract).
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_si256(); 2]; MR_AVX2];
        let rows = row_pointers::<MR_AVX2>(t);
        for g in 0..t.k4 {
            _mm_prefetch::<_MM_HINT_T1>(t.prefetch.wrapping_add(g * 4 * NP).cast());
            let w0 = _mm256_loadu_si256(t.panel.add(g * 4 * NP).cast());
            let w1 = _mm256_loadu_si256(t.panel.add(g * 4 * NP + 32).cast());
            for r in 0..MR_AVX2 {
                let x = _mm256_set1_epi32(rows[r].add(4 * g).cast::<i32>().read_unaligned());
                let magnitude = _mm256_abs_epi8(x);
                for (v, w) in [w0, w1].into_iter().enumerate() {
                    let pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(w, x));
                    acc[r][v] = _mm256_add_epi32(acc[r][v], _mm256_madd_epi16(pairs, ones));
                }
            }
        }
        store(t, &acc);
    }
}

/// The epilogue of the module docs on 8 lanes, masked to the tile's columns and rows.
///
/// # Safety
/// AVX2 and FMA; the [`Tile`]'s output, scales and bias valid as it describes.
#[target_feature(enable = "avx2,fma")]
unsafe fn store<const R: usize>(t: &Tile, acc: &[[__m256i; 2]; R]) {
    // SAFETY: every pointer stays inside the extents the tile describes (contract).
    unsafe {
        let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        for v in 0..2 {
            let c0 = v * 8;
            if c0 >= t.cols {
                break;
            }
            let valid = (t.cols - c0).min(8) as i32;
            let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), lane);
            let sb = _mm256_loadu_ps(t.scales.add(c0));
            let bias = if t.bias.is_null() {
                _mm256_setzero_ps()
            } else {
                _mm256_maskload_ps(t.bias.add(c0), mask)
            };
            for (r, acc) in acc.iter().enumerate().take(t.rows) {
                let scale = _mm256_mul_ps(_mm256_set1_ps(*t.row_scales.add(r)), sb);
                let y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[v]), scale, bias);
                _mm256_maskstore_ps(t.dst.add(r * t.ldc + c0), mask, y);
            }
        }
    }
}
