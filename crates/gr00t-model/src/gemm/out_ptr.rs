//! An output buffer's raw pointer shared by parallel workers, each of which writes only its
//! own disjoint elements (GEMM tiles, weight slabs, attention rows), the split of a fresh
//! product among the threads, and fresh elementwise outputs filled in parallel chunks.

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

/// A fresh `len`-element buffer whose chunks of `chunk` elements (the last may be shorter) are
/// set to `init` and then passed to `fill(start, chunk)` on the rayon pool. Each chunk is
/// initialised by the task that fills it, while it is in that core's cache: `vec![init; len]`
/// would first write the whole buffer on the calling thread alone (a serial `memset` of a
/// large activation costs about as much as the elementwise kernel that overwrites it).
pub(crate) fn par_fresh<T, F>(len: usize, chunk: usize, init: T, fill: F) -> Vec<T>
where
    T: Copy + Send + Sync,
    F: Fn(usize, &mut [T]) + Sync,
{
    use rayon::prelude::*;
    use std::mem::MaybeUninit;
    let chunk = chunk.max(1);
    let mut out: Vec<MaybeUninit<T>> = Vec::with_capacity(len);
    // SAFETY: `MaybeUninit` elements need no initialisation.
    unsafe { out.set_len(len) };
    let one = |(i, part): (usize, &mut [MaybeUninit<T>])| {
        for v in part.iter_mut() {
            v.write(init);
        }
        // SAFETY: every element of `part` was written just above; `MaybeUninit<T>` has the
        // layout of `T`.
        let part = unsafe { &mut *(part as *mut [MaybeUninit<T>] as *mut [T]) };
        fill(i * chunk, part);
    };
    if len > chunk {
        out.par_chunks_mut(chunk).enumerate().for_each(one);
    } else if len > 0 {
        one((0, &mut out[..]));
    }
    let mut out = std::mem::ManuallyDrop::new(out);
    // SAFETY: every chunk was initialised above; same allocation, length and capacity, and
    // `MaybeUninit<T>` has the layout of `T`.
    unsafe { Vec::from_raw_parts(out.as_mut_ptr().cast::<T>(), len, out.capacity()) }
}

#[cfg(test)]
mod tests {
    use super::par_fresh;

    #[test]
    fn par_fresh_initialises_and_fills_every_chunk_at_its_offset() {
        for (len, chunk) in [(0, 4), (3, 4), (4, 4), (1_000_003, 65_536), (10, 0)] {
            // Every other chunk's fill writes only its first element: the rest must be `init`.
            let out = par_fresh(len, chunk, 7u32, |start, part| {
                part[0] = start as u32;
            });
            assert_eq!(out.len(), len);
            let c = chunk.max(1);
            for (i, &v) in out.iter().enumerate() {
                let want = if i % c == 0 { i as u32 } else { 7 };
                assert_eq!(v, want, "len {len} chunk {chunk} at {i}");
            }
        }
    }
}
