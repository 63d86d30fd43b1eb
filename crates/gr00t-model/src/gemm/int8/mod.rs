//! int8 products on the CPU (`--dtype int8`): `C[M, N] = A[M, K]·Bᵀ (+ bias)` with the weight
//! `B` quantised once at load to s8 per output channel ([`PackedI8`]) and each row of `A`
//! quantised per call to s8 by its own absolute maximum (per token). The sums are exact in
//! i32 and dequantised in the epilogue: `y = fma(sum as f32, s_a·s_b, bias)`.
//!
//! | kernel | instructions | tile |
//! | --- | --- | --- |
//! | [`Int8Kernel::Amx`] | AMX `tdpbusd` (Sapphire Rapids and later; K a multiple of 64, else the AVX512-VNNI tile) | 32×32 |
//! | [`Int8Kernel::Avx512Vnni`] | EVEX `vpdpbusd` (Cascade Lake and later, Zen 4/5) | 12×32 |
//! | [`Int8Kernel::AvxVnni`] | VEX `vpdpbusd` (Alder Lake and later, Zen 5) | 6×16 |
//! | [`Int8Kernel::Avx2`] | `vpsignb`, `vpmaddubsw`, `vpmaddwd` | 4×16 |
//! | [`Int8Kernel::Scalar`] | none (every CPU; the reference) | 4×16 |
//!
//! Every kernel computes the same integer sum exactly: the VNNI and AMX ones multiply u8
//! activations offset by 128 and subtract the weight's `128·Σq`, AVX2 multiplies `|a|` by
//! `sign(a)·w`, whose pair sums stay within i16 (both within ±127, so `vpmaddubsw` never
//! saturates). With the same epilogue, every element's bits are the same
//! on every kernel, for any M, block or thread count, and repeats are identical.

#[cfg(target_arch = "x86_64")]
mod amx;
pub(crate) mod pack;
pub(crate) mod quant;
#[cfg(target_arch = "x86_64")]
mod vnni512;
#[cfg(target_arch = "x86_64")]
mod ymm;

use super::driver::has_features;
use super::out_ptr::{split, OutPtr};
pub use pack::PackedI8;
use pack::NP;
pub use quant::LEVELS;
use quant::{quantize_scaled_rows, Encoding, QuantRows};

/// An int8 GEMM kernel, in increasing order of speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Int8Kernel {
    /// Plain Rust (every CPU).
    Scalar,
    /// AVX2 `vpmaddubsw` + `vpmaddwd`.
    Avx2,
    /// AVX-VNNI `vpdpbusd` on 256-bit vectors.
    AvxVnni,
    /// AVX512-VNNI `vpdpbusd` on 512-bit vectors.
    Avx512Vnni,
    /// AMX-INT8 `tdpbusd` on 16×64-byte tiles.
    Amx,
}

impl Int8Kernel {
    /// The name in `/info`, the logs and `gr00t bench`.
    pub fn as_str(self) -> &'static str {
        match self {
            Int8Kernel::Scalar => "scalar",
            Int8Kernel::Avx2 => "avx2",
            Int8Kernel::AvxVnni => "avxvnni",
            Int8Kernel::Avx512Vnni => "avx512vnni",
            Int8Kernel::Amx => "amx",
        }
    }

    /// Every kernel, slowest first.
    pub const ALL: [Int8Kernel; 5] = [
        Int8Kernel::Scalar,
        Int8Kernel::Avx2,
        Int8Kernel::AvxVnni,
        Int8Kernel::Avx512Vnni,
        Int8Kernel::Amx,
    ];

    /// Whether this CPU runs the kernel.
    pub fn available(self) -> bool {
        match self {
            Int8Kernel::Scalar => true,
            Int8Kernel::Avx2 => has_features!("avx2", "fma"),
            Int8Kernel::AvxVnni => has_features!("avx2", "fma", "avxvnni"),
            Int8Kernel::Avx512Vnni => has_features!("avx512f", "avx512bw", "avx512vnni"),
            #[cfg(target_arch = "x86_64")]
            Int8Kernel::Amx => amx::available(),
            #[cfg(not(target_arch = "x86_64"))]
            Int8Kernel::Amx => false,
        }
    }

    /// The fastest kernel this CPU runs.
    pub fn detected() -> Int8Kernel {
        Int8Kernel::fastest(None, Int8Kernel::available)
    }

    /// The fastest kernel at most `cap` that `runs` (AVX-VNNI is not a part of AVX512-VNNI: an
    /// AVX-512 CPU without it capped to `avxvnni` runs AVX2).
    pub fn fastest(cap: Option<Int8Kernel>, runs: impl Fn(Int8Kernel) -> bool) -> Int8Kernel {
        Int8Kernel::ALL
            .into_iter()
            .rev()
            .filter(|&k| cap.is_none_or(|c| k <= c))
            .find(|&k| runs(k))
            .unwrap_or(Int8Kernel::Scalar)
    }

    /// How the kernel reads the activations.
    fn encoding(self) -> Encoding {
        match self {
            Int8Kernel::Scalar | Int8Kernel::Avx2 => Encoding::Signed,
            Int8Kernel::AvxVnni | Int8Kernel::Avx512Vnni | Int8Kernel::Amx => Encoding::Offset,
        }
    }

    /// Rows and columns of its tiles of C.
    fn tile(self) -> (usize, usize) {
        match self {
            Int8Kernel::Amx => (amx::MB, 2 * NP),
            Int8Kernel::Avx512Vnni => (vnni512::MR, 2 * NP),
            Int8Kernel::AvxVnni => (6, NP),
            Int8Kernel::Avx2 | Int8Kernel::Scalar => (4, NP),
        }
    }

    /// The kernel that runs a product of width `k`: AMX takes whole tile steps of 64 k, other
    /// widths run the AVX512-VNNI tile (the same bits).
    fn for_width(self, k: usize) -> Int8Kernel {
        #[cfg(target_arch = "x86_64")]
        if self == Int8Kernel::Amx && (k == 0 || !k.is_multiple_of(amx::KB)) {
            return Int8Kernel::Avx512Vnni;
        }
        let _ = k;
        self
    }

    /// Rows the quantised activations are padded to a multiple of (AMX loads whole tiles, the
    /// AVX512-VNNI tile reads whole ones), and bytes left between rows (AMX: a line, so that a
    /// tile's 16 rows, loaded at the row stride, do not share the L1's sets when k is a
    /// multiple of 1 024).
    fn row_layout(self) -> (usize, usize) {
        match self {
            Int8Kernel::Amx => (2 * 16, 64),
            Int8Kernel::Avx512Vnni => (vnni512::MR, 0),
            _ => (1, 0),
        }
    }

    /// The tiles that run its products: its own, but on AVX512-VNNI the 6×64 tile (four
    /// panels: 10 loads per 24 `vpdpbusd` against the 12×32 tile's 14, and half its padding
    /// rows: the DiT's 41 rows run as 42, not 48). In one process against the 12×32 tile on
    /// Zen 5: the DiT's products 8–19 % faster, the vision tower's 2–7 %, the LLM's within
    /// −1..+11 % (one run −7 %).
    fn shape(self) -> Shape {
        #[cfg(target_arch = "x86_64")]
        if self == Int8Kernel::Avx512Vnni {
            return Shape {
                mr: vnni512::WIDE_MR,
                nr: 4 * NP,
                tile_fn: vnni512::tile_wide,
            };
        }
        self.own_shape()
    }

    /// Its own tiles.
    fn own_shape(self) -> Shape {
        let (mr, nr) = self.tile();
        Shape {
            mr,
            nr,
            tile_fn: self.tile_fn(),
        }
    }

    /// Its tile function (the scalar one off x86-64).
    fn tile_fn(self) -> TileFn {
        #[cfg(target_arch = "x86_64")]
        match self {
            Int8Kernel::Amx => return amx::tile,
            Int8Kernel::Avx512Vnni => return vnni512::tile,
            Int8Kernel::AvxVnni => return ymm::tile_vnni,
            Int8Kernel::Avx2 => return ymm::tile_avx2,
            Int8Kernel::Scalar => {}
        }
        scalar_tile
    }
}

impl std::fmt::Display for Int8Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The tiles a product runs: `mr` × `nr` by `tile_fn`; column tiles narrower than `nr` at the
/// right edge, when `nr` is wider than the kernel's own tile, run the kernel's own.
#[derive(Clone, Copy)]
struct Shape {
    mr: usize,
    nr: usize,
    tile_fn: TileFn,
}

/// One tile of C for a tile function: `rows` rows of quantised activations from `a` (row
/// stride `lda`) by the panels from `panel` (consecutive, `panel_len` bytes each), `cols`
/// valid columns written to `dst` (row stride `ldc`). `scales` and `sums` hold the tile's
/// whole width, `bias` (null when none) only its `cols`.
pub(crate) struct Tile {
    pub(crate) a: *const u8,
    pub(crate) lda: usize,
    pub(crate) rows: usize,
    pub(crate) k4: usize,
    pub(crate) panel: *const i8,
    pub(crate) panel_len: usize,
    pub(crate) row_scales: *const f32,
    pub(crate) scales: *const f32,
    pub(crate) sums: *const i32,
    pub(crate) bias: *const f32,
    pub(crate) dst: *mut f32,
    pub(crate) ldc: usize,
    pub(crate) cols: usize,
    /// A panel to pull into the L2 while the tile runs, one line per step of four k (a hint:
    /// kernels may ignore it; any address, never read).
    pub(crate) prefetch: *const i8,
}

/// A kernel's tile. Safety: its CPU features, and every pointer of the [`Tile`] valid for the
/// extent it describes (rows past `rows` are never stored; the AVX512-VNNI and AMX tiles read
/// them from the padding of whole tiles, the others repeat the last row).
pub(crate) type TileFn = unsafe fn(&Tile);

/// The bytes of activations a row block keeps in the L2 while the column tiles pass over it.
const ROW_BLOCK_BYTES: usize = 256 << 10;

/// Work on each finished run of an output row while the tile that wrote it is still in the
/// L1: `(row, first column, the row's values in those columns)`; each element is in one call.
pub type RowEpilogue<'a> = &'a (dyn Fn(usize, usize, &mut [f32]) + Sync);

/// `a` `[m, k]` · `w`ᵀ (+ `bias` `[n]`) → `[m, n]` row-major through `kernel` (`None` when the
/// CPU does not run it or the sizes do not match), each element then passed once through
/// `after`. The same bits on every kernel and thread count.
pub fn matmul(
    kernel: Int8Kernel,
    a: &[f32],
    m: usize,
    k: usize,
    w: &PackedI8,
    bias: Option<&[f32]>,
    after: Option<RowEpilogue>,
) -> Option<Vec<f32>> {
    let (n, wk) = w.dims();
    if !kernel.available() || wk != k || a.len() != m * k || bias.is_some_and(|b| b.len() != n) {
        return None;
    }
    if m == 0 || n == 0 {
        return Some(Vec::new());
    }
    let kernel = kernel.for_width(k);
    let (row_multiple, gap) = kernel.row_layout();
    // A smoothed weight takes its activations divided per channel by SmoothQuant's factors.
    let q = quantize_scaled_rows(
        a,
        m,
        k,
        w.input_scale(),
        kernel.encoding(),
        row_multiple,
        gap,
    );
    let shape = kernel.shape();
    // Parts of whole tiles of both shapes: rows in steps of the kernel's own tile (so that its
    // tiles, which read whole tiles of rows, stay inside the padded activations).
    let part_tile = (kernel.tile().0.max(shape.mr), shape.nr);
    // SAFETY: the kernel runs here (checked above); each part writes exactly its rows ×
    // columns of the m·n output.
    let out = unsafe {
        split(m, n, part_tile, 2, |rows, cols, dst| {
            unit(kernel, shape, &q, rows, cols, w, bias, after, dst, n)
        })
    };
    Some(out)
}

/// Rows × columns of the product into `dst` (row 0, column 0 of the output, row stride `ldc`):
/// column tiles over blocks of rows that stay in the L2; each tile's rows then through
/// `after`.
///
/// # Safety
/// The kernel's CPU features; `cols.start` a multiple of the kernel's tile width; `dst` valid
/// for those elements, which nothing else touches during the call.
#[allow(clippy::too_many_arguments)]
unsafe fn unit(
    kernel: Int8Kernel,
    shape: Shape,
    q: &QuantRows,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    w: &PackedI8,
    bias: Option<&[f32]>,
    after: Option<RowEpilogue>,
    dst: OutPtr,
    ldc: usize,
) {
    let own = kernel.own_shape();
    let nr = shape.nr;
    // SAFETY: AMX runs here when it is the kernel (`matmul` checked it).
    #[cfg(target_arch = "x86_64")]
    let _tiles = (kernel == Int8Kernel::Amx).then(|| unsafe { amx::Configured::load() });
    let k4 = w.k4();
    // Row blocks of whole tiles of both shapes.
    let step = own.mr.max(shape.mr);
    let mc = (ROW_BLOCK_BYTES / q.ld.max(1) / step).max(1) * step;
    let panel_len = k4 * 4 * NP;
    for b0 in rows.clone().step_by(mc) {
        let b1 = (b0 + mc).min(rows.end);
        for c0 in cols.clone().step_by(nr) {
            let cols_here = nr.min(cols.end - c0);
            let Shape { mr, tile_fn, .. } = if cols_here > own.nr { shape } else { own };
            for (j, r0) in (b0..b1).step_by(mr).enumerate() {
                let prefetch = next_panels(w, (b1 - b0).div_ceil(mr), j, (c0, nr, cols.end))
                    .unwrap_or_else(|| w.panel(c0 / NP).as_ptr());
                let t = Tile {
                    a: q.data.as_ptr().wrapping_add(r0 * q.ld),
                    lda: q.ld,
                    rows: mr.min(b1 - r0),
                    k4,
                    panel: w.panel(c0 / NP).as_ptr(),
                    panel_len,
                    row_scales: q.scales.as_ptr().wrapping_add(r0),
                    scales: w.scales().as_ptr().wrapping_add(c0),
                    sums: w.offset_sums().as_ptr().wrapping_add(c0),
                    bias: bias.map_or(std::ptr::null(), |b| b.as_ptr().wrapping_add(c0)),
                    dst: dst.add(r0 * ldc + c0),
                    ldc,
                    cols: cols_here,
                    prefetch,
                };
                // The next tile's output lines, asked for now so that its stores find them in
                // the L1 rather than each wait for its line from memory.
                let (next_r0, next_c0) = if r0 + mr < b1 {
                    (r0 + mr, c0)
                } else if c0 + nr < cols.end {
                    (b0, c0 + nr)
                } else {
                    (b1, cols.start)
                };
                if next_r0 < rows.end {
                    let next_rows = mr.min(rows.end - next_r0);
                    let next_cols = nr.min(cols.end - next_c0);
                    prefetch_for_write(dst.add(next_r0 * ldc + next_c0), next_rows, next_cols, ldc);
                }
                // SAFETY: the tile's rows and columns lie inside the operands (the scales and
                // sums are padded to whole 32-column tiles, the panels likewise) and inside
                // this unit's part of the output (contract).
                unsafe { tile_fn(&t) };
                if let Some(after) = after {
                    for r in r0..r0 + t.rows {
                        // SAFETY: the elements the tile just wrote, this unit's own (contract).
                        let row = unsafe {
                            std::slice::from_raw_parts_mut(dst.add(r * ldc + c0), cols_here)
                        };
                        after(r, c0, row);
                    }
                }
            }
        }
    }
}

/// Where row tile `j` of a column tile (of `tiles` in its row block) starts pulling the next
/// column tile's panels into the L2, one line per step of four k, or `None` when it has none
/// to pull. The panels stream from memory at an even pace: with few row tiles (the DiT's 41
/// rows are 7) the tiles' starts are spread evenly over the next tile's panels, which they
/// cover together; with many (a vision row block's 42), the first ones pull one panel each,
/// and the others' hints fall on lines already cached. Against the first-ones-only pulls for
/// every product, spreading made the DiT's 41-row products with K = 1 536 3–15 % faster with
/// their weights coming from memory (K = 6 144: ±1 %; alternating in one process, Zen 5).
fn next_panels(
    w: &PackedI8,
    tiles: usize,
    j: usize,
    (c0, nr, end): (usize, usize, usize),
) -> Option<*const i8> {
    let panel_len = w.k4() * 4 * NP;
    let next0 = c0 + nr;
    // The columns are padded to whole 32-column tiles.
    let panels = end.next_multiple_of(2 * NP).saturating_sub(next0).min(nr) / NP;
    let bytes = panels * panel_len;
    let start = if tiles < SPREAD_BELOW_TILES {
        // Each tile pulls one panel's worth of lines (k4 of them) from its start.
        let stride = (bytes / tiles.max(1)).next_multiple_of(64);
        (j * stride).min(bytes.saturating_sub(panel_len))
    } else {
        j * panel_len
    };
    (start < bytes).then(|| w.panel(next0 / NP).as_ptr().wrapping_add(start))
}

/// Row tiles per column tile below which [`next_panels`] spreads the pulls over all of them.
const SPREAD_BELOW_TILES: usize = 16;

/// Prefetches with intent to write the lines of `rows` × `cols` elements at `p` (row stride
/// `ld`; every 16th element of a row and its last, since a run that does not start a line
/// spans one line more). A product's stores miss otherwise (its output is too big for the
/// caches), each holding a store-buffer entry until its line arrives: asking one tile ahead
/// made the K = 1 024 vision products 2–14 % faster (alternating in one process). Any
/// address: prefetches never fault.
#[inline(always)]
fn prefetch_for_write(p: *mut f32, rows: usize, cols: usize, ld: usize) {
    #[cfg(target_arch = "x86_64")]
    for r in 0..rows {
        let row = p.wrapping_add(r * ld).cast_const();
        for c in (0..cols).step_by(NP).chain([cols - 1]) {
            // SAFETY: SSE is part of every x86-64 CPU; `prefetchw` is a no-op hint where the
            // CPU lacks it.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_ET0 }>(
                    row.wrapping_add(c).cast(),
                )
            };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, rows, cols, ld);
}

/// The scalar tile: each element's exact i32 sum, then the epilogue of the module docs.
///
/// # Safety
/// The [`Tile`]'s pointers valid as it describes; the activations s8 ([`Encoding::Signed`]).
unsafe fn scalar_tile(t: &Tile) {
    for r in 0..t.rows {
        for c in 0..t.cols {
            let mut acc = 0i32;
            // SAFETY: row r's 4·k4 bytes and column c's panel bytes are inside the operands.
            unsafe {
                let a = t.a.add(r * t.lda);
                let panel = t.panel.add(c / NP * t.panel_len);
                for g in 0..t.k4 {
                    for i in 0..4 {
                        let x = *a.add(4 * g + i) as i8;
                        let wq = *panel.add(g * 4 * NP + (c % NP) * 4 + i);
                        acc += i32::from(x) * i32::from(wq);
                    }
                }
                let b = if t.bias.is_null() {
                    0.0
                } else {
                    *t.bias.add(c)
                };
                *t.dst.add(r * t.ldc + c) =
                    epilogue(acc, *t.row_scales.add(r), *t.scales.add(c), b);
            }
        }
    }
}

/// One element from its exact sum: `fma(sum as f32, s_a·s_b, bias)`.
#[inline(always)]
pub(crate) fn epilogue(acc: i32, sa: f32, sb: f32, bias: f32) -> f32 {
    (acc as f32).mul_add(sa * sb, bias)
}

#[cfg(test)]
mod tests;

/// What the AVX-512 epilogues need of column vector `v` (16 columns from `v·16`) of a 32-column
/// tile: the tile's column of its first lane, the store mask, the weight scales and the bias
/// (masked; zero without one); `None` past the tile's columns.
///
/// # Safety
/// AVX-512F; the [`Tile`]'s scales (whole tiles) and bias valid as it describes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn column_lanes(
    t: &Tile,
    v: usize,
) -> Option<(
    usize,
    std::arch::x86_64::__mmask16,
    std::arch::x86_64::__m512,
    std::arch::x86_64::__m512,
)> {
    use std::arch::x86_64::*;
    let c0 = v * NP;
    if c0 >= t.cols {
        return None;
    }
    let valid = (t.cols - c0).min(NP);
    let mask: __mmask16 = if valid == NP { !0 } else { (1u16 << valid) - 1 };
    // SAFETY: the scales cover whole tiles; the bias its `cols` (masked) (contract).
    unsafe {
        let sb = _mm512_loadu_ps(t.scales.add(c0));
        let bias = if t.bias.is_null() {
            _mm512_setzero_ps()
        } else {
            _mm512_maskz_loadu_ps(mask, t.bias.add(c0))
        };
        Some((c0, mask, sb, bias))
    }
}

/// [`epilogue`] on 16 lanes: the same roundings (`vcvtdq2ps` rounds to nearest even as `as
/// f32` does, one `vmulps`, one `vfmadd`).
///
/// # Safety
/// AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn epilogue_lanes(
    acc: std::arch::x86_64::__m512i,
    sa: f32,
    sb: std::arch::x86_64::__m512,
    bias: std::arch::x86_64::__m512,
) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let scale = _mm512_mul_ps(_mm512_set1_ps(sa), sb);
    _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), scale, bias)
}
