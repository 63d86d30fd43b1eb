//! The int8 kernels against a scalar reference, bit for bit, and the quantisation against
//! its definition.

use super::quant::{quantize_rows, Encoding};
use super::*;
use crate::test_rng::{lcg, xorshift};

/// Shapes `(m, n, k)`: degenerate ones, around every tile and panel edge (rows 4, 6, 12, 16,
/// 32, columns 16, 32, 64, k a multiple of 4 or not, of AMX's 64 or not), then the model's row
/// counts (1: one token, 41: the DiT, 469: the LLM, 1 792: the vision tower) with ragged
/// columns and k; last, 64-column tiles with a 16-column one after them.
const SHAPES: [(usize, usize, usize); 25] = [
    (1, 5, 64),
    (16, 16, 64),
    (17, 33, 128),
    (31, 47, 192),
    (33, 65, 64),
    (41, 97, 1536),
    (469, 45, 256),
    (1792, 33, 64),
    (1, 1, 1),
    (1, 33, 20),
    (5, 1, 7),
    (3, 17, 1),
    (4, 16, 4),
    (6, 32, 64),
    (12, 31, 63),
    (13, 47, 130),
    (25, 64, 257),
    (37, 100, 96),
    (2, 300, 1000),
    (200, 40, 33),
    (1, 70, 2050),
    (41, 97, 1537),
    (469, 45, 130),
    (1792, 33, 66),
    (29, 80, 96),
];

/// The activations' quantisation by its definition: `(q, scale)` of row `x`.
fn quantize_row_by_definition(x: &[f32]) -> (Vec<i8>, f32) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    if x.iter().any(|v| !v.is_finite()) {
        return (vec![0; x.len()], f32::NAN);
    }
    if amax == 0.0 {
        return (vec![0; x.len()], 0.0);
    }
    let inv = 127.0 / amax;
    let q = x
        .iter()
        .map(|v| (v * inv).round_ties_even().clamp(-127.0, 127.0) as i8)
        .collect();
    (q, amax / 127.0)
}

/// The product by its definition: exact integer sums of the quantised operands (i64), then
/// `fma(sum as f32, s_a·s_b, bias)`.
fn reference(a: &[f32], m: usize, k: usize, w: &PackedI8, bias: Option<&[f32]>) -> Vec<f32> {
    let n = w.dims().0;
    let mut out = vec![0f32; m * n];
    for i in 0..m {
        let (q, sa) = quantize_row_by_definition(&a[i * k..][..k]);
        for j in 0..n {
            let sum: i64 = (0..k).map(|p| i64::from(q[p]) * i64::from(w.q(j, p))).sum();
            let b = bias.map_or(0.0, |b| b[j]);
            out[i * n + j] = (sum as i32 as f32).mul_add(sa * w.scales()[j], b);
        }
    }
    out
}

fn operands(seed: u32, (m, n, k): (usize, usize, usize)) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut rnd = lcg(seed);
    let a = (0..m * k).map(|_| 3.0 * rnd()).collect();
    let w = (0..n * k).map(|_| rnd() * 0.2).collect();
    let bias = (0..n).map(|_| rnd()).collect();
    (a, w, bias)
}

fn same_bits(got: &[f32], want: &[f32]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| g.to_bits() == w.to_bits())
}

#[test]
fn weights_round_trip_within_half_a_step_with_the_extreme_on_the_grid() {
    let (n, k) = (37, 45);
    let mut rnd = xorshift(7);
    let mut w: Vec<f32> = (0..n * k).map(|_| rnd()).collect();
    w[3 * k..4 * k].fill(0.0); // an all-zero row
    let p = PackedI8::from_f32(&w, n, k, LEVELS).unwrap();
    for j in 0..n {
        let row = &w[j * k..][..k];
        let amax = row.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert_eq!(p.scales()[j], amax / 127.0, "scale of row {j}");
        let mut extreme = false;
        for (kk, &v) in row.iter().enumerate() {
            let q = p.q(j, kk);
            assert!((-127..=127).contains(&q));
            if amax > 0.0 {
                assert_eq!(q, (v * (127.0 / amax)).round_ties_even() as i8, "{j} {kk}");
            }
            assert!((p.dequantized(j, kk) - v).abs() <= p.scales()[j] * 0.5001 + 1e-12);
            extreme |= q.unsigned_abs() == 127;
        }
        assert_eq!(extreme, amax > 0.0, "row {j}'s largest value maps to ±127");
        let sum: i32 = (0..k).map(|kk| i32::from(p.q(j, kk))).sum();
        assert_eq!(p.offset_sums()[j], 128 * sum);
    }
    // The bf16 path quantises the same values.
    let wb: Vec<half::bf16> = w.iter().map(|&v| half::bf16::from_f32(v)).collect();
    let wr: Vec<f32> = wb.iter().map(|v| v.to_f32()).collect();
    let (pb, pr) = (
        PackedI8::from_bf16(&wb, n, k, LEVELS).unwrap(),
        PackedI8::from_f32(&wr, n, k, LEVELS).unwrap(),
    );
    assert!((0..n).all(|j| (0..k).all(|kk| pb.q(j, kk) == pr.q(j, kk))));
    assert!(PackedI8::from_f32(&w, n, k + 1, LEVELS).is_none());
    // At a layer's size the int8 panels hold about half the bf16 bytes.
    let (n, k) = (256, 1024);
    let big = PackedI8::from_f32(&vec![0.5; n * k], n, k, LEVELS).unwrap();
    assert!(big.bytes() * 100 <= n * k * 2 * 51, "{} bytes", big.bytes());
}

#[test]
fn fewer_levels_quantise_coarser() {
    let w: Vec<f32> = (0..64).map(|i| (i as f32 - 31.5) / 32.0).collect();
    let fine = PackedI8::from_f32(&w, 1, 64, LEVELS).unwrap();
    let coarse = PackedI8::from_f32(&w, 1, 64, 2).unwrap();
    let err = |p: &PackedI8| {
        (0..64)
            .map(|kk| (p.dequantized(0, kk) - w[kk]).abs())
            .fold(0f32, f32::max)
    };
    // Each value by the definition: q = round_ties_even(w·2/max|w|).
    let inv = 2.0 / (31.5 / 32.0);
    assert!((0..64).all(|kk| coarse.q(0, kk) == (w[kk] * inv).round_ties_even() as i8));
    assert!((0..64).all(|kk| coarse.q(0, kk).abs() <= 2));
    assert!(
        err(&coarse) > 20.0 * err(&fine),
        "{} vs {}",
        err(&coarse),
        err(&fine)
    );
}

#[test]
fn every_vectorised_row_quantisation_gives_the_plain_bytes() {
    // With inv = 1 the odd positions are exact ties (x.5) and levels 31 clamps the ends;
    // inv = 1.37 rounds ordinary products. Lengths around the vectors.
    let x: Vec<f32> = (0..203).map(|i| (i as f32 - 101.0) * 0.5).collect();
    for len in [0, 1, 15, 16, 17, 31, 32, 33, 203] {
        for (levels, flip, inv) in [(127, 0u8, 1.0), (31, 0x80, 1.0), (63, 0x80, 1.37)] {
            let x = &x[..len];
            let mut want = vec![0u8; len];
            quant::quantize_row_plain(x, inv, levels, flip, &mut want);
            #[cfg(target_arch = "x86_64")]
            {
                let mut got = vec![0u8; len];
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: AVX2 was detected.
                    unsafe { quant::quantize_row_avx2(x, inv, levels, flip, &mut got) };
                    assert_eq!(got, want, "avx2 len {len} levels {levels}");
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: AVX-512F was detected.
                    unsafe { quant::quantize_row_avx512(x, inv, levels, flip, &mut got) };
                    assert_eq!(got, want, "avx512 len {len} levels {levels}");
                }
            }
            if len == 203 && levels == 31 {
                // The ends clamp; 0.5 → 0 and 1.5 → 2 (ties to even).
                assert_eq!((want[0] ^ flip) as i8, -31);
                assert_eq!((want[102] ^ flip) as i8, 0);
                assert_eq!((want[104] ^ flip) as i8, 2);
            }
        }
    }
}

#[test]
fn activations_quantise_per_row_by_the_definition_in_both_encodings() {
    let (m, k) = (6, 23);
    let mut rnd = lcg(3);
    let mut a: Vec<f32> = (0..m * k).map(|_| 10.0 * rnd()).collect();
    a[k..2 * k].fill(0.0);
    a[2 * k + 5] = f32::NAN;
    a[3 * k + 1] = f32::INFINITY;
    for enc in [Encoding::Signed, Encoding::Offset] {
        let q = quantize_rows(&a, m, k, enc, 1, 0);
        assert_eq!(q.ld, 24);
        for i in 0..m {
            let (want, s) = quantize_row_by_definition(&a[i * k..][..k]);
            assert_eq!(q.scales[i].to_bits(), s.to_bits(), "row {i} scale");
            for (kk, &w) in want.iter().enumerate() {
                assert_eq!(q.signed(i, kk, enc), w, "row {i} k {kk}");
            }
            assert_eq!(q.signed(i, 23, enc), 0, "the padding is a zero");
        }
        // Padded to whole tiles of rows and a line between rows (AMX): the same rows, then
        // zero rows of scale 0.
        let padded = quantize_rows(&a, m, k, enc, 32, 64);
        assert_eq!((padded.ld, padded.data.len()), (24 + 64, 32 * (24 + 64)));
        for i in 0..m {
            assert_eq!(padded.data[i * padded.ld..][..24], q.data[i * 24..][..24]);
        }
        let bits = |s: &[f32]| s.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&padded.scales[..m]), bits(&q.scales));
        assert!((m..32).all(|i| (0..24).all(|kk| padded.signed(i, kk, enc) == 0)));
        assert!(padded.scales[m..].iter().all(|&s| s == 0.0));
    }
    // The vectorised path (long rows) agrees with the definition too.
    let long: Vec<f32> = (0..4099)
        .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 3.0)
        .collect();
    let q = quantize_rows(&long, 1, long.len(), Encoding::Signed, 1, 0);
    let (want, _) = quantize_row_by_definition(&long);
    assert!((0..long.len()).all(|kk| q.signed(0, kk, Encoding::Signed) == want[kk]));
    // Long rows of exact ties (max 127: the grid is the integers, x.5 rounds to even), of
    // -0.0 only, and with a NaN or infinity deep in the row, in both encodings.
    let k = 203;
    let mut rows: Vec<f32> = (0..k).map(|i| i as f32 * 0.5 - 50.0).collect();
    rows[7] = 127.0;
    rows.extend((0..k).map(|i| (i % 9) as f32 - 4.5));
    rows[k + 150] = -127.0;
    rows.extend(std::iter::repeat_n(-0.0, k));
    rows.extend((0..k).map(|i| i as f32));
    rows[3 * k + 170] = f32::NAN;
    rows.extend((0..k).map(|i| -(i as f32)));
    rows[4 * k + 99] = f32::NEG_INFINITY;
    for enc in [Encoding::Signed, Encoding::Offset] {
        let q = quantize_rows(&rows, 5, k, enc, 1, 0);
        for i in 0..5 {
            let (want, s) = quantize_row_by_definition(&rows[i * k..][..k]);
            assert_eq!(q.scales[i].to_bits(), s.to_bits(), "{enc:?} row {i} scale");
            for (kk, &w) in want.iter().enumerate() {
                assert_eq!(q.signed(i, kk, enc), w, "{enc:?} row {i} k {kk}");
            }
        }
        // The ties went to even: 2.5 → 2, -3.5 → -4, 0.5 → 0.
        assert_eq!(q.signed(0, 105, enc), 2);
        assert_eq!(q.signed(1, 1, enc), -4);
        assert_eq!(q.signed(1, 5, enc), 0);
    }
}

#[test]
fn every_kernel_matches_the_reference_bit_for_bit() {
    for (s, &shape) in SHAPES.iter().enumerate() {
        let (m, n, k) = shape;
        let (a, w, bias) = operands(11 + s as u32, shape);
        let p = PackedI8::from_f32(&w, n, k, LEVELS).unwrap();
        for b in [None, Some(&bias[..])] {
            let want = reference(&a, m, k, &p, b);
            for kernel in Int8Kernel::ALL.into_iter().filter(|k| k.available()) {
                let got = matmul(kernel, &a, m, k, &p, b, None).unwrap();
                assert!(
                    same_bits(&got, &want),
                    "{kernel} {shape:?} bias {}",
                    b.is_some()
                );
            }
        }
    }
    // AMX runs whole tile steps of 64 k and leaves other widths to the VNNI tile.
    assert_eq!(Int8Kernel::Amx.for_width(1536), Int8Kernel::Amx);
    assert_eq!(Int8Kernel::Amx.for_width(1537), Int8Kernel::Avx512Vnni);
    assert_eq!(Int8Kernel::Amx.for_width(0), Int8Kernel::Avx512Vnni);
    eprintln!(
        "kernels run here: {:?}",
        Int8Kernel::ALL
            .iter()
            .filter(|k| k.available())
            .collect::<Vec<_>>()
    );
}

#[test]
fn the_row_epilogue_sees_every_element_once_at_its_row_and_column() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Each element becomes a function of its value and position: a wrong row or column, a
    // missed or repeated element shows in the bits or the count.
    let mark = |r: usize, c: usize, v: f32| v * 0.5 + (r * 4099 + c) as f32;
    for (s, &shape) in SHAPES.iter().enumerate() {
        let (m, n, k) = shape;
        let (a, w, bias) = operands(29 + s as u32, shape);
        let p = PackedI8::from_f32(&w, n, k, LEVELS).unwrap();
        let mut want = reference(&a, m, k, &p, Some(&bias));
        for (i, v) in want.iter_mut().enumerate() {
            *v = mark(i / n, i % n, *v);
        }
        for kernel in Int8Kernel::ALL.into_iter().filter(|k| k.available()) {
            let seen = AtomicUsize::new(0);
            let after = |r: usize, c0: usize, row: &mut [f32]| {
                seen.fetch_add(row.len(), Ordering::Relaxed);
                for (j, v) in row.iter_mut().enumerate() {
                    *v = mark(r, c0 + j, *v);
                }
            };
            let got = matmul(kernel, &a, m, k, &p, Some(&bias), Some(&after)).unwrap();
            assert_eq!(seen.load(Ordering::Relaxed), m * n, "{kernel} {shape:?}");
            assert!(same_bits(&got, &want), "{kernel} {shape:?}");
        }
    }
}

#[test]
fn extreme_operands_never_saturate() {
    // Every activation at its row maximum and every weight at its column maximum, of one sign
    // or alternating: the largest pair sums `vpmaddubsw` sees.
    let (m, n, k) = (5, 40, 1030);
    let a: Vec<f32> = (0..m * k)
        .map(|i| if i % 3 == 0 { -2.0 } else { 2.0 })
        .collect();
    let w: Vec<f32> = (0..n * k)
        .map(|i| if (i / k) % 2 == 0 { 0.5 } else { -0.5 })
        .collect();
    let p = PackedI8::from_f32(&w, n, k, LEVELS).unwrap();
    let want = reference(&a, m, k, &p, None);
    for kernel in Int8Kernel::ALL.into_iter().filter(|k| k.available()) {
        let got = matmul(kernel, &a, m, k, &p, None, None).unwrap();
        assert!(same_bits(&got, &want), "{kernel}");
    }
    // And exact: ±2 and ±0.5 are on the grid, so the product is the f32 one.
    let row0: f32 = (0..k).map(|p| a[p] * w[p]).sum();
    assert!(
        (want[0] - row0).abs() <= 1e-3 * row0.abs().max(1.0),
        "{} vs {row0}",
        want[0]
    );
}

#[test]
fn non_finite_rows_give_nan_and_zero_rows_the_bias() {
    let (m, n, k) = (3, 20, 9);
    let (mut a, w, bias) = operands(5, (m, n, k));
    a[..k].fill(0.0);
    a[k + 2] = f32::NAN;
    let p = PackedI8::from_f32(&w, n, k, LEVELS).unwrap();
    for kernel in Int8Kernel::ALL.into_iter().filter(|k| k.available()) {
        let y = matmul(kernel, &a, m, k, &p, Some(&bias), None).unwrap();
        assert!(
            same_bits(&y[..n], &bias),
            "{kernel}: a zero row is its bias"
        );
        assert!(
            y[n..2 * n].iter().all(|v| v.is_nan()),
            "{kernel}: a NaN row is NaN"
        );
        assert!(y[2 * n..].iter().all(|v| v.is_finite()));
    }
}

#[test]
fn close_to_the_f32_product() {
    // An independent fact: per-row and per-channel int8 of uniform values keeps the product
    // within about 1% of its scale.
    let (m, n, k) = (8, 64, 512);
    let (a, w, _) = operands(9, (m, n, k));
    let p = PackedI8::from_f32(&w, n, k, LEVELS).unwrap();
    let got = matmul(Int8Kernel::detected(), &a, m, k, &p, None, None).unwrap();
    let exact: Vec<f32> = (0..m * n)
        .map(|e| (0..k).map(|q| a[e / n * k + q] * w[e % n * k + q]).sum())
        .collect();
    let scale = exact.iter().fold(0f32, |s, v| s.max(v.abs()));
    let worst = got
        .iter()
        .zip(&exact)
        .fold(0f32, |s, (g, e)| s.max((g - e).abs()));
    assert!(worst < 0.02 * scale, "max |Δ| {worst} of {scale}");
    assert!(worst > 0.0, "int8 is not exact on these values");
}

#[test]
fn answers_do_not_depend_on_the_thread_count_and_repeat() {
    // k a multiple of 64: AMX's tiles where the CPU has them.
    let (m, n, k) = (150, 200, 320);
    let (a, w, bias) = operands(21, (m, n, k));
    let p = PackedI8::from_f32(&w, n, k, LEVELS).unwrap();
    let kernel = Int8Kernel::detected();
    let run = |threads: usize, m: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| matmul(kernel, &a[..m * k], m, k, &p, Some(&bias), None).unwrap())
    };
    let one = run(1, m);
    assert!(same_bits(&one, &run(3, m)));
    assert!(same_bits(&one, &run(2, m)));
    // Fewer rows (split by columns instead of rows) give the same first rows.
    assert!(same_bits(&one[..7 * n], &run(3, 7)));
    assert!(matmul(kernel, &a, m, k + 1, &p, None, None).is_none());
}

/// SmoothQuant on a product whose activations have two outlier channels (×64, the pattern
/// real Qwen3 activations show) and whose weight columns there are /64, so that the exact
/// product is the outlier-free one: factors of 1 change no bit; calibrated factors bring the
/// error back to the outlier-free product's, where plain per-row quantisation loses it.
#[test]
fn smoothing_takes_outlier_channels_out_of_the_activation_scale() {
    use crate::int8::quantize_weight;
    use candle_core::{Device, Tensor};
    let (m, n, k) = (24, 40, 96);
    let mut rnd = xorshift(11);
    let clean_a: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
    let clean_w: Vec<f32> = (0..n * k).map(|_| rnd()).collect();
    let (mut a, mut w) = (clean_a.clone(), clean_w.clone());
    for c in [5, 70] {
        a.iter_mut().skip(c).step_by(k).for_each(|v| *v *= 64.0);
        w.iter_mut().skip(c).step_by(k).for_each(|v| *v /= 64.0);
    }
    let exact: Vec<f64> = (0..m * n)
        .map(|i| {
            let (r, c) = (i / n, i % n);
            (0..k)
                .map(|kk| f64::from(clean_a[r * k + kk]) * f64::from(clean_w[c * k + kk]))
                .sum()
        })
        .collect();
    let err = |a: &[f32], p: &PackedI8| {
        let got = matmul(Int8Kernel::Scalar, a, m, k, p, None, None).unwrap();
        got.iter()
            .zip(&exact)
            .map(|(g, e)| (f64::from(*g) - e).abs())
            .fold(0.0, f64::max)
    };
    let tensor = |w: &[f32]| Tensor::from_slice(w, (n, k), &Device::Cpu).unwrap();
    let wt = tensor(&w);
    let plain = quantize_weight(&wt, LEVELS, None).unwrap();
    assert!(plain.input_scale().is_none());

    // Activation maxima equal to the weight's column maxima: every factor is exactly 1.
    let col_max: Vec<f32> = (0..k)
        .map(|kk| (0..n).fold(0f32, |mx, j| mx.max(w[j * k + kk].abs())))
        .collect();
    let unit = quantize_weight(&wt, LEVELS, Some(&col_max)).unwrap();
    assert!(unit.input_scale().unwrap().iter().all(|&s| s == 1.0));
    let (p, u) = (
        matmul(Int8Kernel::Scalar, &a, m, k, &plain, None, None).unwrap(),
        matmul(Int8Kernel::Scalar, &a, m, k, &unit, None, None).unwrap(),
    );
    assert!(p.iter().zip(&u).all(|(x, y)| x.to_bits() == y.to_bits()));

    // Calibrated on these activations.
    let act_max: Vec<f32> = (0..k)
        .map(|kk| (0..m).fold(0f32, |mx, r| mx.max(a[r * k + kk].abs())))
        .collect();
    let smoothed = quantize_weight(&wt, LEVELS, Some(&act_max)).unwrap();
    let clean = quantize_weight(&tensor(&clean_w), LEVELS, None).unwrap();
    let (e_clean, e_plain, e_smooth) = (err(&clean_a, &clean), err(&a, &plain), err(&a, &smoothed));
    assert!(
        e_plain > 4.0 * e_clean && e_smooth < 1.5 * e_clean,
        "max|Δ|: outlier-free {e_clean}, plain {e_plain}, smoothed {e_smooth}"
    );
    // Every kernel this CPU runs computes the smoothed product's same bits.
    let want = matmul(Int8Kernel::Scalar, &a, m, k, &smoothed, None, None).unwrap();
    for kernel in Int8Kernel::ALL.into_iter().filter(|k| k.available()) {
        let got = matmul(kernel, &a, m, k, &smoothed, None, None).unwrap();
        assert!(
            got.iter()
                .zip(&want)
                .all(|(g, w)| g.to_bits() == w.to_bits()),
            "{kernel}"
        );
    }
}

/// The row tiles of a column tile pull in every line of the next column tile's panels, and only
/// those: spread over all the tiles when there are few (each pulling one panel's worth from its
/// start, so that every tile pulls some), one panel each for the first ones when there are
/// many; nothing after the last column tile.
#[test]
fn row_tiles_pull_in_all_of_the_next_column_tiles_panels() {
    let nr = 4 * NP;
    for (n, k) in [(1536, 1536), (1536, 6144), (96, 64), (100, 256), (48, 4)] {
        let w = PackedI8::from_f32(&vec![0.25; n * k], n, k, LEVELS).unwrap();
        let panel_len = w.k4() * 4 * NP;
        let base = w.panel(0).as_ptr() as usize;
        for tiles in [1, 2, 3, 4, 5, 7, 15, 16, 28] {
            for c0 in (0..n).step_by(nr) {
                let next0 = c0 + nr;
                let panels = n.next_multiple_of(2 * NP).saturating_sub(next0).min(nr) / NP;
                let (lo, hi) = (
                    base + next0 / NP * panel_len,
                    base + (next0 / NP + panels) * panel_len,
                );
                let mut pulled = vec![false; panels * panel_len / 64];
                for j in 0..tiles {
                    let Some(p) = next_panels(&w, tiles, j, (c0, nr, n)) else {
                        // Idle: none to pull, or many tiles and the panels already taken.
                        assert!(
                            panels == 0 || (tiles >= SPREAD_BELOW_TILES && j >= panels),
                            "tile {j} idle"
                        );
                        continue;
                    };
                    let p = p as usize;
                    assert!(
                        p >= lo && p + panel_len <= hi,
                        "n {n} k {k} tiles {tiles} c0 {c0} j {j}"
                    );
                    pulled[(p - lo) / 64..(p - lo + panel_len) / 64].fill(true);
                }
                // Few tiles cover the next panels together when each has a panel's worth to
                // pull; many tiles cover them one panel each.
                if tiles >= panels {
                    assert!(
                        pulled.iter().all(|&p| p),
                        "n {n} k {k} tiles {tiles} c0 {c0}"
                    );
                }
                if panels == 0 {
                    assert!(pulled.is_empty());
                }
            }
        }
    }
}
