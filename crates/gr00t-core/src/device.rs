//! `--device`, `--dtype` and the compute knobs (`--cpu-kernel`, `--dit-backend`,
//! `--vision-cache`): where the network runs, in which precision, and how.

use candle_core::{DType, Device};
use clap::ValueEnum;
use gr00t_model::action_head::DenoiseBackend;
use gr00t_model::cpu_kernel::CpuKernel;
use gr00t_model::vision_cache::DEFAULT_VISION_CACHE_IMAGES;
use gr00t_model::SettingError;
use std::fmt;
use std::str::FromStr;

/// A device named on the command line: `cpu`, `cuda` (GPU 0) or `cuda:N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    /// The host CPU (every build).
    #[default]
    Cpu,
    /// CUDA GPU with this ordinal (builds with the `cuda` feature).
    Cuda(usize),
}

impl FromStr for DeviceSpec {
    type Err = DeviceError;

    fn from_str(s: &str) -> Result<DeviceSpec, DeviceError> {
        let s = s.trim().to_ascii_lowercase();
        let bad = || DeviceError::Unknown(s.clone());
        match s.as_str() {
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" | "gpu" => Ok(DeviceSpec::Cuda(0)),
            other => {
                let n = other
                    .strip_prefix("cuda:")
                    .or_else(|| other.strip_prefix("gpu:"))
                    .ok_or_else(bad)?;
                n.parse().map(DeviceSpec::Cuda).map_err(|_| bad())
            }
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl DeviceSpec {
    /// Opens the device, or says why not (no CUDA in this build, no such GPU, no driver).
    pub fn open(self) -> Result<Device, DeviceError> {
        match self {
            DeviceSpec::Cpu => Ok(Device::Cpu),
            DeviceSpec::Cuda(n) => {
                if !cfg!(feature = "cuda") {
                    return Err(DeviceError::NoCuda(self));
                }
                Device::new_cuda(n).map_err(|e| DeviceError::Gpu {
                    spec: self,
                    cause: root_cause(e),
                })
            }
        }
    }
}

/// The error without the backtrace candle attaches (an operator needs the reason, not frames).
fn root_cause(e: candle_core::Error) -> candle_core::Error {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => root_cause(*inner),
        other => other,
    }
}

/// `--dtype`: the compute precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum DtypeArg {
    /// f32 on the CPU (fp32-reference parity), bf16 on GPUs.
    #[default]
    Auto,
    /// fp32 weights and activations.
    F32,
    /// bf16 products with f32 accumulation. On the CPU each product's activations are rounded
    /// to bf16 while the residual stream, norms, softmax and the rest stay f32 (`vdpbf16ps` on
    /// AVX512-BF16 CPUs); on GPUs bf16 activations with f32 norms and softmax.
    Bf16,
}

impl DtypeArg {
    /// The dtype to compute in on `device`.
    pub fn resolve(self, device: &Device) -> DType {
        match self {
            DtypeArg::Auto => gr00t_model::model::default_dtype(device),
            DtypeArg::F32 => DType::F32,
            DtypeArg::Bf16 => DType::BF16,
        }
    }
}

/// A cap on the CPU GEMM kernel: `auto` (none) or a kernel name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelCap(pub Option<CpuKernel>);

impl FromStr for KernelCap {
    type Err = DeviceError;

    fn from_str(s: &str) -> Result<KernelCap, DeviceError> {
        Ok(KernelCap(CpuKernel::parse_cap(s)?))
    }
}

/// The compute flags shared by `serve`, `predict` and `bench`: device, precision, CPU kernel,
/// denoise backend and vision cache. Each also reads its `GR00T_…` variable (clap), so nothing
/// below the command line reads the environment.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct DeviceOptions {
    /// Where the network runs: cpu, cuda or cuda:N (GPU N; needs a build with the cuda feature).
    #[arg(long, default_value = "cpu", value_name = "DEVICE")]
    pub device: DeviceSpec,
    /// Compute precision: auto is f32 on the CPU and bf16 on a GPU.
    #[arg(long, value_enum, default_value_t = DtypeArg::Auto)]
    pub dtype: DtypeArg,
    /// Caps the CPU GEMM kernel (auto: the best this CPU runs; amx, avx512bf16, avx512, avx2,
    /// library), e.g. to measure the AVX2 path on an AVX-512 machine.
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

impl Default for DeviceOptions {
    fn default() -> DeviceOptions {
        DeviceOptions {
            device: DeviceSpec::default(),
            dtype: DtypeArg::default(),
            cpu_kernel: KernelCap::default(),
            dit_backend: DenoiseBackend::default(),
            vision_cache: DEFAULT_VISION_CACHE_IMAGES,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_parse_and_print_back() {
        assert_eq!("cpu".parse::<DeviceSpec>().ok(), Some(DeviceSpec::Cpu));
        assert_eq!(
            " CUDA ".parse::<DeviceSpec>().ok(),
            Some(DeviceSpec::Cuda(0))
        );
        assert_eq!(
            "cuda:3".parse::<DeviceSpec>().ok(),
            Some(DeviceSpec::Cuda(3))
        );
        assert_eq!(DeviceSpec::Cuda(3).to_string(), "cuda:3");
        for bad in ["", "tpu", "cuda:", "cuda:-1", "cuda:x", "cpu:0"] {
            let e = bad.parse::<DeviceSpec>().unwrap_err().to_string();
            assert!(e.contains("cpu, cuda or cuda:N"), "{bad}: {e}");
        }
    }

    #[test]
    fn auto_dtype_is_f32_on_the_cpu() {
        assert_eq!(DtypeArg::Auto.resolve(&Device::Cpu), DType::F32);
        assert_eq!(DtypeArg::Bf16.resolve(&Device::Cpu), DType::BF16);
        assert_eq!(DtypeArg::F32.resolve(&Device::Cpu), DType::F32);
    }

    #[test]
    fn cuda_is_refused_with_the_reason_on_a_cpu_build() {
        if cfg!(feature = "cuda") {
            return;
        }
        let e = DeviceSpec::Cuda(0).open().unwrap_err().to_string();
        assert!(
            e.contains("without CUDA") && e.contains("build-cuda.sh"),
            "{e}"
        );
    }
}

/// Why `--device` (or `--cpu-kernel`) cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The name is no device.
    #[error("{0:?} is not a device; use cpu, cuda or cuda:N")]
    Unknown(String),
    /// A GPU was asked of a build without CUDA.
    #[error(
        "--device {0}: this gr00t was built without CUDA support; build it with \
         scripts/build-cuda.sh (cargo build --release -p gr00t --features cuda)"
    )]
    NoCuda(DeviceSpec),
    /// The GPU did not open (no such GPU, no driver); the cause without candle's backtrace.
    #[error("--device {spec}: cannot open the GPU: {cause}")]
    Gpu {
        /// The device asked for.
        spec: DeviceSpec,
        /// candle's reason.
        #[source]
        cause: candle_core::Error,
    },
    /// `--cpu-kernel` names no kernel.
    #[error(transparent)]
    Kernel(#[from] SettingError),
}
