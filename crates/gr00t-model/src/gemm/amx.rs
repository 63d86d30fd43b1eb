//! Hand-written AMX-BF16 GEMM `C[M, N] = bf16(A)[M, K]·Bᵀ (+ bias)` for a row-major f32 `A`,
//! rounded to bf16 (round to nearest even) while it is packed, and a bf16 `B` packed once at
//! load as VNNI pairs ([`PackLayout::VnniPairs`](super::PackLayout::VnniPairs), the layout
//! `avx512bf16.rs` reads: a 32-column panel row of pairs is two B tiles side by side).
//! Sapphire, Emerald and Granite Rapids multiply a 16×32 bf16 tile by a 32×16 one into 16×16
//! f32 in one `tdpbf16ps`, 16 times the multiply-adds of an AVX-512 FMA per cycle.
//!
//! Blocks of 2×2 tiles (32×32 of C in tmm0-3, two A tiles in tmm4-5, two B tiles in tmm6-7)
//! each run one `asm!` loop over a K block; stable Rust has no AMX intrinsics. C lives in the
//! output (or a scratch tile at the edges) between K blocks, exactly as f32.
//!
//! Bits: `tdpbf16ps` rounds in its own order (not an FMA chain: 1–2 ulp from `vdpbf16ps`), but
//! every element's sequence of tile operations depends only on K, so they do not depend on M,
//! on the block a row falls in, nor on the thread count, and repeats are identical.

use super::driver::{AlignedBuf, VnniKernel};
use super::NR;
use std::cell::RefCell;
use std::sync::OnceLock;

#[cfg(not(target_arch = "x86_64"))]
use super::driver::no_unit as unit;
#[cfg(target_arch = "x86_64")]
use super::{
    driver::Lhs,
    out_ptr::OutPtr,
    tile::{bf16_pairs, row_masks},
    PackedBf16,
};
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Rows of a C or A tile, and pair rows of a B tile.
const TILE: usize = 16;
/// Rows (and columns: one weight panel) of C per 2×2 block.
const MB: usize = 2 * TILE;
/// K block in pairs, a multiple of [`TILE`] (only where C is stored and reloaded, never the
/// order of the sums). KC and MC were swept with examples/gemm_shapes.rs on an Intel Xeon
/// with AMX (48 KiB L1d, 2 MiB L2, 2 threads): 1024 pairs and 256 rows beat 256 × 256 by
/// 10–20 % on the ViT and LLM shapes (C reloaded less often; the A block, 1 MiB, in L2).
const KC: usize = 1024;
/// Rows of A packed at once (a multiple of [`MB`]).
const MC: usize = 256;
/// Words past each packed row of A, so that a tile's 16 rows do not share a cache set.
const ROW_PAD: usize = 16;
/// Row counts from which the threads split rows (each packs only its own A) instead of
/// columns (each streams only its own weights).
const SPLIT_ROWS_FROM: usize = 256;

/// Whether this CPU runs the kernel: AMX-TILE and AMX-BF16 by CPUID, AVX-512F/BW/BF16 for
/// packing A, and the Linux kernel's leave to use the tile data ([`tile_data_granted`]).
pub(crate) fn available() -> bool {
    static RUNS: OnceLock<bool> = OnceLock::new();
    // Once: CPUID traps to the hypervisor in a VM.
    *RUNS.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            cpu_has_amx(AMX_BF16)
                && super::avx512bf16::available()
                && std::arch::is_x86_feature_detected!("avx512bw")
                && tile_data_granted()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// The Linux kernel's leave to use the tile data, asked once per process (refused where the
/// kernel or a sandbox denies it; never on other systems).
pub(crate) fn tile_data_granted() -> bool {
    static GRANTED: OnceLock<bool> = OnceLock::new();
    *GRANTED.get_or_init(|| {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        {
            // SAFETY: the arch_prctl requests below only read or set this process's XSTATE
            // permissions.
            cpu_has_amx(0) && unsafe { request_tile_data() }
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        {
            false
        }
    })
}

/// CPUID leaf 7 EDX: AMX-BF16.
#[cfg(target_arch = "x86_64")]
pub(crate) const AMX_BF16: u32 = 1 << 22;
/// CPUID leaf 7 EDX: AMX-INT8.
#[cfg(target_arch = "x86_64")]
pub(crate) const AMX_INT8: u32 = 1 << 25;

/// CPUID leaf 7: AMX-TILE (EDX bit 24) and the `unit` bits of EDX (an AMX_* constant).
#[cfg(target_arch = "x86_64")]
pub(crate) fn cpu_has_amx(unit: u32) -> bool {
    // Leaf 7 is read only when the CPU has it.
    if __cpuid(0).eax < 7 {
        return false;
    }
    let edx = __cpuid_count(7, 0).edx;
    let need = unit | (1 << 24);
    edx & need == need
}

/// `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, then `ARCH_GET_XCOMP_PERM` to see
/// the permission granted (without it the first tile instruction kills the process).
///
/// # Safety
/// Linux on x86-64.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
unsafe fn request_tile_data() -> bool {
    const SYS_ARCH_PRCTL: i64 = 158;
    const ARCH_GET_XCOMP_PERM: u64 = 0x1022;
    const ARCH_REQ_XCOMP_PERM: u64 = 0x1023;
    const XFEATURE_XTILEDATA: u64 = 18;
    let call = |code: u64, arg: u64| -> i64 {
        let ret: i64;
        // SAFETY: a raw syscall; rcx and r11 are clobbered by `syscall` itself.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") SYS_ARCH_PRCTL => ret,
                in("rdi") code,
                in("rsi") arg,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            )
        };
        ret
    };
    if call(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0 {
        return false;
    }
    let mut perm = 0u64;
    call(ARCH_GET_XCOMP_PERM, &mut perm as *mut u64 as u64) == 0
        && perm & (1 << XFEATURE_XTILEDATA) != 0
}

/// The kernel's fixed blocks, for `/info` and the logs.
pub(crate) fn blocks_description() -> String {
    format!("AMX tiles 32x32, kc {KC} pairs, mc {MC}")
}

/// The kernel: [`VnniKernel::matmul`] in 32×32 blocks and [`VnniKernel::matmul_to`].
pub(crate) static KERNEL: VnniKernel = VnniKernel {
    available,
    unit,
    tile: (MB, NR),
    // `product` splits rows when m/MB > (n/NR)·rows_over_cols: 0 forces rows, m columns.
    rows_over_cols: |m| if m >= SPLIT_ROWS_FROM { 0 } else { m },
};

/// A 64-byte aligned 32×32 f32 tile block (a C edge or the seed of a block).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Block32([f32; MB * NR]);

/// Per-thread buffers, reused across calls.
struct Scratch {
    /// Packed A block, `[MC][KC]` pairs at most.
    pa: AlignedBuf<u32>,
    /// The first K block's C: the bias (or zero) on every row.
    seed: Box<Block32>,
    /// C of a block at the edge of the output.
    edge: Box<Block32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch {
        pa: AlignedBuf::new(),
        seed: Box::new(Block32([0.0; MB * NR])),
        edge: Box::new(Block32([0.0; MB * NR])),
    });
}

/// The palette-1 tile configuration: all eight tiles 16 rows of 64 bytes.
#[repr(C, align(64))]
pub(crate) struct TileConfig([u8; 64]);

impl TileConfig {
    /// Every tile 16 rows of 64 bytes.
    pub(crate) fn full_tiles() -> TileConfig {
        let mut c = [0u8; 64];
        c[0] = 1;
        for t in 0..8 {
            c[16 + 2 * t] = 64;
            c[48 + t] = TILE as u8;
        }
        TileConfig(c)
    }
}

/// Columns `n0..n1` of the product of `lhs` (its k ≤ the weight's K: the first k of every
/// column) and `w`, written through `dst` at row stride `ldc`.
///
/// # Safety
/// AMX granted and AVX-512F/BW/BF16; `dst + i·ldc + j` writable for `i < lhs.m`, `j` in
/// `n0..n1`, with nothing else touching those elements during the call; `n0` a multiple of
/// NR, `n1` ≤ the weight's n; `bias` holds n.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn unit(
    lhs: Lhs,
    w: &PackedBf16,
    n0: usize,
    n1: usize,
    bias: Option<&[f32]>,
    dst: OutPtr,
    ldc: usize,
) {
    let Lhs { a, lda, m, k } = lhs;
    // Pair rows of A (whole tiles; ≤ the panel's) and of a weight panel (its stride).
    let pairs = k.div_ceil(2).next_multiple_of(TILE);
    let pair_rows = w.pair_rows();
    let panels = w.panels().as_ptr().cast::<u32>();
    let cfg = TileConfig::full_tiles();
    // SAFETY: a valid 64-byte palette-1 configuration; AMX is granted (contract).
    unsafe { std::arch::asm!("ldtilecfg [{}]", in(reg) &cfg, options(nostack, readonly)) };
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        let Scratch { pa, seed, edge } = &mut *s;
        let pa = pa.take(MC * (KC + ROW_PAD));
        for ic in (0..m).step_by(MC) {
            let mc = MC.min(m - ic);
            let mcp = mc.next_multiple_of(MB);
            for pc in (0..pairs).step_by(KC) {
                let kc = KC.min(pairs - pc);
                // SAFETY: AVX-512F/BF16 (contract); `pa` holds MC·KC ≥ mcp·kc words.
                unsafe { pack_a(Lhs { a, lda, m, k }, ic, mc, mcp, pc, kc, pa) };
                for jc in (n0..n1).step_by(NR) {
                    let nr = NR.min(n1 - jc);
                    if pc == 0 {
                        seed_block(&mut seed.0, bias.map(|b| &b[jc..jc + nr]));
                    }
                    // Pair row pc of panel jc/NR.
                    let bp = panels.wrapping_add((jc / NR * pair_rows + pc) * NR);
                    for i2 in (0..mcp).step_by(MB) {
                        let mr = MB.min(mc.saturating_sub(i2));
                        if mr == 0 {
                            break;
                        }
                        let c = dst.add((ic + i2) * ldc + jc);
                        let whole = mr == MB && nr == NR;
                        let row_bytes = ldc * 4;
                        let (cin, cin_stride) = if pc == 0 {
                            (seed.0.as_ptr(), NR * 4)
                        } else if whole {
                            (c.cast_const(), row_bytes)
                        } else {
                            for i in 0..mr {
                                // SAFETY: row i's nr columns are this unit's (contract).
                                let row = unsafe { std::slice::from_raw_parts(c.add(i * ldc), nr) };
                                edge.0[i * NR..i * NR + nr].copy_from_slice(row);
                            }
                            (edge.0.as_ptr(), NR * 4)
                        };
                        let (cout, cout_stride) = if whole {
                            (c, row_bytes)
                        } else {
                            (edge.0.as_mut_ptr(), NR * 4)
                        };
                        // SAFETY: `pa` rows i2..i2+32 hold kc pairs (mcp ≥ i2+32; 16 rows for
                        // block_1x2); the panel
                        // holds kc pair rows of NR from `bp`; `cin`/`cout` are 32 rows of 32
                        // valid floats at their strides (the output's only for whole blocks).
                        // At most 16 rows left: one row of tiles (the DiT's 41 = 32 + 9).
                        let block = if mr <= TILE { block_1x2 } else { block_2x2 };
                        unsafe {
                            block(
                                pa.as_ptr().add(i2 * (kc + ROW_PAD)),
                                (kc + ROW_PAD) * 4,
                                bp,
                                kc / TILE,
                                cin,
                                cin_stride,
                                cout,
                                cout_stride,
                            )
                        };
                        if !whole {
                            for i in 0..mr {
                                // SAFETY: as above.
                                let row =
                                    unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc), nr) };
                                row.copy_from_slice(&edge.0[i * NR..i * NR + nr]);
                            }
                        }
                    }
                }
            }
        }
    });
    // SAFETY: marks the tiles unused (a smaller state to save on a context switch).
    unsafe { std::arch::asm!("tilerelease", options(nostack, nomem)) };
}

/// A block's first C: `bias` (zero past its end, or zero throughout) on all 32 rows.
fn seed_block(seed: &mut [f32; MB * NR], bias: Option<&[f32]>) {
    let mut row = [0f32; NR];
    if let Some(b) = bias {
        row[..b.len()].copy_from_slice(b);
    }
    for r in seed.chunks_exact_mut(NR) {
        r.copy_from_slice(&row);
    }
}

/// Rows `ic..ic+mc` of `lhs`, pair rows `pc..pc+kc` of its k, as `[mcp][kc]` words of two
/// bf16 (RNE) with k in the high and k+1 in the low half, zero past row mc and past k.
///
/// # Safety
/// AVX-512F/BF16; `pa` holds `mcp·kc` words; `kc` a multiple of 16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn pack_a(lhs: Lhs, ic: usize, mc: usize, mcp: usize, pc: usize, kc: usize, pa: &mut [u32]) {
    let Lhs { a, lda, k, .. } = lhs;
    for (i, dst) in pa[..mcp * (kc + ROW_PAD)]
        .chunks_exact_mut(kc + ROW_PAD)
        .map(|r| &mut r[..kc])
        .enumerate()
    {
        if i >= mc {
            dst.fill(0);
            continue;
        }
        let row = &a[(ic + i) * lda..][..k];
        for (q, out) in (0..kc).step_by(16).zip(dst.chunks_exact_mut(16)) {
            // 32 values of k from p: 16 pairs.
            let p = 2 * (pc + q);
            let valid = k.saturating_sub(p);
            let src = row.as_ptr().wrapping_add(p);
            // SAFETY: only the lanes below k are read, inside the row (word j: k = p+2j high);
            // `out` holds 16 words.
            unsafe {
                let pairs = bf16_pairs(src, row_masks(valid));
                _mm512_storeu_si512(out.as_mut_ptr().cast(), pairs);
            }
        }
    }
}

/// The asm lines that prefetch the weight panel two steps (4 096 bytes) past `{b}`, one line in
/// each 128-byte row of the step's 2 048 bytes.
macro_rules! prefetch_b_two_steps_ahead {
    () => {
        prefetch_lines!(
            "b": 4096, 4224, 4352, 4480, 4608, 4736, 4864, 4992,
            5120, 5248, 5376, 5504, 5632, 5760, 5888, 6016
        )
    };
}

/// One 32×32 block of C: loads it from `cin` (row stride `cin_stride` bytes), adds the
/// products of `steps` tiles of 16 pairs of A (`a`, rows at stride `lda` bytes, 64 bytes per
/// step) and of the panel at `b` (128-byte rows, 2048 bytes per step), stores it at `cout`.
///
/// # Safety
/// AMX granted and the full-tile configuration loaded; 32 rows of `steps·64` bytes at `a`,
/// `steps·16` rows of 128 bytes at `b`, 32 rows of 128 bytes at `cin` and `cout`; `steps ≥ 1`.
#[cfg(target_arch = "x86_64")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn block_2x2(
    a: *const u32,
    lda: usize,
    b: *const u32,
    steps: usize,
    cin: *const f32,
    cin_stride: usize,
    cout: *mut f32,
    cout_stride: usize,
) {
    // SAFETY: the contract; tile registers are declared clobbered.
    unsafe {
        std::arch::asm!(
            "tileloadd tmm0, [{ci} + {cis}*1]",
            "tileloadd tmm1, [{ci} + {cis}*1 + 64]",
            "mov {t}, {cis}",
            "shl {t}, 4",
            "add {t}, {ci}",
            "tileloadd tmm2, [{t} + {cis}*1]",
            "tileloadd tmm3, [{t} + {cis}*1 + 64]",
            "mov {a2}, {lda}",
            "shl {a2}, 4",
            "add {a2}, {a}",
            "mov {bs}, 128",
            "2:",
            "tileloadd tmm4, [{a} + {lda}*1]",
            "tileloadd tmm6, [{b} + {bs}*1]",
            "tileloadd tmm7, [{b} + {bs}*1 + 64]",
            "tileloadd tmm5, [{a2} + {lda}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            // B two steps ahead, a line in each 128-byte row: a whole bf16 request 0.97x
            // without (four interleaved pairs), most on the DiT, whose weights stream from
            // memory.
            prefetch_b_two_steps_ahead!(),
            "add {a}, 64",
            "add {a2}, 64",
            "add {b}, 2048",
            "dec {n}",
            "jnz 2b",
            "tilestored [{co} + {cos}*1], tmm0",
            "tilestored [{co} + {cos}*1 + 64], tmm1",
            "mov {t}, {cos}",
            "shl {t}, 4",
            "add {t}, {co}",
            "tilestored [{t} + {cos}*1], tmm2",
            "tilestored [{t} + {cos}*1 + 64], tmm3",
            a = inout(reg) a => _,
            b = inout(reg) b => _,
            n = inout(reg) steps => _,
            lda = in(reg) lda,
            ci = in(reg) cin,
            cis = in(reg) cin_stride,
            co = in(reg) cout,
            cos = in(reg) cout_stride,
            t = out(reg) _,
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

/// [`block_2x2`] for the first 16 rows only (C in tmm0-1, A in tmm4): rows 16..32 of `cin`
/// and `cout` are neither read nor written.
///
/// # Safety
/// As for [`block_2x2`], with 16 rows in place of 32 at `a`, `cin` and `cout`.
#[cfg(target_arch = "x86_64")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn block_1x2(
    a: *const u32,
    lda: usize,
    b: *const u32,
    steps: usize,
    cin: *const f32,
    cin_stride: usize,
    cout: *mut f32,
    cout_stride: usize,
) {
    // SAFETY: the contract; tile registers are declared clobbered.
    unsafe {
        std::arch::asm!(
            "tileloadd tmm0, [{ci} + {cis}*1]",
            "tileloadd tmm1, [{ci} + {cis}*1 + 64]",
            "mov {bs}, 128",
            "2:",
            "tileloadd tmm4, [{a} + {lda}*1]",
            "tileloadd tmm6, [{b} + {bs}*1]",
            "tileloadd tmm7, [{b} + {bs}*1 + 64]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            prefetch_b_two_steps_ahead!(),
            "add {a}, 64",
            "add {b}, 2048",
            "dec {n}",
            "jnz 2b",
            "tilestored [{co} + {cos}*1], tmm0",
            "tilestored [{co} + {cos}*1 + 64], tmm1",
            a = inout(reg) a => _,
            b = inout(reg) b => _,
            n = inout(reg) steps => _,
            lda = in(reg) lda,
            ci = in(reg) cin,
            cis = in(reg) cin_stride,
            co = in(reg) cout,
            cos = in(reg) cout_stride,
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

#[cfg(test)]
mod tests {
    use super::{available, KC, KERNEL, MB, MC, NR};
    use crate::gemm::checks::{self, vnni_kernel_tests};
    use half::bf16;

    /// Within f32 rounding (k+1 roundings of the running magnitude) of the exact product.
    fn within_f32_rounding(got: f32, a: &[f32], w: &[bf16], bias: f32) {
        let (dot, mag) = checks::exact_dot(a, w);
        let (dot, mag) = (dot + bias as f64, mag + bias.abs() as f64);
        let tol = (a.len() as f64 + 1.0) * f32::EPSILON as f64 * mag + 1e-30;
        assert!((got as f64 - dot).abs() <= tol, "{got} vs {dot}");
    }

    /// Odd shapes around every block edge (tile, block, K block in pairs, odd K, A block,
    /// the row/column split).
    fn shapes() -> Vec<(usize, usize, usize)> {
        checks::shapes(&[
            (MB + 1, NR + 1, 33),
            (MB - 1, NR - 1, 4 * KC + 3),
            (41, 300, 70),
            (MC + 3, 48, 4 * KC + 5),
            (2 * MC + 40, 70, 64),
            (29, 3 * NR + 8, 31),
            (16, 16, 32),
        ])
    }

    vnni_kernel_tests!(
        within_f32_rounding_of_the_exact_product_of_the_rounded_activations,
        within_f32_rounding,
        (MB, KC),
        (2 * MC + 20, 3 * NR + 5, 4 * KC + 9),
        &[(0, 1), (3, 3 + MB + 2), (MC - 1, 2 * MC + 20), (5, 5 + 200)]
    );
}
