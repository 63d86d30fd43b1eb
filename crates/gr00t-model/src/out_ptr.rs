//! An output buffer's raw pointer shared by parallel workers, each of which writes only its
//! own disjoint elements (GEMM tiles, weight slabs, attention rows).

/// A `*mut f32` that can cross into rayon tasks.
#[derive(Clone, Copy)]
pub(crate) struct OutPtr(pub(crate) *mut f32);

// SAFETY: the workers holding copies write disjoint elements of one live buffer; the pointer
// itself is never mutated.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// The pointer `off` elements in (a method, so closures capture the whole `Sync` wrapper).
    pub(crate) fn add(self, off: usize) -> *mut f32 {
        self.0.wrapping_add(off)
    }
}
