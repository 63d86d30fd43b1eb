//! `--dtype int8` on the CPU: which stages' linear layers multiply int8 weights by int8
//! activations ([`Int8Stages`], `--int8`), the kernel that runs them ([`kernel`]), and the
//! product a [`crate::linear::Linear`] loaded for it computes (`gemm/int8`: weights s8 per
//! output channel, activations s8 per row, exact i32 sums, f32 epilogue). Attention, norms,
//! the small per-step layers and the sampler stay f32.

use crate::cpu_math::Then;
use crate::error::SettingError;
use crate::gemm::int8::RowEpilogue;
pub use crate::gemm::int8::{Int8Kernel, PackedI8, LEVELS};
use crate::op_inputs::{bias_of, input_rows};
use crate::smoothing::ActivationMax;
use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Storage, Tensor, D};
use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

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

/// How a model loads its int8 layers: which stages, on which grid, smoothed or not, and which
/// layers of those stages stay f32.
#[derive(Debug, Clone)]
pub struct Int8Load {
    /// The stages whose linear layers run int8.
    pub stages: Int8Stages,
    /// The weights' grid: ±[`LEVELS`] for a real int8; fewer only to break it on purpose.
    pub levels: i32,
    /// SmoothQuant's calibration maxima: each layer found there is smoothed
    /// ([`crate::smoothing`]); `None`: none is.
    pub smoothing: Option<Arc<ActivationMax>>,
    /// Layers kept f32 inside the stages, by name or dotted part of it (`k_proj`,
    /// `self_attn.v_proj`, `layers.0`).
    pub keep_f32: Vec<String>,
}

impl Int8Load {
    /// `stages` in a plain int8: full grid, no smoothing, no layer kept f32.
    pub fn stages(stages: Int8Stages) -> Int8Load {
        Int8Load {
            stages,
            levels: LEVELS,
            smoothing: None,
            keep_f32: Vec::new(),
        }
    }

    /// Whether layer `name` stays f32 under [`Int8Load::keep_f32`].
    pub fn keeps_f32(&self, name: &str) -> bool {
        self.keep_f32.iter().any(|p| names_part(name, p))
    }
}

/// Whether `part` is `name` or a whole dotted part of it (`k_proj` in `…self_attn.k_proj`).
fn names_part(name: &str, part: &str) -> bool {
    let part = part.trim_matches('.');
    !part.is_empty()
        && (name == part
            || name.ends_with(&format!(".{part}"))
            || name.starts_with(&format!("{part}."))
            || name.contains(&format!(".{part}.")))
}

thread_local! {
    /// How the layers loading on this thread go int8 (see [`loading_int8`]).
    static LOAD: RefCell<Option<Arc<Int8Load>>> = const { RefCell::new(None) };
}

/// Runs `f` (a model load on this thread) with its linear layers loading as `load` says;
/// restored afterwards, also on panic.
pub fn loading_int8<R>(load: &Int8Load, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Arc<Int8Load>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            LOAD.with(|l| *l.borrow_mut() = self.0.take());
        }
    }
    let _restore = Restore(LOAD.with(|l| l.replace(Some(Arc::new(load.clone())))));
    f()
}

/// The int8 load on this thread, if any.
fn current_load() -> Option<Arc<Int8Load>> {
    LOAD.with(|l| l.borrow().clone())
}

/// Whether the layers of `stage` load int8 on this thread.
pub(crate) fn loads_int8(stage: Stage) -> bool {
    current_load().is_some_and(|l| l.stages.contains(stage))
}

/// Whether layer `name`, in an int8 stage, stays f32 on this thread's load.
pub(crate) fn keeps_f32(name: &str) -> bool {
    current_load().is_some_and(|l| l.keeps_f32(name))
}

/// The grid the weights loading now are quantised to.
fn load_levels() -> i32 {
    current_load().map_or(LEVELS, |l| l.levels)
}

/// Layer `name`'s calibration maxima when this thread's load smooths (a smoothed load whose
/// calibration lacks the layer leaves it plain, with a warning).
fn load_act_max(name: &str) -> Option<Vec<f32>> {
    let load = current_load()?;
    let max = load.smoothing.as_ref()?;
    let found = max.get(name).map(<[f32]>::to_vec);
    if found.is_none() {
        tracing::warn!(
            layer = name,
            "no calibration for this int8 layer: not smoothed"
        );
    }
    found
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
    crate::gemm::int8::matmul(kernel, x, m, k, w, bias, None)
}

/// Quantises a CPU `[out, in]` weight (bf16 or f32) for the int8 products of this thread's
/// load, smoothed when it has calibration maxima for layer `name`.
pub(crate) fn quantize_for_load(
    weight: &Tensor,
    name: Option<&str>,
) -> candle_core::Result<PackedI8> {
    let act_max = name.and_then(load_act_max);
    quantize_weight(weight, load_levels(), act_max.as_deref())
}

/// Quantises a CPU `[out, in]` weight (bf16 or f32) to `±levels` per output channel; with
/// `act_max` (the layer's calibration maxima, length `in`) smoothed first: column j times
/// SmoothQuant's `s_j`, the activations times `1/s_j` at each call.
pub fn quantize_weight(
    weight: &Tensor,
    levels: i32,
    act_max: Option<&[f32]>,
) -> candle_core::Result<PackedI8> {
    let (n, k) = weight.dims2()?;
    let weight = weight.contiguous()?;
    let (guard, l) = weight.storage_and_layout();
    let rows: &(dyn Fn(usize, &mut [f32]) + Sync) = match (&*guard, l.contiguous_offsets()) {
        (Storage::Cpu(CpuStorage::BF16(v)), Some((a, b))) if b - a == n * k => {
            &move |j: usize, buf: &mut [f32]| {
                for (d, s) in buf.iter_mut().zip(&v[a + j * k..][..k]) {
                    *d = s.to_f32();
                }
            }
        }
        (Storage::Cpu(CpuStorage::F32(v)), Some((a, b))) if b - a == n * k => {
            &move |j: usize, buf: &mut [f32]| buf.copy_from_slice(&v[a + j * k..][..k])
        }
        _ => candle_core::bail!("quantising a weight to int8: not a CPU bf16 or f32 tensor"),
    };
    let Some(act_max) = act_max.filter(|m| m.len() == k) else {
        if act_max.is_some() {
            tracing::warn!("calibration maxima of another width: the layer is not smoothed");
        }
        return Ok(PackedI8::quantize(n, k, levels, rows));
    };
    let mut col_max = vec![0f32; k];
    let mut buf = vec![0f32; k];
    for j in 0..n {
        rows(j, &mut buf);
        for (m, v) in col_max.iter_mut().zip(&buf) {
            *m = m.max(v.abs());
        }
    }
    let s = crate::smoothing::factors(act_max, &col_max, crate::smoothing::ALPHA);
    let packed = PackedI8::quantize(n, k, levels, |j, buf| {
        rows(j, buf);
        for (v, s) in buf.iter_mut().zip(&s) {
            *v *= s;
        }
    });
    let inverse = s.iter().map(|s| 1.0 / s).collect();
    packed
        .with_input_scale(inverse)
        .ok_or_else(|| candle_core::Error::Msg("int8 smoothing: width mismatch".into()))
}

/// `x·Wᵀ (+ b)` for f32 CPU `x` `[…, K]` and an int8 `W` (`b` an f32 `[N]`), then `then` on
/// each tile of the product while it is in the L1 (after the whole product when the bias
/// has to be added separately; the same bits).
pub(crate) fn forward(
    x: &Tensor,
    w: &PackedI8,
    bias: Option<&Tensor>,
    then: Option<Then>,
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
    let unfused_bias = bias.filter(|_| fused.is_none());
    let y = x
        .contiguous()?
        .reshape((m, k))?
        .apply_op1_no_bwd(&Int8MatMul {
            w,
            bias: fused,
            then: then.filter(|_| unfused_bias.is_none()),
        })?
        .reshape(dims)?;
    match (unfused_bias, then) {
        (Some(b), Some(then)) => then.apply(&y.broadcast_add(b)?),
        (Some(b), None) => y.broadcast_add(b),
        (None, _) => Ok(y),
    }
}

/// The int8 product (and the step after it) as a candle op.
struct Int8MatMul<'a> {
    w: &'a PackedI8,
    bias: Option<&'a Tensor>,
    then: Option<Then>,
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
        let step = self
            .then
            .map(|then| move |_: usize, _: usize, row: &mut [f32]| then.apply_in_place(row));
        let after = step.as_ref().map(|f| f as RowEpilogue);
        let out = crate::gemm::int8::matmul(kernel(), x, m, k, self.w, bias, after)
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
    fn kept_layers_match_whole_dotted_parts_of_a_name() {
        let load = Int8Load {
            keep_f32: vec!["k_proj".into(), "layers.1".into(), ".to_v.".into()],
            ..Int8Load::stages(Int8Stages::ALL)
        };
        let llm = "backbone.model.model.language_model.layers";
        assert!(load.keeps_f32(&format!("{llm}.0.self_attn.k_proj")));
        assert!(!load.keeps_f32(&format!("{llm}.0.self_attn.q_proj")));
        assert!(load.keeps_f32(&format!("{llm}.1.mlp.up_proj")));
        // Parts, not substrings: layers.1 is not layers.10, k_proj not qk_proj.
        assert!(!load.keeps_f32(&format!("{llm}.10.mlp.up_proj")));
        assert!(!load.keeps_f32("a.qk_proj"));
        assert!(load.keeps_f32("action_head.model.transformer_blocks.0.attn1.to_v"));
        assert!(load.keeps_f32("k_proj"));
        assert!(!Int8Load::stages(Int8Stages::ALL).keeps_f32("k_proj"));
        let blank = Int8Load {
            keep_f32: vec![".".into(), String::new()],
            ..Int8Load::stages(Int8Stages::ALL)
        };
        assert!(!blank.keeps_f32("k_proj"), "an empty part keeps nothing");
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
