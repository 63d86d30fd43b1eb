//! Checks shared by the kernels' tests (and the linear layer's): their operands, the scalar
//! references they are held to, and the contract of the module docs (the bits do not depend
//! on the rows asked for nor on the thread count). The two kernels on VNNI pairs
//! (`avx512bf16.rs`, `amx.rs`) take the same arguments and differ only in how they round
//! inside a sum, so most of their checks are whole tests here.

use super::{Lhs, PackLayout, PackedBf16, VnniKernel, NR};
use half::bf16;

/// Activations `[m, k]`, bf16 weights `[n, k]` and a bias `[n]`.
pub(crate) type Operands = (Vec<f32>, Vec<bf16>, Vec<f32>);

/// The products a kernel gives for `(a, m, k, w, n, bias)`, one for each way it is asked
/// (weight layouts, kernels under one entry point).
pub(crate) type Products<'a> =
    &'a dyn Fn(&[f32], usize, usize, &[bf16], usize, Option<&[f32]>) -> Vec<Vec<f32>>;

/// The product of some rows of the activations (`rows`, how many) by one weight and bias.
pub(crate) type Rows<'a> = &'a (dyn Fn(&[f32], usize) -> Vec<f32> + Sync);

/// Checks one output `got` against its row of activations, its column of weights and its
/// bias.
pub(crate) type Element = fn(got: f32, a: &[f32], w: &[bf16], bias: f32);

/// Small and degenerate shapes `(m, n, k)` every kernel is tested on first (one row, one
/// column, k = 1).
pub(crate) const SMALL_SHAPES: [(usize, usize, usize); 4] =
    [(1, 1, 1), (1, 33, 20), (5, 1, 7), (3, 17, 1)];

/// [`SMALL_SHAPES`], then a kernel's own shapes around its block edges.
pub(crate) fn shapes(edges: &[(usize, usize, usize)]) -> Vec<(usize, usize, usize)> {
    [&SMALL_SHAPES[..], edges].concat()
}

/// Random operands drawn from `rnd`: the activations, then the weights, then the bias.
pub(crate) fn random(rnd: &mut impl FnMut() -> f32, (m, n, k): (usize, usize, usize)) -> Operands {
    let a: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
    let w: Vec<bf16> = (0..n * k).map(|_| bf16::from_f32(rnd())).collect();
    let bias: Vec<f32> = (0..n).map(|_| rnd()).collect();
    (a, w, bias)
}

/// Operands on which every partial sum is exact in f32: weights in quarters, a bias in
/// sixteenths and activations in eighths or, for a kernel that rounds them to bf16, with more
/// than 8 significant bits (the rounding is then part of the product).
pub(crate) fn dyadic((m, n, k): (usize, usize, usize), rounds: bool) -> Operands {
    let a: Vec<f32> = (0..m * k)
        .map(|i| {
            if rounds {
                ((i * 37 % 1021) as f32 - 510.0) / 512.0
            } else {
                ((i * 7 % 13) as f32 - 6.0) / 8.0
            }
        })
        .collect();
    let w: Vec<bf16> = (0..n * k)
        .map(|i| bf16::from_f32(((i * 5 % 11) as f32 - 5.0) / 4.0))
        .collect();
    let bias: Vec<f32> = (0..n).map(|j| j as f32 / 16.0).collect();
    (a, w, bias)
}

/// `w` `[n, k]` packed as VNNI pairs.
pub(crate) fn vnni(w: &[bf16], n: usize, k: usize) -> PackedBf16 {
    PackedBf16::with_layout(w, n, k, PackLayout::VnniPairs).unwrap()
}

/// `a` rounded to bf16 (round to nearest even), kept f32.
pub(crate) fn rounded(a: &[f32]) -> Vec<f32> {
    a.iter().map(|&x| bf16::from_f32(x).to_f32()).collect()
}

/// The exact product of the bf16-rounded activations `a` and the weights `w` (f64), and the
/// sum of its terms' magnitudes (activations in eighths round to themselves).
pub(crate) fn exact_dot(a: &[f32], w: &[bf16]) -> (f64, f64) {
    a.iter().zip(w).fold((0.0, 0.0), |(dot, mag), (x, w)| {
        let p = bf16::from_f32(*x).to_f64() * w.to_f64();
        (dot + p, mag + p.abs())
    })
}

/// The f32 fused multiply-add chain over k in order of `a` and `w`, from `seed`: the bits of
/// every element of the f32 kernels (and of `vdpbf16ps` on rounded activations).
pub(crate) fn fma_chain(a: &[f32], w: &[bf16], seed: f32) -> f32 {
    a.iter()
        .zip(w)
        .fold(seed, |c, (x, w)| x.mul_add(w.to_f32(), c))
}

/// Every output of `products` on dyadic operands of each shape, with and without a bias, is
/// exactly the product of the (rounded, where the kernel `rounds`) activations plus the bias.
pub(crate) fn exact_on_dyadic_inputs(
    shapes: &[(usize, usize, usize)],
    rounds: bool,
    products: Products,
) {
    for &(m, n, k) in shapes {
        let (a, w, bias) = dyadic((m, n, k), rounds);
        for bias in [None, Some(&bias[..])] {
            for (way, y) in products(&a, m, k, &w, n, bias).iter().enumerate() {
                for i in 0..m {
                    for j in 0..n {
                        let (dot, _) = exact_dot(&a[i * k..][..k], &w[j * k..][..k]);
                        let want = dot + bias.map_or(0.0, |b| b[j] as f64);
                        assert_eq!(y[i * n + j] as f64, want, "{m}x{n}x{k} #{way} ({i}, {j})");
                    }
                }
            }
        }
    }
}

/// The elements `points` of the `[m, n]` product `y` are the [`fma_chain`]s of their row of
/// `a` and column of `w` from their bias.
pub(crate) fn assert_fma_chains(
    y: &[f32],
    (a, w, bias): (&[f32], &[bf16], &[f32]),
    (n, k): (usize, usize),
    points: &[(usize, usize)],
) {
    for &(i, j) in points {
        let want = fma_chain(&a[i * k..][..k], &w[j * k..][..k], bias[j]);
        let got = y[i * n + j];
        assert_eq!(got.to_bits(), want.to_bits(), "({i}, {j}): {got} vs {want}");
    }
}

/// The bits of `run` on the `m` rows of `a` (`k` each) repeat, and do not change with the rows
/// asked for (`row_ranges`) nor with the thread count (1 and 3); returns the whole product.
pub(crate) fn same_bits_for_any_rows_or_threads(
    run: Rows,
    a: &[f32],
    (m, k): (usize, usize),
    row_ranges: &[(usize, usize)],
) -> Vec<f32> {
    let all = run(a, m);
    let n = all.len() / m;
    assert_eq!(run(a, m), all, "repeat");
    for &(r0, r1) in row_ranges {
        let part = run(&a[r0 * k..r1 * k], r1 - r0);
        assert_eq!(part, all[r0 * n..r1 * n], "rows {r0}..{r1}");
    }
    for threads in [1, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        assert_eq!(pool.install(|| run(a, m)), all, "{threads} threads");
    }
    all
}

/// [`exact_on_dyadic_inputs`] for a kernel on VNNI pairs.
pub(crate) fn vnni_exact_on_dyadic_inputs(kernel: &VnniKernel, shapes: &[(usize, usize, usize)]) {
    exact_on_dyadic_inputs(shapes, true, &|a, m, k, w, n, bias| {
        vec![kernel.matmul(a, m, k, &vnni(w, n, k), bias).unwrap()]
    });
}

/// [`same_bits_for_any_rows_or_threads`] for a kernel on VNNI pairs, on random `[m, k]`·
/// `[n, k]`ᵀ operands with a bias.
pub(crate) fn bits_do_not_depend_on_rows_threads_or_repeats(
    kernel: &VnniKernel,
    (m, n, k): (usize, usize, usize),
    row_ranges: &[(usize, usize)],
) {
    let (a, w, bias) = random(&mut crate::test_rng::lcg(7u32), (m, n, k));
    let p = vnni(&w, n, k);
    let run = |a: &[f32], m| kernel.matmul(a, m, k, &p, Some(&bias)).unwrap();
    same_bits_for_any_rows_or_threads(&run, &a, (m, k), row_ranges);
}

/// Each element of a kernel's product on random operands of each shape (from `rnd`), with a
/// bias, checked by `element`.
pub(crate) fn each_element_of_random_products(
    kernel: &VnniKernel,
    shapes: &[(usize, usize, usize)],
    mut rnd: impl FnMut() -> f32,
    element: Element,
) {
    for (m, n, k) in shapes.iter().copied() {
        let (a, w, bias) = random(&mut rnd, (m, n, k));
        let y = kernel
            .matmul(&a, m, k, &vnni(&w, n, k), Some(&bias))
            .unwrap();
        for i in 0..m {
            for j in 0..n {
                element(y[i * n + j], &a[i * k..][..k], &w[j * k..][..k], bias[j]);
            }
        }
    }
}

/// `m` rows of `k` values of `a` at row stride `lda`.
fn lhs(a: &[f32], lda: usize, m: usize, k: usize) -> Lhs<'_> {
    Lhs { a, lda, m, k }
}

/// `matmul_to` over each case `(m, lda, k, weight n, weight k, n, ldc)` (odd k prefixes,
/// partial panels, strides, and the edges of the kernel's blocks of `rows` rows and K blocks
/// of `kc` pairs) writes exactly rows `< m` × columns `< n` (each checked by `element` against
/// its strided row of A and the first k of its weight column, bias zero), and refuses too wide
/// a prefix, a short stride and the f32 layout.
pub(crate) fn matmul_to_reads_strided_rows_and_a_prefix_of_the_weight(
    kernel: &VnniKernel,
    (rows, kc): (usize, usize),
    element: Element,
) {
    let cases = [
        (64, 200, 48, 150, 48, 150, 150),
        (64, 150, 149, 48, 150, 48, 4 * 48),
        (3, 9, 7, 40, 9, 33, 40),
        (
            rows + 2,
            2 * kc + 5,
            2 * kc + 3,
            NR + 3,
            2 * kc + 4,
            NR + 1,
            NR + 7,
        ),
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
                    element(got, &a[i * lda..][..k], &w[j * wk..][..k], 0.0);
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

/// The tests both kernels on VNNI pairs pass, written in their `tests` module (beside its
/// `shapes()`, the kernel's `available` and `KERNEL`): `$each` names the test whose random
/// products have each element checked by `$element` (as are `matmul_to`'s), `$edges` are the
/// kernel's tile rows and K block in pairs, `$bits` and `$rows` the operands' shape and the row
/// ranges of the bits check.
macro_rules! vnni_kernel_tests {
    ($each:ident, $element:expr, $edges:expr, $bits:expr, $rows:expr) => {
        #[test]
        fn exact_on_dyadic_inputs_with_and_without_bias() {
            if available() {
                checks::vnni_exact_on_dyadic_inputs(&KERNEL, &shapes());
            }
        }

        #[test]
        fn $each() {
            if available() {
                let rnd = crate::test_rng::xorshift(0x2545_f491_u32);
                checks::each_element_of_random_products(&KERNEL, &shapes(), rnd, $element);
            }
        }

        #[test]
        fn bits_do_not_depend_on_rows_threads_or_repeats() {
            if available() {
                checks::bits_do_not_depend_on_rows_threads_or_repeats(&KERNEL, $bits, $rows);
            }
        }

        #[test]
        fn matmul_to_reads_strided_rows_and_a_prefix_of_the_weight() {
            if available() {
                checks::matmul_to_reads_strided_rows_and_a_prefix_of_the_weight(
                    &KERNEL, $edges, $element,
                );
            }
        }

        #[test]
        fn refuses_other_layouts_and_mismatched_lengths() {
            checks::refuses_other_layouts_and_mismatched_lengths(&KERNEL);
        }
    };
}
pub(crate) use vnni_kernel_tests;
