//! Which GEMM multiplies f32 activations by the bf16 weights on the CPU: the best this CPU
//! runs, unless `--cpu-kernel` names a lesser one (to measure the AVX2 or library path on
//! an AVX-512 machine). Fixed for the process before the weights load, since packing at load
//! depends on it. Every kernel computes each element as one f32 fused multiply-add chain;
//! the hand-written ones in the same order (same bits), the library in its own.
//!
//! `avx512bf16` and `amx` only change the `--dtype bf16` products (bf16 activations,
//! `vdpbf16ps` or AMX tiles); f32 products under them are the `avx512` kernel's. Under `amx`
//! the attention's bf16 products stay `vdpbf16ps` (their keys and values are packed per call).

use crate::cpu_caches::CpuCaches;
use crate::error::SettingError;
use crate::gemm::int8::Int8Kernel;
use std::sync::OnceLock;

/// A CPU GEMM kernel for bf16 weights, in increasing order of speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CpuKernel {
    /// Slabs of weight rows widened per call, multiplied by the `gemm` crate (every CPU).
    Library,
    /// Hand-written AVX2+FMA kernel on weights packed at load (`gemm/avx2.rs`).
    Avx2,
    /// Hand-written AVX-512 kernel on weights packed at load (`gemm/avx512.rs`).
    Avx512,
    /// As [`CpuKernel::Avx512`] for f32 products; bf16 products run `vdpbf16ps` on VNNI pairs
    /// packed at load (`gemm/avx512bf16.rs`).
    Avx512Bf16,
    /// As [`CpuKernel::Avx512Bf16`], but the linear layers' bf16 products run AMX-BF16 tiles
    /// on the same VNNI pairs (`gemm/amx.rs`; Sapphire, Emerald and Granite Rapids).
    Amx,
}

impl CpuKernel {
    /// The name used by `--cpu-kernel` and `/info`.
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
                let b = crate::gemm::avx2::blocking();
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
                crate::gemm::amx::blocks_description()
            )
        } else {
            f32_blocks
        }
    }

    /// The fastest kernel this CPU runs.
    pub fn detected() -> CpuKernel {
        if crate::gemm::amx::available() {
            CpuKernel::Amx
        } else if crate::gemm::avx512bf16::available() {
            CpuKernel::Avx512Bf16
        } else if crate::gemm::avx512::available() {
            CpuKernel::Avx512
        } else if crate::gemm::avx2::available() {
            CpuKernel::Avx2
        } else {
            CpuKernel::Library
        }
    }

    /// Parses a kernel cap: `auto` or empty (no cap), `amx`, `avx512bf16`, `avx512`, `avx2`
    /// or `library`.
    pub fn parse_cap(value: &str) -> Result<Option<CpuKernel>, SettingError> {
        match value.trim() {
            "" | "auto" => Ok(None),
            "avx512bf16" => Ok(Some(CpuKernel::Avx512Bf16)),
            "amx" => Ok(Some(CpuKernel::Amx)),
            "avx512" => Ok(Some(CpuKernel::Avx512)),
            "avx2" => Ok(Some(CpuKernel::Avx2)),
            "library" => Ok(Some(CpuKernel::Library)),
            other => Err(SettingError::CpuKernel(other.to_string())),
        }
    }
}

/// What `--cpu-kernel` caps: the f32/bf16 kernel and the int8 one, as a CPU of that level
/// would run them (`avx512bf16`: Cooper Lake or Zen 4, `avx512` and `avx512vnni`: Cascade or
/// Ice Lake, all three without AMX's int8 tiles; `avxvnni`: an Alder Lake without AVX-512,
/// `avx2`: Zen 3; `library`: the f32 library and the scalar int8 reference).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelCaps {
    /// The f32/bf16 products' cap (`None`: the best this CPU runs).
    pub float: Option<CpuKernel>,
    /// The int8 products' cap (`None`: the best this CPU runs).
    pub int8: Option<Int8Kernel>,
}

impl KernelCaps {
    /// Parses `--cpu-kernel`: `auto` or empty (no cap), a [`CpuKernel`] name, or an int8 level
    /// (`avx512vnni`: f32 `avx512`; `avxvnni`: f32 `avx2`).
    pub fn parse(value: &str) -> Result<KernelCaps, SettingError> {
        let caps = |float, int8| KernelCaps {
            float: Some(float),
            int8: Some(int8),
        };
        Ok(match value.trim() {
            "avx512vnni" => caps(CpuKernel::Avx512, Int8Kernel::Avx512Vnni),
            "avxvnni" => caps(CpuKernel::Avx2, Int8Kernel::AvxVnni),
            other => match CpuKernel::parse_cap(other)? {
                Some(CpuKernel::Avx2) => caps(CpuKernel::Avx2, Int8Kernel::Avx2),
                Some(CpuKernel::Library) => caps(CpuKernel::Library, Int8Kernel::Scalar),
                Some(float @ (CpuKernel::Avx512 | CpuKernel::Avx512Bf16)) => {
                    caps(float, Int8Kernel::Avx512Vnni)
                }
                float => KernelCaps { float, int8: None },
            },
        })
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

/// Whether bf16 products run on a bf16 unit here (`vdpbf16ps` or AMX under the selected
/// kernel) rather than as f32 GEMMs on rounded operands.
pub(crate) fn bf16_unit() -> bool {
    current() >= CpuKernel::Avx512Bf16 && crate::gemm::avx512bf16::available()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_rejects_others_listing_the_choices() {
        assert_eq!(CpuKernel::parse_cap("").unwrap(), None);
        assert_eq!(CpuKernel::parse_cap(" auto ").unwrap(), None);
        for k in [
            CpuKernel::Library,
            CpuKernel::Avx2,
            CpuKernel::Avx512,
            CpuKernel::Avx512Bf16,
            CpuKernel::Amx,
        ] {
            assert_eq!(CpuKernel::parse_cap(k.as_str()), Ok(Some(k)));
        }
        let e = CpuKernel::parse_cap("sse").unwrap_err().to_string();
        assert!(e.contains("sse"), "{e}");
        assert!(e.contains("amx") && e.contains("avx512bf16"), "{e}");
    }

    #[test]
    fn int8_levels_cap_both_kernels_as_such_a_cpu_runs_them() {
        let caps = |v| KernelCaps::parse(v).unwrap();
        assert_eq!(caps(" auto "), KernelCaps::default());
        let both = |f, i| KernelCaps {
            float: Some(f),
            int8: Some(i),
        };
        assert_eq!(
            caps("avx512vnni"),
            both(CpuKernel::Avx512, Int8Kernel::Avx512Vnni)
        );
        assert_eq!(caps("avxvnni"), both(CpuKernel::Avx2, Int8Kernel::AvxVnni));
        assert_eq!(caps("avx2"), both(CpuKernel::Avx2, Int8Kernel::Avx2));
        assert_eq!(
            caps("library"),
            both(CpuKernel::Library, Int8Kernel::Scalar)
        );
        // The AVX-512 levels below AMX have no int8 tiles; `amx` leaves it to the CPU.
        for k in [CpuKernel::Avx512, CpuKernel::Avx512Bf16] {
            assert_eq!(caps(k.as_str()), both(k, Int8Kernel::Avx512Vnni));
        }
        assert_eq!(
            caps("amx"),
            KernelCaps {
                float: Some(CpuKernel::Amx),
                int8: None
            }
        );
        let e = KernelCaps::parse("vnni").unwrap_err().to_string();
        assert!(
            e.contains("\"vnni\"") && e.contains("avx512vnni, avx512, avxvnni"),
            "{e}"
        );
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
        let b = crate::gemm::avx2::blocking();
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
