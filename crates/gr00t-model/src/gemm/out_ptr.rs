//! An output buffer's raw pointer shared by parallel workers, each of which writes only its
//! own disjoint elements (GEMM tiles, weight slabs, attention rows), and the split of a fresh
//! product among the threads.

/// A `*mut f32` that can cross into rayon tasks.
#[derive(Clone, Copy)]
pub(crate) struct OutPtr(pub(crate) *mut f32);

// SAFETY: the workers holding copies write disjoint elements of one live buffer; the pointer
// itself is never mutated.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// The pointer `off` elements in (a method, so closures capture the whole `Sync` wrapper).
    pub(crate) fn add(self, off: usize) -> *mut f32 {
        self.0.wrapping_add(off)
    }
}

/// The `[m, n]` product over `k` terms of the rows of `a` `[m, k]`, filled on the rayon pool
/// by `part(rows, mr, n0, n1, dst)` for the `mr` rows `r0..r0+mr` of `a` and columns `n0..n1`,
/// `dst` pointing at row `r0` of the output; without terms, rows or columns the bias on every
/// row (or zero), without calling `part`. The threads split the longer side in whole tiles of
/// `tile` (rows, columns): by rows when there are more than `rows_over_cols` times as many row
/// tiles as column tiles (the other operand is then repacked by every thread, the cheaper
/// duplication).
///
/// # Safety
/// `a` holds m·k values; `part` must write every element of its rows × columns `n0..n1` (row
/// stride n) through `dst`, and nothing else.
pub(crate) unsafe fn product<F>(
    a: &[f32],
    (m, n, k): (usize, usize, usize),
    bias: Option<&[f32]>,
    tile: (usize, usize),
    rows_over_cols: usize,
    part: F,
) -> Vec<f32>
where
    F: Fn(&[f32], usize, usize, usize, OutPtr) + Sync,
{
    if m == 0 || n == 0 || k == 0 {
        return product_without_terms(m, n, bias);
    }
    // SAFETY: `part` writes every element of its rows × columns (contract).
    unsafe {
        split(m, n, tile, rows_over_cols, |rows, cols, dst| {
            let (r0, r1) = (rows.start, rows.end);
            part(
                &a[r0 * k..r1 * k],
                r1 - r0,
                cols.start,
                cols.end,
                OutPtr(dst.add(r0 * n)),
            );
        })
    }
}

/// A fresh `[m, n]` output (m, n > 0) filled on the rayon pool by `part(rows, cols, dst)`,
/// `dst` pointing at row 0, column 0 (row stride n). The threads split the longer side in whole
/// tiles of `tile` (rows, columns): by rows when there are more than `rows_over_cols` times as
/// many row tiles as column tiles; each part gets all of the other side.
///
/// # Safety
/// `part` must write every element of its rows × columns through `dst`, and nothing else.
pub(crate) unsafe fn split<F>(
    m: usize,
    n: usize,
    (mr, nr): (usize, usize),
    rows_over_cols: usize,
    part: F,
) -> Vec<f32>
where
    F: Fn(std::ops::Range<usize>, std::ops::Range<usize>, OutPtr) + Sync,
{
    use rayon::prelude::*;
    // Not initialised: the parts write every element.
    let mut out: Vec<f32> = Vec::with_capacity(m * n);
    let threads = rayon::current_num_threads().max(1);
    let by_rows = m.div_ceil(mr) > n.div_ceil(nr) * rows_over_cols;
    let (tiles, size, len) = if by_rows {
        (m.div_ceil(mr), mr, m)
    } else {
        (n.div_ceil(nr), nr, n)
    };
    let per = tiles.div_ceil(threads.min(tiles)) * size;
    let units = len.div_ceil(per);
    let dst = OutPtr(out.as_mut_ptr());
    let run = |u: usize| {
        let (s0, s1) = (u * per, ((u + 1) * per).min(len));
        if by_rows {
            part(s0..s1, 0..n, dst);
        } else {
            part(0..m, s0..s1, dst);
        }
    };
    if units == 1 {
        run(0);
    } else {
        (0..units).into_par_iter().for_each(run);
    }
    // SAFETY: the parts cover rows 0..m × columns 0..n and wrote each element (contract).
    unsafe { out.set_len(m * n) };
    out
}

/// The `[m, n]` product over an empty K (or of no rows or columns): the bias on every row, or
/// zero.
fn product_without_terms(m: usize, n: usize, bias: Option<&[f32]>) -> Vec<f32> {
    match bias {
        Some(v) => v.repeat(m),
        None => vec![0f32; m * n],
    }
}
