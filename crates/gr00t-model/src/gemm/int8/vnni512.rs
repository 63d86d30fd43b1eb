//! The AVX512-VNNI tile: 12 rows × 32 columns (two panels), 24 i32 vectors of sums seeded with
//! the weight's `−128·Σq`, one `vpdpbusd` per row and panel for every four k, and one line of
//! the [`Tile`]'s prefetch panel pulled into the L2.

use super::{column_lanes, epilogue_lanes, Tile, NP};
use std::arch::x86_64::*;

/// Rows of a tile.
pub(crate) const MR: usize = 12;

/// A 12×32 tile (see the module docs).
///
/// # Safety
/// AVX-512F/BW and AVX512-VNNI; the [`Tile`] as its docs say, with u8 activations
/// ([`super::Encoding::Offset`]) and two panels behind `panel`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) unsafe fn tile(t: &Tile) {
    // SAFETY: every pointer below stays inside the extents the tile describes (contract).
    unsafe {
        let seed0 = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(t.sums.cast()));
        let seed1 = _mm512_sub_epi32(
            _mm512_setzero_si512(),
            _mm512_loadu_si512(t.sums.add(NP).cast()),
        );
        let mut acc = [[seed0, seed1]; MR];
        let mut rows = [t.a; MR];
        for (r, row) in rows.iter_mut().enumerate() {
            // Rows past the tile's repeat its last one (computed, never stored).
            *row = t.a.add(r.min(t.rows - 1) * t.lda);
        }
        let (p0, p1) = (t.panel, t.panel.add(t.panel_len));
        let pf = t.prefetch;
        for g in 0..t.k4 {
            _mm_prefetch::<_MM_HINT_T1>(pf.wrapping_add(g * 4 * NP).cast());
            let w0 = _mm512_loadu_si512(p0.add(g * 4 * NP).cast());
            let w1 = _mm512_loadu_si512(p1.add(g * 4 * NP).cast());
            for r in 0..MR {
                let x = _mm512_set1_epi32(rows[r].add(4 * g).cast::<i32>().read_unaligned());
                acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], x, w0);
                acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], x, w1);
            }
        }
        for v in 0..2 {
            let Some((c0, mask, sb, bias)) = column_lanes(t, v) else {
                break;
            };
            for (r, acc) in acc.iter().enumerate().take(t.rows) {
                let y = epilogue_lanes(acc[v], *t.row_scales.add(r), sb, bias);
                _mm512_mask_storeu_ps(t.dst.add(r * t.ldc + c0), mask, y);
            }
        }
    }
}
