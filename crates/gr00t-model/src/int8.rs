//! `--dtype int8` on the CPU: which stages' linear layers multiply int8 weights by int8
//! activations ([`Int8Stages`], `--int8`), the kernel that runs them ([`kernel`]), and the
//! product a [`crate::linear::Linear`] loaded for it computes (`gemm/int8`: weights s8 per
//! output channel, activations s8 per row, exact i32 sums, f32 epilogue). Attention, norms,
//! the small per-step layers and the sampler stay f32.

use crate::error::SettingError;
pub use crate::gemm::int8::{Int8Kernel, PackedI8, LEVELS};
use crate::op_inputs::{bias_of, input_rows};
use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Storage, Tensor, D};
use std::cell::Cell;
use std::sync::OnceLock;

/// A stage of the network whose linear layers may run int8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The vision tower (blocks and mergers; the patch embedding stays f32).
    Vision,
    /// The truncated Qwen3 LLM.
    Llm,
    /// The action head's VL adapter (its self-attention block over the backbone features).
    Adapter,
    /// The DiT's blocks (the per-step output projections stay f32).
    Dit,
}

impl Stage {
    /// Every stage, in the order of the data flow.
    pub const ALL: [Stage; 4] = [Stage::Vision, Stage::Llm, Stage::Adapter, Stage::Dit];

    /// The name `--int8` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Vision => "vision",
            Stage::Llm => "llm",
            Stage::Adapter => "adapter",
            Stage::Dit => "dit",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of [`Stage`]s (`--int8 dit,adapter,llm,vision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Int8Stages(u8);

impl Int8Stages {
    /// No stage: every product f32.
    pub const NONE: Int8Stages = Int8Stages(0);
    /// Every stage.
    pub const ALL: Int8Stages = Int8Stages(0b1111);

    /// The set of one stage.
    pub const fn only(stage: Stage) -> Int8Stages {
        Int8Stages(1 << (stage as u8))
    }

    /// This set and `stage`.
    pub const fn with(self, stage: Stage) -> Int8Stages {
        Int8Stages(self.0 | Int8Stages::only(stage).0)
    }

    /// Whether `stage` is in the set.
    pub fn contains(self, stage: Stage) -> bool {
        self.0 & stage.bit() != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The stages' names in data-flow order (`/info`'s `int8_stages`).
    pub fn names(self) -> Vec<&'static str> {
        Stage::ALL
            .into_iter()
            .filter(|s| self.contains(*s))
            .map(Stage::as_str)
            .collect()
    }

    /// Parses `dit,adapter,llm,vision` (any order and subset), `all` or `none`.
    pub fn parse(value: &str) -> Result<Int8Stages, SettingError> {
        let mut set = 0u8;
        for name in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            set |= match name {
                "all" => Int8Stages::ALL.0,
                "none" => 0,
                other => Stage::ALL
                    .into_iter()
                    .find(|s| s.as_str() == other)
                    .ok_or_else(|| SettingError::Int8Stage(other.to_string()))?
                    .bit(),
            };
        }
        Ok(Int8Stages(set))
    }
}

impl std::fmt::Display for Int8Stages {
    /// `vision,llm,adapter,dit` (the stages in data-flow order), or `none`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        f.write_str(&self.names().join(","))
    }
}

impl std::str::FromStr for Int8Stages {
    type Err = SettingError;

    fn from_str(s: &str) -> Result<Int8Stages, SettingError> {
        Int8Stages::parse(s)
    }
}

thread_local! {
    /// The stages whose layers load int8 on this thread (see [`loading_with_stages`]).
    static LOAD_STAGES: Cell<Int8Stages> = const { Cell::new(Int8Stages::NONE) };
    /// The quantisation grid of the weights loaded on this thread ([`LEVELS`] but in tests).
    static LOAD_LEVELS: Cell<i32> = const { Cell::new(LEVELS) };
}

/// Runs `f` (a model load on this thread) with the linear layers of `stages` loading int8
/// weights quantised to `levels` (±[`LEVELS`] for a real int8; fewer only to break the
/// quantisation on purpose); restored afterwards, also on panic.
pub fn loading_with_stages<R>(stages: Int8Stages, levels: i32, f: impl FnOnce() -> R) -> R {
    struct Restore(Int8Stages, i32);
    impl Drop for Restore {
        fn drop(&mut self) {
            LOAD_STAGES.with(|s| s.set(self.0));
            LOAD_LEVELS.with(|l| l.set(self.1));
        }
    }
    let _restore = Restore(
        LOAD_STAGES.with(|s| s.replace(stages)),
        LOAD_LEVELS.with(|l| l.replace(levels)),
    );
    f()
}

/// Whether the layers of `stage` load int8 on this thread.
pub(crate) fn loads_int8(stage: Stage) -> bool {
    LOAD_STAGES.with(Cell::get).contains(stage)
}

/// The grid the weights loading now are quantised to.
pub(crate) fn load_levels() -> i32 {
    LOAD_LEVELS.with(Cell::get)
}

static SELECTED: OnceLock<Int8Kernel> = OnceLock::new();

/// Fixes the process's int8 kernel to the best this CPU runs capped by `cap` (`--cpu-kernel`'s
/// int8 part), unless already fixed; returns the kernel in use.
pub fn select(cap: Option<Int8Kernel>) -> Int8Kernel {
    *SELECTED.get_or_init(|| Int8Kernel::fastest(cap, Int8Kernel::available))
}

/// The int8 kernel of this process (the best this CPU runs, unless [`select`] capped it).
pub fn kernel() -> Int8Kernel {
    select(None)
}

/// `x` `[m, k]` · `w`ᵀ (+ `bias`) through `kernel` (`None` when the CPU does not run it or the
/// sizes do not match; public for the `gemm_int8` benchmark).
#[doc(hidden)]
pub fn matmul_with(
    kernel: Int8Kernel,
    x: &[f32],
    m: usize,
    k: usize,
    w: &PackedI8,
    bias: Option<&[f32]>,
) -> Option<Vec<f32>> {
    crate::gemm::int8::matmul(kernel, x, m, k, w, bias)
}

/// Quantises a CPU `[out, in]` weight (bf16 or f32) for the int8 products.
pub(crate) fn quantize_weight(weight: &Tensor, levels: i32) -> candle_core::Result<PackedI8> {
    let (n, k) = weight.dims2()?;
    let weight = weight.contiguous()?;
    let (guard, l) = weight.storage_and_layout();
    let packed = match (&*guard, l.contiguous_offsets()) {
        (Storage::Cpu(CpuStorage::BF16(v)), Some((a, b))) => {
            PackedI8::from_bf16(&v[a..b], n, k, levels)
        }
        (Storage::Cpu(CpuStorage::F32(v)), Some((a, b))) => {
            PackedI8::from_f32(&v[a..b], n, k, levels)
        }
        _ => None,
    };
    packed.ok_or_else(|| {
        candle_core::Error::Msg("quantising a weight to int8: not a CPU bf16 or f32 tensor".into())
    })
}

/// `x·Wᵀ (+ b)` for f32 CPU `x` `[…, K]` and an int8 `W` (`b` an f32 `[N]`).
pub(crate) fn forward(
    x: &Tensor,
    w: &PackedI8,
    bias: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    if x.dtype() != DType::F32 || !x.device().is_cpu() {
        candle_core::bail!(
            "an int8 linear takes f32 CPU activations, got {:?} on {:?}",
            x.dtype(),
            x.device()
        );
    }
    let (n, _) = w.dims();
    let k = x.dim(D::Minus1)?;
    let mut dims = x.dims().to_vec();
    let m: usize = dims[..dims.len() - 1].iter().product();
    if let Some(last) = dims.last_mut() {
        *last = n;
    }
    let fused = bias.filter(|b| b.dtype() == DType::F32 && b.dims() == [n]);
    let y = x
        .contiguous()?
        .reshape((m, k))?
        .apply_op1_no_bwd(&Int8MatMul { w, bias: fused })?
        .reshape(dims)?;
    match bias {
        Some(b) if fused.is_none() => y.broadcast_add(b),
        _ => Ok(y),
    }
}

/// The int8 product as a candle op.
struct Int8MatMul<'a> {
    w: &'a PackedI8,
    bias: Option<&'a Tensor>,
}

impl CustomOp1 for Int8MatMul<'_> {
    fn name(&self) -> &'static str {
        "int8-matmul"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, m, k) = input_rows(storage, layout, "int8 matmul")?;
        let (n, wk) = self.w.dims();
        if wk != k {
            candle_core::bail!("int8 matmul: input width {k} but weight [{n}, {wk}]");
        }
        let guard = self.bias.map(|b| b.storage_and_layout());
        let bias = bias_of(guard.as_ref().map(|(g, l)| (&**g, *l)), n, "int8 matmul")?;
        let out = matmul_with(kernel(), x, m, k, self.w, bias)
            .ok_or_else(|| candle_core::Error::Msg("int8 matmul: the kernel refused".into()))?;
        Ok((CpuStorage::F32(out), Shape::from((m, n))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_lowers_the_kernel_to_one_the_cpu_runs() {
        use Int8Kernel::*;
        let every = |_| true;
        assert_eq!(Int8Kernel::fastest(None, every), Amx);
        // Sapphire Rapids and later, but AMX refused (a hypervisor, an old Linux kernel).
        assert_eq!(Int8Kernel::fastest(None, |k| k != Amx), Avx512Vnni);
        for cap in Int8Kernel::ALL {
            assert_eq!(Int8Kernel::fastest(Some(cap), every), cap);
            // An AVX2-only CPU (Zen 3).
            assert_eq!(Int8Kernel::fastest(Some(cap), |k| k <= Avx2), cap.min(Avx2));
        }
        // AVX-512 with VNNI but no AVX-VNNI nor AMX (Ice Lake, Zen 4).
        let no_avxvnni = |k| k != AvxVnni && k != Amx;
        assert_eq!(Int8Kernel::fastest(None, no_avxvnni), Avx512Vnni);
        assert_eq!(Int8Kernel::fastest(Some(AvxVnni), no_avxvnni), Avx2);
        assert_eq!(Int8Kernel::fastest(Some(Scalar), no_avxvnni), Scalar);
    }

    #[test]
    fn stages_parse_and_print_back_in_data_flow_order() {
        let s = Int8Stages::parse("dit, adapter").unwrap();
        assert!(s.contains(Stage::Dit) && s.contains(Stage::Adapter));
        assert!(!s.contains(Stage::Llm) && !s.contains(Stage::Vision));
        assert_eq!(s.to_string(), "adapter,dit");
        assert_eq!(Int8Stages::parse("all").unwrap(), Int8Stages::ALL);
        assert_eq!(Int8Stages::ALL.to_string(), "vision,llm,adapter,dit");
        assert_eq!(Int8Stages::parse("none").unwrap().to_string(), "none");
        let e = Int8Stages::parse("dit,vit").unwrap_err().to_string();
        assert!(
            e.contains("vit") && e.contains("vision, llm, adapter, dit"),
            "{e}"
        );
    }
}
