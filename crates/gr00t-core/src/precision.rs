//! The precision the engine computes in, from `--dtype` and `--int8`, and why: `auto` picks
//! int8 only where `gr00t check-dtype --dtype int8` passed for this checkpoint (the remembered
//! [`crate::dtype_check::Verdict`]), else bf16 where the machine multiplies bf16 faster than
//! f32, else f32.

use crate::device::{DeviceError, DeviceOptions, DtypeSetting};
use candle_core::Device;
use gr00t_model::cpu_kernel::CpuKernel;
use gr00t_model::int8::{Int8Stages, Stage};

/// What the network computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// f32 everywhere.
    F32,
    /// bf16 products (see [`DtypeSetting::Bf16`]).
    Bf16,
    /// int8 products in these stages, f32 elsewhere (CPU only).
    Int8(Int8Stages),
}

impl Precision {
    /// `f32`, `bf16` or `int8`, as `--dtype` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
            Precision::Int8(_) => "int8",
        }
    }
}

/// The stages `--dtype int8` runs int8 without `--int8`: those that pass the accuracy gates
/// with margin on every fixture case, the DiT and the adapter (docs/accuracy.md has the table; the
/// LLM and vision each use half or more of the max|Δ| budget, all four together exceed it).
pub const DEFAULT_INT8_STAGES: Int8Stages = Int8Stages::only(Stage::Dit).with(Stage::Adapter);

/// A precision and the reason it was picked (for `/info` and the start-up log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The precision.
    pub precision: Precision,
    /// Why: what was asked, or what `auto` found.
    pub reason: String,
}

/// Picks the precision for `opts` on `device` under the CPU `kernel`; `int8_passed(stages)`
/// says whether the int8 check passed for this checkpoint with those stages.
pub fn choose(
    opts: &DeviceOptions,
    device: &Device,
    kernel: CpuKernel,
    int8_passed: &dyn Fn(Int8Stages) -> bool,
) -> Result<Choice, DeviceError> {
    let stages = opts.int8.unwrap_or(DEFAULT_INT8_STAGES);
    let asked = |precision: Precision, why: &str| Choice {
        precision,
        reason: why.to_string(),
    };
    Ok(match opts.dtype {
        None if device.is_cpu() => asked(Precision::F32, "the CPU default"),
        None => asked(Precision::Bf16, "the GPU default"),
        Some(DtypeSetting::F32) => asked(Precision::F32, "--dtype f32"),
        Some(DtypeSetting::Bf16) => asked(Precision::Bf16, "--dtype bf16"),
        Some(DtypeSetting::Int8) if !device.is_cpu() => {
            return Err(DeviceError::Int8OnGpu(opts.device));
        }
        Some(DtypeSetting::Int8) => asked(Precision::Int8(stages), "--dtype int8"),
        Some(DtypeSetting::Auto) if !device.is_cpu() => {
            asked(Precision::Bf16, "auto: bf16 on a GPU")
        }
        Some(DtypeSetting::Auto) if int8_passed(stages) => Choice {
            precision: Precision::Int8(stages),
            reason: format!(
                "auto: `gr00t check-dtype --dtype int8` passed for this checkpoint (stages {stages})"
            ),
        },
        Some(DtypeSetting::Auto) => {
            let (bf16, why) = bf16_faster(kernel);
            Choice {
                precision: if bf16 { Precision::Bf16 } else { Precision::F32 },
                reason: format!("auto: no passed int8 check for this checkpoint; {why}"),
            }
        }
    })
}

/// Whether this CPU multiplies bf16 faster than f32, and why.
fn bf16_faster(kernel: CpuKernel) -> (bool, &'static str) {
    match kernel {
        CpuKernel::Amx => (true, "bf16 on AMX tiles"),
        CpuKernel::Avx512Bf16 if amd() => {
            (true, "bf16: vdpbf16ps is twice the f32 rate on Zen 4/5")
        }
        CpuKernel::Avx512Bf16 => (
            false,
            "f32: this CPU's vdpbf16ps is no faster than its f32 FMAs (Intel without AMX)",
        ),
        _ => (false, "f32: no bf16 unit on this CPU"),
    }
}

/// Whether the CPU is AMD's (its vendor string).
fn amd() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        #[allow(unused_unsafe)]
        // SAFETY: cpuid leaf 0 exists on every x86-64 CPU.
        let r = unsafe { std::arch::x86_64::__cpuid(0) };
        let mut v = [0u8; 12];
        v[..4].copy_from_slice(&r.ebx.to_le_bytes());
        v[4..8].copy_from_slice(&r.edx.to_le_bytes());
        v[8..].copy_from_slice(&r.ecx.to_le_bytes());
        &v == b"AuthenticAMD"
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(dtype: Option<DtypeSetting>, int8: Option<&str>) -> DeviceOptions {
        DeviceOptions {
            dtype,
            int8: int8.map(|s| s.parse().unwrap()),
            ..DeviceOptions::default()
        }
    }

    #[test]
    fn the_default_stays_f32_on_the_cpu_and_int8_is_asked_for() {
        let cpu = Device::Cpu;
        let never = |_: Int8Stages| false;
        let c = choose(&opts(None, None), &cpu, CpuKernel::Amx, &never).unwrap();
        assert_eq!(c.precision, Precision::F32);
        let c = choose(
            &opts(Some(DtypeSetting::Int8), Some("dit")),
            &cpu,
            CpuKernel::Avx2,
            &never,
        )
        .unwrap();
        assert_eq!(c.precision, Precision::Int8("dit".parse().unwrap()));
        let c = choose(
            &opts(Some(DtypeSetting::Int8), None),
            &cpu,
            CpuKernel::Avx2,
            &never,
        )
        .unwrap();
        assert_eq!(c.precision, Precision::Int8(DEFAULT_INT8_STAGES));
    }

    #[test]
    fn auto_takes_int8_only_after_a_passed_check_then_bf16_where_faster() {
        let cpu = Device::Cpu;
        let auto = opts(Some(DtypeSetting::Auto), Some("dit,adapter"));
        let passed = |s: Int8Stages| s == "adapter,dit".parse().unwrap();
        let c = choose(&auto, &cpu, CpuKernel::Avx2, &passed).unwrap();
        assert_eq!(c.precision, Precision::Int8("dit,adapter".parse().unwrap()));
        assert!(c.reason.contains("check-dtype"), "{}", c.reason);
        let never = |_: Int8Stages| false;
        let c = choose(&auto, &cpu, CpuKernel::Amx, &never).unwrap();
        assert_eq!(c.precision, Precision::Bf16);
        assert!(c.reason.contains("AMX"), "{}", c.reason);
        let c = choose(&auto, &cpu, CpuKernel::Avx512, &never).unwrap();
        assert_eq!(c.precision, Precision::F32);
        // A check of other stages does not count.
        let other = opts(Some(DtypeSetting::Auto), Some("llm"));
        let c = choose(&other, &cpu, CpuKernel::Avx2, &passed).unwrap();
        assert_eq!(c.precision, Precision::F32);
    }
}
