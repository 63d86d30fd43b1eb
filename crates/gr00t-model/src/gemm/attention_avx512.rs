//! The two f32 products of one CPU attention block on AVX-512 (`nn/cpu_attention.rs` with f32
//! operands): scores `S = scale·(Q·Kᵀ)` and outputs `O = P·V`, every operand read in place at
//! its row stride. The `gemm` crate packs both operands on every call and is tuned for large
//! matrices; an attention block is small (the DiT's: 41 queries, 21–448 keys, head width 48),
//! and there it ran at 28–56 GFLOP/s on two Zen 4 cores. Here only K is rearranged: 32 keys at
//! a time are transposed in registers into an L1 buffer (`[Dh][32]`), which every query row
//! tile then reads. Each output element is one FMA chain over k in order, started from zero
//! (the scale applied after), so the bits depend on neither the block nor the thread count.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;
#[cfg(target_arch = "x86_64")]
use std::cell::RefCell;

/// Floats per vector.
const LANES: usize = 16;
/// Keys per transposed panel of K (two vectors).
const KEYS: usize = 2 * LANES;
/// Query rows per score tile (8 × 2 sums).
const SCORE_ROWS: usize = 8;

/// `$call` with `$r` a constant equal to `$rows` (1 to 8): a tile's row count as a const
/// generic (its sums stay in registers).
#[rustfmt::skip]
macro_rules! with_rows {
    ($rows:expr, |$r:ident| $call:expr) => {
        match $rows {
            8 => { const $r: usize = 8; $call }
            7 => { const $r: usize = 7; $call }
            6 => { const $r: usize = 6; $call }
            5 => { const $r: usize = 5; $call }
            4 => { const $r: usize = 4; $call }
            3 => { const $r: usize = 3; $call }
            2 => { const $r: usize = 2; $call }
            _ => { const $r: usize = 1; $call }
        }
    };
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// Per-thread transposed key panel `[Dh][KEYS]`, reused across calls.
    static PANEL: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Whether the kernel runs here for head width `dh`: AVX-512F and whole vectors per row.
pub(crate) fn applies(dh: usize) -> bool {
    dh > 0 && dh.is_multiple_of(LANES) && super::driver::has_features!("avx512f")
}

/// `s[i·lds + j] = scale·(q_i · k_j)` for query rows `i < m` (row `i` at `q + i·qs`) and keys
/// `j < n` (row `j` at `k + j·ks`), each row `dh` floats.
///
/// # Safety
/// [`applies`]`(dh)`; every row addressed lies inside its buffer; `s` holds `m` rows of
/// `lds ≥ n` floats and is the caller's alone.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn scores(
    (q, qs, m): (*const f32, usize, usize),
    (k, ks, n): (*const f32, usize, usize),
    dh: usize,
    scale: f32,
    (s, lds): (*mut f32, usize),
) {
    PANEL.with(|panel| {
        let mut panel = panel.borrow_mut();
        if panel.len() < dh * KEYS {
            panel.resize(dh * KEYS, 0.0);
        }
        let kt = panel.as_mut_ptr();
        let scale = _mm512_set1_ps(scale);
        for j0 in (0..n).step_by(KEYS) {
            let keys = KEYS.min(n - j0);
            transpose_keys(k.add(j0 * ks), ks, keys, dh, kt);
            let masks = [key_mask(keys), key_mask(keys.saturating_sub(LANES))];
            let mut i0 = 0;
            while i0 < m {
                let rows = SCORE_ROWS.min(m - i0);
                let tile = ScoreTile {
                    q: q.add(i0 * qs),
                    qs,
                    kt,
                    dh,
                    scale,
                    s: s.add(i0 * lds + j0),
                    lds,
                    masks,
                };
                with_rows!(rows, |R| score_tile::<R>(tile));
                i0 += rows;
            }
        }
    })
}

/// `o[i·os + c] = Σ_j p[i·lds + j]·v[j·vs + c]` for rows `i < m`, keys `j < n` (in order) and
/// `c < dh`.
///
/// # Safety
/// [`applies`]`(dh)`; every row addressed lies inside its buffer; `o` holds `m` rows of `dh`
/// floats at stride `os`, the caller's alone, not overlapping `p` or `v`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn weighted_values(
    (p, lds, m): (*const f32, usize, usize),
    (v, vs, n): (*const f32, usize, usize),
    dh: usize,
    (o, os): (*mut f32, usize),
) {
    let mut c0 = 0;
    while c0 < dh {
        // Up to four vectors of each row at once; 24 sums at most.
        let vecs = ((dh - c0) / LANES).min(4);
        let max_rows = if vecs == 4 { 6 } else { 8 };
        let mut i0 = 0;
        while i0 < m {
            let rows = max_rows.min(m - i0);
            let tile = ValueTile {
                p: p.add(i0 * lds),
                lds,
                v: v.add(c0),
                vs,
                n,
                o: o.add(i0 * os + c0),
                os,
            };
            match vecs {
                4 => with_rows!(rows, |R| value_tile::<R, 4>(tile)),
                3 => with_rows!(rows, |R| value_tile::<R, 3>(tile)),
                2 => with_rows!(rows, |R| value_tile::<R, 2>(tile)),
                _ => with_rows!(rows, |R| value_tile::<R, 1>(tile)),
            }
            i0 += rows;
        }
        c0 += vecs * LANES;
    }
}

/// The first `n` (≤ 16) lanes.
#[cfg(target_arch = "x86_64")]
fn key_mask(n: usize) -> __mmask16 {
    ((1u32 << n.min(LANES)) - 1) as __mmask16
}

/// Writes keys `0..keys` (≤ [`KEYS`], row `j` at `k + j·ks`) transposed to `kt` `[dh][KEYS]`,
/// zeros for the missing keys.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn transpose_keys(k: *const f32, ks: usize, keys: usize, dh: usize, kt: *mut f32) {
    for half in 0..2 {
        let first = half * LANES;
        for d0 in (0..dh).step_by(LANES) {
            let mut rows = [_mm512_setzero_ps(); LANES];
            for (r, row) in rows.iter_mut().enumerate() {
                if first + r < keys {
                    *row = _mm512_loadu_ps(k.add((first + r) * ks + d0));
                }
            }
            let cols = transpose16(rows);
            for (dd, col) in cols.iter().enumerate() {
                _mm512_storeu_ps(kt.add((d0 + dd) * KEYS + first), *col);
            }
        }
    }
}

/// The 16×16 transpose of `rows`, in four butterfly stages: stage `b` swaps bit `b` of the row
/// index with bit `b` of the column index.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
fn transpose16(mut rows: [__m512; LANES]) -> [__m512; LANES] {
    for (b, [lo, hi]) in STAGES.iter().enumerate() {
        let bit = 1 << b;
        // Row r (bit b clear) takes its columns with bit b clear from itself and the others
        // from row r + bit (shifted down); row r + bit the mirror image.
        // SAFETY: 16 i32 read from each 16-element table row.
        let (lo, hi) = unsafe {
            (
                _mm512_loadu_si512(lo.as_ptr().cast()),
                _mm512_loadu_si512(hi.as_ptr().cast()),
            )
        };
        for r in (0..LANES).filter(|r| r & bit == 0) {
            let (a, c) = (rows[r], rows[r + bit]);
            rows[r] = _mm512_permutex2var_ps(a, lo, c);
            rows[r + bit] = _mm512_permutex2var_ps(a, hi, c);
        }
    }
    rows
}

/// `vpermt2ps` indices of the four butterfly stages (see [`transpose16`]), for the row with
/// bit `b` clear and the row with it set: index `x < 16` picks lane `x` of the first row,
/// `16 + x` lane `x` of the second.
const STAGES: [[[i32; LANES]; 2]; 4] = {
    let mut t = [[[0i32; LANES]; 2]; 4];
    let mut b = 0;
    while b < 4 {
        let bit = 1 << b;
        let mut c = 0;
        while c < LANES {
            if c & bit == 0 {
                t[b][0][c] = c as i32;
                t[b][1][c] = (c + bit) as i32;
            } else {
                t[b][0][c] = (LANES + c - bit) as i32;
                t[b][1][c] = (LANES + c) as i32;
            }
            c += 1;
        }
        b += 1;
    }
    t
};

/// One score tile's operands: up to [`SCORE_ROWS`] query rows against a transposed panel.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct ScoreTile {
    q: *const f32,
    qs: usize,
    kt: *const f32,
    dh: usize,
    scale: __m512,
    s: *mut f32,
    lds: usize,
    /// The panel's keys present in each of its two vectors.
    masks: [__mmask16; 2],
}

/// `R` query rows × the panel's 32 keys: sums in 2R registers.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn score_tile<const R: usize>(t: ScoreTile) {
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    for d in 0..t.dh {
        let b0 = _mm512_loadu_ps(t.kt.add(d * KEYS));
        let b1 = _mm512_loadu_ps(t.kt.add(d * KEYS + LANES));
        for (r, sums) in acc.iter_mut().enumerate() {
            let a = _mm512_set1_ps(*t.q.add(r * t.qs + d));
            sums[0] = _mm512_fmadd_ps(a, b0, sums[0]);
            sums[1] = _mm512_fmadd_ps(a, b1, sums[1]);
        }
    }
    for (r, sums) in acc.iter().enumerate() {
        let row = t.s.add(r * t.lds);
        _mm512_mask_storeu_ps(row, t.masks[0], _mm512_mul_ps(sums[0], t.scale));
        if t.masks[1] != 0 {
            _mm512_mask_storeu_ps(row.add(LANES), t.masks[1], _mm512_mul_ps(sums[1], t.scale));
        }
    }
}

/// One output tile's operands: up to 8 rows of weights against `C` vectors of V's rows.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct ValueTile {
    p: *const f32,
    lds: usize,
    v: *const f32,
    vs: usize,
    n: usize,
    o: *mut f32,
    os: usize,
}

/// `R` rows × `C` vectors of outputs: sums in R·C registers, keys in order.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn value_tile<const R: usize, const C: usize>(t: ValueTile) {
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    for j in 0..t.n {
        let row = t.v.add(j * t.vs);
        let mut b = [_mm512_setzero_ps(); C];
        for (c, bc) in b.iter_mut().enumerate() {
            *bc = _mm512_loadu_ps(row.add(c * LANES));
        }
        for (r, sums) in acc.iter_mut().enumerate() {
            let a = _mm512_set1_ps(*t.p.add(r * t.lds + j));
            for (sum, bc) in sums.iter_mut().zip(&b) {
                *sum = _mm512_fmadd_ps(a, *bc, *sum);
            }
        }
    }
    for (r, sums) in acc.iter().enumerate() {
        for (c, sum) in sums.iter().enumerate() {
            _mm512_storeu_ps(t.o.add(r * t.os + c * LANES), *sum);
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::{applies, scores, transpose16, weighted_values, LANES};
    use std::arch::x86_64::*;

    #[test]
    fn transpose16_swaps_rows_and_columns() {
        if !applies(LANES) {
            return;
        }
        let m: Vec<f32> = (0..256).map(|x| x as f32).collect();
        // SAFETY: AVX-512F checked; 16 rows of 16 floats read and written.
        let t = unsafe {
            let mut rows = [_mm512_setzero_ps(); LANES];
            for (r, row) in rows.iter_mut().enumerate() {
                *row = _mm512_loadu_ps(m[r * 16..].as_ptr());
            }
            let cols = transpose16(rows);
            let mut t = vec![0f32; 256];
            for (c, col) in cols.iter().enumerate() {
                _mm512_storeu_ps(t[c * 16..].as_mut_ptr(), *col);
            }
            t
        };
        for r in 0..16 {
            for c in 0..16 {
                assert_eq!(t[c * 16 + r], m[r * 16 + c], "({r}, {c})");
            }
        }
    }

    /// Both products against one FMA chain per element in f32 (the kernel's order, so the
    /// bits must match), over odd row and key counts, strided rows and several head widths.
    #[test]
    fn products_give_the_bits_of_one_fma_chain_per_element() {
        if !applies(LANES) {
            return;
        }
        let mut rnd = crate::test_rng::xorshift(0xa77e);
        for (m, n, dh) in [
            (41, 448, 48),
            (41, 21, 48),
            (1, 1, 16),
            (9, 33, 64),
            (64, 469, 128),
            (13, 17, 80),
        ] {
            // Rows padded by 5 floats to test the strides.
            let (qs, ks, vs, lds, os) = (dh + 5, dh + 3, dh + 7, n + 2, dh + 1);
            let q: Vec<f32> = (0..m * qs).map(|_| rnd()).collect();
            let k: Vec<f32> = (0..n * ks).map(|_| rnd()).collect();
            let v: Vec<f32> = (0..n * vs).map(|_| rnd()).collect();
            let scale = 0.3f32;
            let mut s = vec![f32::NAN; m * lds];
            let mut o = vec![f32::NAN; m * os];
            // SAFETY: AVX-512F checked; every buffer holds the rows its strides address.
            unsafe {
                scores(
                    (q.as_ptr(), qs, m),
                    (k.as_ptr(), ks, n),
                    dh,
                    scale,
                    (s.as_mut_ptr(), lds),
                );
                weighted_values(
                    (s.as_ptr(), lds, m),
                    (v.as_ptr(), vs, n),
                    dh,
                    (o.as_mut_ptr(), os),
                );
            }
            for i in 0..m {
                for j in 0..n {
                    let dot =
                        (0..dh).fold(0f32, |acc, d| q[i * qs + d].mul_add(k[j * ks + d], acc));
                    let want = dot * scale;
                    assert_eq!(
                        s[i * lds + j].to_bits(),
                        want.to_bits(),
                        "{m}×{n}×{dh} s[{i},{j}]"
                    );
                }
                // The padding after each score row is untouched.
                assert!(s[i * lds + n].is_nan(), "{m}×{n}×{dh}: row {i} overran");
                for c in 0..dh {
                    let want =
                        (0..n).fold(0f32, |acc, j| s[i * lds + j].mul_add(v[j * vs + c], acc));
                    assert_eq!(
                        o[i * os + c].to_bits(),
                        want.to_bits(),
                        "{m}×{n}×{dh} o[{i},{c}]"
                    );
                }
                assert!(
                    o[i * os + dh].is_nan(),
                    "{m}×{n}×{dh}: output row {i} overran"
                );
            }
        }
    }
}
