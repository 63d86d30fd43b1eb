//! Which GEMM multiplies f32 activations by the bf16 weights on the CPU: the best this CPU
//! runs, unless `GR00T_CPU_KERNEL` names a lesser one (to measure the AVX2 or library path on
//! an AVX-512 machine). Fixed for the process before the weights load, since packing at load
//! depends on it. Every kernel computes each element as one f32 fused multiply-add chain;
//! the hand-written ones in the same order (same bits), the library in its own.
//!
//! `avx512bf16` and `amx` only change the `--dtype bf16` products (bf16 activations,
//! `vdpbf16ps` or AMX tiles); f32 products under them are the `avx512` kernel's. Under `amx`
//! the attention's bf16 products stay `vdpbf16ps` (their keys and values are packed per call).

use crate::cpu_caches::CpuCaches;
use std::sync::OnceLock;

/// Environment variable that caps the CPU GEMM kernel.
pub const CPU_KERNEL_ENV: &str = "GR00T_CPU_KERNEL";

/// A CPU GEMM kernel for bf16 weights, in increasing order of speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CpuKernel {
    /// Slabs of weight rows widened per call, multiplied by the `gemm` crate (every CPU).
    Library,
    /// Hand-written AVX2+FMA kernel on weights packed at load (`gemm_avx2.rs`).
    Avx2,
    /// Hand-written AVX-512 kernel on weights packed at load (`gemm_avx512.rs`).
    Avx512,
    /// As [`CpuKernel::Avx512`] for f32 products; bf16 products run `vdpbf16ps` on VNNI pairs
    /// packed at load (`gemm_avx512bf16.rs`).
    Avx512Bf16,
    /// As [`CpuKernel::Avx512Bf16`], but the linear layers' bf16 products run AMX-BF16 tiles
    /// on the same VNNI pairs (`gemm_amx.rs`; Sapphire, Emerald and Granite Rapids).
    Amx,
}

impl CpuKernel {
    /// The name used by [`CPU_KERNEL_ENV`] and `/info`.
    pub fn as_str(self) -> &'static str {
        match self {
            CpuKernel::Library => "library",
            CpuKernel::Avx2 => "avx2",
            CpuKernel::Avx512 => "avx512",
            CpuKernel::Avx512Bf16 => "avx512bf16",
            CpuKernel::Amx => "amx",
        }
    }

    /// The kernel that runs f32 products under this one (`avx512bf16` and `amx` have no f32
    /// kernel of their own).
    pub fn for_f32(self) -> CpuKernel {
        self.min(CpuKernel::Avx512)
    }

    /// This CPU's caches and the blocks this kernel's f32 products use on them, for `/info` and
    /// the logs (`L1d 32 KiB, L2 512 KiB (sysfs); kc 640 mc 102 nc 128`).
    pub fn blocks_description(self) -> String {
        let c = CpuCaches::detected();
        let caches = format!(
            "L1d {} KiB, L2 {} KiB ({})",
            c.l1d >> 10,
            c.l2 >> 10,
            c.source
        );
        let f32_blocks = match self.for_f32() {
            CpuKernel::Avx2 => {
                let b = crate::gemm_avx2::blocking();
                format!("{caches}; kc {} mc {} nc {}", b.kc, b.mc, b.nc)
            }
            CpuKernel::Avx512 | CpuKernel::Avx512Bf16 | CpuKernel::Amx => {
                format!("{caches}; fixed blocks tuned on Zen 5")
            }
            CpuKernel::Library => format!("{caches}; the gemm crate's own blocks"),
        };
        // The bf16 products' own blocks, where they differ.
        if self == CpuKernel::Amx {
            format!(
                "{f32_blocks}; bf16 {}",
                crate::gemm_amx::blocks_description()
            )
        } else {
            f32_blocks
        }
    }

    /// The fastest kernel this CPU runs.
    pub fn detected() -> CpuKernel {
        if crate::gemm_amx::available() {
            CpuKernel::Amx
        } else if crate::gemm_avx512bf16::available() {
            CpuKernel::Avx512Bf16
        } else if crate::gemm_avx512::available() {
            CpuKernel::Avx512
        } else if crate::gemm_avx2::available() {
            CpuKernel::Avx2
        } else {
            CpuKernel::Library
        }
    }

    /// Parses a value of [`CPU_KERNEL_ENV`] (`None`, empty or `auto`: no cap). The error is a
    /// message for the operator naming the variable.
    pub fn cap_from_env_value(value: Option<&str>) -> Result<Option<CpuKernel>, String> {
        match value.map(str::trim) {
            None | Some("") | Some("auto") => Ok(None),
            Some("avx512bf16") => Ok(Some(CpuKernel::Avx512Bf16)),
            Some("amx") => Ok(Some(CpuKernel::Amx)),
            Some("avx512") => Ok(Some(CpuKernel::Avx512)),
            Some("avx2") => Ok(Some(CpuKernel::Avx2)),
            Some("library") => Ok(Some(CpuKernel::Library)),
            Some(other) => Err(format!(
                "{CPU_KERNEL_ENV}={other:?} is not a CPU kernel; use auto, amx, avx512bf16, avx512, \
                 avx2 or library"
            )),
        }
    }

    /// The cap named by [`CPU_KERNEL_ENV`] in the process environment.
    pub fn cap_from_env() -> Result<Option<CpuKernel>, String> {
        match std::env::var(CPU_KERNEL_ENV) {
            Ok(v) => CpuKernel::cap_from_env_value(Some(&v)),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(format!("{CPU_KERNEL_ENV} is not valid UTF-8"))
            }
        }
    }
}

impl std::fmt::Display for CpuKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

static SELECTED: OnceLock<CpuKernel> = OnceLock::new();

/// Fixes the process's kernel to the detected one capped by `cap`, unless already fixed; returns
/// the kernel in use.
pub fn select(cap: Option<CpuKernel>) -> CpuKernel {
    *SELECTED.get_or_init(|| {
        let best = CpuKernel::detected();
        cap.map_or(best, |c| c.min(best))
    })
}

/// The process's kernel (the detected one, uncapped, unless [`select`] ran first).
pub fn current() -> CpuKernel {
    select(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_rejects_others_naming_the_variable() {
        assert_eq!(CpuKernel::cap_from_env_value(None).unwrap(), None);
        assert_eq!(CpuKernel::cap_from_env_value(Some(" auto ")).unwrap(), None);
        for k in [
            CpuKernel::Library,
            CpuKernel::Avx2,
            CpuKernel::Avx512,
            CpuKernel::Avx512Bf16,
            CpuKernel::Amx,
        ] {
            assert_eq!(CpuKernel::cap_from_env_value(Some(k.as_str())), Ok(Some(k)));
        }
        let e = CpuKernel::cap_from_env_value(Some("sse")).unwrap_err();
        assert!(e.contains(CPU_KERNEL_ENV) && e.contains("sse"), "{e}");
        assert!(e.contains("amx") && e.contains("avx512bf16"), "{e}");
    }

    #[test]
    fn the_blocks_are_described_with_the_caches() {
        for k in [
            CpuKernel::Library,
            CpuKernel::Avx2,
            CpuKernel::Avx512,
            CpuKernel::Amx,
        ] {
            let d = k.blocks_description();
            assert!(d.starts_with("L1d ") && d.contains(" KiB, L2 "), "{d}");
        }
        assert!(CpuKernel::Amx
            .blocks_description()
            .contains("; bf16 AMX tiles"));
        let d = CpuKernel::Avx2.blocks_description();
        let b = crate::gemm_avx2::blocking();
        assert!(
            d.ends_with(&format!("kc {} mc {} nc {}", b.kc, b.mc, b.nc)),
            "{d}"
        );
    }

    #[test]
    fn f32_products_never_run_the_bf16_kernel() {
        assert_eq!(CpuKernel::Amx.for_f32(), CpuKernel::Avx512);
        assert_eq!(CpuKernel::Avx512Bf16.for_f32(), CpuKernel::Avx512);
        assert_eq!(CpuKernel::Avx512.for_f32(), CpuKernel::Avx512);
        assert_eq!(CpuKernel::Avx2.for_f32(), CpuKernel::Avx2);
    }
}
