//! What the kernels' drivers share: the CPU feature checks, the operand checks, a 64-byte
//! aligned scratch, and the one driver of the two kernels on VNNI pairs ([`VnniKernel`]),
//! which differ only in their unit.

use super::out_ptr::{product, OutPtr};
use super::{PackLayout, PackedBf16};

/// Whether this CPU has every named x86 feature (`false` off x86-64).
macro_rules! has_features {
    ($($feature:tt),+) => {{
        #[cfg(target_arch = "x86_64")]
        {
            $(std::arch::is_x86_feature_detected!($feature))&&+
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }};
}
pub(crate) use has_features;

/// Whether `a` `[m, k]`, a packed `w` `[n, k]` in `layout` and a `bias` `[n]` make one product.
pub(crate) fn fits(
    a: &[f32],
    m: usize,
    k: usize,
    w: &PackedBf16,
    layout: PackLayout,
    bias: Option<&[f32]>,
) -> bool {
    let (n, wk) = w.dims();
    wk == k && a.len() == m * k && bias.is_none_or(|v| v.len() == n) && w.layout() == layout
}

/// A reusable scratch buffer of 4-byte elements (f32 or u32) whose slices start at a 64-byte
/// boundary, so that packed rows never straddle cache lines.
pub(crate) struct AlignedBuf<T> {
    buf: Vec<T>,
}

impl<T: Copy + Default> AlignedBuf<T> {
    /// An empty buffer.
    pub(crate) const fn new() -> AlignedBuf<T> {
        AlignedBuf { buf: Vec::new() }
    }

    /// `len` elements at a 64-byte boundary (contents unspecified).
    pub(crate) fn take(&mut self, len: usize) -> &mut [T] {
        // 16 elements are the 64 bytes an aligned start may need.
        const { assert!(std::mem::size_of::<T>() == 4) };
        if self.buf.len() < len + 16 {
            self.buf.resize(len + 16, T::default());
        }
        let off = self.buf.as_ptr().align_offset(64).min(16);
        &mut self.buf[off..off + len]
    }
}

/// The rows of A a VNNI unit multiplies: `m` rows of `k` values at row stride `lda`.
#[derive(Clone, Copy)]
pub(crate) struct Lhs<'a> {
    pub(crate) a: &'a [f32],
    pub(crate) lda: usize,
    pub(crate) m: usize,
    pub(crate) k: usize,
}

/// A VNNI kernel's unit: columns `n0..n1` of the product of `lhs` (its k at most the weight's K:
/// the first k of every column) and `w` (+ `bias`), written through `dst` at row stride `ldc`.
///
/// Each unit's safety contract: the kernel's CPU features; `dst + i·ldc + j` writable for
/// `i < lhs.m`, `j` in `n0..n1`, with nothing else touching those elements during the call;
/// `n0` a multiple of NR, `n1` at most the weight's n; `bias` holds n.
pub(crate) type VnniUnit = unsafe fn(Lhs, &PackedBf16, usize, usize, Option<&[f32]>, OutPtr, usize);

/// A kernel on [`PackLayout::VnniPairs`] (`avx512bf16`, `amx`): `bf16(a)`·`w`ᵀ with `a`
/// rounded to bf16 (round to nearest even) while it is packed.
pub(crate) struct VnniKernel {
    /// Whether this CPU runs the kernel.
    pub(crate) available: fn() -> bool,
    /// Its unit, run only where `available` says so.
    pub(crate) unit: VnniUnit,
    /// Rows and columns of its blocks of C: the threads split the output in whole ones.
    pub(crate) tile: (usize, usize),
    /// [`product`]'s `rows_over_cols` for a product of m rows.
    pub(crate) rows_over_cols: fn(usize) -> usize,
}

impl VnniKernel {
    /// `bf16(a)` `[m, k]` · `w`ᵀ (+ `bias` `[n]` on every row) → `[m, n]` row-major, or `None`
    /// when the CPU does not run the kernel, `w` is not in VNNI pairs or the lengths do not
    /// match.
    pub(crate) fn matmul(
        &self,
        a: &[f32],
        m: usize,
        k: usize,
        w: &PackedBf16,
        bias: Option<&[f32]>,
    ) -> Option<Vec<f32>> {
        if !(self.available)() || !fits(a, m, k, w, PackLayout::VnniPairs, bias) {
            return None;
        }
        let n = w.dims().0;
        let part = |rows: &[f32], mr: usize, n0: usize, n1: usize, dst: OutPtr| {
            let lhs = Lhs {
                a: rows,
                lda: k,
                m: mr,
                k,
            };
            // SAFETY: the CPU runs the kernel (checked above); `dst` points at the first of the
            // `mr` rows of the m·n output; every element of those rows × columns n0..n1 lies in
            // exactly one block, whose first K block writes it from the bias (or zero) without
            // reading it.
            unsafe { (self.unit)(lhs, w, n0, n1, bias, dst, n) }
        };
        let rows_over_cols = (self.rows_over_cols)(m);
        // SAFETY: `part` writes exactly its rows × columns (above).
        Some(unsafe { product(a, (m, n, k), bias, self.tile, rows_over_cols, part) })
    }

    /// On the calling thread (for callers already inside their own parallel tasks, such as the
    /// attention's): `dst[i·ldc + j] = Σ_{p<k} bf16(a[i·lda + p])·w[j, p]` for `i < m`, `j < n`
    /// (`lhs` gives a, lda, m and k), over the first `n` columns and the first `k` of K of `w`
    /// (a causal block's visible keys). `false` (nothing written) when the CPU does not run
    /// the kernel, `w` is not in VNNI pairs or the sizes do not fit.
    ///
    /// # Safety
    /// `dst` must be valid for writes at `i·ldc + j` for `i < m`, `j < n`, and nothing else may
    /// access those elements during the call.
    pub(crate) unsafe fn matmul_to(
        &self,
        lhs: Lhs,
        w: &PackedBf16,
        n: usize,
        dst: *mut f32,
        ldc: usize,
    ) -> bool {
        let Lhs { a, lda, m, k } = lhs;
        let (wn, wk) = w.dims();
        let fits =
            n <= wn && k <= wk && lda >= k && ldc >= n && (m == 0 || a.len() >= (m - 1) * lda + k);
        if !(self.available)() || w.layout() != PackLayout::VnniPairs || !fits {
            return false;
        }
        if m == 0 || n == 0 {
            return true;
        }
        if k == 0 {
            for i in 0..m {
                // SAFETY: row i's first n elements are the caller's (contract).
                unsafe { std::slice::from_raw_parts_mut(dst.add(i * ldc), n).fill(0.0) };
            }
            return true;
        }
        // SAFETY: the CPU runs the kernel (checked above); `dst` is valid for rows 0..m ×
        // columns 0..n at stride ldc (contract), every element of which lies in exactly one
        // block, the first K block writing it from zero.
        unsafe { (self.unit)(lhs, w, 0, n, None, OutPtr(dst), ldc) };
        true
    }
}

/// The unit of a VNNI kernel off x86-64, where no kernel runs (`available` is false there).
#[cfg(not(target_arch = "x86_64"))]
pub(crate) unsafe fn no_unit(
    _: Lhs,
    _: &PackedBf16,
    _: usize,
    _: usize,
    _: Option<&[f32]>,
    _: OutPtr,
    _: usize,
) {
    unreachable!("no hand-written kernel runs off x86-64")
}
