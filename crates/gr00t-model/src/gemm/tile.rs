//! What the microkernels and their block loops share: the blocks of C in their loop order and
//! the order of their tiles, a tile's operands ([`Panels`], [`CTile`]) and where its chains
//! start ([`Seed`]), the frame of an AVX-512 tile ([`run_tile`]: the prefetch of the next
//! tile's C rows, the seeding and the masked store of the accumulators around the kernel's own
//! k step), lane masks, the rounding of 32 floats to bf16 pairs, and the AVX-512 16×16
//! transpose.
//!
//! The helpers that take SIMD values are `#[inline(always)]` without target features of their
//! own (the two cannot go together): inlined into a kernel's `#[target_feature]` function they
//! compile to the instructions the kernel wrote before, in the same order.

use super::out_ptr::OutPtr;
use super::NR;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Where a tile's chains start.
#[derive(Clone, Copy)]
pub(crate) enum Seed {
    /// The current C (a later K block).
    C,
    /// The bias values of the tile's columns (the first K block).
    Bias(*const f32),
    /// Zero (the first K block, no bias).
    Zero,
}

/// One block of C: rows `ic..ic+mc`, columns `jc..jc+nc`, the K block of rows `pc..pc+kc` of
/// the weight panels (pair rows for the VNNI kernels). The first K block (`pc` = 0) writes C
/// from the bias (or zero) without reading it.
#[derive(Clone, Copy)]
pub(crate) struct Block {
    pub(crate) ic: usize,
    pub(crate) mc: usize,
    pub(crate) jc: usize,
    pub(crate) nc: usize,
    pub(crate) pc: usize,
    pub(crate) kc: usize,
    /// Rows of a whole weight panel (the stride from one panel to the next, in rows).
    pub(crate) panel_rows: usize,
    /// Row stride of C.
    pub(crate) n: usize,
}

/// A tile of a [`Block`]: its first row and column in the block, and its C.
#[derive(Clone, Copy)]
pub(crate) struct Tile {
    pub(crate) ir: usize,
    pub(crate) jr: usize,
    pub(crate) out: CTile,
}

/// The C side of a tile: where its chains start, where it lives (row stride `ldc`), its valid
/// rows and columns (at most the tile's), and the next tile's C (any address: prefetched while
/// this one computes).
#[derive(Clone, Copy)]
pub(crate) struct CTile {
    pub(crate) seed: Seed,
    pub(crate) c: *mut f32,
    pub(crate) ldc: usize,
    pub(crate) mr: usize,
    pub(crate) nr: usize,
    pub(crate) next: *const f32,
}

/// The A and B sides of a tile: `kc` rows of the packed A panel at `ap` and of the weight
/// panel at `bp`, and the next weight panel at `next` (any address: its rows are prefetched).
#[derive(Clone, Copy)]
pub(crate) struct Panels<A, B> {
    pub(crate) kc: usize,
    pub(crate) ap: *const A,
    pub(crate) bp: *const B,
    pub(crate) next: *const B,
}

impl Block {
    /// The blocks of a product over `k` rows of weight panels (of `panel_rows` rows each), `m`
    /// rows and the columns `n0..n1` (row stride `n`), in blocks of `(kc, mc, nc)`: K blocks
    /// outermost and in order, so that each element's chain over k is unchanged, then row
    /// blocks (their A is packed at the first column block, `jc == n0`), then column blocks.
    pub(crate) fn k_outer(
        (k, m): (usize, usize),
        (n0, n1): (usize, usize),
        (kc, mc, nc): (usize, usize, usize),
        panel_rows: usize,
        n: usize,
    ) -> impl Iterator<Item = Block> {
        (0..k).step_by(kc).flat_map(move |pc| {
            (0..m).step_by(mc).flat_map(move |ic| {
                (n0..n1).step_by(nc).map(move |jc| Block {
                    ic,
                    mc: mc.min(m - ic),
                    jc,
                    nc: nc.min(n1 - jc),
                    pc,
                    kc: kc.min(k - pc),
                    panel_rows,
                    n,
                })
            })
        })
    }

    /// The offset of the block's first weight panel at its first K row, counted in the panels'
    /// entries (bf16 values, or pairs of them for VNNI pairs); `jc` is a multiple of NR, as
    /// units and blocks start on panel boundaries.
    pub(crate) fn panel_start(self) -> usize {
        debug_assert_eq!(self.jc % NR, 0);
        (self.jc / NR * self.panel_rows + self.pc) * NR
    }

    /// The block's tiles of `tile` (rows, columns) in the output `dst`, seeded from `bias` in
    /// the first K block. With `b_outer` down each column of tiles (one weight panel stays in
    /// L1 while the A panels pass), else along each row of tiles (one A panel stays while the
    /// weight panels stream).
    pub(crate) fn tiles(
        self,
        tile: (usize, usize),
        b_outer: bool,
        dst: OutPtr,
        bias: Option<&[f32]>,
    ) -> impl Iterator<Item = Tile> + '_ {
        let (tm, tn) = tile;
        let (rows, cols) = (self.mc.div_ceil(tm), self.nc.div_ceil(tn));
        let at = move |t: usize| {
            if b_outer {
                (t % rows * tm, t / rows * tn)
            } else {
                (t / cols * tm, t % cols * tn)
            }
        };
        let c = move |(ir, jr): (usize, usize)| dst.add((self.ic + ir) * self.n + self.jc + jr);
        let count = rows * cols;
        (0..count).map(move |t| {
            let (ir, jr) = at(t);
            let seed = match (self.pc == 0, bias) {
                (false, _) => Seed::C,
                (true, Some(b)) => Seed::Bias(b[self.jc + jr..].as_ptr()),
                (true, None) => Seed::Zero,
            };
            let out = CTile {
                seed,
                c: c((ir, jr)),
                ldc: self.n,
                mr: tm.min(self.mc - ir),
                nr: tn.min(self.nc - jr),
                next: c(at(if t + 1 < count { t + 1 } else { t })),
            };
            Tile { ir, jr, out }
        })
    }

    /// The first column of the weight panel after the one at column `jr` of the block (that
    /// one for the last panel): prefetched while the tile at `jr` computes.
    pub(crate) fn next_panel(self, jr: usize, nr: usize) -> usize {
        if jr + nr < self.nc {
            jr + nr
        } else {
            jr
        }
    }
}

/// One AVX-512 tile of `R` rows × 32 columns: prefetches the next tile's C, starts the
/// accumulators from `out.seed`, runs `step(p, acc)` for each of the `kc` rows of the panels
/// in order, and stores the valid rows and columns of `out` (masked loads and stores).
///
/// # Safety
/// AVX-512F (the caller's target features); `out` as for [`seed_acc`] and [`store_acc`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn run_tile<const R: usize>(
    kc: usize,
    out: CTile,
    mut step: impl FnMut(usize, &mut Acc<R>),
) {
    let CTile { c, ldc, mr, .. } = out;
    prefetch_rows(out.next, R, ldc, 16);
    let masks = row_masks(out.nr);
    // SAFETY: forwarded contract.
    let mut acc = unsafe { seed_acc::<R>(out.seed, c, ldc, mr, masks) };
    for p in 0..kc {
        step(p, &mut acc);
    }
    // SAFETY: forwarded contract.
    unsafe { store_acc(&acc, c, ldc, mr, masks) };
}

/// Prefetches into L1 the first `rows` rows at `p` (row stride `ld` floats), each at its
/// elements 0 and `second` (its two cache lines). Any address: prefetches never fault.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_rows(p: *const f32, rows: usize, ld: usize, second: usize) {
    for i in 0..rows {
        let r = p.wrapping_add(i * ld);
        // SAFETY: SSE is part of every x86-64 CPU.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(r.cast());
            _mm_prefetch::<_MM_HINT_T0>(r.wrapping_add(second).cast());
        }
    }
}

/// The mask of the first `w` lanes of 16 (all of them from 16 on).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn lanes(w: usize) -> __mmask16 {
    ((1u32 << w.min(16)) - 1) as __mmask16
}

/// The masks of a tile row's first `nr` of 32 columns, as two 16-lane halves.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn row_masks(nr: usize) -> (__mmask16, __mmask16) {
    (lanes(nr), lanes(nr.saturating_sub(16)))
}

/// The accumulators of an AVX-512 tile: `R` rows of 32 columns, two vectors a row.
#[cfg(target_arch = "x86_64")]
type Acc<const R: usize> = [[__m512; 2]; R];

/// The accumulators of the tile at `c` (row stride `ldc`) started from `seed`: the first `mr`
/// rows of C, or the bias on every row, in the lanes of `masks` (zero elsewhere, and zero
/// throughout for [`Seed::Zero`]).
///
/// # Safety
/// AVX-512F (the caller's target features); the enabled lanes of rows `< mr` at `c` (with
/// [`Seed::C`]) or of the bias are valid.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn seed_acc<const R: usize>(
    seed: Seed,
    c: *const f32,
    ldc: usize,
    mr: usize,
    masks: (__mmask16, __mmask16),
) -> Acc<R> {
    let (m0, m1) = masks;
    // SAFETY: AVX-512F (contract).
    let mut acc = unsafe { [[_mm512_setzero_ps(); 2]; R] };
    match seed {
        Seed::C => {
            for (i, row) in acc.iter_mut().enumerate() {
                let (k0, k1) = if i < mr { (m0, m1) } else { (0, 0) };
                let ci = c.wrapping_add(i * ldc);
                // SAFETY: masked-off lanes are not read; the enabled ones are valid (and were
                // written by the first K block) per the contract.
                unsafe {
                    row[0] = _mm512_maskz_loadu_ps(k0, ci);
                    row[1] = _mm512_maskz_loadu_ps(k1, ci.wrapping_add(16));
                }
            }
        }
        Seed::Bias(b) => {
            // SAFETY: the tile's bias lanes are valid per the contract.
            let row = unsafe {
                [
                    _mm512_maskz_loadu_ps(m0, b),
                    _mm512_maskz_loadu_ps(m1, b.wrapping_add(16)),
                ]
            };
            acc = [row; R];
        }
        Seed::Zero => {}
    }
    acc
}

/// Stores the first `mr` rows of `acc` at `c` (row stride `ldc`), the lanes of `masks` only.
///
/// # Safety
/// AVX-512F (the caller's target features); the enabled lanes of rows `< mr` at `c` are
/// writable.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn store_acc<const R: usize>(
    acc: &Acc<R>,
    c: *mut f32,
    ldc: usize,
    mr: usize,
    masks: (__mmask16, __mmask16),
) {
    let (m0, m1) = masks;
    for (i, row) in acc.iter().enumerate() {
        let (k0, k1) = if i < mr { (m0, m1) } else { (0, 0) };
        let ci = c.wrapping_add(i * ldc);
        // SAFETY: masked-off lanes are not written; the enabled ones are valid.
        unsafe {
            _mm512_mask_storeu_ps(ci, k0, row[0]);
            _mm512_mask_storeu_ps(ci.wrapping_add(16), k1, row[1]);
        }
    }
}

/// The 32 floats at `row` (the lanes of `masks` only, zero elsewhere) rounded to bf16 (round to
/// nearest even) as 16 pairs: word j holds value 2j in its high half and 2j+1 in its low half
/// (the order in which `vdpbf16ps` and AMX tiles take k).
///
/// # Safety
/// AVX-512F and AVX512-BF16 (the caller's target features); the enabled lanes at `row` are
/// readable.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn bf16_pairs(row: *const f32, masks: (__mmask16, __mmask16)) -> __m512i {
    let (m0, m1) = masks;
    // SAFETY: only the enabled lanes are read (contract); AVX-512F/BF16 (contract).
    unsafe {
        let (lo, hi) = (
            _mm512_maskz_loadu_ps(m0, row),
            _mm512_maskz_loadu_ps(m1, row.wrapping_add(16)),
        );
        // bf16 of lo in words 0..16, of hi in 16..32: word 2j is value 2j. Rotating each dword
        // by 16 puts it in the high half.
        let bh: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
        _mm512_rol_epi32::<16>(bh)
    }
}

/// Stores the transpose of the 16×16 tile `v` (row r = `v[r]`) as rows `dst + c·ld`, only the
/// lanes in `mask`.
///
/// # Safety
/// AVX-512F; the `mask` lanes of `dst + c·ld` must be writable for c in 0..16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) unsafe fn transpose_store(v: [__m512; 16], dst: *mut f32, ld: usize, mask: __mmask16) {
    // Pairs of rows interleaved within 128-bit lanes, then pairs of pairs.
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);
    }
    // u[4g + q] lane l = column q + 4l of rows 4g..4g+4.
    let mut u = [_mm512_setzero_ps(); 16];
    for g in 0..4 {
        let (x0, x1, x2, x3) = (
            _mm512_castps_pd(t[4 * g]),
            _mm512_castps_pd(t[4 * g + 1]),
            _mm512_castps_pd(t[4 * g + 2]),
            _mm512_castps_pd(t[4 * g + 3]),
        );
        u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(x0, x2));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(x0, x2));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(x1, x3));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(x1, x3));
    }
    for q in 0..4 {
        let w0 = _mm512_shuffle_f32x4::<0b10_00_10_00>(u[q], u[4 + q]);
        let w1 = _mm512_shuffle_f32x4::<0b11_01_11_01>(u[q], u[4 + q]);
        let x0 = _mm512_shuffle_f32x4::<0b10_00_10_00>(u[8 + q], u[12 + q]);
        let x1 = _mm512_shuffle_f32x4::<0b11_01_11_01>(u[8 + q], u[12 + q]);
        let rows = [
            (q, _mm512_shuffle_f32x4::<0b10_00_10_00>(w0, x0)),
            (q + 8, _mm512_shuffle_f32x4::<0b11_01_11_01>(w0, x0)),
            (q + 4, _mm512_shuffle_f32x4::<0b10_00_10_00>(w1, x1)),
            (q + 12, _mm512_shuffle_f32x4::<0b11_01_11_01>(w1, x1)),
        ];
        for (c, r) in rows {
            // SAFETY: row c of the destination is writable per the contract.
            unsafe { _mm512_mask_storeu_ps(dst.add(c * ld), mask, r) };
        }
    }
}
