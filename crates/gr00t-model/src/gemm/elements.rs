//! Where a packed weight's elements live: a buffer of its own, or a read-only mapping of the
//! packed-weight cache ([`crate::weight_cache`]) used in place (no copy, no page zeroing).

use std::sync::Arc;

/// Byte alignment of packed elements: a cache line (no row load straddles two).
const ALIGN: usize = 64;

/// Element types every bit pattern of which is a value, 1 or 2 bytes wide: what a mapped file
/// may hold and be read as.
pub(crate) trait Plain: Copy + Default + Send + Sync + 'static {}
impl Plain for half::bf16 {}
impl Plain for i8 {}

/// `len` elements starting at an [`ALIGN`]-byte boundary.
pub(crate) enum Elements<T: Plain> {
    /// A buffer of their own (`start` elements in, for the alignment).
    Owned {
        buf: Vec<T>,
        start: usize,
        len: usize,
    },
    /// Bytes `offset..` of a read-only mapping.
    Mapped {
        map: Arc<memmap2::Mmap>,
        offset: usize,
        len: usize,
    },
}

impl<T: Plain> Elements<T> {
    /// `len` zero elements of their own.
    pub(crate) fn zeroed(len: usize) -> Elements<T> {
        let pad = ALIGN / size_of::<T>();
        let buf = vec![T::default(); len + pad];
        let start = buf.as_ptr().align_offset(ALIGN).min(pad);
        Elements::Owned { buf, start, len }
    }

    /// `len` elements at byte `offset` of `map`; `None` unless they lie inside it at an
    /// [`ALIGN`]-byte boundary.
    pub(crate) fn mapped(map: Arc<memmap2::Mmap>, offset: usize, len: usize) -> Option<Self> {
        let end = len.checked_mul(size_of::<T>())?.checked_add(offset)?;
        let aligned = (map.as_ptr() as usize + offset).is_multiple_of(ALIGN);
        (aligned && end <= map.len()).then_some(Elements::Mapped { map, offset, len })
    }

    /// The elements.
    pub(crate) fn as_slice(&self) -> &[T] {
        match self {
            Elements::Owned { buf, start, len } => &buf[*start..][..*len],
            Elements::Mapped { map, offset, len } => {
                let bytes = &map[*offset..][..len * size_of::<T>()];
                // SAFETY: the bytes lie inside the mapping (checked in `mapped`), aligned for
                // T (an ALIGN-byte boundary), every bit pattern is a T (`Plain`), and the
                // mapping is read-only and lives as long as `self` (the Arc).
                unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), *len) }
            }
        }
    }

    /// The elements, writable: `None` when mapped (a mapped weight is never written).
    pub(crate) fn as_mut_slice(&mut self) -> Option<&mut [T]> {
        match self {
            Elements::Owned { buf, start, len } => Some(&mut buf[*start..][..*len]),
            Elements::Mapped { .. } => None,
        }
    }

    /// The elements' bytes (what the cache writes).
    pub(crate) fn as_bytes(&self) -> &[u8] {
        let s = self.as_slice();
        // SAFETY: `Plain` types have no padding; the bytes are the slice's own.
        unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)) }
    }

    /// Bytes of anonymous memory held (a mapping's pages are the page cache's).
    pub(crate) fn owned_bytes(&self) -> usize {
        match self {
            Elements::Owned { buf, .. } => std::mem::size_of_val(buf.as_slice()),
            Elements::Mapped { .. } => 0,
        }
    }
}

impl<T: Plain> std::fmt::Debug for Elements<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Elements::Owned { len, .. } => write!(f, "{len} owned elements"),
            Elements::Mapped { offset, len, .. } => write!(f, "{len} elements mapped at {offset}"),
        }
    }
}
