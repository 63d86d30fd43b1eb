//! The weight layouts the kernels read: a bf16 `[N, K]` weight rearranged once at load into
//! NR-column panels ([`PackedBf16`]), as rows of NR values widened in registers (the f32
//! kernels) or as VNNI pairs (`vdpbf16ps` and AMX tiles).

use super::elements::Elements;
use half::bf16;
use rayon::prelude::*;

/// Columns of a packed weight panel, and of C per AVX-512 tile (two 16-lane vectors).
pub(crate) const NR: usize = 32;

/// A bf16 `[N, K]` weight laid out once, at load, in the order one kernel family reads it
/// ([`PackLayout`]); NR-column panels either way (columns past N are zero), so no kernel packs
/// a weight per call. Same bytes as the row-major weight plus padding.
#[derive(Debug)]
pub struct PackedBf16 {
    n: usize,
    k: usize,
    layout: PackLayout,
    /// The panels, at a 64-byte boundary (no row load straddles a cache line).
    elements: Elements<bf16>,
}

/// The element order of a [`PackedBf16`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackLayout {
    /// `[⌈N/NR⌉][K][NR]`, each row of NR in [`stored_column`] order, so that two word unpacks
    /// with zero widen it exactly into columns 0..16 and 16..32 (the f32 kernels, AVX-512 and
    /// AVX2).
    Panels,
    /// `[⌈N/NR⌉][⌈K/32⌉·16][NR][2]`: VNNI pairs for `vdpbf16ps` (`gemm/avx512bf16.rs`) and
    /// AMX tiles (`gemm/amx.rs`), k padded with zero to a whole tile of 16 pairs. Each pair
    /// holds k+1 in its low and k in its high half: `vdpbf16ps` adds the high product first,
    /// so each chain runs over k in order.
    VnniPairs,
}

impl PackLayout {
    /// The stored length of each column's k values.
    fn padded_k(self, k: usize) -> usize {
        match self {
            PackLayout::Panels => k,
            PackLayout::VnniPairs => k.next_multiple_of(32),
        }
    }
}

impl PackedBf16 {
    /// Rearranges a row-major `[n, k]` bf16 matrix for the f32 kernels ([`PackLayout::Panels`];
    /// `None` when the length does not match).
    pub fn new(w: &[bf16], n: usize, k: usize) -> Option<PackedBf16> {
        PackedBf16::with_layout(w, n, k, PackLayout::Panels)
    }

    /// Rearranges a row-major `[n, k]` bf16 matrix in `layout` (`None` when the length does
    /// not match).
    pub fn with_layout(w: &[bf16], n: usize, k: usize, layout: PackLayout) -> Option<PackedBf16> {
        if w.len() != n * k {
            return None;
        }
        Some(PackedBf16::from_fn(n, k, layout, |c, p| w[c * k + p]))
    }

    /// The `[n, k]` matrix whose element `(c, p)` is `at(c, p)`, in `layout` (also a strided or
    /// transposed f32 source rounded on the way: the attention's keys and values).
    pub(crate) fn from_fn(
        n: usize,
        k: usize,
        layout: PackLayout,
        at_cp: impl Fn(usize, usize) -> bf16 + Sync,
    ) -> PackedBf16 {
        let kp = layout.padded_k(k);
        let mut packed = PackedBf16::zeroed(n, k, layout);
        let panels = packed.panels_mut();
        // Position of column slot `s`, k index `p` inside a panel.
        let at = |s: usize, p: usize| match layout {
            PackLayout::Panels => p * NR + s,
            PackLayout::VnniPairs => (p / 2 * NR + s) * 2 + 1 - p % 2,
        };
        let column = |s: usize| match layout {
            PackLayout::Panels => stored_column(s),
            PackLayout::VnniPairs => s,
        };
        if k > 0 {
            panels
                .par_chunks_mut(NR * kp)
                .enumerate()
                .for_each(|(j, panel)| {
                    let cols = NR.min(n - j * NR);
                    // K in short runs so the NR source rows stream through the cache together.
                    for p0 in (0..k).step_by(64) {
                        let p1 = (p0 + 64).min(k);
                        for s in 0..NR {
                            let c = column(s);
                            if c < cols {
                                for p in p0..p1 {
                                    panel[at(s, p)] = at_cp(j * NR + c, p);
                                }
                            }
                        }
                    }
                });
        }
        packed
    }

    /// An all-zero `[n, k]` matrix in `layout`, to be filled through
    /// [`PackedBf16::panels_mut`].
    pub(crate) fn zeroed(n: usize, k: usize, layout: PackLayout) -> PackedBf16 {
        PackedBf16 {
            n,
            k,
            layout,
            elements: Elements::zeroed(panels_len(n, k, layout)),
        }
    }

    /// An `[n, k]` matrix in `layout` whose panels are `elements` (`None` when their length
    /// is not the layout's).
    pub(crate) fn from_elements(
        n: usize,
        k: usize,
        layout: PackLayout,
        elements: Elements<bf16>,
    ) -> Option<PackedBf16> {
        (elements.as_slice().len() == panels_len(n, k, layout)).then_some(PackedBf16 {
            n,
            k,
            layout,
            elements,
        })
    }

    /// The panels' storage (what the packed-weight cache writes, or maps).
    pub(crate) fn elements(&self) -> &Elements<bf16> {
        &self.elements
    }

    /// The panels, writable (see [`PackedBf16::panels`]); only a weight being packed, never a
    /// mapped one, is written.
    pub(crate) fn panels_mut(&mut self) -> &mut [bf16] {
        self.elements
            .as_mut_slice()
            .expect("a mapped weight is never packed again")
    }

    /// `(n, k)` of the logical matrix.
    pub fn dims(&self) -> (usize, usize) {
        (self.n, self.k)
    }

    /// The element order.
    pub fn layout(&self) -> PackLayout {
        self.layout
    }

    /// Rows of pairs per panel of a [`PackLayout::VnniPairs`] matrix (a multiple of 16).
    pub(crate) fn pair_rows(&self) -> usize {
        PackLayout::VnniPairs.padded_k(self.k) / 2
    }

    /// The panels, `[⌈n/NR⌉][k][NR]` or `[⌈n/NR⌉][pair rows][NR][2]` by [`PackLayout`].
    pub(crate) fn panels(&self) -> &[bf16] {
        self.elements.as_slice()
    }
}

/// Elements of the panels of an `[n, k]` matrix in `layout` (columns padded to NR, k as the
/// layout pads it).
pub(crate) fn panels_len(n: usize, k: usize, layout: PackLayout) -> usize {
    n.div_ceil(NR) * NR * layout.padded_k(k)
}

/// The panel column stored at position `s` of a packed row: `vpunpcklwd` with zero takes words
/// 0..4 of each 128-bit lane (lane l → columns 4l..4l+4), `vpunpckhwd` words 4..8 (columns
/// 16+4l..16+4l+4).
pub(crate) fn stored_column(s: usize) -> usize {
    let (lane, w) = (s / 8, s % 8);
    if w < 4 {
        4 * lane + w
    } else {
        16 + 4 * lane + w - 4
    }
}

/// Exact bf16 → f32 (the bf16 bits are the high half of the f32).
pub(crate) fn widen(v: bf16) -> f32 {
    f32::from_bits(u32::from(v.to_bits()) << 16)
}
