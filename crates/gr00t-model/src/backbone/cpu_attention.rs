//! Softmax attention on the CPU in f32 without the whole score matrix: each task takes a block
//! of query rows of one head, computes their scores against every key (one GEMM), applies the
//! scale, mask and `e^(x − max)` in place, multiplies by the values (a second GEMM) straight
//! into the output and divides each output row by its softmax sum (Dh divisions, not Lk).
//! With a causal mask a block skips the keys after its last row (all masked: their weights are
//! exactly zero). Same math as the plain candle ops; only rounding order and the `exp` kernel
//! differ.

use crate::out_ptr::OutPtr;
use candle_core::{DType, Layout, Storage, Tensor};
use rayon::prelude::*;
use std::cell::RefCell;

/// Query rows per task: the score block (rows × keys) stays in L2 for prompt-sized key sets.
const BLOCK_ROWS: usize = 64;

thread_local! {
    /// Per-thread score block, reused across calls.
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Whether [`attention`] handles these operands (CPU, f32 throughout).
pub(crate) fn applies(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>) -> bool {
    q.device().is_cpu()
        && [q, k, v]
            .iter()
            .chain(mask.as_ref())
            .all(|t| t.dtype() == DType::F32)
}

/// `softmax(q·kᵀ·scale + mask)·v` for CPU f32 `q` `[B, Hq, Lq, Dh]` and `k`/`v`
/// `[B, Hkv, Lk, Dh]` (query head j reads kv head j / (Hq/Hkv)); `mask` is additive and
/// broadcasts to `[B, Hq, Lq, Lk]`; `causal` says it is the causal mask (query i sees keys
/// up to i + Lk − Lq), so masked key ranges are skipped. Operands are read in place when their
/// last dimension is contiguous. Returns `[B, Hq, Lq, Dh]` as a transposed view of a contiguous
/// `[B, Lq, Hq, Dh]` (so merging the heads afterwards costs no copy).
pub(crate) fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    mask: Option<&Tensor>,
    causal: bool,
) -> candle_core::Result<Tensor> {
    let (b, hq, lq, dh) = q.dims4()?;
    let (_, hkv, lk, _) = k.dims4()?;
    if k.dims4()? != v.dims4()? || k.dims4()? != (b, hkv, lk, dh) {
        candle_core::bail!(
            "attention: k {:?} / v {:?} do not fit q {:?}",
            k.dims(),
            v.dims(),
            q.dims()
        );
    }
    if hkv == 0 || !hq.is_multiple_of(hkv) {
        candle_core::bail!("attention: {hq} query heads do not share {hkv} kv heads evenly");
    }
    let rep = hq / hkv;
    let unit_last = |t: &Tensor| -> candle_core::Result<Tensor> {
        if t.stride()[3] == 1 {
            Ok(t.clone())
        } else {
            t.contiguous()
        }
    };
    let (q, k, v) = (unit_last(q)?, unit_last(k)?, unit_last(v)?);
    let mask = mask.map(|m| m.broadcast_as((b, hq, lq, lk))).transpose()?;
    let (qg, ql) = q.storage_and_layout();
    let (kg, kl) = k.storage_and_layout();
    let (vg, vl) = v.storage_and_layout();
    let (qv, kv, vv) = (view(&qg, ql)?, view(&kg, kl)?, view(&vg, vl)?);
    let mask_guard = mask.as_ref().map(|m| m.storage_and_layout());
    let mask_view = match &mask_guard {
        Some((g, l)) => Some(view(g, l)?),
        None => None,
    };
    let mut out = vec![0f32; b * lq * hq * dh];
    let blocks = lq.div_ceil(BLOCK_ROWS);
    let dst = OutPtr(out.as_mut_ptr());
    let row_stride = hq * dh;
    if !out.is_empty() && lk > 0 {
        (0..b * hq * blocks).into_par_iter().for_each(|task| {
            let (bh, blk) = (task / blocks, task % blocks);
            let (bi, h) = (bh / hq, bh % hq);
            let r0 = blk * BLOCK_ROWS;
            let rows = BLOCK_ROWS.min(lq - r0);
            let hk = h / rep;
            // Keys this block can see (all of them unless causal).
            let lk = if causal {
                (r0 + rows + lk.saturating_sub(lq)).min(lk)
            } else {
                lk
            };
            SCORES.with(|buf| {
                let mut buf = buf.borrow_mut();
                if buf.len() < rows * lk + rows {
                    buf.resize(rows * lk + rows, 0.0);
                }
                let (s, sums) = buf[..rows * lk + rows].split_at_mut(rows * lk);
                // SAFETY: s is rows×lk (row stride lk); the query rows and the keys (read as
                // their transpose) lie inside their tensors' storage by their layouts.
                unsafe {
                    gemm::gemm(
                        rows,
                        lk,
                        dh,
                        s.as_mut_ptr(),
                        1,
                        lk as isize,
                        false,
                        qv.at(bi, h, r0),
                        1,
                        qv.st[2] as isize,
                        kv.at(bi, hk, 0),
                        kv.st[2] as isize,
                        1,
                        0.0,
                        scale as f32,
                        false,
                        false,
                        false,
                        gemm::Parallelism::None,
                    );
                }
                for (i, row) in s.chunks_exact_mut(lk).enumerate() {
                    if let Some(m) = &mask_view {
                        let base = m.off + bi * m.st[0] + h * m.st[1] + (r0 + i) * m.st[2];
                        for (j, x) in row.iter_mut().enumerate() {
                            *x += m.data[base + j * m.st[3]];
                        }
                    }
                    sums[i] = crate::cpu_math::exp_minus_max(row);
                }
                // SAFETY: this task alone writes rows r0..r0+rows of head h (row stride
                // Hq·Dh) of `out`; s is rows×lk; the values lie inside their storage.
                unsafe {
                    gemm::gemm(
                        rows,
                        dh,
                        lk,
                        dst.add((bi * lq + r0) * row_stride + h * dh),
                        1,
                        row_stride as isize,
                        false,
                        s.as_ptr(),
                        1,
                        lk as isize,
                        vv.at(bi, hk, 0),
                        1,
                        vv.st[2] as isize,
                        0.0,
                        1.0,
                        false,
                        false,
                        false,
                        gemm::Parallelism::None,
                    );
                }
                for (i, &sum) in sums.iter().enumerate() {
                    let at = (bi * lq + r0 + i) * row_stride + h * dh;
                    // SAFETY: row r0+i of head h: this task's own dh outputs, written above.
                    let out = unsafe { std::slice::from_raw_parts_mut(dst.add(at), dh) };
                    out.iter_mut().for_each(|o| *o /= sum);
                }
            });
        });
    }
    drop((qg, kg, vg, mask_guard));
    Tensor::from_vec(out, (b, lq, hq, dh), q.device())?.transpose(1, 2)
}

/// A 4-D f32 tensor read in place: its storage, start offset and strides.
struct View<'a> {
    data: &'a [f32],
    off: usize,
    st: [usize; 4],
}

impl View<'_> {
    /// Pointer to element `[b, h, i, 0]`.
    fn at(&self, b: usize, h: usize, i: usize) -> *const f32 {
        self.data[self.off + b * self.st[0] + h * self.st[1] + i * self.st[2]..].as_ptr()
    }
}

/// The in-place view of a 4-D CPU f32 tensor.
fn view<'a>(storage: &'a Storage, layout: &Layout) -> candle_core::Result<View<'a>> {
    match (storage, layout.stride()) {
        (Storage::Cpu(candle_core::CpuStorage::F32(data)), &[s0, s1, s2, s3]) => Ok(View {
            data,
            off: layout.start_offset(),
            st: [s0, s1, s2, s3],
        }),
        _ => candle_core::bail!("attention: operands must be 4-D CPU f32 tensors"),
    }
}

#[cfg(test)]
mod tests {
    use super::attention;
    use candle_core::{Device, Tensor};

    /// f64 `softmax(q·kᵀ·scale + mask)·v` with GQA, `[B, H, L, D]` in and out.
    fn reference(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        dims: [usize; 6],
        scale: f64,
        mask: &[f32],
    ) -> Vec<f64> {
        let [b, hq, hkv, lq, lk, dh] = dims;
        let mut out = vec![0f64; b * hq * lq * dh];
        for bi in 0..b {
            for h in 0..hq {
                let hk = h / (hq / hkv);
                for i in 0..lq {
                    let qrow = &q[((bi * hq + h) * lq + i) * dh..][..dh];
                    let scores: Vec<f64> = (0..lk)
                        .map(|j| {
                            let krow = &k[((bi * hkv + hk) * lk + j) * dh..][..dh];
                            let dot: f64 = qrow
                                .iter()
                                .zip(krow)
                                .map(|(a, b)| *a as f64 * *b as f64)
                                .sum();
                            dot * scale + mask[i * lk + j] as f64
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for d in 0..dh {
                        let acc: f64 = (0..lk)
                            .map(|j| e[j] * v[((bi * hkv + hk) * lk + j) * dh + d] as f64)
                            .sum();
                        out[((bi * hq + h) * lq + i) * dh + d] = acc / sum;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn matches_an_f64_reference_with_gqa_causal_offsets_and_additive_masks() {
        let dev = Device::Cpu;
        let mut rnd = crate::test_rng::xorshift(0x1234_5678u32);
        // (lq, lk, causal): several 64-row blocks, a key offset (lk > lq), a plain mask.
        for (lq, lk, causal) in [(150, 150, true), (70, 100, true), (70, 90, false)] {
            let (b, hq, hkv, dh) = (2, 4, 2, 16);
            let q: Vec<f32> = (0..b * hq * lq * dh).map(|_| rnd()).collect();
            let k: Vec<f32> = (0..b * hkv * lk * dh).map(|_| rnd()).collect();
            let v: Vec<f32> = (0..b * hkv * lk * dh).map(|_| rnd()).collect();
            let mask: Vec<f32> = (0..lq * lk)
                .map(|idx| {
                    let (i, j) = (idx / lk, idx % lk);
                    match causal {
                        true if j > i + (lk - lq) => f32::NEG_INFINITY,
                        true => 0.0,
                        false => rnd(),
                    }
                })
                .collect();
            let scale = 0.25;
            let t = |x: &[f32], h, l| Tensor::from_vec(x.to_vec(), (b, h, l, dh), &dev).unwrap();
            let m = Tensor::from_vec(mask.clone(), (lq, lk), &dev).unwrap();
            let got = attention(
                &t(&q, hq, lq),
                &t(&k, hkv, lk),
                &t(&v, hkv, lk),
                scale,
                Some(&m),
                causal,
            )
            .unwrap()
            .contiguous()
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
            let want = reference(&q, &k, &v, [b, hq, hkv, lq, lk, dh], scale, &mask);
            let worst = got
                .iter()
                .zip(&want)
                .map(|(g, w)| (*g as f64 - w).abs())
                .fold(0f64, f64::max);
            assert!(
                worst < 2e-6,
                "lq {lq} lk {lk} causal {causal}: max |Δ| {worst}"
            );
        }
    }
}
