//! AVX2+FMA kernel for `C[M, N] = A[M, K]·Wᵀ (+ bias)` with a bf16 weight packed at load
//! ([`PackedBf16`]), for CPUs without AVX-512 (most desktop Intel parts, Zen 1–3). It reads the
//! same panels as the AVX-512 kernel: within each 128-bit lane the word unpacks with zero widen
//! 8 columns exactly, so one 6×16 tile takes the low words of a panel row (columns 0..16) and the
//! next the high words (16..32).
//!
//! Each output element is one fused multiply-add chain over k in order from its bias (or zero),
//! as in `gemm::avx512`: the two kernels give the same bits, whatever M, the blocks or threads.
//! The blocks follow the CPU's caches ([`GemmBlocking::for_tile`]).

use super::driver::{fits, has_features, AlignedBuf};
use super::out_ptr::product;
use super::{PackLayout, PackedBf16, NR};
use crate::cpu_caches::{CpuCaches, GemmBlocking, TileBytes};
use std::cell::RefCell;
use std::sync::OnceLock;

#[cfg(target_arch = "x86_64")]
use super::{
    out_ptr::OutPtr,
    tile::{prefetch_rows, Block, CTile, Panels, Seed, Tile},
};
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Rows of C per microkernel tile (12 accumulators, 2 weight vectors and a broadcast: all 16
/// registers).
const MR: usize = 6;
/// Columns of C per tile: half a packed panel.
const TW: usize = 16;
/// Row blocks up to this size keep one weight panel in L1 while all their row tiles pass.
const FEW_ROWS: usize = 8 * MR;

/// The kernel's blocks on this CPU: K blocks (where C is reloaded, never a change of summation
/// order), rows of A packed at once, weight columns per block.
pub(crate) fn blocking() -> GemmBlocking {
    static BLOCKS: OnceLock<GemmBlocking> = OnceLock::new();
    *BLOCKS.get_or_init(|| GemmBlocking::for_tile(CpuCaches::detected(), TILE))
}

/// What one tile holds per k: MR f32 rows of A, a panel row of NR bf16.
const TILE: TileBytes = TileBytes {
    mr: MR,
    nr: NR,
    a: 4,
    w: 2,
};

/// Whether this CPU runs the kernel (AVX2 and FMA).
pub(crate) fn available() -> bool {
    has_features!("avx2", "fma")
}

/// `a` `[m, k]` · the packed `w` `[n, k]`ᵀ (+ `bias` `[n]` on every row) → `[m, n]`, or `None`
/// when the CPU lacks AVX2/FMA or the lengths do not match.
pub(crate) fn matmul(
    a: &[f32],
    m: usize,
    k: usize,
    w: &PackedBf16,
    bias: Option<&[f32]>,
) -> Option<Vec<f32>> {
    matmul_blocked(a, m, k, w, bias, blocking())
}

/// [`matmul`] in the given blocks (the same bits whatever they are), or `None` also when a block
/// is not a whole number of tiles and panels.
pub(crate) fn matmul_blocked(
    a: &[f32],
    m: usize,
    k: usize,
    w: &PackedBf16,
    bias: Option<&[f32]>,
    blocks: GemmBlocking,
) -> Option<Vec<f32>> {
    if !available()
        || blocks.kc == 0
        || blocks.mc == 0
        || !blocks.mc.is_multiple_of(MR)
        || blocks.nc == 0
        || !blocks.nc.is_multiple_of(NR)
        || !fits(a, m, k, w, PackLayout::Panels, bias)
    {
        return None;
    }
    let n = w.dims().0;
    // SAFETY: AVX2/FMA were detected above; each part's `dst` points at the first of its `mr`
    // rows of the m·n output, and its unit writes every element of those rows × columns n0..n1
    // (n0 a multiple of NR: rows split in MR tiles, columns in whole panels) from its seed
    // without reading it, and nothing else.
    Some(unsafe {
        product(a, (m, n, k), bias, (MR, NR), 4, |rows, mr, n0, n1, dst| {
            #[cfg(target_arch = "x86_64")]
            unit(rows, mr, k, w, n0, n1, bias, dst, blocks)
        })
    })
}

thread_local! {
    /// Per-thread packed block of A (reused across calls).
    static PACKED_A: RefCell<AlignedBuf<f32>> = const { RefCell::new(AlignedBuf::new()) };
}

/// Columns `n0..n1` of the product for the `m` rows of `a`, written through `dst` (`[m, n]`), in
/// `blocks`.
///
/// # Safety
/// AVX2 and FMA; `n0` a multiple of NR, `blocks.mc` of MR and `blocks.nc` of NR; `dst` holds
/// `m·n` floats that nothing else touches in columns `n0..n1` during the call; `bias` holds n.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn unit(
    a: &[f32],
    m: usize,
    k: usize,
    w: &PackedBf16,
    n0: usize,
    n1: usize,
    bias: Option<&[f32]>,
    dst: OutPtr,
    blocks: GemmBlocking,
) {
    let n = w.dims().0;
    let GemmBlocking {
        kc: kcb,
        mc: mcb,
        nc: ncb,
    } = blocks;
    PACKED_A.with(|pa| {
        let mut pa = pa.borrow_mut();
        let pa = pa.take(mcb * kcb);
        for blk in Block::k_outer((k, m), (n0, n1), (kcb, mcb, ncb), k, n) {
            if blk.jc == n0 {
                // SAFETY: AVX2 per the contract.
                unsafe { pack_a(a, k, blk.ic, blk.mc, blk.pc, blk.kc, pa) };
            }
            let panels = &w.panels()[blk.panel_start()..];
            // SAFETY: forwarded contract.
            unsafe { block(blk, pa, panels, bias, dst) };
        }
    });
}

/// Multiplies the packed A block by the block's weight panels (`panels` from the first one,
/// at the block's first K row) into C.
///
/// # Safety
/// As [`unit`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn block(blk: Block, pa: &[f32], panels: &[half::bf16], bias: Option<&[f32]>, dst: OutPtr) {
    let Block { kc, n, .. } = blk;
    let k = blk.panel_rows;
    // Half-panel tiles with at least one column inside the block. A few rows (the DiT's 41): a
    // weight panel stays in L1 while every row tile passes. Otherwise an A panel stays in L1
    // while the block's weight streams from L2.
    let b_outer = blk.mc <= FEW_ROWS;
    for Tile { ir, jr, out } in blk.tiles((MR, TW), b_outer, dst, bias) {
        let bp = panels[jr / NR * k * NR..][..kc * NR].as_ptr();
        // The next panel's rows, fetched while this tile runs (prefetches never fault).
        let next = bp.wrapping_add(k * NR);
        let ap = pa[ir * kc..(ir + MR) * kc].as_ptr();
        let panels = Panels { kc, ap, bp, next };
        let high = !(blk.jc + jr).is_multiple_of(NR);
        let CTile {
            seed, c, mr, nr, ..
        } = out;
        // SAFETY: `ap` holds kc·MR floats, `bp` kc panel rows; the tile's mr×nr elements lie
        // in this unit's part of `dst`; a bias seed holds nr values.
        unsafe {
            if mr == MR && nr == TW {
                tile(high, panels, out, n);
            } else {
                // Edge tile: computed whole in a local buffer, only its valid part copied.
                let mut buf = [0f32; MR * TW];
                for i in 0..mr {
                    for j in 0..nr {
                        buf[i * TW + j] = match seed {
                            Seed::C => *c.add(i * n + j),
                            Seed::Bias(b) => *b.add(j),
                            Seed::Zero => 0.0,
                        };
                    }
                }
                let c_buf = buf.as_mut_ptr();
                let whole = CTile {
                    seed: Seed::C,
                    c: c_buf,
                    ldc: TW,
                    ..out
                };
                tile(high, panels, whole, n);
                for i in 0..mr {
                    for j in 0..nr {
                        *c.add(i * n + j) = buf[i * TW + j];
                    }
                }
            }
        }
    }
}

/// Prefetches the MR rows of TW floats at `out.next` (row stride `ld_next`; any address) and
/// dispatches to the low- or high-word tile.
///
/// # Safety
/// As [`micro`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile(high: bool, panels: Panels<f32, half::bf16>, out: CTile, ld_next: usize) {
    // A row of TW floats spans up to two cache lines.
    prefetch_rows(out.next, MR, ld_next, TW - 1);
    // SAFETY: forwarded contract.
    unsafe {
        if high {
            micro::<true>(panels, out)
        } else {
            micro::<false>(panels, out)
        }
    }
}

/// One full MR×TW tile `out`: `c[i, j] = fma-chain over p of ap[p, i]·w[p, j]` from its seed,
/// where `w` row p is columns 0..16 (`HIGH` false) or 16..32 of the panel row at `bp + p·NR`.
///
/// # Safety
/// AVX2 and FMA; `ap` holds `kc·MR` floats, `bp` `kc` panel rows of NR bf16; `c + i·ldc + j`
/// is valid for `i < MR`, `j < TW` (initialised for `Seed::C`); a bias seed holds TW values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn micro<const HIGH: bool>(panels: Panels<f32, half::bf16>, out: CTile) {
    let Panels { kc, ap, bp, next } = panels;
    let CTile { seed, c, ldc, .. } = out;
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    // SAFETY: the seed's reads are valid per the contract.
    unsafe {
        match seed {
            Seed::C => {
                for (i, row) in acc.iter_mut().enumerate() {
                    let ci = c.add(i * ldc);
                    *row = [_mm256_loadu_ps(ci), _mm256_loadu_ps(ci.add(8))];
                }
            }
            Seed::Bias(b) => acc = [[_mm256_loadu_ps(b), _mm256_loadu_ps(b.add(8))]; MR],
            Seed::Zero => {}
        }
    }
    let zero = _mm256_setzero_si256();
    for p in 0..kc {
        // SAFETY: p < kc, within the panel rows and the A panel.
        unsafe {
            let row = bp.add(p * NR);
            _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(p * NR).cast());
            // Words 0..16 of the row widen to columns 0..8 and 16..24, words 16..32 to 8..16 and
            // 24..32 (see `stored_column`): bf16 in the high half of each f32, zero below.
            let r0 = _mm256_loadu_si256(row.cast());
            let r1 = _mm256_loadu_si256(row.add(16).cast());
            let (b0, b1) = if HIGH {
                (
                    _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, r0)),
                    _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, r1)),
                )
            } else {
                (
                    _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, r0)),
                    _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, r1)),
                )
            };
            let a = ap.add(p * MR);
            for (i, row) in acc.iter_mut().enumerate() {
                let ai = _mm256_broadcast_ss(&*a.add(i));
                row[0] = _mm256_fmadd_ps(ai, b0, row[0]);
                row[1] = _mm256_fmadd_ps(ai, b1, row[1]);
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        // SAFETY: the tile's elements are valid per the contract.
        unsafe {
            let ci = c.add(i * ldc);
            _mm256_storeu_ps(ci, row[0]);
            _mm256_storeu_ps(ci.add(8), row[1]);
        }
    }
}

/// Packs rows `ic..ic+mc`, k `pc..pc+kc` of `a` as MR-row panels laid out `[k][MR]`, zero rows
/// past the end: 8 k at a time through an 8×8 transpose in registers.
///
/// # Safety
/// AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn pack_a(a: &[f32], k: usize, ic: usize, mc: usize, pc: usize, kc: usize, pa: &mut [f32]) {
    let full = kc / 8 * 8;
    for (ir, panel) in (0..mc).step_by(MR).zip(pa.chunks_exact_mut(MR * kc)) {
        let rows = MR.min(mc - ir);
        for p0 in (0..full).step_by(8) {
            let mut v = [_mm256_setzero_ps(); 8];
            for (i, v) in v.iter_mut().enumerate().take(rows) {
                let row = &a[(ic + ir + i) * k + pc + p0..][..8];
                // SAFETY: `row` holds 8 floats.
                *v = unsafe { _mm256_loadu_ps(row.as_ptr()) };
            }
            let t = transpose8(v);
            let out = &mut panel[p0 * MR..(p0 + 8) * MR];
            for (p, t) in t.iter().enumerate() {
                let dst = out[p * MR..(p + 1) * MR].as_mut_ptr();
                // SAFETY: `dst` holds MR = 6 floats: lanes 0..4, then 4..6.
                unsafe {
                    _mm_storeu_ps(dst, _mm256_castps256_ps128(*t));
                    _mm_storel_pd(
                        dst.add(4).cast(),
                        _mm_castps_pd(_mm256_extractf128_ps::<1>(*t)),
                    );
                }
            }
        }
        for i in 0..MR {
            for p in full..kc {
                panel[p * MR + i] = if i < rows {
                    a[(ic + ir + i) * k + pc + p]
                } else {
                    0.0
                };
            }
        }
    }
}

/// The transpose of 8 rows of 8 floats: lane i of output p is lane p of input i.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let mut out = [_mm256_setzero_ps(); 8];
    // Rows 0..4 and 4..8 alike: in each 128-bit half, columns p and p+4 of four rows.
    let mut cols = [[_mm256_setzero_ps(); 4]; 2];
    for (half, cols) in cols.iter_mut().enumerate() {
        let q = &r[half * 4..half * 4 + 4];
        let (lo01, hi01) = (
            _mm256_unpacklo_ps(q[0], q[1]),
            _mm256_unpackhi_ps(q[0], q[1]),
        );
        let (lo23, hi23) = (
            _mm256_unpacklo_ps(q[2], q[3]),
            _mm256_unpackhi_ps(q[2], q[3]),
        );
        *cols = [
            _mm256_shuffle_ps::<0b01_00_01_00>(lo01, lo23),
            _mm256_shuffle_ps::<0b11_10_11_10>(lo01, lo23),
            _mm256_shuffle_ps::<0b01_00_01_00>(hi01, hi23),
            _mm256_shuffle_ps::<0b11_10_11_10>(hi01, hi23),
        ];
    }
    for p in 0..4 {
        out[p] = _mm256_permute2f128_ps::<0x20>(cols[0][p], cols[1][p]);
        out[p + 4] = _mm256_permute2f128_ps::<0x31>(cols[0][p], cols[1][p]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{available, blocking, matmul_blocked, MR};
    use crate::cpu_caches::GemmBlocking;
    use crate::gemm::avx512::{self, Rhs};
    use crate::gemm::checks;
    use crate::gemm::{PackedBf16, NR};
    use half::bf16;

    /// Small blocks, so that the shapes below cross every block edge.
    const BLOCKS: GemmBlocking = GemmBlocking {
        kc: 256,
        mc: MR * 20,
        nc: NR * 8,
    };
    const KC: usize = BLOCKS.kc;
    const MC: usize = BLOCKS.mc;
    const NC: usize = BLOCKS.nc;

    /// Shapes around every edge: tiles, half panels, K and row blocks, column blocks.
    fn shapes() -> Vec<(usize, usize, usize)> {
        vec![
            (1, 1, 1),
            (1, 33, 20),
            (5, 17, 7),
            (MR + 1, NR + 1, 17),
            (MR - 1, 16, KC + 3),
            (41, 300, 70),
            (MC + 3, 48, 2 * KC + 5),
            (29, NC + 40, 33),
            (200, 2 * NC + NR + 3, 2 * KC),
        ]
    }

    #[test]
    fn exact_on_dyadic_inputs_with_and_without_bias() {
        if available() {
            checks::exact_on_dyadic_inputs(&shapes(), false, &|a, m, k, w, n, bias| {
                let packed = PackedBf16::new(w, n, k).unwrap();
                vec![matmul_blocked(a, m, k, &packed, bias, BLOCKS).unwrap()]
            });
        }
    }

    #[test]
    fn each_element_is_one_fma_chain_whatever_m_or_threads() {
        if !available() {
            return;
        }
        let (m, n, k) = (MC + 20, 3 * NR + 5, 2 * KC + 9);
        let (a, w, bias) = checks::random(&mut crate::test_rng::lcg(11u32), (m, n, k));
        let packed = PackedBf16::new(&w, n, k).unwrap();
        let run = |a: &[f32], m| matmul_blocked(a, m, k, &packed, Some(&bias), BLOCKS).unwrap();
        let rows = [(0, 1), (3, 3 + MR + 2), (MC - 1, m)];
        let all = checks::same_bits_for_any_rows_or_threads(&run, &a, (m, k), &rows);
        let points = [
            (0, 0),
            (m - 1, n - 1),
            (MR, 16),
            (m / 2, n / 2),
            (7, NR + 20),
        ];
        checks::assert_fma_chains(&all, (&a, &w, &bias), (n, k), &points);
    }

    #[test]
    fn the_blocks_never_change_the_bits() {
        if !available() {
            return;
        }
        let (m, n, k) = (MR * 7 + 5, NC + NR + 7, KC + 101);
        let (a, w, bias) = checks::random(&mut crate::test_rng::lcg(5u32), (m, n, k));
        let packed = PackedBf16::new(&w, n, k).unwrap();
        let want = matmul_blocked(&a, m, k, &packed, Some(&bias), BLOCKS).unwrap();
        let b = |kc, mc, nc| GemmBlocking { kc, mc, nc };
        for blocks in [
            blocking(),
            b(1, MR, NR),
            b(7, 2 * MR, 3 * NR),
            b(100, MR * 17, NR * 4),
            b(640, MR * 3, NR),
            b(4096, MR * 200, NR * 64),
        ] {
            let got = matmul_blocked(&a, m, k, &packed, Some(&bias), blocks).unwrap();
            assert_eq!(got, want, "{blocks:?}");
        }
        // Blocks that are not whole tiles and panels are refused, not run.
        for blocks in [b(0, MR, NR), b(64, MR + 1, NR), b(64, MR, NR - 1)] {
            assert!(matmul_blocked(&a, m, k, &packed, None, blocks).is_none());
        }
    }

    #[test]
    fn same_bits_as_the_avx512_kernel() {
        if !available() || !avx512::available() {
            return;
        }
        let mut rnd = crate::test_rng::xorshift(0x7f4a_7c15_u32);
        for (m, n, k) in shapes() {
            let (a, w, bias) = checks::random(&mut rnd, (m, n, k));
            let packed = PackedBf16::new(&w, n, k).unwrap();
            for bias in [None, Some(&bias[..])] {
                let want = avx512::matmul(&a, m, k, Rhs::Packed(&packed), n, bias).unwrap();
                let got = matmul_blocked(&a, m, k, &packed, bias, BLOCKS).unwrap();
                assert_eq!(got, want, "{m}x{n}x{k}");
            }
        }
    }

    #[test]
    fn mismatched_lengths_are_refused() {
        let packed = PackedBf16::new(&[bf16::ONE; 6], 2, 3).unwrap();
        for (a, k, bias) in [
            (&[1.0; 6][..], 2, None),
            (&[1.0; 5], 3, None),
            (&[1.0; 6], 3, Some(&[0.0][..])),
        ] {
            assert!(matmul_blocked(a, 2, k, &packed, bias, BLOCKS).is_none());
        }
    }
}
