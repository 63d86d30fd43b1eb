//! `--device`, `--dtype` and the compute knobs (`--cpu-kernel`, `--dit-backend`,
//! `--vision-cache`): where the network runs, in which precision, and how.

use candle_core::Device;
use gr00t_model::action_head::DenoiseBackend;
use gr00t_model::cpu_kernel::KernelCaps;
use gr00t_model::int8::Int8Stages;
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

/// The precision asked for (`--dtype`); `None` beside it means the device's default: f32 on
/// the CPU (fp32-reference parity), bf16 on GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DtypeSetting {
    /// The fastest this checkpoint passed on this machine: int8 where `gr00t check-dtype
    /// --dtype int8` passed for it, else bf16 on AMX CPUs, Zen 4/5 and GPUs, else f32.
    Auto,
    /// fp32 weights and activations.
    F32,
    /// bf16 products with f32 accumulation.
    Bf16,
    /// int8 linear layers in the chosen stages (CPU only).
    Int8,
}

impl DtypeSetting {
    /// The name `--dtype` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            DtypeSetting::Auto => "auto",
            DtypeSetting::F32 => "f32",
            DtypeSetting::Bf16 => "bf16",
            DtypeSetting::Int8 => "int8",
        }
    }
}

/// A cap on the CPU GEMM kernels: `auto` (none), a kernel name or an int8 level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelCap(pub KernelCaps);

impl FromStr for KernelCap {
    type Err = DeviceError;

    fn from_str(s: &str) -> Result<KernelCap, DeviceError> {
        Ok(KernelCap(KernelCaps::parse(s)?))
    }
}

/// Where the network runs and how: device, precision, CPU kernel, denoise backend and vision
/// cache (the binary's `--device`, `--dtype`, … flags fill it).
#[derive(Debug, Clone)]
pub struct DeviceOptions {
    /// Where the network runs.
    pub device: DeviceSpec,
    /// The precision asked for; `None`: f32 on the CPU, bf16 on a GPU.
    pub dtype: Option<DtypeSetting>,
    /// Stages whose linear layers run int8 under int8; `None`: the default stages.
    pub int8: Option<Int8Stages>,
    /// Quantisation grid of the int8 weights (±levels; 127 unless a test breaks it on purpose).
    pub int8_levels: i32,
    /// Smooth the int8 layers with this checkpoint's calibration (SmoothQuant).
    pub int8_smooth: bool,
    /// Layers of the int8 stages kept f32, by name or dotted part of it (`k_proj`).
    pub int8_keep: Vec<String>,
    /// Cap on the CPU GEMM kernels.
    pub cpu_kernel: KernelCap,
    /// Denoise implementation.
    pub dit_backend: DenoiseBackend,
    /// Images whose vision features are kept for reuse; 0 disables the cache.
    pub vision_cache: usize,
}

impl Default for DeviceOptions {
    fn default() -> DeviceOptions {
        DeviceOptions {
            device: DeviceSpec::default(),
            dtype: None,
            int8: None,
            int8_levels: gr00t_model::int8::LEVELS,
            int8_smooth: false,
            int8_keep: Vec::new(),
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
    /// `--dtype int8` on a GPU.
    #[error("--dtype int8 runs on the CPU only; use --dtype bf16 on {0}")]
    Int8OnGpu(DeviceSpec),
}
