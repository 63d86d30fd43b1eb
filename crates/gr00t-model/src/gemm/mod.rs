//! The CPU's hand-written GEMM kernels: `C[M, N] = A[M, K]·Bᵀ (+ bias)` for f32 activations
//! `A` and bf16 weights `B` `[N, K]`, most of them rearranged once at load ([`PackedBf16`]).
//! `crate::cpu_kernel` picks the one this CPU runs; `crate::linear` and the CPU attention call
//! them.
//!
//! | kernel | instructions | tile | bits of each element |
//! | --- | --- | --- | --- |
//! | [`avx512`] | AVX-512F FMA | 14×32 | one f32 FMA chain over k in order from the bias (or zero) |
//! | [`avx2`] | AVX2 FMA | 6×16 | the same chain: the same bits as `avx512` |
//! | [`avx512bf16`] | `vdpbf16ps` | 14×32 | that chain on the activations rounded to bf16 (denormals flushed) |
//! | [`amx`] | AMX `tdpbf16ps` | 32×32 | the tiles' own rounding order, a function of K only |
//!
//! The contract every kernel keeps: an element's bits do not depend on M, on the block or tile
//! its row falls in, nor on the thread count, and repeats are identical. Blocks split K only
//! where C is stored and reloaded, never the order of the sums.
//!
//! Besides one file per kernel: `pack.rs` (the weight layouts), `tile.rs` (what the
//! microkernels share: seeds, tile order, prefetches, masked loads and stores), `driver.rs`
//! (feature and operand checks, aligned scratch, the VNNI kernels' one driver), `out_ptr.rs`
//! (the output split among threads) and, for the tests, `checks.rs`.

// Off x86-64 every kernel's `available()` is false and the kernels proper are compiled out,
// leaving their shared helpers unused.
#![cfg_attr(
    not(target_arch = "x86_64"),
    allow(dead_code, unused_variables, unused_macros)
)]

/// The asm lines `prefetcht0 [{reg} + off]`, one per offset (the AMX kernels prefetch their
/// weight panels a line a row, two tile steps ahead).
macro_rules! prefetch_lines {
    ($reg:literal: $($off:literal),+ $(,)?) => {
        concat!($("prefetcht0 [{", $reg, "} + ", $off, "]\n"),+)
    };
}

pub(crate) mod amx;
pub(crate) mod attention_avx512;
pub(crate) mod avx2;
pub(crate) mod avx512;
pub(crate) mod avx512bf16;
#[cfg(test)]
pub(crate) mod checks;
mod driver;
pub(crate) mod elements;
pub(crate) mod int8;
pub(crate) mod out_ptr;
mod pack;
mod tile;

pub(crate) use driver::{Lhs, VnniKernel};
pub(crate) use pack::{widen, NR};
pub use pack::{PackLayout, PackedBf16};
