//! Where a packed weight's elements live: a buffer of its own (on Linux, a large one in
//! anonymous memory on transparent huge pages), or a read-only mapping of the packed-weight
//! cache ([`crate::weight_cache`]) used in place (no copy, no page zeroing).

use std::sync::Arc;

/// Byte alignment of packed elements: a cache line (no row load straddles two).
const ALIGN: usize = 64;

/// Element types every bit pattern of which is a value, 1 or 2 bytes wide: what a mapped file
/// may hold and be read as.
pub(crate) trait Plain: Copy + Default + Send + Sync + 'static {}
impl Plain for half::bf16 {}
impl Plain for i8 {}

/// Bytes from which a buffer of its own is anonymous memory asked to be backed by 2 MiB pages.
#[cfg(target_os = "linux")]
const HUGE_FROM: usize = 2 << 20;

/// `len` elements starting at an [`ALIGN`]-byte boundary.
pub(crate) enum Elements<T: Plain> {
    /// A buffer of their own (`start` elements in, for the alignment).
    Owned {
        buf: Vec<T>,
        start: usize,
        len: usize,
    },
    /// A large buffer of their own: an anonymous mapping (page-aligned) advised onto huge pages.
    /// The products stream gigabytes of weights per request, and on 4 KiB pages every page of
    /// every panel stream costs a TLB miss. With the weights coming from memory, alternating in
    /// one process (Zen 5, 2 threads): the DiT's 41-row products 1–3 % faster, a 469-row
    /// one (the LLM's) 3 %, the vision tower's qkv 1 %.
    Anonymous(memmap2::MmapMut),
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
        #[cfg(target_os = "linux")]
        {
            let bytes = len * size_of::<T>();
            // Fresh anonymous pages read as zero; a failed mapping falls back to the heap.
            if let Some(map) = (bytes >= HUGE_FROM)
                .then(|| memmap2::MmapMut::map_anon(bytes).ok())
                .flatten()
            {
                // A hint: without transparent huge pages (or with them off) the pages stay small.
                let _ = map.advise(memmap2::Advice::HugePage);
                return Elements::Anonymous(map);
            }
        }
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
            // SAFETY: the mapping holds a whole number of T (its length is a count of them
            // times their size), page-aligned, every bit pattern is a T (`Plain`), and it lives
            // as long as `self`.
            Elements::Anonymous(map) => unsafe {
                std::slice::from_raw_parts(map.as_ptr().cast::<T>(), map.len() / size_of::<T>())
            },
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
            // SAFETY: as in `as_slice`, and the mapping is writable and borrowed mutably.
            Elements::Anonymous(map) => {
                let len = map.len() / size_of::<T>();
                Some(unsafe { std::slice::from_raw_parts_mut(map.as_mut_ptr().cast::<T>(), len) })
            }
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
            Elements::Anonymous(map) => map.len(),
            Elements::Mapped { .. } => 0,
        }
    }
}

impl<T: Plain> std::fmt::Debug for Elements<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Elements::Owned { len, .. } => write!(f, "{len} owned elements"),
            Elements::Anonymous(map) => {
                let len = map.len() / size_of::<T>();
                write!(f, "{len} owned elements (anonymous map)")
            }
            Elements::Mapped { offset, len, .. } => write!(f, "{len} elements mapped at {offset}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fresh elements read as zero, take writes, and read them back, at every size (small ones
    /// on the heap, large ones in an anonymous mapping on Linux), at an ALIGN-byte boundary.
    #[test]
    fn zeroed_elements_are_zero_writable_and_aligned_at_every_size() {
        for len in [1usize, 63, 4096, (2 << 20) - 1, 2 << 20, (5 << 20) + 3] {
            let mut e = Elements::<i8>::zeroed(len);
            assert_eq!(e.as_slice().len(), len);
            assert!(e.as_slice().iter().all(|&v| v == 0), "{len}: not zero");
            assert!(
                (e.as_slice().as_ptr() as usize).is_multiple_of(ALIGN),
                "{len}"
            );
            assert!(e.owned_bytes() >= len, "{len}: {} owned", e.owned_bytes());
            let w = e.as_mut_slice().expect("owned elements are writable");
            for (i, v) in w.iter_mut().enumerate() {
                *v = (i % 251) as i8;
            }
            assert!(e
                .as_slice()
                .iter()
                .enumerate()
                .all(|(i, &v)| v == (i % 251) as i8));
            assert_eq!(e.as_bytes().len(), len);
            #[cfg(target_os = "linux")]
            assert_eq!(
                matches!(e, Elements::Anonymous(_)),
                len >= HUGE_FROM,
                "{len}: {e:?}"
            );
        }
        let b = Elements::<half::bf16>::zeroed(3 << 20);
        assert!(b.as_slice().iter().all(|v| v.to_f32() == 0.0));
        assert_eq!(b.as_bytes().len(), 6 << 20);
    }
}
