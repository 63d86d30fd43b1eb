//! Softmax attention on the CPU in f32 without the whole score matrix: each task takes a block
//! of query rows of one head, computes their scores against every key (one GEMM), applies the
//! scale, mask and `e^(x − max)` in place, multiplies by the values (a second GEMM) straight
//! into the output and divides each output row by its softmax sum (Dh divisions, not Lk).
//! With a causal mask a block skips the keys after its last row (all masked: their weights are
//! exactly zero). Same math as the plain candle ops; only rounding order and the `exp` kernel
//! differ.
//!
//! The f32 products run `gemm/attention_avx512.rs` on an AVX-512 CPU (head widths of whole
//! vectors; 1.3–2× the `gemm` crate on these small blocks), the `gemm` crate elsewhere.
//!
//! For [`Products::Bf16`] (`--dtype bf16` on the CPU) both products take bf16 operands with f32
//! accumulation: q and k rounded for the scores, the softmax weights (after `exp`, before the
//! division; the sum is that of the rounded weights) and v for the output. On an AVX512-BF16
//! CPU `vdpbf16ps` multiplies them, k and v packed as VNNI pairs once per call and head;
//! elsewhere the f32 products multiply the rounded values (the same numbers).

use crate::cpu_kernel::{self, CpuKernel};
use crate::cpu_math::{softmax_numerators, ScoreTerms};
use crate::gemm::out_ptr::OutPtr;
use crate::gemm::{amx, attention_avx512, avx512bf16, Lhs, PackedBf16, VnniKernel};
use crate::linear::Products;
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
/// up to i + Lk − Lq), so masked key ranges are skipped; `products` the precision of the two
/// products' operands. Operands are read in place when their last dimension is contiguous.
/// Returns `[B, Hq, Lq, Dh]` as a transposed view of a contiguous `[B, Lq, Hq, Dh]` (so
/// merging the heads afterwards costs no copy).
pub(crate) fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    mask: Option<&Tensor>,
    causal: bool,
    products: Products,
) -> candle_core::Result<Tensor> {
    attention_with(
        q,
        k,
        v,
        scale,
        mask,
        causal,
        products,
        cpu_kernel::current(),
    )
}

/// How the two products of a block are multiplied.
#[derive(Clone, Copy)]
enum Mul<'a> {
    /// f32 operands by `by`.
    F32(F32Products),
    /// bf16-rounded q, k, v (already) and softmax weights (rounded here) by the f32 products
    /// `by`.
    RoundedF32(F32Products),
    /// `vdpbf16ps` or AMX tiles (the kernel given): per (batch, kv head), the keys
    /// `[Lk, Dh]` and the values transposed
    /// `[Dh, Lk]` as VNNI pairs; q is rounded while the kernel packs it, the weights in place
    /// (for their sum).
    Vnni(&'a [(PackedBf16, PackedBf16)], &'static VnniKernel),
}

/// What multiplies f32 (or bf16-rounded) operands.
#[derive(Clone, Copy)]
enum F32Products {
    /// The `gemm` crate (every CPU).
    Library,
    /// `gemm/attention_avx512.rs` (AVX-512F, head widths of whole vectors).
    Avx512,
}

/// [`attention`] with bf16 products run by `kernel` (`vdpbf16ps` for
/// [`CpuKernel::Avx512Bf16`] or [`CpuKernel::Amx`] on a CPU that has it, the f32 GEMMs
/// otherwise).
#[allow(clippy::too_many_arguments)]
fn attention_with(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    mask: Option<&Tensor>,
    causal: bool,
    products: Products,
    kernel: CpuKernel,
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
    let vnni =
        products == Products::Bf16 && kernel >= CpuKernel::Avx512Bf16 && avx512bf16::available();
    // The kernel reads q rows of at least Dh at a positive stride.
    let unit_last = |t: &Tensor| -> candle_core::Result<Tensor> {
        if t.stride()[3] == 1 && (!vnni || t.stride()[2] >= dh) {
            Ok(t.clone())
        } else {
            t.contiguous()
        }
    };
    // Without the kernel the f32 GEMMs take rounded copies.
    let round = |t: &Tensor| -> candle_core::Result<Tensor> {
        t.to_dtype(DType::BF16)?.to_dtype(DType::F32)
    };
    let (q, k, v) = if products == Products::Bf16 && !vnni {
        (round(q)?, round(k)?, round(v)?)
    } else {
        (unit_last(q)?, unit_last(k)?, unit_last(v)?)
    };
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
    let packed: Vec<(PackedBf16, PackedBf16)> = if vnni && lk > 0 {
        (0..b * hkv)
            .into_par_iter()
            .map(|bh| {
                let (k0, v0) = (
                    kv.index(bh / hkv, bh % hkv, 0),
                    vv.index(bh / hkv, bh % hkv, 0),
                );
                let (ks, vs) = (kv.st[2], vv.st[2]);
                let keys = avx512bf16::pack_vnni_f32(&kv.data[k0..], ks, 1, lk, dh);
                let values = avx512bf16::pack_vnni_f32(&vv.data[v0..], 1, vs, dh, lk);
                (keys, values)
            })
            .collect()
    } else {
        Vec::new()
    };
    let f32s = if kernel >= CpuKernel::Avx512 && attention_avx512::applies(dh) {
        F32Products::Avx512
    } else {
        F32Products::Library
    };
    let mul = match products {
        // Int8 modules ask for Bf16 or F32 (`linear::attention_products_for`).
        Products::F32 | Products::Int8 => Mul::F32(f32s),
        Products::Bf16 if vnni => Mul::Vnni(
            &packed,
            if kernel == CpuKernel::Amx && amx::available() {
                &amx::KERNEL
            } else {
                &avx512bf16::KERNEL
            },
        ),
        Products::Bf16 => Mul::RoundedF32(f32s),
    };
    let out = blocks(
        &qv,
        &kv,
        &vv,
        mask_view.as_ref(),
        [b, hq, hkv, lq, lk, dh],
        scale,
        causal,
        mul,
    );
    drop((qg, kg, vg, mask_guard));
    Tensor::from_vec(out, (b, lq, hq, dh), q.device())?.transpose(1, 2)
}

/// The attention's query blocks on the rayon pool: `[B, Lq, Hq, Dh]` out.
#[allow(clippy::too_many_arguments)]
fn blocks(
    qv: &View,
    kv: &View,
    vv: &View,
    mask_view: Option<&View>,
    dims: [usize; 6],
    scale: f64,
    causal: bool,
    mul: Mul,
) -> Vec<f32> {
    let [b, hq, hkv, lq, lk, dh] = dims;
    let rep = hq / hkv;
    let len = b * lq * hq * dh;
    if len == 0 || lk == 0 {
        // No keys: every weight is absent and the output is zero.
        return vec![0f32; len];
    }
    // Not initialised: the tasks below write every element (each row of each head once, the
    // products not reading their destination).
    let mut out: Vec<f32> = Vec::with_capacity(len);
    let blocks = lq.div_ceil(BLOCK_ROWS);
    let dst = OutPtr(out.as_mut_ptr());
    let row_stride = hq * dh;
    {
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
                let out_at = dst.add((bi * lq + r0) * row_stride + h * dh);
                match mul {
                    Mul::F32(by) | Mul::RoundedF32(by) => {
                        // SAFETY: s is rows×lk (row stride lk); the query rows and the keys
                        // (read as their transpose) lie inside their tensors' storage by
                        // their layouts; Avx512 only where `applies` said so.
                        unsafe {
                            f32_scores(
                                by,
                                (rows, lk, dh),
                                (s.as_mut_ptr(), lk),
                                (qv.at(bi, h, r0), qv.st[2]),
                                (kv.at(bi, hk, 0), kv.st[2]),
                                scale as f32,
                            );
                        }
                    }
                    Mul::Vnni(packed, kernel) => {
                        let q0 = qv.index(bi, h, r0);
                        let q_rows = Lhs {
                            a: &qv.data[q0..],
                            lda: qv.st[2],
                            m: rows,
                            k: dh,
                        };
                        let keys = &packed[bi * hkv + hk].0;
                        // SAFETY: s is rows×lk at row stride lk, this task's own buffer.
                        let done =
                            unsafe { kernel.matmul_to(q_rows, keys, lk, s.as_mut_ptr(), lk) };
                        assert!(done, "attention: the bf16 kernel refused q·kᵀ");
                    }
                }
                // The bf16 kernels' products leave the scale to the softmax pass.
                let unscaled = matches!(mul, Mul::Vnni(..)).then_some(scale as f32);
                for (i, row) in s.chunks_exact_mut(lk).enumerate() {
                    let mask = mask_view.map(|m| {
                        let base = m.off + bi * m.st[0] + h * m.st[1] + (r0 + i) * m.st[2];
                        (&m.data[base..], m.st[3])
                    });
                    let terms = ScoreTerms {
                        scale: unscaled,
                        mask,
                    };
                    // bf16 products: weights rounded, normalised by the sum of what they
                    // multiply.
                    sums[i] = softmax_numerators(row, terms, !matches!(mul, Mul::F32(_)));
                }
                match mul {
                    Mul::F32(by) | Mul::RoundedF32(by) => {
                        // SAFETY: this task alone writes rows r0..r0+rows of head h (row
                        // stride Hq·Dh) of `out`; s is rows×lk; the values lie inside their
                        // storage.
                        unsafe {
                            f32_values(
                                by,
                                (rows, dh, lk),
                                (out_at, row_stride),
                                (s.as_ptr(), lk),
                                (vv.at(bi, hk, 0), vv.st[2]),
                            );
                        }
                    }
                    Mul::Vnni(packed, kernel) => {
                        let weights = Lhs {
                            a: s,
                            lda: lk,
                            m: rows,
                            k: lk,
                        };
                        let values = &packed[bi * hkv + hk].1;
                        // SAFETY: as above; the first lk keys of the packed values.
                        let done =
                            unsafe { kernel.matmul_to(weights, values, dh, out_at, row_stride) };
                        assert!(done, "attention: the bf16 kernel refused p·v");
                    }
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
    // SAFETY: the tasks covered every (batch, row, head) and wrote its Dh outputs.
    unsafe { out.set_len(len) };
    out
}

/// A 4-D f32 tensor read in place: its storage, start offset and strides.
struct View<'a> {
    data: &'a [f32],
    off: usize,
    st: [usize; 4],
}

impl View<'_> {
    /// Index of element `[b, h, i, 0]` in `data`.
    fn index(&self, b: usize, h: usize, i: usize) -> usize {
        self.off + b * self.st[0] + h * self.st[1] + i * self.st[2]
    }

    /// Pointer to element `[b, h, i, 0]`.
    fn at(&self, b: usize, h: usize, i: usize) -> *const f32 {
        self.data[self.index(b, h, i)..].as_ptr()
    }
}

/// `s = scale · q·kᵀ` for `rows` query rows and `lk` keys of width `dh` (`s` at row stride
/// `lds`, q and k rows at their strides), by `by`.
///
/// # Safety
/// As [`gemm_f32`]'s; `by` is Avx512 only where `attention_avx512::applies(dh)`.
unsafe fn f32_scores(
    by: F32Products,
    (rows, lk, dh): (usize, usize, usize),
    (s, lds): (*mut f32, usize),
    (q, qs): (*const f32, usize),
    (k, ks): (*const f32, usize),
    scale: f32,
) {
    match by {
        #[cfg(target_arch = "x86_64")]
        F32Products::Avx512 => {
            attention_avx512::scores((q, qs, rows), (k, ks, lk), dh, scale, (s, lds))
        }
        _ => gemm_f32((rows, lk, dh), (s, lds), (q, qs), (k, ks, 1), scale),
    }
}

/// `o = p·v` for `rows` weight rows over `lk` keys, `dh` outputs each (`o` at row stride
/// `os`), by `by`.
///
/// # Safety
/// As [`gemm_f32`]'s; `by` is Avx512 only where `attention_avx512::applies(dh)`.
unsafe fn f32_values(
    by: F32Products,
    (rows, dh, lk): (usize, usize, usize),
    (o, os): (*mut f32, usize),
    (p, lds): (*const f32, usize),
    (v, vs): (*const f32, usize),
) {
    match by {
        #[cfg(target_arch = "x86_64")]
        F32Products::Avx512 => {
            attention_avx512::weighted_values((p, lds, rows), (v, vs, lk), dh, (o, os))
        }
        _ => gemm_f32((rows, dh, lk), (o, os), (p, lds), (v, 1, vs), 1.0),
    }
}

/// `dst = scale · lhs·rhs` in f32, single-threaded, by the `gemm` crate: `(m, n, k)`, `dst`
/// and `lhs` with unit column stride and the given row stride, `rhs` with its column and row
/// strides (a transpose is a swap).
///
/// # Safety
/// Every element the shapes and strides address lies inside its buffer, and `dst` is the
/// caller's alone.
unsafe fn gemm_f32(
    (m, n, k): (usize, usize, usize),
    (dst, dst_rs): (*mut f32, usize),
    (lhs, lhs_rs): (*const f32, usize),
    (rhs, rhs_cs, rhs_rs): (*const f32, usize, usize),
    scale: f32,
) {
    gemm::gemm(
        m,
        n,
        k,
        dst,
        1,
        dst_rs as isize,
        false,
        lhs,
        1,
        lhs_rs as isize,
        rhs,
        rhs_cs as isize,
        rhs_rs as isize,
        0.0,
        scale,
        false,
        false,
        false,
        gemm::Parallelism::None,
    );
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
    use super::attention_with;
    use crate::cpu_kernel::CpuKernel;
    use crate::linear::Products;
    use candle_core::{Device, Tensor};
    use half::bf16;

    /// f64 `softmax(q·kᵀ·scale + mask)·v` with GQA, `[B, H, L, D]` in and out.
    fn reference(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        dims: [usize; 6],
        scale: f64,
        mask: &[f32],
    ) -> Vec<f64> {
        reference_with(q, k, v, dims, scale, mask, |x| x.exp())
    }

    /// [`reference`] with the unnormalised weight `weight(s − max)` of each score.
    fn reference_with(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        dims: [usize; 6],
        scale: f64,
        mask: &[f32],
        weight: impl Fn(f64) -> f64,
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
                    let e: Vec<f64> = scores.iter().map(|s| weight(s - max)).collect();
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
        // (lq, lk, causal, dh): several 64-row blocks, a key offset (lk > lq), a plain mask,
        // head widths of one and three vectors and one the AVX-512 products do not take.
        let cases = [
            (150, 150, true, 16),
            (70, 100, true, 48),
            (70, 90, false, 16),
            (41, 37, false, 24),
        ];
        for (n, &(lq, lk, causal, dh)) in cases.iter().enumerate() {
            let p = problem(lq, lk, causal, dh, 0x5678 + n as u32);
            let want = reference(&p.q, &p.k, &p.v, p.dims, 0.125, &p.mask);
            // The `gemm` crate and, where the CPU has AVX-512, the hand-written products.
            for kernel in [CpuKernel::Library, CpuKernel::Avx512] {
                for strided_q in [false, true] {
                    let w = worst(&run(&p, Products::F32, kernel, strided_q), &want);
                    assert!(
                        w < 2e-6,
                        "{kernel:?} lq {lq} lk {lk} causal {causal} dh {dh}: max |Δ| {w:e}"
                    );
                }
            }
        }
    }

    fn round(x: &[f32]) -> Vec<f32> {
        x.iter().map(|&v| bf16::from_f32(v).to_f32()).collect()
    }

    /// f64 attention of bf16 operands: q, k, v rounded, the weights `e^(s − max)` rounded to
    /// bf16 and normalised by their own sum. `[B, H, L, D]` in and out. Each weight is rounded
    /// from an f32 `exp` of the f32 argument, as in the kernel: rounded from the f64 value a
    /// weight near a bf16 tie would round the other way now and then (2⁻⁸ of that weight).
    fn bf16_reference(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        dims: [usize; 6],
        scale: f64,
        mask: &[f32],
    ) -> Vec<f64> {
        let (q, k, v) = (round(q), round(k), round(v));
        reference_with(&q, &k, &v, dims, scale, mask, |x| {
            bf16::from_f32((x as f32).exp()).to_f64()
        })
    }

    /// One random problem: q, k, v, the `[Lq, Lk]` mask and the dims.
    struct Problem {
        q: Vec<f32>,
        k: Vec<f32>,
        v: Vec<f32>,
        mask: Vec<f32>,
        dims: [usize; 6],
        causal: bool,
    }

    fn problem(lq: usize, lk: usize, causal: bool, dh: usize, seed: u32) -> Problem {
        let mut rnd = crate::test_rng::xorshift(seed);
        let (b, hq, hkv) = (2, 4, 2);
        // Scores of a few units, as in the model (the softmax is not flat).
        let q: Vec<f32> = (0..b * hq * lq * dh).map(|_| 4.0 * rnd()).collect();
        let k: Vec<f32> = (0..b * hkv * lk * dh).map(|_| rnd()).collect();
        let v: Vec<f32> = (0..b * hkv * lk * dh).map(|_| rnd()).collect();
        let mask = (0..lq * lk)
            .map(|idx| {
                let (i, j) = (idx / lk, idx % lk);
                match causal {
                    true if j > i + (lk - lq) => f32::NEG_INFINITY,
                    true => 0.0,
                    false if j % 7 == 3 => f32::NEG_INFINITY,
                    false => rnd(),
                }
            })
            .collect();
        Problem {
            q,
            k,
            v,
            mask,
            dims: [b, hq, hkv, lq, lk, dh],
            causal,
        }
    }

    /// The attention of `p` as `[B, H, L, D]`, q passed as a view with row stride Hq·Dh (as
    /// the vision tower's frames) when `strided_q`.
    fn run(p: &Problem, products: Products, kernel: CpuKernel, strided_q: bool) -> Vec<f32> {
        let dev = Device::Cpu;
        let [b, hq, hkv, lq, lk, dh] = p.dims;
        let t = |x: &[f32], h, l| Tensor::from_vec(x.to_vec(), (b, h, l, dh), &dev).unwrap();
        let q = if strided_q {
            t(&p.q, hq, lq)
                .transpose(1, 2)
                .unwrap()
                .contiguous()
                .unwrap()
                .transpose(1, 2)
                .unwrap()
        } else {
            t(&p.q, hq, lq)
        };
        let m = Tensor::from_vec(p.mask.clone(), (lq, lk), &dev).unwrap();
        attention_with(
            &q,
            &t(&p.k, hkv, lk),
            &t(&p.v, hkv, lk),
            0.125,
            Some(&m),
            p.causal,
            products,
            kernel,
        )
        .unwrap()
        .contiguous()
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
    }

    fn worst(got: &[f32], want: &[f64]) -> f64 {
        got.iter()
            .zip(want)
            .map(|(g, w)| (*g as f64 - w).abs())
            .fold(0f64, f64::max)
    }

    #[test]
    fn bf16_products_match_an_f64_reference_on_rounded_operands_on_both_paths() {
        // (lq, lk, causal, dh): several 64-row blocks, a key offset (lk > lq), a plain mask,
        // odd key counts, a head width that is not a whole panel (the DiT's 48).
        let cases = [
            (150, 150, true, 64),
            (70, 101, true, 48),
            (70, 91, false, 48),
            (5, 33, false, 16),
        ];
        for (n, &(lq, lk, causal, dh)) in cases.iter().enumerate() {
            let p = problem(lq, lk, causal, dh, 0x1234 + n as u32);
            let want = bf16_reference(&p.q, &p.k, &p.v, p.dims, 0.125, &p.mask);
            let f32_path = run(&p, Products::F32, CpuKernel::Avx512Bf16, false);
            // AMX and vdpbf16ps (where the CPU has them) and the f32 GEMMs on rounded operands.
            for kernel in [
                CpuKernel::Amx,
                CpuKernel::Avx512Bf16,
                CpuKernel::Avx512,
                CpuKernel::Library,
            ] {
                for strided_q in [false, true] {
                    let got = run(&p, Products::Bf16, kernel, strided_q);
                    let w = worst(&got, &want);
                    // f32 sums and exp on top of the rounded operands (measured ≤ 2.3e-7).
                    assert!(
                        w < 1e-6,
                        "{kernel:?} lq {lq} lk {lk} causal {causal} dh {dh}: max |Δ| {w:e}"
                    );
                    assert_ne!(got, f32_path, "{kernel:?}: the products were not rounded");
                }
            }
        }
    }

    #[test]
    fn bf16_bits_do_not_depend_on_threads_or_repeats() {
        let p = problem(150, 170, true, 64, 9);
        for kernel in [CpuKernel::Amx, CpuKernel::Avx512Bf16, CpuKernel::Avx512] {
            let once = run(&p, Products::Bf16, kernel, false);
            assert_eq!(
                run(&p, Products::Bf16, kernel, false),
                once,
                "{kernel:?} repeat"
            );
            for threads in [1, 3] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let y = pool.install(|| run(&p, Products::Bf16, kernel, false));
                assert_eq!(y, once, "{kernel:?} {threads} threads");
            }
        }
    }
}
