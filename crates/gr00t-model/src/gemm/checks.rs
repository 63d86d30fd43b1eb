//! Checks shared by the tests of the two kernels on VNNI pairs (`gemm/avx512bf16.rs`,
//! `gemm/amx.rs`), which take the same arguments and differ only in how they round inside a
//! sum.

use super::{Lhs, PackLayout, PackedBf16, VnniKernel};
use half::bf16;

/// Checks one output `got` against its row of activations and column of weights.
pub(crate) type Element = fn(got: f32, a: &[f32], w: &[bf16]);

/// `m` rows of `k` values of `a` at row stride `lda`.
fn lhs(a: &[f32], lda: usize, m: usize, k: usize) -> Lhs<'_> {
    Lhs { a, lda, m, k }
}

/// `w` `[n, k]` packed as VNNI pairs.
pub(crate) fn vnni(w: &[bf16], n: usize, k: usize) -> PackedBf16 {
    PackedBf16::with_layout(w, n, k, PackLayout::VnniPairs).unwrap()
}

/// The exact product of the bf16-rounded activations `a` and the weights `w` (f64), and the
/// sum of its terms' magnitudes.
pub(crate) fn exact_dot(a: &[f32], w: &[bf16]) -> (f64, f64) {
    a.iter().zip(w).fold((0.0, 0.0), |(dot, mag), (x, w)| {
        let p = bf16::from_f32(*x).to_f64() * w.to_f64();
        (dot + p, mag + p.abs())
    })
}

/// On activations with more than 8 significant bits (their rounding to bf16 is part of the
/// product) and weights in quarters every partial sum is exact in f32, so any kernel's
/// output is the exact product of the rounded activations (plus the bias).
pub(crate) fn exact_on_dyadic_inputs(kernel: &VnniKernel, shapes: &[(usize, usize, usize)]) {
    for &(m, n, k) in shapes {
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 37 % 1021) as f32 - 510.0) / 512.0)
            .collect();
        let w: Vec<bf16> = (0..n * k)
            .map(|i| bf16::from_f32(((i * 5 % 11) as f32 - 5.0) / 4.0))
            .collect();
        let bias: Vec<f32> = (0..n).map(|j| j as f32 / 16.0).collect();
        let packed = vnni(&w, n, k);
        for bias in [None, Some(&bias[..])] {
            let y = kernel.matmul(&a, m, k, &packed, bias).unwrap();
            for i in 0..m {
                for j in 0..n {
                    let (dot, _) = exact_dot(&a[i * k..][..k], &w[j * k..][..k]);
                    let want = dot + bias.map_or(0.0, |b| b[j] as f64);
                    assert_eq!(y[i * n + j] as f64, want, "{m}x{n}x{k} ({i}, {j})");
                }
            }
        }
    }
}

/// The bits of `matmul` on `[m, k]`·`[n, k]`ᵀ repeat, and do not change with the rows asked
/// for (`row_ranges`) nor with the thread count.
pub(crate) fn bits_do_not_depend_on_rows_threads_or_repeats(
    kernel: &VnniKernel,
    (m, n, k): (usize, usize, usize),
    row_ranges: &[(usize, usize)],
) {
    let mut rnd = crate::test_rng::lcg(7u32);
    let a: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
    let w: Vec<bf16> = (0..n * k).map(|_| bf16::from_f32(rnd())).collect();
    let bias: Vec<f32> = (0..n).map(|_| rnd()).collect();
    let p = vnni(&w, n, k);
    let all = kernel.matmul(&a, m, k, &p, Some(&bias)).unwrap();
    assert_eq!(
        kernel.matmul(&a, m, k, &p, Some(&bias)).unwrap(),
        all,
        "repeat"
    );
    for &(r0, r1) in row_ranges {
        let part = kernel
            .matmul(&a[r0 * k..r1 * k], r1 - r0, k, &p, Some(&bias))
            .unwrap();
        assert_eq!(part, all[r0 * n..r1 * n], "rows {r0}..{r1}");
    }
    for threads in [1, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let y = pool.install(|| kernel.matmul(&a, m, k, &p, Some(&bias)).unwrap());
        assert_eq!(y, all, "{threads} threads");
    }
}

/// `matmul_to` over each case `(m, lda, k, weight n, weight k, n, ldc)` (odd k prefixes,
/// partial panels, strides; `extra` adds the kernel's block edges) writes exactly rows `< m` ×
/// columns `< n` (each checked by `element` against its strided row of A and the first k of
/// its weight column), and refuses too wide a prefix, a short stride and the f32 layout.
pub(crate) fn matmul_to_reads_strided_rows_and_a_prefix_of_the_weight(
    kernel: &VnniKernel,
    extra: (usize, usize, usize, usize, usize, usize, usize),
    element: Element,
) {
    let cases = [
        (64, 200, 48, 150, 48, 150, 150),
        (64, 150, 149, 48, 150, 48, 4 * 48),
        (3, 9, 7, 40, 9, 33, 40),
        extra,
    ];
    let mut rnd = crate::test_rng::xorshift(0x77u32);
    for (m, lda, k, wn, wk, n, ldc) in cases {
        let a: Vec<f32> = (0..(m - 1) * lda + k).map(|_| rnd()).collect();
        let w: Vec<bf16> = (0..wn * wk).map(|_| bf16::from_f32(rnd())).collect();
        let p = vnni(&w, wn, wk);
        let sentinel = -7.25f32;
        let mut c = vec![sentinel; m * ldc];
        // SAFETY: c holds m rows of ldc.
        assert!(unsafe { kernel.matmul_to(lhs(&a, lda, m, k), &p, n, c.as_mut_ptr(), ldc) });
        for i in 0..m {
            for j in 0..ldc {
                let got = c[i * ldc + j];
                if j >= n {
                    assert_eq!(got, sentinel, "({i}, {j}) written past n");
                } else {
                    element(got, &a[i * lda..][..k], &w[j * wk..][..k]);
                }
            }
        }
    }
    let w = [bf16::ONE; 6];
    let p = vnni(&w, 2, 3);
    let mut c = [0f32; 8];
    let a = [1f32; 8];
    // SAFETY: c holds every element the calls could write.
    unsafe {
        assert!(!kernel.matmul_to(lhs(&a, 3, 2, 4), &p, 2, c.as_mut_ptr(), 2));
        assert!(!kernel.matmul_to(lhs(&a, 3, 2, 3), &p, 3, c.as_mut_ptr(), 3));
        assert!(!kernel.matmul_to(lhs(&a, 2, 2, 3), &p, 2, c.as_mut_ptr(), 2));
        let panels = PackedBf16::new(&w, 2, 3).unwrap();
        assert!(!kernel.matmul_to(lhs(&a, 3, 2, 3), &panels, 2, c.as_mut_ptr(), 2));
    }
}

/// `matmul` refuses the f32 layout and lengths that do not match.
pub(crate) fn refuses_other_layouts_and_mismatched_lengths(kernel: &VnniKernel) {
    let w = [bf16::ONE; 6];
    let a = [1f32; 6];
    let panels = PackedBf16::new(&w, 2, 3).unwrap();
    assert!(kernel.matmul(&a, 2, 3, &panels, None).is_none());
    let p = vnni(&w, 2, 3);
    assert!(kernel.matmul(&a, 3, 3, &p, None).is_none());
    assert!(kernel.matmul(&a, 2, 3, &p, Some(&[0.0])).is_none());
}
