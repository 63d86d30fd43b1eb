//! The AMX-INT8 tile (Sapphire, Emerald and Granite Rapids): 32 rows × 32 columns of C as 2×2
//! tiles of 16×16 i32 sums, each `tdpbusd` multiplying 16 rows × 64 k of u8 activations
//! (offset by 128) by 64 k × 16 columns of s8 weights (16 times the multiply-adds of an
//! AVX-512 `vpdpbusd`). A weight panel `[k4][16][4]` is already a B tile's rows (one k4 group
//! of 16 columns, 64 bytes each), and the quantised activations are read in place, so nothing
//! is repacked. The sums are exact integers, as on every kernel: the epilogue subtracts the
//! weight's `128·Σq` and gives the same bits.
//!
//! Full tiles only: K a multiple of 64 (the caller runs the VNNI tile otherwise) and 16 or 32
//! readable rows of activations (their buffer is padded to whole tiles of rows).

use super::{column_lanes, epilogue_lanes, Tile};
use std::arch::x86_64::*;

/// Rows (and columns) of C per call.
pub(crate) const MB: usize = 32;
/// k per tile step (a tile row of 64 bytes); K must be a multiple of it.
pub(crate) const KB: usize = 64;

/// Whether this CPU runs the tile: AMX-TILE and AMX-INT8 by CPUID, AVX-512F/BW and VNNI (the
/// epilogue, and the VNNI tile for other K), and the Linux kernel's leave for the tile data.
pub(crate) fn available() -> bool {
    static RUNS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *RUNS.get_or_init(|| {
        crate::gemm::amx::cpu_has_amx(crate::gemm::amx::AMX_INT8)
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni")
            && crate::gemm::amx::tile_data_granted()
    })
}

/// The full-tile configuration loaded for as long as it lives (the tiles released after).
pub(crate) struct Configured(());

impl Configured {
    /// Loads the configuration on this thread.
    ///
    /// # Safety
    /// [`available`].
    pub(crate) unsafe fn load() -> Configured {
        let cfg = crate::gemm::amx::TileConfig::full_tiles();
        // SAFETY: a valid palette-1 configuration; AMX is granted (contract).
        unsafe { std::arch::asm!("ldtilecfg [{}]", in(reg) &cfg, options(nostack, readonly)) };
        Configured(())
    }
}

impl Drop for Configured {
    fn drop(&mut self) {
        // SAFETY: only built by `load` on an AMX CPU; marks the tiles unused (a smaller state
        // to save on a context switch).
        unsafe { std::arch::asm!("tilerelease", options(nostack, nomem)) };
    }
}

/// A 64-byte aligned 32×32 block of i32 sums.
#[repr(C, align(64))]
struct Sums([i32; MB * MB]);

/// A 32×32 tile (see the module docs).
///
/// # Safety
/// [`available`] and a [`Configured`] alive on this thread; the [`Tile`] as its docs say, with
/// u8 activations ([`super::Encoding::Offset`]), `k4` a multiple of 16, two panels behind
/// `panel`, and 16 rows (`rows` ≤ 16) or 32 rows of `4·k4` bytes readable at `a`.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn tile(t: &Tile) {
    let mut sums = Sums([0; MB * MB]);
    let steps = t.k4 / 16;
    let (p0, p1) = (t.panel, t.panel.wrapping_add(t.panel_len));
    let c = sums.0.as_mut_ptr();
    // SAFETY: the contract: `steps` tile steps of A and of both panels are readable, `c`
    // holds 32 rows of 128 bytes.
    unsafe {
        if t.rows > 16 {
            block_2x2(t.a, t.lda, p0, p1, steps, c);
        } else {
            block_1x2(t.a, t.lda, p0, p1, steps, c);
        }
    }
    // SAFETY: every pointer stays inside the extents the tile describes (contract).
    unsafe {
        for v in 0..2 {
            let Some((c0, mask, sb, bias)) = column_lanes(t, v) else {
                break;
            };
            let offset = _mm512_loadu_si512(t.sums.add(c0).cast());
            for r in 0..t.rows {
                let acc = _mm512_sub_epi32(_mm512_load_si512(c.add(r * MB + c0).cast()), offset);
                let y = epilogue_lanes(acc, *t.row_scales.add(r), sb, bias);
                _mm512_mask_storeu_ps(t.dst.add(r * t.ldc + c0), mask, y);
            }
        }
    }
}

/// The asm lines that prefetch a weight panel two steps (2 048 bytes) past the register named
/// `$b`, a line each: the DiT's weights stream from memory (0.8 GB a step), and the LLM's
/// panels are re-read once per block of rows (gemm_shapes with and without, alternating three
/// times on the Emerald Rapids guest: LLM and DiT shapes 1.05-1.22x, vision 1.0-1.1x).
macro_rules! prefetch_two_steps_ahead {
    ($b:literal) => {
        prefetch_lines!(
            $b: 2048, 2112, 2176, 2240, 2304, 2368, 2432, 2496,
            2560, 2624, 2688, 2752, 2816, 2880, 2944, 3008
        )
    };
}

/// 32 rows of A (`a`, row stride `lda` bytes) by two panels (`b0`, `b1`) over `steps` steps of
/// 64 k into the 32×32 sums at `c` (128-byte rows).
///
/// # Safety
/// As for [`tile`], with 32 rows at `a`; `steps ≥ 1`.
#[inline]
unsafe fn block_2x2(
    a: *const u8,
    lda: usize,
    b0: *const i8,
    b1: *const i8,
    steps: usize,
    c: *mut i32,
) {
    // SAFETY: the contract; tile registers are declared clobbered.
    unsafe {
        std::arch::asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "mov {a2}, {lda}",
            "shl {a2}, 4",
            "add {a2}, {a}",
            "mov {bs}, 64",
            "2:",
            "tileloadd tmm4, [{a} + {lda}*1]",
            "tileloadd tmm6, [{b0} + {bs}*1]",
            "tileloadd tmm7, [{b1} + {bs}*1]",
            "tileloadd tmm5, [{a2} + {lda}*1]",
            "tdpbusd tmm0, tmm4, tmm6",
            "tdpbusd tmm1, tmm4, tmm7",
            "tdpbusd tmm2, tmm5, tmm6",
            "tdpbusd tmm3, tmm5, tmm7",
            prefetch_two_steps_ahead!("b0"),
            prefetch_two_steps_ahead!("b1"),
            "add {a}, 64",
            "add {a2}, 64",
            "add {b0}, 1024",
            "add {b1}, 1024",
            "dec {n}",
            "jnz 2b",
            "mov {bs}, 128",
            "tilestored [{c} + {bs}*1], tmm0",
            "tilestored [{c} + {bs}*1 + 64], tmm1",
            "tilestored [{c} + {bs}*1 + 2048], tmm2",
            "tilestored [{c} + {bs}*1 + 2112], tmm3",
            a = inout(reg) a => _,
            b0 = inout(reg) b0 => _,
            b1 = inout(reg) b1 => _,
            n = inout(reg) steps => _,
            lda = in(reg) lda,
            c = in(reg) c,
            a2 = out(reg) _,
            bs = out(reg) _,
            out("tmm0") _,
            out("tmm1") _,
            out("tmm2") _,
            out("tmm3") _,
            out("tmm4") _,
            out("tmm5") _,
            out("tmm6") _,
            out("tmm7") _,
            options(nostack),
        )
    };
}

/// [`block_2x2`] for 16 rows: rows 16..32 of `c` are left as they are.
///
/// # Safety
/// As for [`block_2x2`], with 16 rows at `a`.
#[inline]
unsafe fn block_1x2(
    a: *const u8,
    lda: usize,
    b0: *const i8,
    b1: *const i8,
    steps: usize,
    c: *mut i32,
) {
    // SAFETY: the contract; tile registers are declared clobbered.
    unsafe {
        std::arch::asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "mov {bs}, 64",
            "2:",
            "tileloadd tmm4, [{a} + {lda}*1]",
            "tileloadd tmm6, [{b0} + {bs}*1]",
            "tileloadd tmm7, [{b1} + {bs}*1]",
            "tdpbusd tmm0, tmm4, tmm6",
            "tdpbusd tmm1, tmm4, tmm7",
            prefetch_two_steps_ahead!("b0"),
            prefetch_two_steps_ahead!("b1"),
            "add {a}, 64",
            "add {b0}, 1024",
            "add {b1}, 1024",
            "dec {n}",
            "jnz 2b",
            "mov {bs}, 128",
            "tilestored [{c} + {bs}*1], tmm0",
            "tilestored [{c} + {bs}*1 + 64], tmm1",
            a = inout(reg) a => _,
            b0 = inout(reg) b0 => _,
            b1 = inout(reg) b1 => _,
            n = inout(reg) steps => _,
            lda = in(reg) lda,
            c = in(reg) c,
            bs = out(reg) _,
            out("tmm0") _,
            out("tmm1") _,
            out("tmm4") _,
            out("tmm6") _,
            out("tmm7") _,
            options(nostack),
        )
    };
}
