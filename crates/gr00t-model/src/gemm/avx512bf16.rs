//! Hand-written AVX512-BF16 GEMM `C[M, N] = bf16(A)[M, K]·Bᵀ (+ bias)` for a row-major f32 `A`,
//! rounded to bf16 (round to nearest even) while it is packed, and a bf16 `B` packed once at
//! load as VNNI pairs ([`PackLayout::VnniPairs`]). `vdpbf16ps` multiplies a pair of bf16 per
//! f32 lane, twice the multiply-adds of an f32 FMA per instruction; same Goto/BLIS blocking and
//! 14×32 tiles as `gemm/avx512.rs`.
//!
//! Each output element is one f32 chain over k in order, seeded with its bias (or zero): a
//! product of two bf16 is exact in f32, and `vdpbf16ps` adds the pair's high product first
//! then the low one, each rounded (Intel SDM; checked on Zen 5 by the tests), and the pairs
//! hold k in the high half. So the bits are those of the f32 kernels on the rounded
//! activations, apart from the instruction flushing denormal inputs and outputs to zero, and
//! they do not depend on M, on the block a row falls in, nor on the thread count.

use super::avx512::MR;
use super::driver::{has_features, AlignedBuf, VnniKernel};
use super::{PackLayout, PackedBf16, NR};
use std::cell::RefCell;

#[cfg(not(target_arch = "x86_64"))]
use super::driver::no_unit as unit;
#[cfg(target_arch = "x86_64")]
use super::{
    avx512::{FEW_ROWS, MC, NC},
    driver::Lhs,
    out_ptr::OutPtr,
    tile::CTile,
    tile::{bf16_pairs, lanes, row_masks, run_tile, transpose_store, Block, Panels, Tile},
};
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// K block in pairs (only where C is reloaded, never the summation order). Tuned with
/// examples/gemm_shapes.rs on Zen 5; the tiles (MR×NR) and the row and column blocks (MC, NC,
/// FEW_ROWS) are the f32 kernel's.
const KC: usize = 256;

/// Whether this CPU runs the kernel: AVX-512F/BW and AVX512-BF16 (Zen 4/5, Cooper Lake,
/// Sapphire Rapids and later).
pub(crate) fn available() -> bool {
    has_features!("avx512f", "avx512bw", "avx512bf16")
}

/// The kernel: [`VnniKernel::matmul`] on MR×NR tiles (the threads split the longer side of C)
/// and [`VnniKernel::matmul_to`], both the chains of the module docs.
pub(crate) static KERNEL: VnniKernel = VnniKernel {
    available,
    unit,
    tile: (MR, NR),
    rows_over_cols: |_| 2,
};

/// The `[n, k]` matrix whose element `(c, p)` is `bf16(src[c·cs + p·ps])` (round to nearest
/// even) in [`PackLayout::VnniPairs`]: the attention's keys (`ps = 1`) and values (`cs = 1`),
/// sixteen at a time on an AVX512-BF16 CPU, one by one otherwise (the same values).
///
/// # Panics
/// When an element lies outside `src`.
pub(crate) fn pack_vnni_f32(src: &[f32], cs: usize, ps: usize, n: usize, k: usize) -> PackedBf16 {
    if n > 0 && k > 0 {
        assert!(
            (n - 1) * cs + (k - 1) * ps < src.len(),
            "pack_vnni_f32: out of range"
        );
    }
    let fast = available() && n > 0 && k > 0 && (ps == 1 || cs == 1);
    if !fast {
        return PackedBf16::from_fn(n, k, PackLayout::VnniPairs, |c, p| {
            half::bf16::from_f32(src[c * cs + p * ps])
        });
    }
    let mut packed = PackedBf16::zeroed(n, k, PackLayout::VnniPairs);
    let pair_rows = packed.pair_rows();
    let words = packed.panels_mut();
    // SAFETY: AVX-512F/BF16 were detected; every read is inside `src` (asserted above: only
    // elements with c < n, p < k are loaded) and every write inside the panels.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        let dst = words.as_mut_ptr().cast::<u32>();
        if ps == 1 {
            pack_rows(src, cs, n, k, dst, pair_rows)
        } else {
            pack_columns(src, ps, n, k, dst, pair_rows)
        }
    };
    packed
}

/// [`pack_vnni_f32`] for contiguous rows (`ps = 1`): 16 columns × 16 pairs, transposed.
///
/// # Safety
/// AVX-512F/BF16; `src` holds row c's k values from `c·cs` for c < n; `dst` the zeroed panels
/// of an `[n, k]` VNNI matrix with `pair_rows` pair rows each.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn pack_rows(src: &[f32], cs: usize, n: usize, k: usize, dst: *mut u32, pair_rows: usize) {
    for c0 in (0..n).step_by(16) {
        let cols = 16.min(n - c0);
        // Panel c0/NR, slots c0%NR.. (16 of a panel's NR).
        let panel = dst.wrapping_add(c0 / NR * pair_rows * NR + c0 % NR);
        for q0 in (0..k.div_ceil(2)).step_by(16) {
            let p = 2 * q0;
            let valid = k - p;
            let mut v = [_mm512_setzero_ps(); 16];
            for (i, v) in v.iter_mut().enumerate().take(cols) {
                let row = src.as_ptr().wrapping_add((c0 + i) * cs + p);
                // SAFETY: only the lanes below k of row c0+i are read. Word j: k = p+2j high.
                *v = _mm512_castsi512_ps(unsafe { bf16_pairs(row, row_masks(valid)) });
            }
            // SAFETY: pair rows q0..q0+16 ≤ pair_rows (a multiple of 16) of the panel, 16 slots
            // from c0 % NR (0 or 16).
            unsafe { transpose_store(v, panel.wrapping_add(q0 * NR).cast(), NR, 0xFFFF) };
        }
    }
}

/// [`pack_vnni_f32`] for contiguous columns (`cs = 1`): rows p and p+1 interleaved, 16 columns
/// at a time.
///
/// # Safety
/// AVX-512F/BF16; `src` holds row p's n values from `p·ps` for p < k; `dst` as for
/// [`pack_rows`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn pack_columns(
    src: &[f32],
    ps: usize,
    n: usize,
    k: usize,
    dst: *mut u32,
    pair_rows: usize,
) {
    for c0 in (0..n).step_by(16) {
        let m = lanes(n - c0);
        let panel = dst.wrapping_add(c0 / NR * pair_rows * NR + c0 % NR);
        for q in 0..k.div_ceil(2) {
            let (p0, p1) = (2 * q, 2 * q + 1);
            let at = |p: usize| src.as_ptr().wrapping_add(p * ps + c0);
            // SAFETY: only columns below n of rows p0 and (if < k) p1 are read.
            let (even, odd) = unsafe {
                (
                    _mm512_maskz_loadu_ps(m, at(p0)),
                    _mm512_maskz_loadu_ps(if p1 < k { m } else { 0 }, at(p1)),
                )
            };
            let widen = |x: __m512| -> __m512i {
                let h: __m256i = unsafe { std::mem::transmute(_mm512_cvtneps_pbh(x)) };
                _mm512_cvtepu16_epi32(h)
            };
            // k = p0 in the high half, p1 in the low.
            let pairs = _mm512_or_si512(_mm512_slli_epi32::<16>(widen(even)), widen(odd));
            // SAFETY: pair row q < pair_rows of the panel, 16 slots from c0 % NR.
            unsafe { _mm512_storeu_si512(panel.wrapping_add(q * NR).cast(), pairs) };
        }
    }
}

thread_local! {
    /// Per-thread packed block of A (reused across calls).
    static PACK_A: RefCell<AlignedBuf<u32>> = const { RefCell::new(AlignedBuf::new()) };
}

/// Pair rows of an A panel: KC rounded up to the 16 pairs `pack_a` writes at once.
const KC_ROWS: usize = KC.next_multiple_of(16);

/// Columns `n0..n1` of the product of `lhs` (its k ≤ the weight's K: the first k of every
/// column) and `w`, written through `dst` at row stride `ldc`.
///
/// # Safety
/// AVX-512F/BW/BF16; `dst + i·ldc + j` must be writable for `i < lhs.m`, `j` in `n0..n1`, with
/// nothing else touching those elements during the call; `n0` a multiple of NR; `n1` ≤ the
/// weight's n; `bias` holds n.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn unit(
    lhs: Lhs,
    w: &PackedBf16,
    n0: usize,
    n1: usize,
    bias: Option<&[f32]>,
    dst: OutPtr,
    ldc: usize,
) {
    let Lhs { a, lda, m, k } = lhs;
    // Pair rows of A used, and of a whole weight panel (its stride).
    let pairs = k.div_ceil(2);
    let panel_pairs = w.pair_rows();
    PACK_A.with(|p| {
        let mut p = p.borrow_mut();
        let pa = p.take(MC * KC_ROWS);
        for blk in Block::k_outer((pairs, m), (n0, n1), (KC, MC, NC), panel_pairs, ldc) {
            let Block { ic, mc, pc, kc, .. } = blk;
            if blk.jc == n0 {
                // SAFETY: AVX-512F/BF16 per the contract; `pa` holds MC·KC_ROWS words.
                unsafe { pack_a(a, lda, k, ic, mc, pc, kc, pa) };
            }
            // Two bf16 a pair.
            let panels = w.panels()[blk.panel_start() * 2..].as_ptr();
            // SAFETY: forwarded contract; `panels` starts this block's pair rows.
            unsafe { block(blk, pa, panels.cast(), bias, dst) };
        }
    });
}

/// Multiplies the packed A block `pa` by the block's weight panels (from `panels`, the first
/// panel at the block's first pair row) into C.
///
/// # Safety
/// AVX-512F/BW/BF16; as [`unit`] for `dst`; `panels` covers columns `jc..jc+nc` for the
/// block's pair rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn block(blk: Block, pa: &[u32], panels: *const u32, bias: Option<&[f32]>, dst: OutPtr) {
    let kc = blk.kc;
    // A few rows (the DiT's 41): one weight panel stays in L1 while the A panels pass, so each
    // weight byte comes from memory once; otherwise one A panel stays while the panels stream.
    let b_outer = blk.mc <= FEW_ROWS;
    let stride = blk.panel_rows * NR;
    for Tile { ir, jr, out } in blk.tiles((MR, NR), b_outer, dst, bias) {
        let ap = pa[ir / MR * MR * KC_ROWS..][..MR * kc].as_ptr();
        // SAFETY: `ap` holds kc·MR pairs; each panel holds kc pair rows of NR u32 from
        // `panels` (panel stride pairs·NR); the tile's mr×nr elements lie inside `dst` in the
        // unit's columns; the next tile's C and the next panel are only prefetched.
        unsafe {
            let bp = panels.add(jr / NR * stride);
            let next = panels.wrapping_add(blk.next_panel(jr, NR) / NR * stride);
            micro(Panels { kc, ap, bp, next }, out)
        };
    }
}

/// Packs rows `ic..ic+mc`, pairs `pc..pc+kc` of `a` (row stride `lda`, `k` values used)
/// rounded to bf16 as MR-row panels `[KC_ROWS][MR]` of pairs (k in the high half, k+1 in the
/// low; zero past K and past the rows).
///
/// # Safety
/// AVX-512F/BF16; `pa` holds `⌈mc/MR⌉·MR·KC_ROWS` words.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
#[allow(clippy::too_many_arguments)]
unsafe fn pack_a(
    a: &[f32],
    lda: usize,
    k: usize,
    ic: usize,
    mc: usize,
    pc: usize,
    kc: usize,
    pa: &mut [u32],
) {
    let (k0, k1) = (2 * pc, (2 * (pc + kc)).min(k));
    for (ir, panel) in (0..mc).step_by(MR).zip(pa.chunks_exact_mut(MR * KC_ROWS)) {
        let rows = MR.min(mc - ir);
        for q0 in (0..kc).step_by(16) {
            // 32 values of k from k0 + 2·q0 per row: 16 pairs.
            let p = k0 + 2 * q0;
            let valid = k1 - p;
            let masks = row_masks(valid);
            let mut v = [_mm512_setzero_ps(); 16];
            for (i, v) in v.iter_mut().enumerate().take(rows) {
                let row = a[(ic + ir + i) * lda + p..].as_ptr();
                // SAFETY: only the lanes below k1 are read, inside row ic+ir+i of `a`. Word j
                // holds k = p+2j high.
                *v = _mm512_castsi512_ps(unsafe { bf16_pairs(row, masks) });
            }
            // SAFETY: rows q0..q0+16 of MR words lie inside the panel (KC_ROWS is a multiple
            // of 16); only MR lanes of each are stored.
            unsafe { transpose_store(v, panel[q0 * MR..].as_mut_ptr().cast(), MR, (1 << MR) - 1) };
        }
    }
}

/// One MR×NR tile: `c[i, j]` continues its chain from `out.seed` over the `kc` pairs of `ap`
/// (`[kc][MR]`) and `bp` (`kc` rows of NR pairs, row stride NR); only the valid rows and
/// columns of `out` are read or written. Its next tile's C rows and the panel rows at
/// `next` (any addresses) are prefetched.
///
/// # Safety
/// AVX-512F/BW/BF16; `ap` holds `kc·MR` and `bp` `kc·NR` words; the valid elements of `out`
/// are valid (and initialised with `Seed::C`); a `Seed::Bias` holds `nr`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn micro(panels: Panels<u32, u32>, out: CTile) {
    let Panels { kc, ap, bp, next } = panels;
    // SAFETY: AVX-512F/BF16; the tile's lanes are valid per the contract; p < kc, within `ap`
    // and `bp`; `next` is only prefetched.
    unsafe {
        run_tile::<MR>(kc, out, |p, acc| {
            let nb = next.wrapping_add(p * NR);
            _mm_prefetch::<_MM_HINT_T0>(nb.cast());
            _mm_prefetch::<_MM_HINT_T0>(nb.wrapping_add(16).cast());
            let row = bp.add(p * NR);
            let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(row.cast()));
            let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(row.add(16).cast()));
            let a = ap.add(p * MR);
            for (i, acc) in acc.iter_mut().enumerate() {
                let ai: __m512bh = std::mem::transmute(_mm512_set1_epi32(*a.add(i) as i32));
                acc[0] = _mm512_dpbf16_ps(acc[0], ai, b0);
                acc[1] = _mm512_dpbf16_ps(acc[1], ai, b1);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{available, KC, KERNEL, MR, NR};
    use crate::gemm::avx512::{self, Rhs, MC, NC};
    use crate::gemm::checks::{self, vnni, vnni_kernel_tests};
    use crate::gemm::{PackLayout, PackedBf16};
    use half::bf16;

    /// `got` is the f32 fused multiply-add chain over k in order of the bf16-rounded
    /// activations and the weights, from the bias.
    fn is_the_rounded_chain(got: f32, a: &[f32], w: &[bf16], bias: f32) {
        let want = checks::fma_chain(&checks::rounded(a), w, bias);
        assert_eq!(got.to_bits(), want.to_bits(), "{got} vs {want}");
    }

    /// Odd shapes around every block edge (tile, K block in pairs, odd K, A block, B block).
    fn shapes() -> Vec<(usize, usize, usize)> {
        checks::shapes(&[
            (MR + 1, NR + 1, 17),
            (MR - 1, NR - 1, 2 * KC + 3),
            (41, 300, 70),
            (MC + 3, 48, 4 * KC + 5),
            (29, NC + 40, 33),
            (2, 16, 32),
            (3, 40, 2 * KC),
        ])
    }

    vnni_kernel_tests!(
        each_element_is_the_f32_chain_of_the_rounded_activations,
        is_the_rounded_chain,
        (MR, KC),
        (MC + 20, 3 * NR + 5, 4 * KC + 9),
        &[(0, 1), (3, 3 + MR + 2), (MC - 1, MC + 20)]
    );

    #[test]
    fn same_bits_as_the_f32_kernel_on_rounded_activations() {
        if !available() || !avx512::available() {
            return;
        }
        let mut rnd = crate::test_rng::lcg(0x51u32);
        for (m, n, k) in shapes() {
            let (a, w, bias) = checks::random(&mut rnd, (m, n, k));
            let panels = PackedBf16::new(&w, n, k).unwrap();
            let rhs = Rhs::Packed(&panels);
            let f32_kernel = avx512::matmul(&checks::rounded(&a), m, k, rhs, n, Some(&bias));
            let got = KERNEL.matmul(&a, m, k, &vnni(&w, n, k), Some(&bias));
            assert_eq!(got.unwrap(), f32_kernel.unwrap(), "{m}x{n}x{k}");
        }
    }

    #[test]
    fn f32_sources_pack_as_the_element_by_element_rounding() {
        let mut rnd = crate::test_rng::xorshift(0x99u32);
        for (n, k) in [
            (1, 1),
            (5, 3),
            (17, 33),
            (40, 64),
            (33, 70),
            (150, 48),
            (48, 151),
        ] {
            // Rows of k at stride k + 3, and the transposed reading at stride n + 5.
            let rows: Vec<f32> = (0..n * (k + 3)).map(|_| rnd() * 3.0).collect();
            let cols: Vec<f32> = (0..k * (n + 5)).map(|_| rnd() * 3.0).collect();
            for (src, cs, ps) in [(&rows, k + 3, 1), (&cols, 1, n + 5)] {
                let got = super::pack_vnni_f32(src, cs, ps, n, k);
                let want = PackedBf16::from_fn(n, k, PackLayout::VnniPairs, |c, p| {
                    bf16::from_f32(src[c * cs + p * ps])
                });
                assert_eq!(got.dims(), (n, k));
                assert_eq!(got.layout(), PackLayout::VnniPairs);
                assert!(
                    got.panels()
                        .iter()
                        .zip(want.panels())
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{n}x{k} cs {cs} ps {ps}"
                );
            }
        }
    }

    #[test]
    fn the_f32_kernels_refuse_vnni_pairs() {
        let (a, p) = ([1f32; 6], vnni(&[bf16::ONE; 6], 2, 3));
        assert!(avx512::matmul(&a, 2, 3, Rhs::Packed(&p), 2, None).is_none());
        assert!(crate::gemm::avx2::matmul(&a, 2, 3, &p, None).is_none());
    }

    #[test]
    fn vnni_pairs_hold_k_high_and_k_plus_one_low_zero_padded_to_a_tile() {
        // [n=2, k=3]: rows (1, 2, 3) and (4, 5, 6).
        let w: Vec<bf16> = (1..=6).map(|v| bf16::from_f32(v as f32)).collect();
        let p = vnni(&w, 2, 3);
        let v: Vec<f32> = p.panels().iter().map(|x| x.to_f32()).collect();
        // One whole tile of 16 pair rows.
        assert_eq!(v.len(), NR * 32);
        // Pair row 0: column 0 = (k1 low, k0 high), column 1 likewise.
        assert_eq!(&v[..4], &[2.0, 1.0, 5.0, 4.0]);
        // Pair row 1: k = 2 high, the padding k = 3 low.
        assert_eq!(&v[NR * 2..NR * 2 + 4], &[0.0, 3.0, 0.0, 6.0]);
        assert!(v[4..NR * 2].iter().all(|&x| x == 0.0));
        assert!(v[NR * 2 + 4..].iter().all(|&x| x == 0.0));
    }
}
