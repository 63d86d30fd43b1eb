//! Row norms on the CPU in f32 (LayerNorm, Qwen3's RMSNorm), vectorised and rows in parallel,
//! alone or fused with the residual add before them (each row's sum normalised while in L1).

use crate::cpu_math::{add_slice, cpu_f32_pair, dispatch, lane_sum, with_values, CHUNK, LANES};
use crate::gemm::out_ptr::{par_fresh, OutPtr};
use candle_core::{CpuStorage, Storage, Tensor};

/// `Σ x²` as LANES interleaved partial sums, then the partials and the tail in order (as
/// [`lane_sum`]).
#[inline(always)]
fn lane_sum_squares(x: &[f32]) -> f32 {
    let mut lanes = [0f32; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += v * v;
        }
    }
    let tail = chunks.remainder().iter().map(|v| v * v);
    lanes.iter().copied().chain(tail).sum::<f32>()
}

dispatch! {
    /// Two-pass LayerNorm of one row into `out`: `(x − mean) / sqrt(var + eps)`, then
    /// `· w + b` when given.
    layer_norm_row(x: &[f32], out: &mut [f32], affine: Option<(&[f32], &[f32])>, eps: f32) {
        let n = x.len() as f32;
        let mean = lane_sum(x) / n;
        for (o, &v) in out.iter_mut().zip(x) {
            *o = v - mean;
        }
        let var = lane_sum_squares(out) / n;
        let std = (var + eps).sqrt();
        for o in out.iter_mut() {
            *o /= std;
        }
        if let Some((w, b)) = affine {
            for ((o, &w), &b) in out.iter_mut().zip(w).zip(b) {
                *o = *o * w + b;
            }
        }
    }
}

/// A LayerNorm's `[D]` weight and bias as values, checked against rows of `d`.
fn affine_values(
    affine: Option<(&Tensor, &Tensor)>,
    d: usize,
) -> candle_core::Result<Option<(Vec<f32>, Vec<f32>)>> {
    let Some((w, b)) = affine else {
        return Ok(None);
    };
    let (w, b) = (
        w.flatten_all()?.to_vec1::<f32>()?,
        b.flatten_all()?.to_vec1::<f32>()?,
    );
    if w.len() != d || b.len() != d {
        candle_core::bail!("layer norm: affine of width {} for rows of {d}", w.len());
    }
    Ok(Some((w, b)))
}

/// LayerNorm over the last dimension of a CPU f32 tensor (statistics two-pass, as the plain
/// candle version), with an optional `[D]` weight and bias; rows in parallel.
pub(crate) fn layer_norm(
    x: &Tensor,
    affine: Option<(&Tensor, &Tensor)>,
    eps: f64,
) -> candle_core::Result<Tensor> {
    let d = x.dim(candle_core::D::Minus1)?;
    let w = affine_values(affine, d)?;
    let affine = w.as_ref().map(|(w, b)| (&w[..], &b[..]));
    map_rows(x, |s, o| layer_norm_row(s, o, affine, eps as f32))
}

dispatch! {
    /// Qwen3's RMSNorm of one row into `out`: `x / sqrt(mean(x²) + eps) · w`, candle's
    /// `rms_norm` with its sum of squares in lanes.
    rms_norm_row(x: &[f32], out: &mut [f32], w: &[f32], eps: f32) {
        let sum2 = lane_sum_squares(x);
        let m = (sum2 / x.len() as f32 + eps).sqrt();
        for ((o, &v), &w) in out.iter_mut().zip(x).zip(w) {
            *o = v / m * w;
        }
    }
}

/// The `[D]` weight of an RMSNorm as values, checked against rows of `d`.
fn weight_values(w: &Tensor, d: usize) -> candle_core::Result<Vec<f32>> {
    let w = w.flatten_all()?.to_vec1::<f32>()?;
    if w.len() != d {
        candle_core::bail!("rms norm: weight of width {} for rows of {d}", w.len());
    }
    Ok(w)
}

/// Qwen3's RMSNorm over the last dimension of a CPU f32 tensor with a `[D]` weight (candle's
/// `rms_norm`, whose rows sum their squares one after another, a chain of dependent adds):
/// rows in parallel.
pub(crate) fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> candle_core::Result<Tensor> {
    let w = weight_values(w, x.dim(candle_core::D::Minus1)?)?;
    map_rows(x, |s, o| rms_norm_row(s, o, &w, eps))
}

/// Elements per task of a row-wise op with rows of `d` (whole rows, at least one).
fn rows_per_task(d: usize) -> usize {
    CHUNK.checked_div(d).unwrap_or(0).max(1) * d.max(1)
}

/// Each row (last dimension) of a CPU f32 tensor through `row(src, dst)` into a fresh tensor of
/// its shape, rows in parallel.
fn map_rows(x: &Tensor, row: impl Fn(&[f32], &mut [f32]) + Sync) -> candle_core::Result<Tensor> {
    let d = x.dim(candle_core::D::Minus1)?;
    let x = x.contiguous()?;
    let (guard, layout) = x.storage_and_layout();
    let src = match (&*guard, layout.contiguous_offsets()) {
        (Storage::Cpu(CpuStorage::F32(v)), Some((a, b))) => &v[a..b],
        _ => candle_core::bail!("norm: input must be a CPU f32 tensor"),
    };
    let out = par_fresh(src.len(), rows_per_task(d), 0.0, |start, o| {
        let s = &src[start..start + o.len()];
        for (o, s) in o.chunks_exact_mut(d).zip(s.chunks_exact(d)) {
            row(s, o);
        }
    });
    drop(guard);
    Tensor::from_vec(out, x.shape(), x.device())
}

/// The residual sum `x + h` and its LayerNorm ([`layer_norm`]'s math) of CPU f32 tensors of one
/// shape, in one pass over the rows: each row's sum is normalised while it is in the L1. The
/// bits of [`residual_add`](crate::cpu_math::residual_add) then [`layer_norm`].
pub(crate) fn add_layer_norm(
    x: &Tensor,
    h: &Tensor,
    affine: Option<(&Tensor, &Tensor)>,
    eps: f64,
) -> candle_core::Result<(Tensor, Tensor)> {
    let w = affine_values(affine, x.dim(candle_core::D::Minus1)?)?;
    let affine = w.as_ref().map(|(w, b)| (&w[..], &b[..]));
    add_map_rows(x, h, |s, o| layer_norm_row(s, o, affine, eps as f32))
}

/// The residual sum `x + h` and its RMSNorm ([`rms_norm`]'s math) of CPU f32 tensors of one
/// shape, in one pass over the rows (as [`add_layer_norm`]).
pub(crate) fn add_rms_norm(
    x: &Tensor,
    h: &Tensor,
    w: &Tensor,
    eps: f32,
) -> candle_core::Result<(Tensor, Tensor)> {
    let w = weight_values(w, x.dim(candle_core::D::Minus1)?)?;
    add_map_rows(x, h, |s, o| rms_norm_row(s, o, &w, eps))
}

/// `x + h` of CPU f32 tensors of one shape and each row of the sum through `row(sum, dst)`,
/// rows in parallel, each row's sum used while it is in the L1.
fn add_map_rows(
    x: &Tensor,
    h: &Tensor,
    row: impl Fn(&[f32], &mut [f32]) + Sync,
) -> candle_core::Result<(Tensor, Tensor)> {
    if !cpu_f32_pair(x, h) {
        candle_core::bail!("residual norm: expected CPU f32 tensors of one shape");
    }
    let d = x.dim(candle_core::D::Minus1)?;
    let (x, h) = (x.contiguous()?, h.contiguous()?);
    let len = x.elem_count();
    let mut sum: Vec<f32> = Vec::with_capacity(len);
    let sum_at = OutPtr(sum.as_mut_ptr());
    let mapped = with_values(&x, &h, |a, b| {
        par_fresh(len, rows_per_task(d), 0.0, |start, o| {
            let end = start + o.len();
            // SAFETY: elements start..end of `sum`'s allocation (capacity len), this task's
            // own; zeroed before the slice is made.
            let s = unsafe {
                std::ptr::write_bytes(sum_at.add(start), 0, o.len());
                std::slice::from_raw_parts_mut(sum_at.add(start), o.len())
            };
            add_slice(&a[start..end], &b[start..end], s);
            for (o, s) in o.chunks_exact_mut(d).zip(s.chunks_exact(d)) {
                row(s, o);
            }
        })
    })?;
    // SAFETY: the tasks wrote all `len` elements (par_fresh's chunks cover 0..len).
    unsafe { sum.set_len(len) };
    let dev = candle_core::Device::Cpu;
    Ok((
        Tensor::from_vec(sum, x.shape(), &dev)?,
        Tensor::from_vec(mapped, x.shape(), &dev)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu_math::residual_add;
    use candle_core::DType;

    #[test]
    fn the_fused_residual_norm_gives_the_bits_of_candles_add_then_the_norm() {
        let dev = candle_core::Device::Cpu;
        // Several tasks with a short last one, one row, and rows wider than a task.
        for (rows, d) in [(150, 1000), (1, 37), (3, CHUNK + 5)] {
            let draw = |seed: usize| -> Vec<f32> {
                (0..rows * d)
                    .map(|i| (((i + seed) * 7919 % 2003) as f32 - 1001.0) / 97.0)
                    .collect()
            };
            let x = Tensor::from_vec(draw(1), (rows, d), &dev).unwrap();
            let h = Tensor::from_vec(draw(5), (rows, d), &dev).unwrap();
            let w = Tensor::from_vec(draw(9)[..d].to_vec(), d, &dev).unwrap();
            let b = Tensor::from_vec(draw(13)[..d].to_vec(), d, &dev).unwrap();
            let bits = |t: &Tensor| -> Vec<u32> {
                let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                v.iter().map(|v| v.to_bits()).collect()
            };
            let candle_sum = (&x + &h).unwrap();
            let sum = residual_add(&x, &h).unwrap();
            assert_eq!(bits(&sum), bits(&candle_sum), "{rows}×{d}: residual_add");
            let fused = [
                add_layer_norm(&x, &h, Some((&w, &b)), 1e-6).unwrap(),
                add_rms_norm(&x, &h, &w, 1e-6).unwrap(),
            ];
            let separate = [
                layer_norm(&candle_sum, Some((&w, &b)), 1e-6).unwrap(),
                rms_norm(&candle_sum, &w, 1e-6).unwrap(),
            ];
            for ((fused_sum, fused_norm), norm) in fused.iter().zip(&separate) {
                assert_eq!(bits(fused_sum), bits(&candle_sum), "{rows}×{d}: sum");
                assert_eq!(bits(fused_norm), bits(norm), "{rows}×{d}: norm");
                assert_eq!(fused_norm.dims(), &[rows, d]);
            }
        }
        // Shapes that differ are errors, as candle's add makes them.
        let x = Tensor::ones((2, 3), DType::F32, &dev).unwrap();
        let row = Tensor::new(&[1f32, 2.0, 3.0], &dev).unwrap();
        assert!(residual_add(&x, &row).is_err());
        assert!(add_layer_norm(&x, &row, None, 1e-6).is_err());
        assert!(add_rms_norm(&x, &row, &row, 1e-6).is_err());
    }

    #[test]
    fn rms_norm_matches_an_f64_reference_and_candles_op() {
        let dev = candle_core::Device::Cpu;
        // Rows of whole lanes and with a tail; many rows (several tasks).
        for (rows, d) in [(3, 128), (700, 2048), (4, 37)] {
            let x: Vec<f32> = (0..rows * d)
                .map(|i| ((i * 7919 % 2003) as f32 - 1001.0) / 97.0)
                .collect();
            let w: Vec<f32> = (0..d).map(|j| 0.5 + j as f32 / d as f32).collect();
            let xt = Tensor::from_vec(x.clone(), (rows, d), &dev).unwrap();
            let wt = Tensor::new(&w[..], &dev).unwrap();
            let y = rms_norm(&xt, &wt, 1e-6).unwrap();
            let theirs = candle_nn::ops::rms_norm(&xt, &wt, 1e-6).unwrap();
            let (y, theirs) = (
                y.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                theirs.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            );
            for (r, row) in x.chunks(d).enumerate() {
                let ms = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / d as f64;
                for j in 0..d {
                    let want = row[j] as f64 / (ms + 1e-6).sqrt() * w[j] as f64;
                    let (got, candle) = (y[r * d + j] as f64, theirs[r * d + j] as f64);
                    let tol = 4e-7 * want.abs().max(1e-3);
                    assert!((got - want).abs() < tol, "({r}, {j}): {got} vs {want}");
                    // candle's serial sum of squares drifts further (√d rounding steps).
                    let loose = 2e-5 * want.abs().max(1e-3);
                    assert!(
                        (got - candle).abs() < loose,
                        "({r}, {j}): {got} vs candle {candle}"
                    );
                }
            }
        }
    }

    #[test]
    fn layer_norm_matches_an_f64_two_pass_reference() {
        let (rows, d) = (5, 37);
        let x: Vec<f32> = (0..rows * d)
            .map(|i| 100.0 + ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let w: Vec<f32> = (0..d).map(|j| 0.5 + j as f32 / 40.0).collect();
        let b: Vec<f32> = (0..d).map(|j| j as f32 / 10.0 - 1.0).collect();
        let dev = candle_core::Device::Cpu;
        let xt = Tensor::from_vec(x.clone(), (rows, d), &dev).unwrap();
        let (wt, bt) = (
            Tensor::new(&w[..], &dev).unwrap(),
            Tensor::new(&b[..], &dev).unwrap(),
        );
        let y = layer_norm(&xt, Some((&wt, &bt)), 1e-5)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        for (r, row) in x.chunks(d).enumerate() {
            let mean = row.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
            let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / d as f64;
            for j in 0..d {
                let want = (row[j] as f64 - mean) / (var + 1e-5).sqrt() * w[j] as f64 + b[j] as f64;
                let got = y[r * d + j] as f64;
                // f32 statistics of values near 100: a few ulp of the mean, over the std.
                assert!((got - want).abs() < 1e-5, "({r}, {j}): {got} vs {want}");
            }
        }
    }
}
