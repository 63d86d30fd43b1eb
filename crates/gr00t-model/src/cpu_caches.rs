//! The CPU's data cache sizes per core, read once: the GEMM kernels size their K, row and column
//! blocks from them ([`GemmBlocking`]), so one kernel fits Zen 3's 32 KiB L1 / 512 KiB L2, Zen 5's
//! 48 KiB / 1 MiB and Sapphire Rapids' 48 KiB / 2 MiB alike. Blocks only decide where C is
//! reloaded, never the summation order: the bits do not depend on them.

use std::path::Path;
use std::sync::OnceLock;

/// Data cache sizes in bytes seen by one core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuCaches {
    /// Level-1 data cache.
    pub l1d: usize,
    /// Level-2 cache (unified, private to the core on every x86 server part).
    pub l2: usize,
    /// Where the sizes came from: `sysfs`, `cpuid` or `default`.
    pub source: &'static str,
}

impl CpuCaches {
    /// What a CPU we cannot read is taken to have: the smallest of current x86 server cores
    /// (Zen 2/3: 32 KiB L1d, 512 KiB L2).
    pub const DEFAULT: CpuCaches = CpuCaches {
        l1d: 32 << 10,
        l2: 512 << 10,
        source: "default",
    };

    /// This machine's caches (CPU 0 under `/sys`, else CPUID, else [`CpuCaches::DEFAULT`]).
    pub fn detected() -> CpuCaches {
        static DETECTED: OnceLock<CpuCaches> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            CpuCaches::from_sysfs(Path::new("/sys/devices/system/cpu/cpu0/cache"))
                .or_else(CpuCaches::from_cpuid)
                .unwrap_or(CpuCaches::DEFAULT)
        })
    }

    /// Reads `index*/{level,type,size}` under a sysfs cache folder; `None` unless both an L1
    /// data and an L2 cache are listed with plausible sizes.
    pub fn from_sysfs(dir: &Path) -> Option<CpuCaches> {
        let (mut l1d, mut l2) = (None, None);
        for entry in std::fs::read_dir(dir).ok()?.flatten() {
            let read = |f: &str| std::fs::read_to_string(entry.path().join(f)).ok();
            let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
            else {
                continue;
            };
            let size = parse_size(&size);
            match (level.trim(), kind.trim()) {
                ("1", "Data") => l1d = size,
                ("2", "Unified" | "Data") => l2 = size,
                _ => {}
            }
        }
        CpuCaches::checked(l1d?, l2?, "sysfs")
    }

    /// The deterministic cache parameters of CPUID (leaf 4 on Intel, 0x8000_001D on AMD).
    #[cfg(target_arch = "x86_64")]
    fn from_cpuid() -> Option<CpuCaches> {
        use std::arch::x86_64::__cpuid_count;
        // Leaf 0 and 0x8000_0000 give the highest leaves (CPUID exists on every x86-64 CPU).
        let (max, max_ext) = (__cpuid_count(0, 0).eax, __cpuid_count(0x8000_0000, 0).eax);
        let leaf = if max_ext >= 0x8000_001D && amd_cache_topology(max_ext) {
            0x8000_001D
        } else if max >= 4 {
            4
        } else {
            return None;
        };
        let (mut l1d, mut l2) = (None, None);
        for sub in 0..16 {
            // Subleaves past the last cache report type 0.
            let r = __cpuid_count(leaf, sub);
            let kind = r.eax & 0x1f;
            if kind == 0 {
                break;
            }
            let level = (r.eax >> 5) & 0x7;
            let ways = ((r.ebx >> 22) & 0x3ff) as usize + 1;
            let parts = ((r.ebx >> 12) & 0x3ff) as usize + 1;
            let line = (r.ebx & 0xfff) as usize + 1;
            let sets = r.ecx as usize + 1;
            let size = ways * parts * line * sets;
            match (level, kind) {
                (1, 1) => l1d = Some(size),
                (2, 1 | 3) => l2 = Some(size),
                _ => {}
            }
        }
        CpuCaches::checked(l1d?, l2?, "cpuid")
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn from_cpuid() -> Option<CpuCaches> {
        None
    }

    /// Sizes a kernel can block for (4 KiB..1 MiB L1d, L2 at least as large), or `None`.
    fn checked(l1d: usize, l2: usize, source: &'static str) -> Option<CpuCaches> {
        ((4 << 10..=1 << 20).contains(&l1d) && l2 >= l1d).then_some(CpuCaches { l1d, l2, source })
    }
}

/// Whether CPUID leaf 0x8000_001D (AMD's cache topology) is there: the TopologyExtensions bit.
#[cfg(target_arch = "x86_64")]
fn amd_cache_topology(max_ext: u32) -> bool {
    max_ext >= 0x8000_0001 && std::arch::x86_64::__cpuid_count(0x8000_0001, 0).ecx & (1 << 22) != 0
}

/// A sysfs size (`32K`, `1024K`, `32M`, or bytes) in bytes.
fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let n: usize = digits.parse().ok()?;
    let mult = match unit {
        "" => 1,
        "K" | "KB" | "KiB" => 1 << 10,
        "M" | "MB" | "MiB" => 1 << 20,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// Block sizes of a Goto/BLIS GEMM over packed weight panels: `kc` values of k per block (where
/// C is reloaded), `mc` rows of A packed at once, `nc` weight columns per block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmBlocking {
    /// k per block.
    pub kc: usize,
    /// Rows of A per packed block (a multiple of the tile's rows).
    pub mc: usize,
    /// Weight columns per block (a multiple of the panel width).
    pub nc: usize,
}

/// What one microkernel tile holds per step of k, for sizing its blocks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TileBytes {
    /// Rows of C per tile.
    pub mr: usize,
    /// Columns of a weight panel.
    pub nr: usize,
    /// Bytes of packed A per row and step (4 for f32).
    pub a: usize,
    /// Bytes of packed weight per column and step (2 for bf16).
    pub w: usize,
}

impl GemmBlocking {
    /// The blocks for a tile on these caches. The A micro-panel (`mr` rows × kc) takes half of
    /// L1, so it stays there while the weight panels stream past it from L2; the block's
    /// weight (nc × kc) takes 3/8 of L2 and the packed A block (mc × kc) half of it. kc is a
    /// multiple of 64, at least 128. On Zen 5's 48 KiB / 1 MiB this gives the AVX-512 kernel's
    /// blocks tuned there (384, 336, 512); on Zen 3's 32 KiB / 512 KiB the AVX2 kernel's
    /// (640, 102, 128), where a sweep (examples/gemm_blocking.rs) found K blocks of 512–640
    /// faster than 256–384 on the long-K shapes and the rest within noise.
    pub(crate) fn for_tile(caches: CpuCaches, t: TileBytes) -> GemmBlocking {
        let kc = ((caches.l1d / 2 / (t.mr * t.a)) / 64 * 64).max(128);
        let mc = ((caches.l2 / 2 / (kc * t.a)) / t.mr * t.mr).max(t.mr);
        let nc = ((caches.l2 * 3 / 8 / (kc * t.w)) / t.nr * t.nr).max(t.nr);
        GemmBlocking { kc, mc, nc }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_sizes_parse_in_their_units() {
        assert_eq!(parse_size("32K\n"), Some(32 << 10));
        assert_eq!(parse_size("1024K"), Some(1 << 20));
        assert_eq!(parse_size("32M"), Some(32 << 20));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("12Q"), None);
        assert_eq!(parse_size(""), None);
    }

    #[test]
    fn a_sysfs_tree_gives_l1d_and_l2_and_incomplete_trees_give_none() {
        let dir = std::env::temp_dir().join(format!("gr00t-caches-{}", std::process::id()));
        let write = |idx: usize, level: &str, kind: &str, size: &str| {
            let d = dir.join(format!("index{idx}"));
            std::fs::create_dir_all(&d).unwrap();
            for (f, v) in [("level", level), ("type", kind), ("size", size)] {
                std::fs::write(d.join(f), format!("{v}\n")).unwrap();
            }
        };
        write(0, "1", "Data", "48K");
        write(1, "1", "Instruction", "32K");
        assert_eq!(CpuCaches::from_sysfs(&dir), None, "no L2 yet");
        write(2, "2", "Unified", "2048K");
        write(3, "3", "Unified", "105M");
        let c = CpuCaches::from_sysfs(&dir).unwrap();
        assert_eq!((c.l1d, c.l2, c.source), (48 << 10, 2 << 20, "sysfs"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(CpuCaches::from_sysfs(&dir), None, "no folder");
    }

    #[test]
    fn blocks_follow_the_caches_and_give_the_tuned_ones() {
        let caches = |l1d: usize, l2: usize| CpuCaches {
            l1d: l1d << 10,
            l2: l2 << 10,
            source: "test",
        };
        let avx512 = TileBytes {
            mr: 14,
            nr: 32,
            a: 4,
            w: 2,
        };
        let avx2 = TileBytes { mr: 6, ..avx512 };
        let b = |kc, mc, nc| GemmBlocking { kc, mc, nc };
        // Zen 5 (tuned there by hand before this model existed) and Zen 3.
        assert_eq!(
            GemmBlocking::for_tile(caches(48, 1024), avx512),
            b(384, 336, 512)
        );
        assert_eq!(
            GemmBlocking::for_tile(caches(32, 512), avx2),
            b(640, 102, 128)
        );
        // Sapphire/Emerald Rapids' 2 MiB L2: larger row and column blocks, same K block.
        assert_eq!(
            GemmBlocking::for_tile(caches(48, 2048), avx512),
            b(384, 672, 1024)
        );
        // Tiny caches still give whole tiles and panels.
        let tiny = GemmBlocking::for_tile(caches(4, 4), avx512);
        assert_eq!((tiny.kc, tiny.mc % 14, tiny.nc % 32), (128, 0, 0));
        assert!(tiny.mc >= 14 && tiny.nc >= 32);
    }

    #[test]
    fn this_machine_reports_plausible_caches() {
        let c = CpuCaches::detected();
        assert!(c.l1d >= 4 << 10 && c.l2 >= c.l1d, "{c:?}");
    }
}
