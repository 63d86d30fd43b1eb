//! The packed-weight cache: the first load writes the linear layers' weights exactly as the
//! kernels read them (bf16 panels, int8 panels with their scales and column sums) to one file
//! per checkpoint × precision × kernel × binary; later loads map that file read-only and use
//! it in place, so they neither read nor pack nor zero the pages of those weights.
//!
//! A file is `GR00TPW1`, the header's length and the data's offset (u64 LE each), the header
//! (JSON: the key, every weight's shape and blobs), the header's SHA-256, then the blobs at
//! 64-byte boundaries from the data offset, the last padded to one. Before any weight is used
//! the header, its hash, the key, the length and every blob's 64-bit checksum are checked; a file
//! that fails one is logged, removed and rebuilt, never used. A file is written under a
//! temporary name and renamed when complete, so concurrent loads never see half of one.

use crate::gemm::elements::Elements;
use crate::gemm::int8::PackedI8;
use crate::gemm::{PackLayout, PackedBf16};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The file's first bytes.
const MAGIC: &[u8; 8] = b"GR00TPW1";
/// Bumped when the layout of a file or of a packed weight changes.
const FORMAT: u32 = 2;
/// The data starts at a page boundary; each blob at a cache line.
const DATA_ALIGN: u64 = 4096;
const BLOB_ALIGN: u64 = 64;
/// Bytes checksummed as one part (parts run in parallel, combined in order).
const PART: usize = 1 << 20;

/// What a cache file is for: every setting the packed bytes depend on. Two loads share a file
/// exactly when their keys are equal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheKey(BTreeMap<String, String>);

impl CacheKey {
    /// The key of a load of the checkpoint with `digest` whose weight files are `files`, by
    /// this executable, with `settings` (precision, kernels, …: whatever changes the packing).
    pub fn new(digest: &str, files: &[PathBuf], settings: &[(&str, String)]) -> CacheKey {
        let mut m = BTreeMap::new();
        m.insert("format".into(), FORMAT.to_string());
        m.insert("binary".into(), binary_digest());
        m.insert("checkpoint_digest".into(), digest.to_string());
        // A file rewritten in place (a fine-tune saved over its folder) changes its length or
        // its modification time, even where the sampled digest would not see it.
        let stamps: Vec<String> = files
            .iter()
            .map(|p| {
                let meta = std::fs::metadata(p).ok();
                let len = meta.as_ref().map_or(0, std::fs::Metadata::len);
                let mtime = meta
                    .and_then(|m| m.modified().ok())
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos());
                let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
                format!("{}:{len}:{mtime}", name.unwrap_or_default())
            })
            .collect();
        m.insert("weight_files".into(), stamps.join(","));
        for (k, v) in settings {
            m.insert((*k).to_string(), v.clone());
        }
        CacheKey(m)
    }

    /// The file name: the checkpoint digest's head and the whole key's hash.
    fn file_name(&self) -> String {
        let json = serde_json::to_vec(&self.0).unwrap_or_default();
        let hash = hex(&Sha256::digest(&json));
        let digest = self.0.get("checkpoint_digest").map_or("", String::as_str);
        format!(
            "{}-{}.gr00tw",
            digest.get(..16).unwrap_or(digest),
            &hash[..16]
        )
    }
}

/// SHA-256 of this executable (once per process): any rebuild is another binary.
fn binary_digest() -> String {
    static DIGEST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DIGEST
        .get_or_init(|| {
            std::env::current_exe()
                .and_then(std::fs::read)
                .map(|b| hex(&Sha256::digest(&b))[..32].to_string())
                .unwrap_or_else(|_| format!("unreadable-{}", std::process::id()))
        })
        .clone()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// How a weight is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Kind {
    /// bf16 panels ([`PackLayout::Panels`]).
    Bf16Panels,
    /// bf16 VNNI pairs ([`PackLayout::VnniPairs`]).
    Bf16VnniPairs,
    /// int8 panels, then the f32 scales and the i32 offset sums (little-endian).
    Int8,
}

/// One stored run of bytes, from the data offset.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Blob {
    offset: u64,
    len: u64,
    checksum: String,
}

/// One weight of the file.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    name: String,
    kind: Kind,
    n: usize,
    k: usize,
    blobs: Vec<Blob>,
}

/// The header.
#[derive(Debug, Serialize, Deserialize)]
struct Header {
    key: CacheKey,
    entries: Vec<Entry>,
}

impl Header {
    /// Bytes of the blobs from the data offset: the last one's end, padded to a blob boundary.
    fn data_len(&self) -> u64 {
        let ends = self.entries.iter().flat_map(|e| &e.blobs);
        let end = ends.map(|b| b.offset.saturating_add(b.len)).max();
        end.unwrap_or(0).next_multiple_of(BLOB_ALIGN)
    }
}

/// A packed weight as a linear layer holds it.
#[derive(Debug, Clone)]
pub(crate) enum CachedWeight {
    /// bf16 panels.
    Bf16(Arc<PackedBf16>),
    /// int8 panels.
    Int8(Arc<PackedI8>),
}

/// What became of the cache on one load (the log line and `/info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Weights mapped from this file.
    Mapped { path: PathBuf, weights: usize },
    /// The file written by this load (`refused`: why an existing one was not used).
    Written {
        path: PathBuf,
        weights: usize,
        bytes: u64,
        refused: Option<String>,
    },
    /// The cache could not be used (this load packed its weights as without it).
    Failed { path: PathBuf, reason: String },
    /// Nothing was packed (small layers, another device): no file.
    Empty,
}

impl std::fmt::Display for CacheOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CacheOutcome::Mapped { path, weights } => {
                write!(f, "{weights} packed weights mapped from {}", path.display())
            }
            CacheOutcome::Written {
                path,
                weights,
                bytes,
                refused,
            } => {
                write!(
                    f,
                    "{weights} packed weights written to {} ({:.2} GB)",
                    path.display(),
                    *bytes as f64 / 1e9
                )?;
                if let Some(why) = refused {
                    write!(f, " in place of a file refused: {why}")?;
                }
                Ok(())
            }
            CacheOutcome::Failed { path, reason } => {
                write!(
                    f,
                    "packed-weight cache {} not used: {reason}",
                    path.display()
                )
            }
            CacheOutcome::Empty => f.write_str("no packed weights to cache"),
        }
    }
}

/// A cache file a load reads from.
struct Mapped {
    map: Arc<memmap2::Mmap>,
    data: usize,
    entries: HashMap<String, Entry>,
    /// Weights served from it, and the names asked for that it lacked.
    taken: usize,
    missed: Vec<String>,
}

/// One load's use of the cache: reading a valid file, or recording what it packs.
pub struct CacheLoad {
    path: PathBuf,
    key: CacheKey,
    mode: Mode,
}

enum Mode {
    Reading(Mapped),
    Writing {
        recorded: Vec<(String, CachedWeight)>,
        refused: Option<String>,
    },
}

thread_local! {
    /// The cache of the load running on this thread (see [`loading_with`]).
    static LOAD: RefCell<Option<CacheLoad>> = const { RefCell::new(None) };
}

impl CacheLoad {
    /// The cache in `dir` for `key`: its file mapped when it passes every check, else (none,
    /// or refused: logged and removed) a load that records its weights for
    /// [`CacheLoad::finish`] to write.
    pub fn begin(dir: &Path, key: CacheKey) -> CacheLoad {
        remove_stale_temporaries(dir);
        let path = dir.join(key.file_name());
        let refused = match open(&path, &key) {
            Ok(Some(mapped)) => {
                return CacheLoad {
                    path,
                    key,
                    mode: Mode::Reading(mapped),
                }
            }
            Ok(None) => None,
            Err(why) => {
                tracing::warn!(
                    "packed-weight cache {} refused ({why}): removed, rebuilt by this start",
                    path.display()
                );
                let _ = std::fs::remove_file(&path);
                Some(why)
            }
        };
        CacheLoad {
            path,
            key,
            mode: Mode::Writing {
                recorded: Vec::new(),
                refused,
            },
        }
    }

    /// After the load: what was mapped, or the file still to write from what this load
    /// packed (see [`PendingWrite`]).
    pub fn finish(self) -> Finished {
        match self.mode {
            Mode::Reading(m) => {
                if !m.missed.is_empty() {
                    tracing::warn!(
                        "packed-weight cache {}: {} weights not in it were packed at load ({})",
                        self.path.display(),
                        m.missed.len(),
                        m.missed.join(", ")
                    );
                }
                Finished::Done(CacheOutcome::Mapped {
                    path: self.path,
                    weights: m.taken,
                })
            }
            Mode::Writing { recorded, refused } => {
                if recorded.is_empty() {
                    return Finished::Done(CacheOutcome::Empty);
                }
                Finished::ToWrite(PendingWrite {
                    path: self.path,
                    key: self.key,
                    recorded,
                    refused,
                })
            }
        }
    }
}

/// What a load's cache came to.
pub enum Finished {
    /// Nothing left to do.
    Done(CacheOutcome),
    /// A file to write.
    ToWrite(PendingWrite),
}

/// A cache file still to be written from the weights a load packed (held, not copied): a
/// server writes it on a thread of its own once it is ready, so a first start is not slower
/// for it (the file is GBs; the disk's write speed, not the copy, sets its time).
pub struct PendingWrite {
    path: PathBuf,
    key: CacheKey,
    recorded: Vec<(String, CachedWeight)>,
    refused: Option<String>,
}

impl PendingWrite {
    /// The file it writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many weights it holds.
    pub fn weights(&self) -> usize {
        self.recorded.len()
    }

    /// Writes the file through a temporary one renamed when complete, on this thread only
    /// (not the compute pool). A write that fails leaves no file behind and is reported, not
    /// raised: the weights are loaded either way.
    pub fn write(self) -> CacheOutcome {
        match write(&self.path, &self.key, &self.recorded) {
            Ok(bytes) => CacheOutcome::Written {
                path: self.path,
                weights: self.recorded.len(),
                bytes,
                refused: self.refused,
            },
            Err(e) => CacheOutcome::Failed {
                path: self.path,
                reason: format!("writing it failed: {e}"),
            },
        }
    }
}

/// Removes temporary files an interrupted writer left (an hour old: no live writer takes
/// that long).
fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age.as_secs() > 3600);
        if name.starts_with('.') && name.contains(".gr00tw.tmp-") && old {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Runs `f` (a model load on this thread) with `cache` serving and recording its linear
/// layers' packed weights (`None`: as without a cache); returns `f`'s result and the cache,
/// ready for [`CacheLoad::finish`]. The thread's previous state is restored, also on panic.
pub fn loading_with<R>(cache: Option<CacheLoad>, f: impl FnOnce() -> R) -> (R, Option<CacheLoad>) {
    struct Restore(Option<CacheLoad>);
    impl Drop for Restore {
        fn drop(&mut self) {
            LOAD.with(|l| *l.borrow_mut() = self.0.take());
        }
    }
    let restore = Restore(LOAD.with(|l| l.replace(cache)));
    let r = f();
    let cache = LOAD.with(|l| l.borrow_mut().take());
    drop(restore);
    (r, cache)
}

/// The weight `name` (`[n, k]`) from this thread's cache file, if it holds one of that shape.
pub(crate) fn cached(name: &str, n: usize, k: usize) -> Option<CachedWeight> {
    LOAD.with(|l| {
        let mut load = l.borrow_mut();
        let Some(CacheLoad {
            mode: Mode::Reading(m),
            ..
        }) = load.as_mut()
        else {
            return None;
        };
        let weight = m.entries.get(name).and_then(|e| weight_of(m, e, n, k));
        match weight {
            Some(_) => m.taken += 1,
            None => m.missed.push(name.to_string()),
        }
        weight
    })
}

/// Records a weight this thread's load packed, for the file it will write.
pub(crate) fn record(name: &str, weight: CachedWeight) {
    LOAD.with(|l| {
        if let Some(CacheLoad {
            mode: Mode::Writing { recorded, .. },
            ..
        }) = l.borrow_mut().as_mut()
        {
            recorded.push((name.to_string(), weight));
        }
    })
}

/// The weight of entry `e` if it is `[n, k]` and its blobs fit it.
fn weight_of(m: &Mapped, e: &Entry, n: usize, k: usize) -> Option<CachedWeight> {
    if (e.n, e.k) != (n, k) {
        return None;
    }
    let blob = |i: usize| -> Option<(usize, usize)> {
        let b = e.blobs.get(i)?;
        Some((
            m.data + usize::try_from(b.offset).ok()?,
            usize::try_from(b.len).ok()?,
        ))
    };
    match e.kind {
        Kind::Bf16Panels | Kind::Bf16VnniPairs => {
            let layout = if e.kind == Kind::Bf16Panels {
                PackLayout::Panels
            } else {
                PackLayout::VnniPairs
            };
            let (at, len) = blob(0)?;
            let elements = Elements::mapped(m.map.clone(), at, len / 2)?;
            PackedBf16::from_elements(n, k, layout, elements)
                .map(|p| CachedWeight::Bf16(Arc::new(p)))
        }
        Kind::Int8 => {
            let (at, len) = blob(0)?;
            let elements = Elements::mapped(m.map.clone(), at, len)?;
            // The little-endian 4-byte values of blob i.
            let words = |i: usize| -> Option<_> {
                let (at, len) = blob(i)?;
                let bytes = m.map.get(at..at.checked_add(len)?)?;
                Some(bytes.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]))
            };
            let scales = words(1)?.map(f32::from_le_bytes).collect();
            let sums = words(2)?.map(i32::from_le_bytes).collect();
            PackedI8::from_parts(n, k, elements, scales, sums)
                .map(|p| CachedWeight::Int8(Arc::new(p)))
        }
    }
}

/// The file at `path` mapped, when it exists and passes every check (`Ok(None)`: no file;
/// `Err`: why it is refused).
fn open(path: &Path, key: &CacheKey) -> Result<Option<Mapped>, String> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot open it: {e}")),
    };
    // SAFETY: the cache's files are only ever replaced by rename, never written in place, so
    // the mapped bytes do not change under the load; every byte is checked before use.
    let map = unsafe { memmap2::MmapOptions::new().populate().map(&file) }
        .map_err(|e| format!("cannot map it: {e}"))?;
    let len = map.len() as u64;
    let word = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(map.get(at..at + 8)?.try_into().ok()?))
    };
    if map.get(..8) != Some(MAGIC.as_slice()) {
        return Err("not a packed-weight cache file".into());
    }
    let (Some(header_len), Some(data)) = (word(8), word(16)) else {
        return Err("truncated".into());
    };
    let header_end = 24u64.saturating_add(header_len);
    if header_end.saturating_add(32) > data.min(len) || !data.is_multiple_of(DATA_ALIGN) {
        return Err("truncated or malformed preamble".into());
    }
    let (h0, h1) = (24usize, header_end as usize);
    let header_bytes = &map[h0..h1];
    if Sha256::digest(header_bytes).as_slice() != &map[h1..h1 + 32] {
        return Err("the header's hash does not match".into());
    }
    let header: Header =
        serde_json::from_slice(header_bytes).map_err(|e| format!("unreadable header: {e}"))?;
    if &header.key != key {
        return Err("written for another checkpoint, precision or binary".into());
    }
    let want = data.saturating_add(header.data_len());
    if want != len {
        return Err(format!("{len} bytes, its header says {want}"));
    }
    let blobs: Vec<&Blob> = header.entries.iter().flat_map(|e| &e.blobs).collect();
    for b in &blobs {
        let fits = b.offset.is_multiple_of(BLOB_ALIGN)
            && data
                .checked_add(b.offset)
                .and_then(|s| s.checked_add(b.len))
                .is_some_and(|end| end <= len);
        if !fits {
            return Err("a blob lies outside the file".into());
        }
    }
    let data = data as usize;
    let bad = blobs.par_iter().find_any(|b| {
        let at = data + b.offset as usize;
        format!("{:016x}", checksum(&map[at..at + b.len as usize])) != b.checksum
    });
    if bad.is_some() {
        return Err("a weight's checksum does not match (the file is corrupt)".into());
    }
    let entries = header
        .entries
        .into_iter()
        .map(|e| (e.name.clone(), e))
        .collect();
    Ok(Some(Mapped {
        map: Arc::new(map),
        data,
        entries,
        taken: 0,
        missed: Vec::new(),
    }))
}

/// One weight's kind, shape and blobs as bytes.
type Parts<'a> = (Kind, usize, usize, Vec<std::borrow::Cow<'a, [u8]>>);

/// Writes `weights` to `path` through a temporary file renamed when complete; returns the
/// file's length.
fn write(path: &Path, key: &CacheKey, weights: &[(String, CachedWeight)]) -> std::io::Result<u64> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    // Each weight's blobs, as bytes (the int8 scales and sums converted to little-endian).
    let parts: Vec<Parts<'_>> = weights
        .iter()
        .map(|(_, w)| match w {
            CachedWeight::Bf16(p) => {
                let kind = match p.layout() {
                    PackLayout::Panels => Kind::Bf16Panels,
                    PackLayout::VnniPairs => Kind::Bf16VnniPairs,
                };
                let (n, k) = p.dims();
                (kind, n, k, vec![p.elements().as_bytes().into()])
            }
            CachedWeight::Int8(p) => {
                let (n, k) = p.dims();
                let scales: Vec<u8> = p.scales().iter().flat_map(|s| s.to_le_bytes()).collect();
                let sums: Vec<u8> = p
                    .offset_sums()
                    .iter()
                    .flat_map(|s| s.to_le_bytes())
                    .collect();
                let blobs = vec![p.elements().as_bytes().into(), scales.into(), sums.into()];
                (Kind::Int8, n, k, blobs)
            }
        })
        .collect();
    let mut offset = 0u64;
    let mut entries = Vec::with_capacity(weights.len());
    for ((name, _), (kind, n, k, blobs)) in weights.iter().zip(&parts) {
        let blobs = blobs
            .iter()
            .map(|b| {
                let blob = Blob {
                    offset,
                    len: b.len() as u64,
                    checksum: format!("{:016x}", checksum_on_this_thread(b)),
                };
                offset = (offset + b.len() as u64).next_multiple_of(BLOB_ALIGN);
                blob
            })
            .collect();
        entries.push(Entry {
            name: name.clone(),
            kind: *kind,
            n: *n,
            k: *k,
            blobs,
        });
    }
    let header = Header {
        key: key.clone(),
        entries,
    };
    let header_bytes = serde_json::to_vec(&header).map_err(std::io::Error::other)?;
    let data = (24 + header_bytes.len() as u64 + 32).next_multiple_of(DATA_ALIGN);
    // Unique per writer: two loads writing at once each rename a whole file of their own.
    static WRITERS: AtomicUsize = AtomicUsize::new(0);
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{}",
        path.file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        std::process::id(),
        WRITERS.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| -> std::io::Result<()> {
        let mut f = std::io::BufWriter::with_capacity(4 << 20, std::fs::File::create(&tmp)?);
        f.write_all(MAGIC)?;
        f.write_all(&(header_bytes.len() as u64).to_le_bytes())?;
        f.write_all(&data.to_le_bytes())?;
        f.write_all(&header_bytes)?;
        f.write_all(&Sha256::digest(&header_bytes))?;
        let mut at = 24 + header_bytes.len() as u64 + 32;
        let zeros = [0u8; DATA_ALIGN as usize];
        f.write_all(&zeros[..(data - at) as usize])?;
        at = 0;
        for (entry, (_, _, _, blobs)) in header.entries.iter().zip(&parts) {
            for (b, bytes) in entry.blobs.iter().zip(blobs) {
                f.write_all(&zeros[..(b.offset - at) as usize])?;
                f.write_all(bytes)?;
                at = b.offset + bytes.len() as u64;
            }
        }
        f.write_all(&zeros[..(offset - at) as usize])?;
        // No fsync: a file cut short by a crash fails its checks and is rebuilt.
        f.flush()?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map(|()| data + offset)
}

/// A 64-bit checksum of `bytes`: four lanes of xor-multiply-rotate over 8-byte words per
/// 1 MiB part (parts in parallel), the parts' sums combined in order. Each step is a
/// bijection of the word, so any change to one word changes the sum.
fn checksum(bytes: &[u8]) -> u64 {
    let parts: Vec<u64> = bytes.par_chunks(PART).map(part_sum).collect();
    parts.iter().fold(bytes.len() as u64, |h, &p| mix(h, p))
}

/// [`checksum`] without the thread pool (the same sum).
fn checksum_on_this_thread(bytes: &[u8]) -> u64 {
    bytes
        .chunks(PART)
        .map(part_sum)
        .fold(bytes.len() as u64, mix)
}

const MUL: u64 = 0x9e37_79b9_7f4a_7c15;

fn mix(h: u64, w: u64) -> u64 {
    (h ^ w).wrapping_mul(MUL).rotate_left(29)
}

fn part_sum(part: &[u8]) -> u64 {
    let mut lanes = [
        0x243f_6a88_85a3_08d3u64,
        0x1319_8a2e_0370_7344,
        0xa409_3822_299f_31d0,
        0x082e_fa98_ec4e_6c89,
    ];
    let mut chunks = part.chunks_exact(32);
    for c in &mut chunks {
        for (l, w) in lanes.iter_mut().zip(c.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            *l = mix(*l, u64::from_le_bytes(b));
        }
    }
    let mut tail = [0u8; 32];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    for (l, w) in lanes.iter_mut().zip(tail.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        *l = mix(*l, u64::from_le_bytes(b));
    }
    lanes.iter().fold(part.len() as u64, |h, &l| mix(h, l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flipped_bit_anywhere_changes_the_checksum() {
        let bytes: Vec<u8> = (0..3 * PART + 77).map(|i| (i * 31 % 251) as u8).collect();
        let sum = checksum(&bytes);
        for at in [0, 5, 31, 32, PART - 1, PART, 2 * PART + 9, bytes.len() - 1] {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x10;
            assert_ne!(checksum(&flipped), sum, "flip at {at}");
        }
        // A shorter run of the same bytes is another sum too.
        assert_ne!(checksum(&bytes[..bytes.len() - 1]), sum);
    }

    #[test]
    fn both_checksums_agree() {
        let bytes: Vec<u8> = (0..2 * PART + 5).map(|i| (i * 7 % 253) as u8).collect();
        assert_eq!(checksum(&bytes), checksum_on_this_thread(&bytes));
    }

    #[test]
    fn keys_differ_by_every_setting() {
        let a = CacheKey::new("d", &[], &[("precision", "f32".into())]);
        let b = CacheKey::new("d", &[], &[("precision", "bf16".into())]);
        let c = CacheKey::new("e", &[], &[("precision", "f32".into())]);
        assert_ne!(a.file_name(), b.file_name());
        assert_ne!(a.file_name(), c.file_name());
        assert_eq!(
            a.file_name(),
            CacheKey::new("d", &[], &[("precision", "f32".into())]).file_name()
        );
    }
}
