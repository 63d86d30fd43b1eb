//! The AVX512-VNNI tiles: 12 rows × 32 columns (two panels), or 6 rows × 64 columns (four
//! panels: products of a few rows, where twelve-row tiles would mostly multiply padding); 24
//! i32 vectors of sums seeded with the weight's `−128·Σq`, one `vpdpbusd` per row and panel
//! for every four k, and one line of the [`Tile`]'s prefetch panel pulled into the L2.
//!
//! The k loop is inline assembly: written with intrinsics, the compiler's register allocation
//! of 24 accumulators, 12 row pointers and the panel pointers is fragile (small changes around
//! the loop had it store every accumulator to the stack at each step, halving the rate). Here
//! the accumulators are `zmm0`–`zmm23` and the rows are addressed from four bases and the row
//! stride, nine general registers in all.

use super::{column_lanes, epilogue_lanes, Tile, NP};
use std::arch::asm;
use std::arch::x86_64::*;

/// Rows of a tile.
pub(crate) const MR: usize = 12;

/// One row of a step: broadcast its four k, then one `vpdpbusd` per panel into its two
/// accumulators.
macro_rules! row_step {
    ($base:literal, $index:literal, $acc0:literal, $acc1:literal) => {
        concat!(
            "vpbroadcastd zmm26, dword ptr [",
            $base,
            $index,
            "]\n",
            "vpdpbusd zmm",
            $acc0,
            ", zmm26, zmm24\n",
            "vpdpbusd zmm",
            $acc1,
            ", zmm26, zmm25\n",
        )
    };
}

/// Three rows of a step: the one at `base` and those one and two row strides on, each with its
/// pair of accumulators.
macro_rules! three_rows {
    ($base:literal, [$a0:literal, $a1:literal], [$b0:literal, $b1:literal], [$c0:literal, $c1:literal]) => {
        concat!(
            row_step!($base, "", $a0, $a1),
            row_step!($base, " + {l}", $b0, $b1),
            row_step!($base, " + {l}*2", $c0, $c1),
        )
    };
}

/// One row of a wide step: broadcast its four k, then one `vpdpbusd` per panel into its four
/// accumulators.
macro_rules! wide_row_step {
    ($base:literal, $index:literal, $a0:literal, $a1:literal, $a2:literal, $a3:literal) => {
        concat!(
            "vpbroadcastd zmm28, dword ptr [",
            $base,
            $index,
            "]\n",
            "vpdpbusd zmm",
            $a0,
            ", zmm28, zmm24\n",
            "vpdpbusd zmm",
            $a1,
            ", zmm28, zmm25\n",
            "vpdpbusd zmm",
            $a2,
            ", zmm28, zmm26\n",
            "vpdpbusd zmm",
            $a3,
            ", zmm28, zmm27\n",
        )
    };
}

/// The epilogue of a tile's accumulators (`V` column vectors a row) into its valid rows and
/// columns.
///
/// # Safety
/// AVX-512F; the [`Tile`]'s scales, sums, bias and output as its docs say.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn store<const V: usize>(t: &Tile, acc: &[[__m512i; V]]) {
    for v in 0..V {
        // SAFETY: forwarded contract.
        let Some((c0, mask, sb, bias)) = (unsafe { column_lanes(t, v) }) else {
            break;
        };
        for (r, acc) in acc.iter().enumerate().take(t.rows) {
            // SAFETY: row r < rows and the masked columns are the tile's (contract).
            unsafe {
                let y = epilogue_lanes(acc[v], *t.row_scales.add(r), sb, bias);
                _mm512_mask_storeu_ps(t.dst.add(r * t.ldc + c0), mask, y);
            }
        }
    }
}

/// Rows of the wide tile.
pub(crate) const WIDE_MR: usize = 6;

/// A 6×64 tile (see the module docs).
///
/// # Safety
/// As [`tile`], with 6 readable rows from `a` and four panels behind `panel`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) unsafe fn tile_wide(t: &Tile) {
    // SAFETY: every pointer below stays inside the extents the tile describes (contract); the
    // prefetches read nothing.
    unsafe {
        let mut seeds = [_mm512_setzero_si512(); 4];
        for (v, seed) in seeds.iter_mut().enumerate() {
            *seed = _mm512_sub_epi32(*seed, _mm512_loadu_si512(t.sums.add(v * NP).cast()));
        }
        let mut acc = [seeds; WIDE_MR];
        if t.k4 > 0 {
            let [[c0, c1, c2, c3], [c4, c5, c6, c7], [c8, c9, c10, c11], [c12, c13, c14, c15], [c16, c17, c18, c19], [c20, c21, c22, c23]] =
                &mut acc;
            asm!(
                "2:",
                "prefetcht1 byte ptr [{pf}]",
                "vmovdqu64 zmm24, zmmword ptr [{p}]",
                "vmovdqu64 zmm25, zmmword ptr [{p} + {plen}]",
                "vmovdqu64 zmm26, zmmword ptr [{p2}]",
                "vmovdqu64 zmm27, zmmword ptr [{p2} + {plen}]",
                wide_row_step!("{a0}", "", "0", "1", "2", "3"),
                wide_row_step!("{a0}", " + {l}", "4", "5", "6", "7"),
                wide_row_step!("{a0}", " + {l}*2", "8", "9", "10", "11"),
                wide_row_step!("{a3}", "", "12", "13", "14", "15"),
                wide_row_step!("{a3}", " + {l}", "16", "17", "18", "19"),
                wide_row_step!("{a3}", " + {l}*2", "20", "21", "22", "23"),
                "add {p}, 64",
                "add {p2}, 64",
                "add {pf}, 64",
                "add {a0}, 4",
                "add {a3}, 4",
                "dec {n}",
                "jnz 2b",
                p = inout(reg) t.panel => _,
                p2 = inout(reg) t.panel.add(2 * t.panel_len) => _,
                plen = in(reg) t.panel_len,
                pf = inout(reg) t.prefetch => _,
                l = in(reg) t.lda,
                a0 = inout(reg) t.a => _,
                a3 = inout(reg) t.a.add(3 * t.lda) => _,
                n = inout(reg) t.k4 => _,
                inout("zmm0") *c0,
                inout("zmm1") *c1,
                inout("zmm2") *c2,
                inout("zmm3") *c3,
                inout("zmm4") *c4,
                inout("zmm5") *c5,
                inout("zmm6") *c6,
                inout("zmm7") *c7,
                inout("zmm8") *c8,
                inout("zmm9") *c9,
                inout("zmm10") *c10,
                inout("zmm11") *c11,
                inout("zmm12") *c12,
                inout("zmm13") *c13,
                inout("zmm14") *c14,
                inout("zmm15") *c15,
                inout("zmm16") *c16,
                inout("zmm17") *c17,
                inout("zmm18") *c18,
                inout("zmm19") *c19,
                inout("zmm20") *c20,
                inout("zmm21") *c21,
                inout("zmm22") *c22,
                inout("zmm23") *c23,
                out("zmm24") _,
                out("zmm25") _,
                out("zmm26") _,
                out("zmm27") _,
                out("zmm28") _,
                options(nostack, readonly),
            );
        }
        store(t, &acc);
    }
}

/// A 12×32 tile (see the module docs).
///
/// # Safety
/// AVX-512F/BW and AVX512-VNNI; the [`Tile`] as its docs say, with u8 activations
/// ([`super::Encoding::Offset`]), 12 readable rows from `a` (rows past `rows` are read but not
/// stored: the activations are padded to whole tiles) and two panels behind `panel`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) unsafe fn tile(t: &Tile) {
    // SAFETY: every pointer below stays inside the extents the tile describes (contract); the
    // prefetches read nothing.
    unsafe {
        let seed0 = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(t.sums.cast()));
        let seed1 = _mm512_sub_epi32(
            _mm512_setzero_si512(),
            _mm512_loadu_si512(t.sums.add(NP).cast()),
        );
        let mut acc = [[seed0, seed1]; MR];
        if t.k4 > 0 {
            let [[c0, c1], [c2, c3], [c4, c5], [c6, c7], [c8, c9], [c10, c11], [c12, c13], [c14, c15], [c16, c17], [c18, c19], [c20, c21], [c22, c23]] =
                &mut acc;
            asm!(
                "2:",
                "prefetcht1 byte ptr [{pf}]",
                "vmovdqu64 zmm24, zmmword ptr [{p}]",
                "vmovdqu64 zmm25, zmmword ptr [{p} + {plen}]",
                three_rows!("{a0}", ["0", "1"], ["2", "3"], ["4", "5"]),
                three_rows!("{a3}", ["6", "7"], ["8", "9"], ["10", "11"]),
                three_rows!("{a6}", ["12", "13"], ["14", "15"], ["16", "17"]),
                three_rows!("{a9}", ["18", "19"], ["20", "21"], ["22", "23"]),
                "add {p}, 64",
                "add {pf}, 64",
                "add {a0}, 4",
                "add {a3}, 4",
                "add {a6}, 4",
                "add {a9}, 4",
                "dec {n}",
                "jnz 2b",
                p = inout(reg) t.panel => _,
                plen = in(reg) t.panel_len,
                pf = inout(reg) t.prefetch => _,
                l = in(reg) t.lda,
                a0 = inout(reg) t.a => _,
                a3 = inout(reg) t.a.add(3 * t.lda) => _,
                a6 = inout(reg) t.a.add(6 * t.lda) => _,
                a9 = inout(reg) t.a.add(9 * t.lda) => _,
                n = inout(reg) t.k4 => _,
                inout("zmm0") *c0,
                inout("zmm1") *c1,
                inout("zmm2") *c2,
                inout("zmm3") *c3,
                inout("zmm4") *c4,
                inout("zmm5") *c5,
                inout("zmm6") *c6,
                inout("zmm7") *c7,
                inout("zmm8") *c8,
                inout("zmm9") *c9,
                inout("zmm10") *c10,
                inout("zmm11") *c11,
                inout("zmm12") *c12,
                inout("zmm13") *c13,
                inout("zmm14") *c14,
                inout("zmm15") *c15,
                inout("zmm16") *c16,
                inout("zmm17") *c17,
                inout("zmm18") *c18,
                inout("zmm19") *c19,
                inout("zmm20") *c20,
                inout("zmm21") *c21,
                inout("zmm22") *c22,
                inout("zmm23") *c23,
                out("zmm24") _,
                out("zmm25") _,
                out("zmm26") _,
                options(nostack, readonly),
            );
        }
        store(t, &acc);
    }
}
