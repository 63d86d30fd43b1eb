//! `nn.Linear` whose weight may stay bf16 in memory (half the bytes of f32) while the product
//! is computed in f32. On AVX-512 and AVX2 CPUs the large weights are rearranged once at load
//! into the hand-written kernels' panel order and widened exactly in registers (`gemm/avx512.rs`,
//! `gemm/avx2.rs`); elsewhere slabs of weight rows are widened into a small per-thread f32 buffer
//! and multiplied straight into their columns of the output (`cpu_kernel.rs` says which). The math is the f32 product of the stored
//! values; only the summation order inside the GEMM may differ.
//!
//! A model loaded for bf16 products on the CPU ([`loading_with`], `--dtype bf16`) rounds each
//! product's activations to bf16 (round to nearest even) and keeps everything else f32: on
//! AVX512-BF16 CPUs `vdpbf16ps` multiplies them by weights packed at load as VNNI pairs
//! (`gemm/avx512bf16.rs`), on AMX CPUs tiles of the same pairs (`gemm/amx.rs`); elsewhere the f32 kernels multiply the rounded values (the same
//! numbers at f32 speed).

use crate::cpu_kernel::{self, CpuKernel};
pub use crate::cpu_math::Then;
use crate::gemm::avx512::{self, Rhs};
use crate::gemm::out_ptr::OutPtr;
use crate::gemm::{amx, avx2, avx512bf16, widen};
use crate::int8::{self, PackedI8, Stage};
use crate::op_inputs::{bias_of, input_rows};
use crate::weight_cache::{self, CachedWeight};
use crate::weights::COMPACT;
use candle_core::{CpuStorage, CustomOp1, DType, Layout, Module, Shape, Storage, Tensor, D};
use candle_nn::VarBuilder;
use half::bf16;
use rayon::prelude::*;
use std::cell::{Cell, RefCell};
use std::sync::Arc;

/// `y = x·Wᵀ + b` with `W` `[out, in]` in f32 or bf16 and `x`, `b` in the compute dtype.
#[derive(Debug, Clone)]
pub struct Linear {
    weight: Weight,
    bias: Option<Tensor>,
    /// Round `x` to bf16 before the product (a CPU layer loaded for [`Products::Bf16`]).
    bf16_inputs: bool,
    /// The checkpoint name (`…self_attn.q_proj`) of a layer [`linear`] loaded: what int8
    /// calibration records its inputs under.
    name: Option<Arc<str>>,
}

/// The precision of the activations entering a CPU linear's product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Products {
    /// f32 activations (the default, fp32-reference parity).
    #[default]
    F32,
    /// Activations rounded to bf16, bf16 weights, f32 accumulation (`--dtype bf16`).
    Bf16,
    /// int8 weights (per output channel) by activations quantised per row, exact i32 sums
    /// (`--dtype int8`, the stages of `--int8`; see [`crate::int8`]).
    Int8,
}

thread_local! {
    /// The products [`linear`] builds CPU layers for, on this thread (see [`loading_with`]).
    static LOAD_PRODUCTS: Cell<Products> = const { Cell::new(Products::F32) };
}

/// Runs `f` (a model load on this thread) with the CPU layers [`linear`] builds computing
/// `products`; restored afterwards, also on panic. A thread-local so that models of both
/// kinds can load side by side.
pub fn loading_with<R>(products: Products, f: impl FnOnce() -> R) -> R {
    struct Restore(Products);
    impl Drop for Restore {
        fn drop(&mut self) {
            LOAD_PRODUCTS.with(|p| p.set(self.0));
        }
    }
    let _restore = Restore(LOAD_PRODUCTS.with(|p| p.replace(products)));
    f()
}

/// Loads `stage` through `f`: its linear layers int8 when the stage is in the load's set
/// ([`int8::loading_with_stages`]).
pub(crate) fn loading_stage<R>(stage: Stage, f: impl FnOnce() -> R) -> R {
    if int8::loads_int8(stage) {
        loading_with(Products::Int8, f)
    } else {
        f()
    }
}

/// Rounds f32 values to bf16 (round to nearest even), kept as f32.
fn round_to_bf16(x: &Tensor) -> candle_core::Result<Tensor> {
    x.to_dtype(DType::BF16)?.to_dtype(DType::F32)
}

/// How a [`Linear`] holds its weight.
#[derive(Debug, Clone)]
enum Weight {
    /// A `[out, in]` tensor, used as is.
    Dense(Tensor),
    /// bf16 rearranged at load for the CPU's hand-written kernel (f32 activations only).
    Packed(Arc<PackedBf16>),
    /// Quantised at load for the int8 products.
    Int8(Arc<PackedI8>),
}

impl Linear {
    /// Wraps a `[out, in]` weight (bf16 is kept as is) and an optional `[out]` bias.
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> candle_core::Result<Linear> {
        weight.dims2()?;
        Ok(Linear {
            weight: Weight::Dense(weight.contiguous()?),
            bias,
            bf16_inputs: false,
            name: None,
        })
    }

    /// Like [`Linear::new`], for a layer that only ever sees f32 activations on the CPU: a bf16
    /// weight a hand-written kernel serves is rearranged once into its panel order (the "packed
    /// once at load" of the weights; the same bytes, no per-call transpose).
    pub fn new_for_cpu_f32(weight: Tensor, bias: Option<Tensor>) -> candle_core::Result<Linear> {
        Linear::new_for_cpu(weight, bias, Products::F32)
    }

    /// Like [`Linear::new_for_cpu_f32`], computing `products`: for [`Products::Bf16`] the
    /// weight becomes bf16 (an f32 one is rounded once) and, on an AVX512-BF16 CPU, is packed
    /// as VNNI pairs whatever its shape.
    pub fn new_for_cpu(
        weight: Tensor,
        bias: Option<Tensor>,
        products: Products,
    ) -> candle_core::Result<Linear> {
        Linear::new_for_kernel(weight, bias, products, cpu_kernel::current())
    }

    /// [`Linear::new_for_cpu`] packing for `kernel` (the process's kernel, or a lesser one).
    fn new_for_kernel(
        weight: Tensor,
        bias: Option<Tensor>,
        products: Products,
        kernel: CpuKernel,
    ) -> candle_core::Result<Linear> {
        let (n, k) = weight.dims2()?;
        if products == Products::Int8 && weight.device().is_cpu() {
            return Linear::new_int8(weight, bias, None);
        }
        let bf16_inputs = products == Products::Bf16;
        let weight = if bf16_inputs && weight.dtype() != DType::BF16 {
            weight.to_dtype(DType::BF16)?
        } else {
            weight
        };
        let layout = if bf16_inputs && kernel >= CpuKernel::Avx512Bf16 {
            PackLayout::VnniPairs
        } else {
            PackLayout::Panels
        };
        if weight.dtype() != DType::BF16
            || !weight.device().is_cpu()
            || kernel == CpuKernel::Library
            || (layout == PackLayout::Panels && !packed_wins(k, n))
        {
            let mut l = Linear::new(weight, bias)?;
            l.bf16_inputs = bf16_inputs;
            return Ok(l);
        }
        let weight = weight.contiguous()?;
        let packed = {
            // Straight from the loaded tensor's storage: no intermediate copy.
            let (guard, l) = weight.storage_and_layout();
            match (&*guard, l.contiguous_offsets()) {
                (Storage::Cpu(CpuStorage::BF16(v)), Some((a, b))) => {
                    PackedBf16::with_layout(&v[a..b], n, k, layout)
                }
                _ => None,
            }
        }
        .ok_or_else(|| {
            candle_core::Error::Msg("packing a bf16 weight: not a CPU bf16 tensor".into())
        })?;
        Ok(Linear {
            weight: Weight::Packed(Arc::new(packed)),
            bias,
            bf16_inputs,
            name: None,
        })
    }

    /// An int8 layer of this thread's load (see [`crate::int8::loading_int8`]), smoothed when
    /// the load has calibration maxima for `name`.
    fn new_int8(
        weight: Tensor,
        bias: Option<Tensor>,
        name: Option<&str>,
    ) -> candle_core::Result<Linear> {
        let packed = int8::quantize_for_load(&weight, name)?;
        Ok(Linear {
            weight: Weight::Int8(Arc::new(packed)),
            bias,
            bf16_inputs: false,
            name: None,
        })
    }

    /// The precision of the activations entering the product.
    pub fn products(&self) -> Products {
        if matches!(self.weight, Weight::Int8(_)) {
            Products::Int8
        } else if self.bf16_inputs {
            Products::Bf16
        } else {
            Products::F32
        }
    }

    /// The packed weight's layout, if it was packed at load.
    pub fn pack_layout(&self) -> Option<PackLayout> {
        match &self.weight {
            Weight::Dense(_) | Weight::Int8(_) => None,
            Weight::Packed(p) => Some(p.layout()),
        }
    }

    /// The `[out, in]` weight tensor, unless it was packed for the CPU kernel.
    pub fn weight(&self) -> Option<&Tensor> {
        match &self.weight {
            Weight::Dense(w) => Some(w),
            Weight::Packed(_) | Weight::Int8(_) => None,
        }
    }

    /// `(out, in)`.
    pub fn dims(&self) -> (usize, usize) {
        match &self.weight {
            Weight::Dense(w) => w.dims2().unwrap_or((0, 0)),
            Weight::Packed(p) => p.dims(),
            Weight::Int8(p) => p.dims(),
        }
    }

    /// Bytes of the weight (a packed one with its panels' padding) and bias as held.
    pub fn weight_bytes(&self) -> usize {
        let bytes = |t: &Tensor| t.elem_count() * t.dtype().size_in_bytes();
        let weight = match &self.weight {
            Weight::Dense(w) => bytes(w),
            Weight::Packed(p) => std::mem::size_of_val(p.panels()),
            Weight::Int8(p) => p.bytes(),
        };
        weight + self.bias.as_ref().map_or(0, bytes)
    }

    /// Whether the weight was packed at load for the CPU's hand-written kernel.
    pub fn is_packed(&self) -> bool {
        matches!(self.weight, Weight::Packed(_) | Weight::Int8(_))
    }

    /// The `[out]` bias.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// `then` of the layer's output: `forward` followed by the step, which an int8 layer runs
    /// on each tile of its product (no pass over the whole output; the same bits).
    pub fn forward_then(&self, x: &Tensor, then: Then) -> candle_core::Result<Tensor> {
        match &self.weight {
            Weight::Int8(p) => {
                self.record_input(x)?;
                int8::forward(x, p, self.bias.as_ref(), Some(then))
            }
            _ => then.apply(&self.forward(x)?),
        }
    }

    /// Records the input for int8 calibration when a calibration is under way.
    fn record_input(&self, x: &Tensor) -> candle_core::Result<()> {
        if crate::smoothing::recording() {
            if let Some(name) = &self.name {
                crate::smoothing::record(name, x)?;
            }
        }
        Ok(())
    }
}

/// Loads `weight` `[out, in]` (kept bf16 when the checkpoint stores bf16) and, when `bias`,
/// `bias` `[out]` in the VarBuilder's dtype; packed for the CPU kernel when the layer computes
/// in f32 on the CPU.
pub fn linear(
    vb: VarBuilder,
    in_dim: usize,
    out_dim: usize,
    bias: bool,
) -> candle_core::Result<Linear> {
    let name = vb.prefix();
    let cpu = vb.dtype() == DType::F32 && vb.device().is_cpu();
    let bias = if bias {
        Some(vb.get(out_dim, "bias")?)
    } else {
        None
    };
    if let Some(cached) = cpu
        .then(|| weight_cache::cached(&name, out_dim, in_dim))
        .flatten()
    {
        // Mapped as packed by an earlier load with the same key: nothing read or packed.
        let (weight, bf16_inputs) = match cached {
            CachedWeight::Bf16(p) => (
                Weight::Packed(p),
                LOAD_PRODUCTS.with(Cell::get) == Products::Bf16,
            ),
            CachedWeight::Int8(p) => (Weight::Int8(p), false),
        };
        return Ok(Linear {
            weight,
            bias,
            bf16_inputs,
            name: Some(name.into()),
        });
    }
    let weight =
        vb.get_with_hints_dtype((out_dim, in_dim), "weight", Default::default(), COMPACT)?;
    let mut layer = if cpu {
        match LOAD_PRODUCTS.with(Cell::get) {
            Products::Int8 if int8::keeps_f32(&name) => {
                Linear::new_for_cpu(weight, bias, Products::F32)?
            }
            Products::Int8 if weight.device().is_cpu() => {
                Linear::new_int8(weight, bias, Some(&name))?
            }
            products => Linear::new_for_cpu(weight, bias, products)?,
        }
    } else {
        Linear::new(weight, bias)?
    };
    match &layer.weight {
        Weight::Packed(p) if cpu => weight_cache::record(&name, CachedWeight::Bf16(p.clone())),
        Weight::Int8(p) if cpu => weight_cache::record(&name, CachedWeight::Int8(p.clone())),
        _ => {}
    }
    layer.name = Some(name.into());
    Ok(layer)
}

/// The products of the CPU attention, norms and small layers loaded from `vb` now (see
/// [`loading_with`]): bf16 only for f32 activations on the CPU (what attention modules record
/// at load, as [`Linear`] does); f32 under int8, which only the large linears run.
pub(crate) fn products_for(vb: &VarBuilder) -> Products {
    match LOAD_PRODUCTS.with(Cell::get) {
        Products::Bf16 if vb.dtype() == DType::F32 && vb.device().is_cpu() => Products::Bf16,
        _ => Products::F32,
    }
}

/// The products of the CPU attention of a vision, LLM or VL-adapter layer loaded from `vb` now:
/// [`products_for`]'s, except that in an int8 stage the attention (scores and values, which
/// stay activations by activations) takes bf16 operands where the CPU multiplies them faster
/// than f32 (`vdpbf16ps` or AMX under the selected kernel), and f32 elsewhere. The DiT's
/// attention (41 queries) keeps [`products_for`]'s: too short to pay for the rounding.
pub(crate) fn attention_products_for(vb: &VarBuilder) -> Products {
    match LOAD_PRODUCTS.with(Cell::get) {
        Products::Int8 if vb.dtype() == DType::F32 && vb.device().is_cpu() => {
            if crate::cpu_kernel::bf16_unit() {
                Products::Bf16
            } else {
                Products::F32
            }
        }
        _ => products_for(vb),
    }
}

/// A small layer with its `[out, in]` weight and bias in the VarBuilder's dtype, multiplied
/// exactly as candle's `nn.Linear` for f32 products; for bf16 products the weight is kept bf16
/// and the layer computes as [`linear`]'s do.
pub(crate) fn linear_f32_weight(
    vb: VarBuilder,
    in_dim: usize,
    out_dim: usize,
) -> candle_core::Result<Linear> {
    if products_for(&vb) == Products::Bf16 {
        return linear(vb, in_dim, out_dim, true);
    }
    Linear::new(
        vb.get((out_dim, in_dim), "weight")?,
        Some(vb.get(out_dim, "bias")?),
    )
}

/// A loaded `[out, in]` weight and bias as a layer computing the products of `vb`'s load:
/// [`Linear::new`] for f32 ones, [`Linear::new_for_cpu`] for bf16 ones.
pub(crate) fn wrap_loaded(
    vb: &VarBuilder,
    weight: Tensor,
    bias: Option<Tensor>,
) -> candle_core::Result<Linear> {
    match products_for(vb) {
        Products::F32 | Products::Int8 => Linear::new(weight, bias),
        Products::Bf16 => Linear::new_for_cpu(weight, bias, Products::Bf16),
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.record_input(x)?;
        // The VNNI kernel rounds while packing the activations; every other path is given
        // rounded values.
        let rounded;
        let x = if self.bf16_inputs && self.pack_layout() != Some(PackLayout::VnniPairs) {
            rounded = round_to_bf16(x)?;
            &rounded
        } else {
            x
        };
        let (n, _) = self.dims();
        let source = match &self.weight {
            Weight::Dense(w) if w.dtype() == x.dtype() => {
                // Exactly candle's own Linear.
                return candle_nn::Linear::new(w.clone(), self.bias.clone()).forward(x);
            }
            Weight::Dense(w)
                if w.dtype() == DType::BF16 && x.dtype() == DType::F32 && x.device().is_cpu() =>
            {
                WeightSource::Tensor(w)
            }
            Weight::Dense(w) => {
                let w = w.to_dtype(x.dtype())?;
                return candle_nn::Linear::new(w, self.bias.clone()).forward(x);
            }
            Weight::Int8(p) => return crate::int8::forward(x, p, self.bias.as_ref(), None),
            Weight::Packed(p) => {
                if x.dtype() != DType::F32 || !x.device().is_cpu() {
                    candle_core::bail!(
                        "a CPU-packed linear takes f32 CPU activations, got {:?} on {:?}",
                        x.dtype(),
                        x.device()
                    );
                }
                WeightSource::Packed(p)
            }
        };
        let k = x.dim(D::Minus1)?;
        let mut dims = x.dims().to_vec();
        let m: usize = dims[..dims.len() - 1].iter().product();
        if let Some(last) = dims.last_mut() {
            *last = n;
        }
        // The bias seeds the output rows (no separate pass) when it is a plain f32 row.
        let fused_bias = self
            .bias
            .as_ref()
            .filter(|b| b.dtype() == DType::F32 && b.dims() == [n]);
        let y = x
            .contiguous()?
            .reshape((m, k))?
            .apply_op1_no_bwd(&WidenedMatMul {
                weight: source,
                bias: fused_bias,
            })?
            .reshape(dims)?;
        match &self.bias {
            Some(b) if fused_bias.is_none() => y.broadcast_add(b),
            _ => Ok(y),
        }
    }
}

/// A bf16 weight as the widened product reads it.
#[derive(Clone, Copy)]
enum WeightSource<'a> {
    /// A contiguous `[N, K]` CPU tensor.
    Tensor(&'a Tensor),
    /// Packed at load.
    Packed(&'a PackedBf16),
}

/// `x·Wᵀ (+ b)` for f32 `x` `[M, K]`, a bf16 `W` `[N, K]` and an optional f32 `b` `[N]` on the
/// CPU.
struct WidenedMatMul<'a> {
    weight: WeightSource<'a>,
    bias: Option<&'a Tensor>,
}

impl CustomOp1 for WidenedMatMul<'_> {
    fn name(&self) -> &'static str {
        "widened-bf16-matmul"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, m, k) = input_rows(storage, layout, "widened matmul")?;
        let (n, wk) = match self.weight {
            WeightSource::Tensor(w) => w.dims2()?,
            WeightSource::Packed(p) => p.dims(),
        };
        if wk != k {
            candle_core::bail!("widened matmul: input width {k} but weight [{n}, {wk}]");
        }
        let bias_guard = self.bias.map(|b| b.storage_and_layout());
        let bias = bias_of(
            bias_guard.as_ref().map(|(g, l)| (&**g, *l)),
            n,
            "widened matmul",
        )?;
        let out = match self.weight {
            WeightSource::Packed(p) => matmul_packed_with(cpu_kernel::current(), x, m, k, p, bias)
                .ok_or_else(|| {
                    candle_core::Error::Msg(
                        "widened matmul: the CPU kernel does not read this packed weight".into(),
                    )
                })?,
            WeightSource::Tensor(t) => {
                let (guard, wl) = t.storage_and_layout();
                let w = match (&*guard, wl.contiguous_offsets()) {
                    (Storage::Cpu(CpuStorage::BF16(v)), Some((a, b))) => &v[a..b],
                    _ => candle_core::bail!(
                        "widened matmul: weight must be a contiguous CPU bf16 tensor"
                    ),
                };
                // The kernel that measured faster for this weight shape.
                let kernel = if packed_wins(k, n) {
                    cpu_kernel::current()
                } else {
                    CpuKernel::Library
                };
                matmul_bf16_with(kernel, x, m, k, w, n, bias)
            }
        };
        Ok((CpuStorage::F32(out), Shape::from((m, n))))
    }
}

thread_local! {
    /// Per-thread f32 copy of the weight rows being multiplied (reused across calls).
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `x` `[m, k]` · a row-major `w` `[n, k]`ᵀ (+ `bias` `[n]`) through `kernel`, the weight
/// packed per call (the library when the CPU does not run `kernel`; public for the
/// `gemm_shapes` benchmark). Same bits as through a weight packed at load.
#[doc(hidden)]
pub fn matmul_bf16_with(
    kernel: CpuKernel,
    x: &[f32],
    m: usize,
    k: usize,
    w: &[bf16],
    n: usize,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let y = match kernel.for_f32() {
        CpuKernel::Avx512 => avx512::matmul(x, m, k, Rhs::Bf16(w), n, bias),
        CpuKernel::Avx2 if avx2::available() => {
            PackedBf16::new(w, n, k).and_then(|p| avx2::matmul(x, m, k, &p, bias))
        }
        _ => None,
    };
    if let Some(y) = y {
        return y;
    }
    library_matmul(x, m, k, w, n, bias)
}

/// A weight packed at load and its layouts (public only for the `gemm_shapes` benchmark).
#[doc(hidden)]
pub use crate::gemm::{PackLayout, PackedBf16};

/// `x` `[m, k]` · a packed weight ᵀ (+ `bias`) through `kernel`: f32 `x` for
/// [`PackLayout::Panels`] (the f32 kernel under `kernel`), `x` rounded to bf16 for
/// [`PackLayout::VnniPairs`] (`avx512bf16` and `amx` only); `None` for the library or when the CPU does
/// not run the kernel (public for the `gemm_shapes` benchmark).
#[doc(hidden)]
pub fn matmul_packed_with(
    kernel: CpuKernel,
    x: &[f32],
    m: usize,
    k: usize,
    w: &PackedBf16,
    bias: Option<&[f32]>,
) -> Option<Vec<f32>> {
    match (w.layout(), kernel) {
        (PackLayout::VnniPairs, CpuKernel::Amx) => amx::KERNEL.matmul(x, m, k, w, bias),
        (PackLayout::VnniPairs, CpuKernel::Avx512Bf16) => {
            avx512bf16::KERNEL.matmul(x, m, k, w, bias)
        }
        (PackLayout::VnniPairs, _) => None,
        (PackLayout::Panels, kernel) => match kernel.for_f32() {
            CpuKernel::Avx512 => avx512::matmul(x, m, k, Rhs::Packed(w), w.dims().0, bias),
            CpuKernel::Avx2 => avx2::matmul(x, m, k, w, bias),
            _ => None,
        },
    }
}

/// [`matmul_packed_with`] through the AVX2 kernel in the given blocks (the same bits whatever
/// they are; `None` where the CPU lacks AVX2 or the blocks are not whole tiles; public for the
/// `gemm_blocking` sweep).
#[doc(hidden)]
pub fn matmul_avx2_blocked(
    x: &[f32],
    m: usize,
    k: usize,
    w: &PackedBf16,
    bias: Option<&[f32]>,
    blocks: crate::cpu_caches::GemmBlocking,
) -> Option<Vec<f32>> {
    avx2::matmul_blocked(x, m, k, w, bias, blocks)
}

/// The blocks the AVX2 kernel uses on this CPU (public for the `gemm_blocking` sweep).
#[doc(hidden)]
pub fn avx2_blocking() -> crate::cpu_caches::GemmBlocking {
    avx2::blocking()
}

/// Whether the hand-written kernels measured faster than the library for weights `[n, k]`: on
/// every model shape benchmarked (`examples/gemm_shapes.rs`, all with k, n >= 1024; smaller
/// ones were not measured). Chosen by the weight shape only, never by the row count, so a row's
/// bits do not depend on the batch it is computed in.
fn packed_wins(k: usize, n: usize) -> bool {
    k >= 1024 && n >= 1024
}

/// The `gemm`-crate path: widened weight slabs multiplied per thread.
fn library_matmul(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[bf16],
    n: usize,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    // A few rows (the DiT's 41 tokens) run faster with the tokens along the kernel's long
    // side: the slabs then write a column-major `[n, m]` product, transposed at the end.
    let col_major = (2..=SMALL_M).contains(&m);
    let mut out = match bias {
        Some(b) if n > 0 && !col_major => b.repeat(m),
        _ => vec![0f32; m * n],
    };
    if m == 0 || n == 0 {
        return out;
    }
    let read_dst = bias.is_some() && !col_major;
    // Element (i, j) of a slab's product sits at i·dst_rs + j·dst_cs from its first column.
    let (dst_cs, dst_rs, slab_step) = if col_major {
        (m as isize, 1, m)
    } else {
        (1, n as isize, 1)
    };
    let rows = slab_rows(m, n, rayon::current_num_threads());
    let slabs = n.div_ceil(rows);
    let dst = OutPtr(out.as_mut_ptr());
    let run = |s: usize| {
        let n0 = s * rows;
        let nr = rows.min(n - n0);
        SCRATCH.with(|buf| {
            let mut buf = buf.borrow_mut();
            if buf.len() < nr * k {
                buf.resize(nr * k, 0.0);
            }
            let src = &w[n0 * k..(n0 + nr) * k];
            buf[..nr * k]
                .iter_mut()
                .zip(src)
                .for_each(|(d, &s)| *d = widen(s));
            // SAFETY: `dst` has m·n elements and this call writes only output columns
            // n0..n0+nr (in either layout); `x` is m·k, `buf` holds nr·k; no slab overlaps.
            unsafe {
                gemm::gemm(
                    m,
                    nr,
                    k,
                    dst.add(n0 * slab_step),
                    dst_cs,
                    dst_rs,
                    read_dst,
                    x.as_ptr(),
                    1,
                    k as isize,
                    buf.as_ptr(),
                    k as isize,
                    1,
                    1.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
        });
    };
    if slabs == 1 {
        run(0);
    } else {
        (0..slabs).into_par_iter().for_each(run);
    }
    if col_major {
        let t = out;
        out = vec![0f32; m * n];
        for (i, row) in out.chunks_exact_mut(n).enumerate() {
            for (j, y) in row.iter_mut().enumerate() {
                *y = t[j * m + i];
            }
            if let Some(b) = bias {
                row.iter_mut().zip(b).for_each(|(y, b)| *y += b);
            }
        }
    }
    out
}

/// Largest row count computed column-major (see [`library_matmul`]).
const SMALL_M: usize = 64;

/// Weight rows per slab: big enough that re-packing `x` per slab is cheap, small enough that
/// the widened slab stays in cache, and a slab count the threads share evenly.
fn slab_rows(m: usize, n: usize, threads: usize) -> usize {
    const ALIGN: usize = 16;
    let target = if (2..=SMALL_M).contains(&m) || m > 128 {
        256
    } else {
        128
    };
    let threads = threads.max(1);
    let mut slabs = n.div_ceil(target).next_multiple_of(threads);
    // Never split below ALIGN rows per slab.
    slabs = slabs.min(n.div_ceil(ALIGN)).max(1);
    n.div_ceil(slabs).next_multiple_of(ALIGN).min(n)
}

#[cfg(test)]
mod tests {
    use super::{
        attention_products_for, loading_with, matmul_bf16_with, slab_rows, CpuKernel, Linear,
        PackLayout, Products, Then,
    };
    use crate::gemm::checks::{self, Operands};
    use candle_core::DType;
    use candle_core::{Device, Module, Tensor};
    use candle_nn::VarBuilder;
    use half::bf16;

    /// Random operands from `rnd` and the `[m, k]` input, `[n, k]` weight and `[n]` bias
    /// tensors holding them.
    fn operands(
        mut rnd: impl FnMut() -> f32,
        (m, n, k): (usize, usize, usize),
    ) -> (Operands, [Tensor; 3]) {
        let (x, w, b) = checks::random(&mut rnd, (m, n, k));
        let dev = Device::Cpu;
        let tensors = [
            Tensor::from_slice(&x, (m, k), &dev).unwrap(),
            Tensor::from_slice(&w, (n, k), &dev).unwrap(),
            Tensor::from_slice(&b, n, &dev).unwrap(),
        ];
        ((x, w, b), tensors)
    }

    #[test]
    fn int8_stages_take_bf16_attention_only_where_a_bf16_unit_runs_it() {
        let cpu = candle_core::Device::Cpu;
        let vb = VarBuilder::zeros(DType::F32, &cpu);
        let under = |p| loading_with(p, || attention_products_for(&vb));
        assert_eq!(under(Products::F32), Products::F32);
        assert_eq!(under(Products::Bf16), Products::Bf16);
        let unit = super::cpu_kernel::current() >= CpuKernel::Avx512Bf16
            && crate::gemm::avx512bf16::available();
        let want = if unit { Products::Bf16 } else { Products::F32 };
        assert_eq!(under(Products::Int8), want);
        // bf16 activations (a GPU-style load) keep the module's own choice.
        let vb16 = VarBuilder::zeros(DType::BF16, &cpu);
        let got = loading_with(Products::Int8, || attention_products_for(&vb16));
        assert_eq!(got, Products::F32);
    }

    #[test]
    fn bf16_products_round_the_activations_and_f32_ones_do_not() {
        let (m, n, k) = (5, 40, 70);
        let ((x, w, b), [xt, wt, bt]) = operands(crate::test_rng::lcg(3u32), (m, n, k));
        let run = |products| {
            let l = Linear::new_for_cpu(wt.clone(), Some(bt.clone()), products).unwrap();
            assert_eq!(l.products(), products);
            let y = l.forward(&xt).unwrap().flatten_all().unwrap();
            (l, y.to_vec1::<f32>().unwrap())
        };
        let (l16, y16) = run(Products::Bf16);
        let (_, y32) = run(Products::F32);
        // On an AVX512-BF16 CPU the bf16 layer multiplies VNNI pairs packed at load.
        if super::cpu_kernel::current() >= CpuKernel::Avx512Bf16 {
            assert_eq!(l16.pack_layout(), Some(PackLayout::VnniPairs));
        }
        for i in 0..m {
            for j in 0..n {
                let dot = |round: bool| -> f64 {
                    (0..k)
                        .map(|t| {
                            let a = x[i * k + t];
                            let a = if round { bf16::from_f32(a).to_f32() } else { a };
                            a as f64 * w[j * k + t].to_f64()
                        })
                        .sum::<f64>()
                        + b[j] as f64
                };
                // Both within f32 summation error of their own exact product.
                let tol = 1e-5;
                assert!(
                    (y16[i * n + j] as f64 - dot(true)).abs() < tol,
                    "bf16 ({i}, {j})"
                );
                assert!(
                    (y32[i * n + j] as f64 - dot(false)).abs() < tol,
                    "f32 ({i}, {j})"
                );
            }
        }
        assert_ne!(y16, y32);
    }

    #[test]
    fn a_step_after_the_product_gives_the_bits_of_the_separate_op_for_every_kind_of_layer() {
        // The int8 layer runs the GELU on its tiles; the others after the product. A 3-D input
        // (the DiT's `[1, T, D]`), ragged sizes, a `[1, N]` bias (added separately).
        let (m, n, k) = (41, 70, 130);
        let (_, [xt, wt, bt]) = operands(crate::test_rng::xorshift(5u32), (m, n, k));
        let xt = xt.reshape((1, m, k)).unwrap();
        let bits = |t: &Tensor| -> Vec<u32> {
            let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            v.iter().map(|v| v.to_bits()).collect()
        };
        for products in [Products::F32, Products::Bf16, Products::Int8] {
            for bias in [Some(bt.clone()), Some(bt.reshape((1, n)).unwrap()), None] {
                let l = Linear::new_for_cpu(wt.clone(), bias.clone(), products).unwrap();
                let plain = l.forward(&xt).unwrap();
                for (then, want) in [
                    (Then::GeluTanh, crate::cpu_math::gelu_tanh(&plain).unwrap()),
                    (Then::GeluErf, crate::cpu_math::gelu_erf(&plain).unwrap()),
                ] {
                    let fused = l.forward_then(&xt, then).unwrap();
                    assert_eq!(fused.dims(), [1, m, n]);
                    let what = format!("{then:?} {products:?} bias {bias:?}");
                    assert_eq!(bits(&fused), bits(&want), "{what}");
                    // The step did something.
                    assert_ne!(bits(&fused), bits(&plain), "{what}");
                }
            }
        }
    }

    #[test]
    fn bf16_products_give_the_same_bits_through_the_f32_kernel_on_rounded_activations() {
        // What `GR00T_CPU_KERNEL=avx512 --dtype bf16` runs against the native kernel.
        // Under `amx` the VNNI layer runs tiles, which round in their own order.
        if super::cpu_kernel::current() != CpuKernel::Avx512Bf16 {
            return;
        }
        let (m, n, k) = (17, 1056, 1030);
        let (_, [xt, wt, bt]) = operands(crate::test_rng::xorshift(11u32), (m, n, k));
        let run = |kernel| {
            let l = Linear::new_for_kernel(wt.clone(), Some(bt.clone()), Products::Bf16, kernel)
                .unwrap();
            let y = l.forward(&xt).unwrap().flatten_all().unwrap();
            (l.pack_layout(), y.to_vec1::<f32>().unwrap())
        };
        let (native_layout, native) = run(CpuKernel::Avx512Bf16);
        let (f32_layout, via_f32) = run(CpuKernel::Avx512);
        assert_eq!(native_layout, Some(PackLayout::VnniPairs));
        assert_eq!(f32_layout, Some(PackLayout::Panels));
        assert_eq!(native, via_f32);
    }

    #[test]
    fn products_match_a_plain_f64_product_in_both_layouts() {
        let shapes = [(41, 300, 70), (1, 33, 20), (300, 40, 130), (65, 17, 9)];
        checks::exact_on_dyadic_inputs(&shapes, false, &|x, m, k, w, n, bias| {
            [CpuKernel::Library, CpuKernel::Avx2, CpuKernel::Avx512]
                .map(|kernel| matmul_bf16_with(kernel, x, m, k, w, n, bias))
                .to_vec()
        });
    }

    #[test]
    fn slabs_cover_every_row_and_share_evenly() {
        for &(m, n, t) in &[
            (41, 1536, 2),
            (1792, 4096, 2),
            (469, 1000, 2),
            (5, 7, 2),
            (3, 1, 4),
        ] {
            let r = slab_rows(m, n, t);
            assert!(r >= 1 && r <= n, "{m} {n} {t} → {r}");
            let slabs = n.div_ceil(r);
            assert!(slabs * r >= n);
        }
        assert_eq!(1536usize.div_ceil(slab_rows(41, 1536, 2)) % 2, 0);
    }
}
