//! Hand-written AVX-512 f32 GEMM `C[M, N] = A[M, K]·Bᵀ (+ bias)` for a row-major f32 `A` and a
//! row-major `B` `[N, K]` in bf16 (widened exactly while packing) or f32, or a bf16 `B` rearranged
//! once at load into the kernel's column panels ([`PackedBf16`]). Goto/BLIS blocking: packed B
//! blocks, packed A blocks and a 14×32 register-blocked microkernel; threads split the longer side
//! of C.
//!
//! Every output element is one fused multiply-add chain over k in order, seeded with its bias
//! (or zero): the microkernel reloads C at each K block and continues the chain, so the bits do
//! not depend on M, on the block a row falls in, nor on the thread count.

use super::driver::{has_features, AlignedBuf};
use super::out_ptr::product;
use super::{PackLayout, PackedBf16, NR};
use half::bf16;
use std::cell::RefCell;

#[cfg(target_arch = "x86_64")]
use super::{
    out_ptr::OutPtr,
    pack::widen,
    tile::{run_tile, transpose_store, Block, CTile, Panels, Tile},
};
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Right-hand operand `B` `[N, K]`, row-major.
#[derive(Clone, Copy)]
pub(crate) enum Rhs<'a> {
    /// bf16 values, widened exactly to f32.
    Bf16(&'a [bf16]),
    /// f32 values (tested; the model's f32 weights still go through candle's own matmul).
    #[cfg_attr(not(test), allow(dead_code))]
    F32(&'a [f32]),
    /// bf16 values already in the kernel's panel order.
    Packed(&'a PackedBf16),
}

impl Rhs<'_> {
    /// Elements of the logical `[N, K]` matrix.
    fn len(&self) -> usize {
        match self {
            Rhs::Bf16(v) => v.len(),
            Rhs::F32(v) => v.len(),
            Rhs::Packed(p) => {
                let (n, k) = p.dims();
                n * k
            }
        }
    }
}

/// Rows of C per microkernel tile (broadcast side).
pub(super) const MR: usize = 14;
/// K block: a fixed split of K (only where C is reloaded, never the summation order).
/// KC, MC and NC were tuned on the model's shapes (examples/gemm_shapes.rs, Zen 5).
const KC: usize = 384;
/// Row blocks up to this size multiply a packed weight panel by panel (see `block`).
pub(super) const FEW_ROWS: usize = 4 * MR;
/// Rows of A packed at once; each MR-row panel (KC·MR floats) is reused from L1.
pub(super) const MC: usize = MR * 24;
/// Columns of B packed at once per thread (KC·NC floats, streamed from L2).
pub(super) const NC: usize = NR * 16;

/// Whether this CPU runs the kernel: AVX-512F, and BW for widening packed bf16 in registers
/// (every AVX-512 CPU since Skylake-SP has both).
pub(crate) fn available() -> bool {
    has_features!("avx512f", "avx512bw")
}

/// `a` `[m, k]` · `b` `[n, k]`ᵀ (+ `bias` `[n]` on every row) → `[m, n]` row-major, or `None`
/// when the CPU lacks AVX-512F/BW or the slice lengths do not match the shape.
pub(crate) fn matmul(
    a: &[f32],
    m: usize,
    k: usize,
    b: Rhs,
    n: usize,
    bias: Option<&[f32]>,
) -> Option<Vec<f32>> {
    if !available()
        || a.len() != m * k
        || b.len() != n * k
        || bias.is_some_and(|v| v.len() != n)
        || matches!(b, Rhs::Packed(p) if p.layout() != PackLayout::Panels)
    {
        return None;
    }
    // SAFETY: AVX-512F/BW were detected above; each part's `dst` points at the first of its
    // `mr` rows of the m·n output, and its unit writes exactly those rows × columns n0..n1:
    // every element lies in one tile, whose first K block writes it from the bias (or zero)
    // without reading it. Splits never change the bits (see the module docs).
    Some(unsafe {
        product(a, (m, n, k), bias, (MR, NR), 2, |rows, mr, n0, n1, dst| {
            #[cfg(target_arch = "x86_64")]
            unit(rows, mr, k, b, n, n0, n1, bias, dst)
        })
    })
}

thread_local! {
    /// Per-thread packed blocks of A and B (reused across calls).
    static PACKS: RefCell<(AlignedBuf<f32>, AlignedBuf<f32>)> =
        const { RefCell::new((AlignedBuf::new(), AlignedBuf::new())) };
}

/// Columns `n0..n1` of the product, written through `dst` (`[m, n]`; every element's chain
/// starts from its `bias`, or zero).
///
/// # Safety
/// The CPU must have AVX-512F and BW; `dst` must point to `m·n` writable floats (initialised
/// or not) that nothing else touches in columns `n0..n1` during the call; `bias` holds n.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn unit(
    a: &[f32],
    m: usize,
    k: usize,
    b: Rhs,
    n: usize,
    n0: usize,
    n1: usize,
    bias: Option<&[f32]>,
    dst: OutPtr,
) {
    PACKS.with(|p| {
        let mut p = p.borrow_mut();
        let (pa, pb) = &mut *p;
        let pa = pa.take(MC * KC);
        let pb = pb.take(NC * KC);
        if let Rhs::Packed(w) = b {
            // Nothing to pack on the B side, so each A block is packed once.
            for blk in Block::k_outer((k, m), (n0, n1), (KC, MC, NC), k, n) {
                if blk.jc == n0 {
                    pack_a(a, k, blk.ic, blk.mc, blk.pc, blk.kc, pa);
                }
                let panels = w.panels()[blk.panel_start()..].as_ptr();
                // SAFETY: forwarded contract; `panels` starts this block's K rows.
                unsafe { block(blk, pa, BSide::Packed(panels), bias, dst) };
            }
            return;
        }
        for jc in (n0..n1).step_by(NC) {
            let nc = NC.min(n1 - jc);
            for pc in (0..k).step_by(KC) {
                let kc = KC.min(k - pc);
                pack_b(b, k, jc, nc, pc, kc, pb);
                for ic in (0..m).step_by(MC) {
                    let mc = MC.min(m - ic);
                    pack_a(a, k, ic, mc, pc, kc, pa);
                    let blk = Block {
                        ic,
                        mc,
                        jc,
                        nc,
                        pc,
                        kc,
                        panel_rows: k,
                        n,
                    };
                    // SAFETY: forwarded contract.
                    unsafe { block(blk, pa, BSide::Widened(pb), bias, dst) };
                }
            }
        }
    });
}

/// Where a block's B values come from.
#[derive(Clone, Copy)]
enum BSide<'a> {
    /// Widened f32 panels packed per call, `[panel][kc][NR]`.
    Widened(&'a [f32]),
    /// A [`PackedBf16`]'s first panel of the block, at its first K row of the block.
    Packed(*const bf16),
}

/// Multiplies the packed A block `pa` by the block's B panels into C.
///
/// # Safety
/// AVX-512F and BW; as [`unit`] for `dst`; `BSide::Packed` points into a packed weight whose
/// panels cover columns `jc..jc+nc` for K rows `pc..pc+kc`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn block(blk: Block, pa: &[f32], bside: BSide, bias: Option<&[f32]>, dst: OutPtr) {
    let kc = blk.kc;
    // A few rows (the DiT's 41) of a packed weight: one B panel stays in L1 while the A panels
    // pass, so each weight byte comes from memory once. Otherwise one A panel stays in L1 while
    // the B panels stream past it (measured faster for hundreds of rows, examples/gemm_shapes.rs).
    let b_outer = matches!(bside, BSide::Packed(_)) && blk.mc <= FEW_ROWS;
    for Tile { ir, jr, out } in blk.tiles((MR, NR), b_outer, dst, bias) {
        let ap = pa[ir * kc..(ir + MR) * kc].as_ptr();
        // SAFETY: `ap` holds kc·MR packed floats; a packed weight holds kc rows of NR bf16
        // per panel from `panels` (row stride k·NR), and `pb` kc·NR floats per panel; the
        // tile's valid mr×nr elements lie inside `dst` in the unit's columns; `next` is only
        // prefetched.
        unsafe {
            match bside {
                BSide::Packed(panels) => {
                    // The next panel's rows are fetched while this one runs.
                    let stride = blk.panel_rows * NR;
                    let next_panel = blk.next_panel(jr, NR) / NR * stride;
                    let bp = panels.add(jr / NR * stride).cast();
                    let next = panels.add(next_panel).cast();
                    micro::<true>(Panels { kc, ap, bp, next }, out)
                }
                BSide::Widened(pb) => {
                    let bp = pb[jr * kc..(jr + NR) * kc].as_ptr().cast();
                    let next = std::ptr::null();
                    micro::<false>(Panels { kc, ap, bp, next }, out)
                }
            }
        };
    }
}

/// Packs rows `ic..ic+mc`, k `pc..pc+kc` of `a` as MR-row panels laid out `[k][MR]`, zero rows
/// past the end.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn pack_a(a: &[f32], k: usize, ic: usize, mc: usize, pc: usize, kc: usize, pa: &mut [f32]) {
    let full = kc / 16 * 16;
    for (ir, panel) in (0..mc).step_by(MR).zip(pa.chunks_exact_mut(MR * kc)) {
        let rows = MR.min(mc - ir);
        for p0 in (0..full).step_by(16) {
            let mut v = [_mm512_setzero_ps(); 16];
            for (i, v) in v.iter_mut().enumerate().take(rows) {
                let row = &a[(ic + ir + i) * k + pc + p0..][..16];
                // SAFETY: `row` holds 16 floats.
                *v = unsafe { _mm512_loadu_ps(row.as_ptr()) };
            }
            let out = &mut panel[p0 * MR..(p0 + 16) * MR];
            // SAFETY: `out` holds 16 rows of MR floats; only MR lanes of each are stored.
            unsafe { transpose_store(v, out.as_mut_ptr(), MR, (1 << MR) - 1) };
        }
        for i in 0..MR {
            if i < rows {
                let row = &a[(ic + ir + i) * k + pc..][..kc];
                for p in full..kc {
                    panel[p * MR + i] = row[p];
                }
            } else {
                for p in full..kc {
                    panel[p * MR + i] = 0.0;
                }
            }
        }
    }
}

/// Packs columns `jc..jc+nc` (rows of `b`), k `pc..pc+kc` as NR-column panels laid out
/// `[k][NR]` in f32, zero columns past the end.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn pack_b(b: Rhs, k: usize, jc: usize, nc: usize, pc: usize, kc: usize, pb: &mut [f32]) {
    for (jr, panel) in (0..nc).step_by(NR).zip(pb.chunks_exact_mut(NR * kc)) {
        for half in [0, 16] {
            let j0 = jr + half;
            let valid = nc.saturating_sub(j0).min(16);
            let full = if valid == 16 { kc / 16 * 16 } else { 0 };
            for p0 in (0..full).step_by(16) {
                let src = (jc + j0) * k + pc + p0;
                let out = &mut panel[p0 * NR + half..];
                // SAFETY: 16 rows of 16 values from `src` (row stride k) lie inside `b` since
                // j0+16 <= nc and p0+16 <= kc; `out` holds at least 15·NR+16 floats.
                unsafe {
                    match b {
                        Rhs::Bf16(v) => tile_bf16(v.as_ptr().add(src), k, out.as_mut_ptr()),
                        Rhs::F32(v) => tile_f32(v.as_ptr().add(src), k, out.as_mut_ptr()),
                        Rhs::Packed(_) => unreachable!("packed weights are never packed again"),
                    }
                }
            }
            for j in 0..16 {
                let col = &mut panel[half + j..];
                if j < valid {
                    let base = (jc + j0 + j) * k + pc;
                    match b {
                        Rhs::Bf16(v) => {
                            for p in full..kc {
                                col[p * NR] = widen(v[base + p]);
                            }
                        }
                        Rhs::F32(v) => {
                            for p in full..kc {
                                col[p * NR] = v[base + p];
                            }
                        }
                        Rhs::Packed(_) => unreachable!("packed weights are never packed again"),
                    }
                } else {
                    for p in 0..kc {
                        col[p * NR] = 0.0;
                    }
                }
            }
        }
    }
}

/// Transposes a 16×16 bf16 tile (rows `src + r·ld`) into f32 rows `dst + c·NR`.
///
/// # Safety
/// AVX-512F; the 16 source rows of 16 and the 16 destination rows of 16 must be valid.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_bf16(src: *const bf16, ld: usize, dst: *mut f32) {
    let mut v = [_mm512_setzero_ps(); 16];
    for (r, v) in v.iter_mut().enumerate() {
        // SAFETY: row r holds 16 bf16 (32 bytes) per the contract.
        let h = unsafe { _mm256_loadu_si256(src.add(r * ld).cast()) };
        *v = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)));
    }
    // SAFETY: forwarded contract.
    unsafe { transpose_store(v, dst, NR, 0xFFFF) }
}

/// Transposes a 16×16 f32 tile (rows `src + r·ld`) into rows `dst + c·NR`.
///
/// # Safety
/// AVX-512F; the 16 source rows of 16 and the 16 destination rows of 16 must be valid.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_f32(src: *const f32, ld: usize, dst: *mut f32) {
    let mut v = [_mm512_setzero_ps(); 16];
    for (r, v) in v.iter_mut().enumerate() {
        // SAFETY: row r holds 16 floats per the contract.
        *v = unsafe { _mm512_loadu_ps(src.add(r * ld)) };
    }
    // SAFETY: forwarded contract.
    unsafe { transpose_store(v, dst, NR, 0xFFFF) }
}

/// One MR×NR tile: `c[i, j] = fma-chain over p of ap[p, i]·bp[p, j]`, continuing from
/// `out.seed` (the current `c`, a bias row or zero); only the valid rows and columns of `out`
/// are read or written, and its next tile's C rows are prefetched. `bp` is `kc` rows of NR f32,
/// or with `BF16` `kc` rows of NR bf16 in [`stored_column`](super::pack::stored_column) order at
/// a row stride of NR, and then the `kc` rows at `next` (any address) are prefetched too.
///
/// # Safety
/// AVX-512F and BW; `ap` holds `kc·MR` floats and `bp` `kc` rows as above; the valid elements
/// of `out` are valid (and initialised with `Seed::C`); a `Seed::Bias` holds `nr`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn micro<const BF16: bool>(panels: Panels<f32, u8>, out: CTile) {
    let Panels { kc, ap, bp, next } = panels;
    let zero = _mm512_setzero_si512();
    // SAFETY: AVX-512F; the tile's lanes are valid per the contract; p < kc, within the panels.
    unsafe {
        run_tile::<MR>(kc, out, |p, acc| {
            let (b0, b1) = if BF16 {
                _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(p * NR * 2).cast());
                // bf16 in the high half of each f32 word, zero in the low half: exact.
                let raw = _mm512_loadu_si512(bp.add(p * NR * 2).cast());
                (
                    _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, raw)),
                    _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, raw)),
                )
            } else {
                let bp = bp.cast::<f32>();
                (
                    _mm512_loadu_ps(bp.add(p * NR)),
                    _mm512_loadu_ps(bp.add(p * NR + 16)),
                )
            };
            let a = ap.add(p * MR);
            for (i, row) in acc.iter_mut().enumerate() {
                let ai = _mm512_set1_ps(*a.add(i));
                row[0] = _mm512_fmadd_ps(ai, b0, row[0]);
                row[1] = _mm512_fmadd_ps(ai, b1, row[1]);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{available, matmul, PackedBf16, Rhs, KC, MC, MR, NC, NR};
    use crate::gemm::checks;
    use half::bf16;

    /// Odd shapes around every block edge (tile, K block, A block, B block).
    fn shapes() -> Vec<(usize, usize, usize)> {
        checks::shapes(&[
            (MR + 1, NR + 1, 17),
            (MR - 1, NR - 1, KC + 3),
            (41, 300, 70),
            (MC + 3, 48, 2 * KC + 5),
            (29, NC + 40, 33),
            (2, 16, 32),
        ])
    }

    #[test]
    fn exact_on_dyadic_inputs_for_bf16_and_f32_weights_with_and_without_bias() {
        if available() {
            checks::exact_on_dyadic_inputs(&shapes(), false, &|a, m, k, w, n, bias| {
                let wf: Vec<f32> = w.iter().map(|v| v.to_f32()).collect();
                [Rhs::Bf16(w), Rhs::F32(&wf)]
                    .map(|rhs| matmul(a, m, k, rhs, n, bias).unwrap())
                    .to_vec()
            });
        }
    }

    #[test]
    fn close_to_f64_on_general_inputs() {
        if !available() {
            return;
        }
        let mut rnd = crate::test_rng::xorshift(0x2545_f491_u32);
        for (m, n, k) in shapes() {
            let a: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
            let wf: Vec<f32> = (0..n * k).map(|_| rnd()).collect();
            let w: Vec<bf16> = wf.iter().map(|&v| bf16::from_f32(v)).collect();
            let wb: Vec<f32> = w.iter().map(|v| v.to_f32()).collect();
            let bias: Vec<f32> = (0..n).map(|_| rnd()).collect();
            for (rhs, exact) in [(Rhs::Bf16(&w), &wb), (Rhs::F32(&wf), &wf)] {
                let y = matmul(&a, m, k, rhs, n, Some(&bias)).unwrap();
                for i in 0..m {
                    for j in 0..n {
                        let terms = a[i * k..][..k].iter().zip(&exact[j * k..][..k]);
                        let (dot, mag) = terms.fold((0.0, 0.0), |(dot, mag), (&x, &b)| {
                            let p = x as f64 * b as f64;
                            (dot + p, mag + p.abs())
                        });
                        // Bound: k·ε·Σ|a||b| plus the bias.
                        let mag = mag + bias[j].abs() as f64;
                        let err = (y[i * n + j] as f64 - (dot + bias[j] as f64)).abs();
                        assert!(
                            err <= (k as f64 + 1.0) * f32::EPSILON as f64 * mag,
                            "{m}x{n}x{k} ({i}, {j}): {err} vs {mag}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn each_element_is_one_fma_chain_whatever_m_or_threads() {
        if !available() {
            return;
        }
        let (m, n, k) = (MC + 20, 3 * NR + 5, 2 * KC + 9);
        let (a, w, bias) = checks::random(&mut crate::test_rng::lcg(7u32), (m, n, k));
        let run = |a: &[f32], m| matmul(a, m, k, Rhs::Bf16(&w), n, Some(&bias)).unwrap();
        let rows = [(0, 1), (3, 3 + MR + 2), (MC - 1, m)];
        let all = checks::same_bits_for_any_rows_or_threads(&run, &a, (m, k), &rows);
        let points = [(0, 0), (m - 1, n - 1), (MR, NR), (m / 2, n / 2)];
        checks::assert_fma_chains(&all, (&a, &w, &bias), (n, k), &points);
    }

    #[test]
    fn a_weight_packed_at_load_gives_the_same_bits_as_the_row_major_one() {
        if !available() {
            return;
        }
        let mut rnd = crate::test_rng::lcg(0x51u32);
        let mut shapes = shapes();
        shapes.push((MC + 3, NC + NR + 7, KC + 1));
        for (m, n, k) in shapes {
            let (a, w, bias) = checks::random(&mut rnd, (m, n, k));
            let packed = PackedBf16::new(&w, n, k).unwrap();
            assert_eq!(packed.dims(), (n, k));
            for bias in [None, Some(&bias[..])] {
                let want = matmul(&a, m, k, Rhs::Bf16(&w), n, bias).unwrap();
                let got = matmul(&a, m, k, Rhs::Packed(&packed), n, bias).unwrap();
                assert_eq!(got, want, "{m}x{n}x{k}");
            }
        }
        assert!(PackedBf16::new(&[bf16::ONE; 5], 2, 3).is_none());
    }

    #[test]
    fn mismatched_lengths_are_refused() {
        let a = [1f32; 6];
        let w = [1f32; 6];
        assert!(matmul(&a, 2, 3, Rhs::F32(&w), 3, None).is_none());
        assert!(matmul(&a, 2, 3, Rhs::F32(&w), 2, Some(&[0.0])).is_none());
    }
}
