//! Softmax attention on the CPU in f32 without the whole score matrix: each task takes a block
//! of query rows of one head, computes their scores against every key (one GEMM), applies the
//! scale, mask and softmax in place, and multiplies by the values (a second GEMM) straight
//! into the output. Same math as the plain candle ops; only GEMM summation order and the
//! `exp` kernel differ.

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
/// broadcasts to `[B, Hq, Lq, Lk]`. Operands are read in place when their last dimension is
/// contiguous. Returns `[B, Hq, Lq, Dh]` as a transposed view of a contiguous
/// `[B, Lq, Hq, Dh]` (so merging the heads afterwards costs no copy).
pub(crate) fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    mask: Option<&Tensor>,
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
            SCORES.with(|buf| {
                let mut buf = buf.borrow_mut();
                if buf.len() < rows * lk {
                    buf.resize(rows * lk, 0.0);
                }
                let s = &mut buf[..rows * lk];
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
                    crate::cpu_math::softmax_row(row);
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

/// Output pointer shared by the tasks; each writes its own rows of one head.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: tasks write disjoint elements of one live buffer.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// The pointer `off` elements in (a method, so closures capture the whole `Sync` wrapper).
    fn add(self, off: usize) -> *mut f32 {
        self.0.wrapping_add(off)
    }
}
