//! The Qwen2-VL fast image processor (transformers 4.57, `Qwen2VLImageProcessorFast`) as Qwen3-VL
//! uses it: smart_resize → uint8 antialiased bicubic → `(x − mean')/std'` in f32 → temporal
//! duplication → patch rows in merge-block order (qwen3_vl.md §2).
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::bicubic::resize_bicubic_aa;
use super::{Frame, ImageError};
use gr00t_model::config::ImageProcessorConfig;

/// Largest long/short side ratio smart_resize accepts.
const MAX_ASPECT: f64 = 200.0;

/// `smart_resize`: (height, width) rounded to multiples of `factor` with the pixel count kept in
/// `[min_pixels, max_pixels]`; Python float arithmetic and round-half-to-even.
pub fn smart_resize(
    height: usize,
    width: usize,
    factor: usize,
    min_pixels: usize,
    max_pixels: usize,
) -> Result<(usize, usize), ImageError> {
    if height == 0 || width == 0 || factor == 0 {
        return Err(ImageError::Geometry(format!(
            "smart_resize of {height}x{width} (factor {factor})"
        )));
    }
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    if h.max(w) / h.min(w) > MAX_ASPECT {
        return Err(ImageError::Geometry(format!(
            "absolute aspect ratio must be smaller than {MAX_ASPECT}, got {}",
            h.max(w) / h.min(w)
        )));
    }
    let mut h_bar = ((h / f).round_ties_even() as usize).saturating_mul(factor);
    let mut w_bar = ((w / f).round_ties_even() as usize).saturating_mul(factor);
    let pixels = h * w;
    if h_bar.saturating_mul(w_bar) > max_pixels {
        let beta = (pixels / max_pixels as f64).sqrt();
        h_bar = factor.max(((h / beta / f).floor() as usize).saturating_mul(factor));
        w_bar = factor.max(((w / beta / f).floor() as usize).saturating_mul(factor));
    } else if h_bar.saturating_mul(w_bar) < min_pixels {
        let beta = (min_pixels as f64 / pixels).sqrt();
        h_bar = ((h * beta / f).ceil() as usize).saturating_mul(factor);
        w_bar = ((w * beta / f).ceil() as usize).saturating_mul(factor);
    }
    Ok((h_bar, w_bar))
}

/// Qwen image-processor settings, validated, with the fused normalisation constants.
#[derive(Debug, Clone, PartialEq)]
pub struct QwenImageProcessor {
    /// Spatial patch size (16).
    pub patch_size: usize,
    /// Frames per temporal patch (2): a still image is repeated this many times.
    pub temporal_patch_size: usize,
    /// Spatial merge size (2).
    pub merge_size: usize,
    /// smart_resize lower pixel bound.
    pub min_pixels: usize,
    /// smart_resize upper pixel bound.
    pub max_pixels: usize,
    /// Per-channel mean on the 0..255 scale (`f32(mean)·255`).
    pub mean: [f32; 3],
    /// Per-channel std on the 0..255 scale (`f32(std)·255`).
    pub std: [f32; 3],
}

impl QwenImageProcessor {
    /// From `preprocessor_config.json`. The fast processor fuses rescale (1/255) and normalise:
    /// `mean' = f32(mean) · f32(1/rescale_factor)` (a float32 tensor times a Python float), so
    /// with the standard rescale factor 1/255 that is `f32(mean) · 255`.
    pub fn from_config(cfg: &ImageProcessorConfig) -> Result<QwenImageProcessor, ImageError> {
        if cfg.patch_size == 0 || cfg.temporal_patch_size == 0 || cfg.merge_size == 0 {
            return Err(ImageError::Config(
                "patch_size, temporal_patch_size and merge_size must be positive".into(),
            ));
        }
        let three = |v: &[f64], name: &str| -> Result<[f32; 3], ImageError> {
            match v {
                [a, b, c] => Ok([*a as f32 * 255.0, *b as f32 * 255.0, *c as f32 * 255.0]),
                _ => Err(ImageError::Config(format!(
                    "{name} must have 3 values, got {}",
                    v.len()
                ))),
            }
        };
        let mean = three(&cfg.image_mean, "image_mean")?;
        let std = three(&cfg.image_std, "image_std")?;
        if std.iter().any(|&s| s == 0.0 || !s.is_finite()) || mean.iter().any(|m| !m.is_finite()) {
            return Err(ImageError::Config(
                "image_mean/image_std must be finite, std ≠ 0".into(),
            ));
        }
        Ok(QwenImageProcessor {
            patch_size: cfg.patch_size,
            temporal_patch_size: cfg.temporal_patch_size,
            merge_size: cfg.merge_size,
            min_pixels: cfg.size.shortest_edge,
            max_pixels: cfg.size.longest_edge,
            mean,
            std,
        })
    }

    /// smart_resize factor = patch_size · merge_size (32).
    pub fn factor(&self) -> usize {
        self.patch_size * self.merge_size
    }

    /// Width of one patch row: 3 · temporal · patch² (1536).
    pub fn patch_dim(&self) -> usize {
        3 * self.temporal_patch_size * self.patch_size * self.patch_size
    }

    /// Target (width, height) of a `width`×`height` image.
    pub fn target_size(&self, width: usize, height: usize) -> Result<(usize, usize), ImageError> {
        let (h, w) = smart_resize(
            height,
            width,
            self.factor(),
            self.min_pixels,
            self.max_pixels,
        )?;
        Ok((w, h))
    }

    /// `[t, h, w]` patch grid of an image already at its target size.
    pub fn grid_thw(&self, width: usize, height: usize) -> [usize; 3] {
        let p = self.patch_size.max(1);
        [1, height / p, width / p]
    }

    /// LLM tokens of one image (`grid_h · grid_w / merge²`).
    pub fn tokens(&self, grid: [usize; 3]) -> usize {
        grid[0] * grid[1] * grid[2] / (self.merge_size * self.merge_size).max(1)
    }

    /// Resizes to the smart_resize target (bicubic antialias, uint8); unchanged sizes are copied.
    pub fn resize(&self, frame: &Frame) -> Result<Frame, ImageError> {
        let (w, h) = self.target_size(frame.width, frame.height)?;
        resize_bicubic_aa(frame, w, h)
    }

    /// Per-channel `(v − mean')/std'` for every byte value, computed in f32 like torch.
    fn lut(&self) -> [[f32; 256]; 3] {
        let mut lut = [[0f32; 256]; 3];
        for (c, row) in lut.iter_mut().enumerate() {
            for (v, out) in row.iter_mut().enumerate() {
                *out = (v as f32 - self.mean[c]) / self.std[c];
            }
        }
        lut
    }

    /// Normalises a resized frame and appends its patch rows to `out` (row-major, `patch_dim`
    /// wide, merge-block order); returns its `[t, h, w]` grid.
    pub fn patchify_into(
        &self,
        frame: &Frame,
        out: &mut Vec<f32>,
    ) -> Result<[usize; 3], ImageError> {
        frame.check()?;
        let (p, m, t_len) = (self.patch_size, self.merge_size, self.temporal_patch_size);
        if p == 0 || m == 0 || t_len == 0 {
            return Err(ImageError::Config(
                "patch, merge and temporal sizes must be positive".into(),
            ));
        }
        if !frame.width.is_multiple_of(self.factor()) || !frame.height.is_multiple_of(self.factor())
        {
            return Err(ImageError::Geometry(format!(
                "{}x{} is not a multiple of {} (resize first)",
                frame.width,
                frame.height,
                self.factor()
            )));
        }
        let grid = self.grid_thw(frame.width, frame.height);
        let (gh, gw) = (grid[1], grid[2]);
        let lut = self.lut();
        out.reserve(gh * gw * self.patch_dim());
        let row = frame.width * 3;
        for bh in 0..gh / m {
            for bw in 0..gw / m {
                for r in 0..m {
                    for s in 0..m {
                        let (ph, pw) = (bh * m + r, bw * m + s);
                        for (c, lut_c) in lut.iter().enumerate() {
                            for _ in 0..t_len {
                                for dy in 0..p {
                                    let base = (ph * p + dy) * row + pw * p * 3 + c;
                                    out.extend(
                                        (0..p).map(|dx| lut_c[frame.data[base + dx * 3] as usize]),
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(grid)
    }
}
