//! The compute flags shared by `serve`, `predict`, `bench` and `check-dtype` (`--device`,
//! `--dtype`, `--int8`, `--cpu-kernel`, `--dit-backend`, `--vision-cache`), parsed by clap into
//! the core's [`DeviceOptions`]. Each also reads its `GR00T_…` variable, so nothing below the
//! command line reads the environment.

use gr00t_core::device::{DeviceOptions, DeviceSpec, DtypeSetting, KernelCap};
use gr00t_model::action_head::DenoiseBackend;
use gr00t_model::int8::Int8Stages;
use gr00t_model::vision_cache::DEFAULT_VISION_CACHE_IMAGES;

/// `--dtype`: the compute precision. Without it: f32 on the CPU (fp32-reference parity),
/// bf16 on GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DtypeFlag {
    /// The fastest this checkpoint passed on this machine: int8 where `gr00t check-dtype
    /// --dtype int8` passed for it, else bf16 on AMX CPUs, Zen 4/5 and GPUs, else f32.
    Auto,
    /// fp32 weights and activations.
    F32,
    /// bf16 products with f32 accumulation. On the CPU each product's activations are rounded
    /// to bf16 while the residual stream, norms, softmax and the rest stay f32 (`vdpbf16ps` on
    /// AVX512-BF16 CPUs); on GPUs bf16 activations with f32 norms and softmax.
    Bf16,
    /// CPU only: the linear layers of the `--int8` stages multiply int8 weights (per output
    /// channel) by activations quantised per token, exact i32 sums; the rest stays f32.
    Int8,
}

impl From<DtypeFlag> for DtypeSetting {
    fn from(flag: DtypeFlag) -> DtypeSetting {
        match flag {
            DtypeFlag::Auto => DtypeSetting::Auto,
            DtypeFlag::F32 => DtypeSetting::F32,
            DtypeFlag::Bf16 => DtypeSetting::Bf16,
            DtypeFlag::Int8 => DtypeSetting::Int8,
        }
    }
}

/// The compute flags, as the command line gives them.
#[derive(clap::Args, Debug, Clone)]
pub struct DeviceArgs {
    /// Where the network runs: cpu, cuda or cuda:N (GPU N; needs a build with the cuda feature).
    #[arg(long, default_value = "cpu", value_name = "DEVICE")]
    pub device: DeviceSpec,
    /// Compute precision (f32, bf16, int8 or auto); without it f32 on the CPU, bf16 on a GPU.
    #[arg(long, value_enum)]
    pub dtype: Option<DtypeFlag>,
    /// Stages whose linear layers run int8 under `--dtype int8`: a list of vision, llm,
    /// adapter, dit (or all); default: the stages that pass the accuracy gates on every fixture.
    #[arg(long, value_name = "STAGES")]
    pub int8: Option<Int8Stages>,
    /// Quantisation grid of the int8 weights (±127); fewer levels only break the quantisation
    /// on purpose, for the tests of `check-dtype`.
    #[arg(long, default_value_t = gr00t_model::int8::LEVELS, hide = true,
          value_parser = clap::value_parser!(i32).range(1..=127))]
    pub int8_levels: i32,
    /// Under `--dtype int8`: SmoothQuant, each int8 layer's activation outliers moved into its
    /// weight by per-channel factors from calibration (`gr00t check-dtype --int8-smooth`
    /// records them for this checkpoint, and `serve` then needs them).
    #[arg(long)]
    pub int8_smooth: bool,
    /// Under `--dtype int8`: layers of the int8 stages kept f32, by name or a dotted part of it
    /// (`k_proj,v_proj`: every LLM layer's k and v projections, as FlashRT keeps them;
    /// `language_model.layers.0`: one layer).
    #[arg(long, value_name = "LAYERS", value_delimiter = ',')]
    pub int8_keep: Vec<String>,
    /// Caps the CPU GEMM kernels (auto: the best this CPU runs; amx, avx512bf16, avx512vnni,
    /// avx512, avxvnni, avx2, library), e.g. to measure the AVX2 path on an AVX-512 machine;
    /// every level below amx caps the int8 kernel as such a CPU runs it (avx512bf16, avx512
    /// and avx512vnni: int8 avx512vnni; avxvnni: int8 avxvnni with f32 avx2).
    #[arg(
        long,
        env = "GR00T_CPU_KERNEL",
        default_value = "auto",
        value_name = "KERNEL"
    )]
    pub cpu_kernel: KernelCap,
    /// Denoise implementation: fused (per-request and per-step work hoisted out of the Euler
    /// loop) or reference (upstream's structure); their actions are bit-identical.
    #[arg(
        long,
        env = "GR00T_DIT_BACKEND",
        default_value = "fused",
        value_name = "BACKEND"
    )]
    pub dit_backend: DenoiseBackend,
    /// Images whose vision features are kept for reuse (a control loop's t−15 frames were the
    /// t frames of an earlier request); 0 disables the cache.
    #[arg(long, env = "GR00T_VISION_CACHE", default_value_t = DEFAULT_VISION_CACHE_IMAGES,
          value_name = "IMAGES")]
    pub vision_cache: usize,
}

impl From<DeviceArgs> for DeviceOptions {
    fn from(a: DeviceArgs) -> DeviceOptions {
        DeviceOptions {
            device: a.device,
            dtype: a.dtype.map(DtypeSetting::from),
            int8: a.int8,
            int8_levels: a.int8_levels,
            int8_smooth: a.int8_smooth,
            int8_keep: a.int8_keep,
            cpu_kernel: a.cpu_kernel,
            dit_backend: a.dit_backend,
            vision_cache: a.vision_cache,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        device: DeviceArgs,
    }

    #[test]
    fn the_flags_fill_the_core_options_and_their_defaults_are_the_cores() {
        let parsed = |args: &[&str]| {
            let argv = std::iter::once("gr00t").chain(args.iter().copied());
            DeviceOptions::from(Cli::try_parse_from(argv).map(|c| c.device).unwrap())
        };
        let default = DeviceOptions::default();
        let none = parsed(&[]);
        assert_eq!(none.device, default.device);
        assert_eq!(none.dtype, default.dtype);
        assert_eq!(none.int8, default.int8);
        assert_eq!(none.int8_levels, default.int8_levels);
        assert_eq!(none.int8_smooth, default.int8_smooth);
        assert_eq!(none.int8_keep, default.int8_keep);
        assert_eq!(none.cpu_kernel, default.cpu_kernel);
        assert_eq!(none.dit_backend, default.dit_backend);
        assert_eq!(none.vision_cache, default.vision_cache);
        let set = parsed(&[
            "--device",
            "cuda:1",
            "--dtype",
            "int8",
            "--int8",
            "dit",
            "--vision-cache",
            "0",
            "--dit-backend",
            "reference",
        ]);
        assert_eq!(set.device, DeviceSpec::Cuda(1));
        assert_eq!(set.dtype, Some(DtypeSetting::Int8));
        assert_eq!(set.int8, "dit".parse().ok());
        assert_eq!(set.vision_cache, 0);
        assert_eq!(set.dit_backend, DenoiseBackend::Reference);
        for (flag, want) in [
            ("auto", DtypeSetting::Auto),
            ("f32", DtypeSetting::F32),
            ("bf16", DtypeSetting::Bf16),
        ] {
            assert_eq!(parsed(&["--dtype", flag]).dtype, Some(want));
            assert_eq!(want.as_str(), flag);
        }
        assert!(Cli::try_parse_from(["gr00t", "--dtype", "f16"]).is_err());
    }
}
