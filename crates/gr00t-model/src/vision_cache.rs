//! A bounded LRU of per-image vision-tower outputs. The tower attends within each image only, so
//! an image's merged rows and DeepStack rows depend on nothing but its own pixel rows and grid;
//! in a control loop the t−15 frames of a request are the t frames of an earlier one and need
//! not be encoded again. Entries are keyed by SHA-256 over the grid and the exact f32 bits of
//! the image's `pixel_values` rows, so a hit returns exactly what the tower computed.

use candle_core::Tensor;
use sha2::{Digest, Sha256};

/// Images kept when nothing else is configured.
pub const DEFAULT_VISION_CACHE_IMAGES: usize = 16;

/// Identity of one image: SHA-256 of its grid and pixel rows.
pub type ImageKey = [u8; 32];

/// The tower's outputs for one image.
#[derive(Debug, Clone)]
pub struct ImageFeatures {
    /// Merged rows `[t·h·w/4, out_hidden]`.
    pub embeds: Tensor,
    /// DeepStack merger rows of this image, one `[t·h·w/4, out_hidden]` per DeepStack layer.
    pub deepstack: Vec<Tensor>,
}

/// Counters of a [`VisionCache`] since it was made or cleared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VisionCacheStats {
    /// Images answered from the cache.
    pub hits: u64,
    /// Images looked up and not found (the tower ran on them).
    pub misses: u64,
    /// Entries dropped to make room.
    pub evictions: u64,
    /// Images held now.
    pub entries: usize,
    /// Most images held; 0 disables the cache.
    pub capacity: usize,
}

/// Least-recently-used map from [`ImageKey`] to [`ImageFeatures`], at most `capacity` entries.
#[derive(Debug)]
pub struct VisionCache {
    /// Most recently used last.
    entries: Vec<(ImageKey, ImageFeatures)>,
    stats: VisionCacheStats,
}

impl VisionCache {
    /// An empty cache holding at most `capacity` images (0 = disabled).
    pub fn new(capacity: usize) -> VisionCache {
        VisionCache {
            entries: Vec::new(),
            stats: VisionCacheStats {
                capacity,
                ..VisionCacheStats::default()
            },
        }
    }

    /// Most images held.
    pub fn capacity(&self) -> usize {
        self.stats.capacity
    }

    /// Whether lookups can ever hit.
    pub fn is_enabled(&self) -> bool {
        self.stats.capacity > 0
    }

    /// Changes the bound, evicting the least recently used entries beyond it.
    pub fn set_capacity(&mut self, capacity: usize) {
        self.stats.capacity = capacity;
        self.shrink_to_capacity();
    }

    /// The features of `key`, marking them most recently used; counts a hit or a miss. A
    /// disabled cache answers `None` without counting.
    pub fn get(&mut self, key: &ImageKey) -> Option<ImageFeatures> {
        if !self.is_enabled() {
            return None;
        }
        match self.entries.iter().position(|(k, _)| k == key) {
            Some(i) => {
                let entry = self.entries.remove(i);
                let features = entry.1.clone();
                self.entries.push(entry);
                self.stats.hits += 1;
                Some(features)
            }
            None => {
                self.stats.misses += 1;
                None
            }
        }
    }

    /// Stores `features` under `key` as the most recently used entry (no-op when disabled).
    pub fn insert(&mut self, key: ImageKey, features: ImageFeatures) {
        if !self.is_enabled() {
            return;
        }
        self.entries.retain(|(k, _)| *k != key);
        self.entries.push((key, features));
        self.shrink_to_capacity();
    }

    /// Whether `key` is held (does not count or reorder).
    pub fn contains(&self, key: &ImageKey) -> bool {
        self.entries.iter().any(|(k, _)| k == key)
    }

    /// Drops every entry and resets the counters (the capacity stays).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.stats = VisionCacheStats {
            capacity: self.stats.capacity,
            ..VisionCacheStats::default()
        };
    }

    /// Counters and occupancy.
    pub fn stats(&self) -> VisionCacheStats {
        VisionCacheStats {
            entries: self.entries.len(),
            ..self.stats
        }
    }

    fn shrink_to_capacity(&mut self) {
        let excess = self.entries.len().saturating_sub(self.stats.capacity);
        if excess > 0 {
            self.entries.drain(..excess);
            self.stats.evictions += excess as u64;
        }
    }
}

/// The key of one image: SHA-256 over its `[t, h, w]` grid and the bit patterns of its
/// `pixel_values` rows (so −0.0 and 0.0, or two NaN payloads, are different images).
pub fn image_key(grid: [usize; 3], rows: &[f32]) -> ImageKey {
    let mut h = Sha256::new();
    for g in grid {
        h.update((g as u64).to_le_bytes());
    }
    // Bytes in blocks: one `update` per value would dominate the hashing time.
    let mut buf = Vec::with_capacity(4 * 4096);
    for chunk in rows.chunks(4096) {
        buf.clear();
        buf.extend(chunk.iter().flat_map(|v| v.to_bits().to_le_bytes()));
        h.update(&buf);
    }
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn features(v: f32) -> ImageFeatures {
        let t = Tensor::new(&[v], &Device::Cpu).unwrap();
        ImageFeatures {
            embeds: t.clone(),
            deepstack: vec![t],
        }
    }

    fn value(f: &ImageFeatures) -> f32 {
        f.embeds.to_vec1::<f32>().unwrap()[0]
    }

    #[test]
    fn keys_depend_on_grid_and_every_bit() {
        let rows = vec![1.0f32, 2.0, 3.0, 4.0];
        let k = image_key([1, 2, 2], &rows);
        assert_eq!(k, image_key([1, 2, 2], &rows.clone()));
        assert_ne!(k, image_key([1, 4, 1], &rows));
        let (mut pos_zero, mut neg_zero) = (rows.clone(), rows.clone());
        pos_zero[0] = 0.0;
        neg_zero[0] = -0.0;
        assert_ne!(
            image_key([1, 2, 2], &neg_zero),
            image_key([1, 2, 2], &pos_zero)
        );
    }

    #[test]
    fn lru_evicts_the_least_recently_used() {
        let mut c = VisionCache::new(2);
        let (a, b, d) = ([1u8; 32], [2u8; 32], [3u8; 32]);
        c.insert(a, features(1.0));
        c.insert(b, features(2.0));
        assert_eq!(c.get(&a).map(|f| value(&f)), Some(1.0)); // a is now the most recent
        c.insert(d, features(3.0)); // evicts b
        assert!(c.contains(&a) && c.contains(&d) && !c.contains(&b));
        assert!(c.get(&b).is_none());
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.evictions, s.entries), (1, 1, 1, 2));
        c.set_capacity(1); // keeps d, the most recent
        assert!(c.contains(&d) && !c.contains(&a));
        c.clear();
        assert_eq!(c.stats().entries, 0);
        assert_eq!(c.capacity(), 1);
    }

    #[test]
    fn capacity_zero_holds_and_counts_nothing() {
        let mut c = VisionCache::new(0);
        c.insert([1u8; 32], features(1.0));
        assert!(c.get(&[1u8; 32]).is_none());
        assert_eq!(c.stats(), VisionCacheStats::default());
    }
}
