//! The GR00T N1.7 eval transform, both of upstream's paths (`image_augmentations.py`):
//! - albumentations 1.4.18 (`use_albumentations: true`): `SmallestMaxSize(s, INTER_AREA)` →
//!   `FractionalCenterCrop(f)` → `SmallestMaxSize(s, INTER_AREA)`;
//! - torchvision 0.24 v2 (`use_albumentations: false`): `Resize(target)` → `CenterCrop(crop)` →
//!   `Resize(target)`, bilinear with antialias on uint8;
//!
//! each optionally after a letterbox (`letter_box_transform`: `LetterBoxPad` /
//! `LetterBoxTransform`, both centre-pad to a square with black, the odd pixel bottom/right).
//! Every stage stays uint8, as upstream's do.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::area::resize_area;
use super::bicubic::resize_bilinear_aa;
use super::{Frame, ImageError, Padding, MAX_DECODE_DIMENSION};
use gr00t_model::checkpoint::ProcessorConfig;

/// Largest pixel count of any stage: that of the largest decodable frame.
const MAX_STAGE_PIXELS: usize = (MAX_DECODE_DIMENSION as usize) * (MAX_DECODE_DIMENSION as usize);

/// A torchvision `Resize` size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TvSize {
    /// `[h, w]`: exactly this size.
    Exact {
        /// Output width.
        width: usize,
        /// Output height.
        height: usize,
    },
    /// `[s]`: shorter side `s`, longer side `int(s · long / short)`.
    Shorter(usize),
}

impl TvSize {
    /// torchvision's `_compute_resized_output_size` for a `width`×`height` input.
    pub fn output(&self, width: usize, height: usize) -> (usize, usize) {
        match *self {
            TvSize::Exact { width, height } => (width, height),
            TvSize::Shorter(s) => {
                let (short, long) = (width.min(height), width.max(height));
                // Python `int(s * long / short)`: exact integer product, f64 quotient, truncated.
                let new_long = (s.saturating_mul(long) as f64 / short.max(1) as f64) as usize;
                if width <= height {
                    (s, new_long)
                } else {
                    (new_long, s)
                }
            }
        }
    }
}

/// Which of upstream's two eval chains runs, with its parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ResizeKind {
    /// albumentations: `SmallestMaxSize` → `FractionalCenterCrop` → `SmallestMaxSize`.
    Albumentations {
        /// `SmallestMaxSize` target for the shorter side (`shortest_image_edge`).
        shortest_edge: usize,
        /// Centre-crop fraction (`crop_fraction`).
        crop_fraction: f64,
    },
    /// torchvision: `Resize(target)` → `CenterCrop(crop)` → `Resize(target)`.
    Torchvision {
        /// `image_target_size`.
        target: TvSize,
        /// `image_crop_size` width.
        crop_width: usize,
        /// `image_crop_size` height.
        crop_height: usize,
    },
}

/// Parameters of the eval transform.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvalTransform {
    /// Pad to a square first (`letter_box_transform`).
    pub letter_box: bool,
    /// The resize/crop chain.
    pub kind: ResizeKind,
}

/// The outputs of the eval transform for one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AugStages {
    /// After the letterbox, when it is on and the frame is not square.
    pub letterboxed: Option<Frame>,
    /// After the first resize (`proc.aug_step1_resize_u8`).
    pub resized: Frame,
    /// After the centre crop (`proc.aug_step2_centercrop_u8`).
    pub cropped: Frame,
    /// After the second resize (`proc.images_after_aug_u8`).
    pub output: Frame,
}

/// A centre-crop rectangle: offset and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CropRect {
    /// Left column.
    pub x0: usize,
    /// Top row.
    pub y0: usize,
    /// Crop width.
    pub width: usize,
    /// Crop height.
    pub height: usize,
}

/// Sizes (width, height) of every stage of the eval transform for one input size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AugGeometry {
    /// The letterbox's borders (none when off or square).
    pub letterbox: Padding,
    /// After the letterbox.
    pub letterboxed: (usize, usize),
    /// After the first resize.
    pub resized: (usize, usize),
    /// Zero borders torchvision's `CenterCrop` adds when the crop exceeds the image.
    pub crop_pad: Padding,
    /// The crop, in the (padded) resized image.
    pub crop: CropRect,
    /// After the second resize.
    pub output: (usize, usize),
}

/// Where a config error comes from.
fn config_err(key: &str, msg: impl std::fmt::Display) -> ImageError {
    ImageError::Config(format!(
        "processor_config.json: processor_kwargs.{key} {msg}"
    ))
}

/// A torchvision size list: `[h, w]` or `[s]`, positive.
fn tv_size_list(key: &str, v: Option<&Vec<usize>>) -> Result<Vec<usize>, ImageError> {
    let v = v.ok_or_else(|| {
        config_err(
            key,
            "is null or missing; the torchvision eval transform (use_albumentations: false) \
             needs it",
        )
    })?;
    if !(1..=2).contains(&v.len()) || v.contains(&0) {
        return Err(config_err(
            key,
            format!("is {v:?}; torchvision wants [height, width] or [size], positive"),
        ));
    }
    Ok(v.clone())
}

impl EvalTransform {
    /// Validated albumentations parameters.
    pub fn albumentations(
        shortest_edge: usize,
        crop_fraction: f64,
        letter_box: bool,
    ) -> Result<EvalTransform, ImageError> {
        if shortest_edge == 0 {
            return Err(config_err("shortest_image_edge", "must be positive"));
        }
        // FractionalCenterCrop's own check.
        if !(crop_fraction > 0.0 && crop_fraction <= 1.0) {
            return Err(config_err(
                "crop_fraction",
                format!("must be in (0, 1], got {crop_fraction}"),
            ));
        }
        Ok(EvalTransform {
            letter_box,
            kind: ResizeKind::Albumentations {
                shortest_edge,
                crop_fraction,
            },
        })
    }

    /// From `processor_config.json`, as `Gr00tN1d7Processor.__init__` builds it. albumentations:
    /// `shortest_image_edge` (null: `image_target_size[0]`) and `crop_fraction` (null:
    /// `image_crop_size[0] / image_target_size[0]`). torchvision: `image_target_size` and
    /// `image_crop_size`, each `[h, w]` or `[s]`. Refuses what upstream cannot build or run.
    pub fn from_processor_config(cfg: &ProcessorConfig) -> Result<EvalTransform, ImageError> {
        let letter_box = cfg.letter_box_transform;
        if !cfg.use_albumentations {
            let target = tv_size_list("image_target_size", cfg.image_target_size.as_ref())?;
            let crop = tv_size_list("image_crop_size", cfg.image_crop_size.as_ref())?;
            let target = match target[..] {
                [h, w] => TvSize::Exact {
                    width: w,
                    height: h,
                },
                _ => TvSize::Shorter(target[0]),
            };
            // CenterCrop: `[s]` is an s×s crop.
            let (crop_height, crop_width) = (crop[0], *crop.last().unwrap_or(&crop[0]));
            return Ok(EvalTransform {
                letter_box,
                kind: ResizeKind::Torchvision {
                    target,
                    crop_width,
                    crop_height,
                },
            });
        }
        let target0 = cfg
            .image_target_size
            .as_ref()
            .and_then(|v| v.first().copied());
        let crop0 = cfg
            .image_crop_size
            .as_ref()
            .and_then(|v| v.first().copied());
        let edge = cfg.shortest_image_edge.or(target0).ok_or_else(|| {
            config_err(
                "shortest_image_edge",
                "is null and image_target_size is not set (upstream raises)",
            )
        })?;
        let fraction =
            match (cfg.crop_fraction, crop0, target0) {
                (Some(f), _, _) => f,
                (None, Some(c), Some(t)) if t > 0 => c as f64 / t as f64,
                _ => return Err(config_err(
                    "crop_fraction",
                    "is null and image_crop_size/image_target_size are not set (upstream raises)",
                )),
            };
        EvalTransform::albumentations(edge, fraction, letter_box)
    }

    /// The letterbox of a `width`×`height` frame: centre-pad to a square, `top = (max − h)//2`.
    pub fn letterbox(&self, width: usize, height: usize) -> Padding {
        if !self.letter_box || width == height {
            return Padding::default();
        }
        let side = width.max(height);
        let (pw, ph) = (side - width, side - height);
        Padding {
            left: pw / 2,
            top: ph / 2,
            right: pw - pw / 2,
            bottom: ph - ph / 2,
        }
    }

    /// Output (width, height) of one resize step on a `width`×`height` image.
    pub fn resize_dims(&self, width: usize, height: usize) -> (usize, usize) {
        match self.kind {
            ResizeKind::Albumentations { shortest_edge, .. } => {
                smallest_max_size_dims(shortest_edge, width, height)
            }
            ResizeKind::Torchvision { target, .. } => target.output(width, height),
        }
    }

    /// The centre crop of a `width`×`height` image: the zero borders added first (torchvision,
    /// crop larger than the image) and the crop rectangle in the padded image.
    pub fn crop_rect(&self, width: usize, height: usize) -> (Padding, CropRect) {
        match self.kind {
            ResizeKind::Albumentations { crop_fraction, .. } => {
                // FractionalCenterCrop: `max(1, int(dim·f))`, offset `(dim − c) // 2`.
                let cw = ((width as f64 * crop_fraction) as usize).clamp(1, width.max(1));
                let ch = ((height as f64 * crop_fraction) as usize).clamp(1, height.max(1));
                let rect = CropRect {
                    x0: (width - cw) / 2,
                    y0: (height - ch) / 2,
                    width: cw,
                    height: ch,
                };
                (Padding::default(), rect)
            }
            ResizeKind::Torchvision {
                crop_width: cw,
                crop_height: ch,
                ..
            } => {
                // `_center_crop_compute_padding`, then `_center_crop_compute_crop_anchor`:
                // `int(round((dim − c) / 2.0))`, Python's round half to even.
                let pad = Padding {
                    left: cw.saturating_sub(width) / 2,
                    top: ch.saturating_sub(height) / 2,
                    right: cw.saturating_sub(width).div_ceil(2),
                    bottom: ch.saturating_sub(height).div_ceil(2),
                };
                let (pw, ph) = pad.apply((width, height));
                let anchor = |dim: usize, c: usize| ((dim - c) as f64 / 2.0).round_ties_even();
                let rect = CropRect {
                    x0: anchor(pw, cw) as usize,
                    y0: anchor(ph, ch) as usize,
                    width: cw,
                    height: ch,
                };
                (pad, rect)
            }
        }
    }

    /// Stage sizes for a `width`×`height` input.
    pub fn geometry(&self, width: usize, height: usize) -> Result<AugGeometry, ImageError> {
        if width == 0 || height == 0 {
            return Err(ImageError::Geometry(format!(
                "empty frame ({width}x{height})"
            )));
        }
        let letterbox = self.letterbox(width, height);
        let letterboxed = letterbox.apply((width, height));
        let resized = self.resize_dims(letterboxed.0, letterboxed.1);
        if resized.0 == 0 || resized.1 == 0 {
            return Err(ImageError::Geometry(format!(
                "a {width}x{height} frame resizes to {}x{}",
                resized.0, resized.1
            )));
        }
        let (crop_pad, crop) = self.crop_rect(resized.0, resized.1);
        let output = self.resize_dims(crop.width, crop.height);
        // No stage may outgrow the largest decodable frame (a 8192x1 frame would otherwise
        // resize to 2097152x256 before anything else refuses it).
        let max = MAX_STAGE_PIXELS;
        for (w, h) in [letterboxed, resized, crop_pad.apply(resized), output] {
            if w.checked_mul(h).is_none_or(|n| n > max) {
                return Err(ImageError::Geometry(format!(
                    "a {width}x{height} frame would reach {w}x{h} in the eval transform \
                     (more than {max} pixels)"
                )));
            }
        }
        if output.0 == 0 || output.1 == 0 {
            return Err(ImageError::Geometry(format!(
                "a {width}x{height} frame ends at {}x{}",
                output.0, output.1
            )));
        }
        Ok(AugGeometry {
            letterbox,
            letterboxed,
            resized,
            crop_pad,
            crop,
            output,
        })
    }

    /// One resize step (a copy when the size does not change, as both libraries skip it).
    fn resize(&self, frame: &Frame) -> Result<Frame, ImageError> {
        let (w, h) = self.resize_dims(frame.width, frame.height);
        if (w, h) == (frame.width, frame.height) {
            frame.check()?;
            return Ok(frame.clone());
        }
        match self.kind {
            ResizeKind::Albumentations { .. } => resize_area(frame, w, h),
            ResizeKind::Torchvision { .. } => resize_bilinear_aa(frame, w, h),
        }
    }

    /// Runs the whole eval transform on one frame, keeping every stage.
    pub fn apply(&self, frame: &Frame) -> Result<AugStages, ImageError> {
        frame.check()?;
        let g = self.geometry(frame.width, frame.height)?;
        let letterboxed = if g.letterbox == Padding::default() {
            None
        } else {
            Some(frame.pad(g.letterbox)?)
        };
        let resized = self.resize(letterboxed.as_ref().unwrap_or(frame))?;
        let r = g.crop;
        let cropped = if g.crop_pad == Padding::default() {
            resized.crop(r.x0, r.y0, r.width, r.height)?
        } else {
            resized
                .pad(g.crop_pad)?
                .crop(r.x0, r.y0, r.width, r.height)?
        };
        let output = self.resize(&cropped)?;
        Ok(AugStages {
            letterboxed,
            resized,
            cropped,
            output,
        })
    }
}

/// albumentations `SmallestMaxSize(s)` output (width, height): `round(dim · s/min(w, h))` with
/// Python's round-half-to-even, unchanged when the scale is exactly 1.
pub fn smallest_max_size_dims(s: usize, width: usize, height: usize) -> (usize, usize) {
    let scale = s as f64 / width.min(height).max(1) as f64;
    if scale == 1.0 {
        return (width, height);
    }
    let w = (width as f64 * scale).round_ties_even() as usize;
    let h = (height as f64 * scale).round_ties_even() as usize;
    (w, h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tv(target: TvSize, cw: usize, ch: usize, letter_box: bool) -> EvalTransform {
        EvalTransform {
            letter_box,
            kind: ResizeKind::Torchvision {
                target,
                crop_width: cw,
                crop_height: ch,
            },
        }
    }

    #[test]
    fn letterbox_puts_the_odd_pixel_bottom_right() {
        let t = EvalTransform::albumentations(256, 0.95, true).unwrap();
        let p = t.letterbox(320, 179);
        assert_eq!((p.left, p.top, p.right, p.bottom), (0, 70, 0, 71));
        let p = t.letterbox(179, 320);
        assert_eq!((p.left, p.top, p.right, p.bottom), (70, 0, 71, 0));
        assert_eq!(t.letterbox(64, 64), Padding::default());
    }

    #[test]
    fn released_geometries() {
        // 320x180 with the letterbox: 320x320 → 256x256 → crop 243x243 at (6, 6) → 256x256.
        let t = EvalTransform::albumentations(256, 0.95, true).unwrap();
        let g = t.geometry(320, 180).unwrap();
        assert_eq!(g.letterboxed, (320, 320));
        assert_eq!(g.resized, (256, 256));
        assert_eq!((g.crop.x0, g.crop.y0, g.crop.width), (6, 6, 243));
        assert_eq!(g.output, (256, 256));
        // torchvision [256, 256] / [230, 230]: any input → 256x256 → crop at (13, 13) → 256x256.
        let exact = TvSize::Exact {
            width: 256,
            height: 256,
        };
        let g = tv(exact, 230, 230, false).geometry(320, 180).unwrap();
        assert_eq!(g.resized, (256, 256));
        assert_eq!((g.crop.x0, g.crop.y0), (13, 13));
        assert_eq!(g.output, (256, 256));
    }

    #[test]
    fn torchvision_crop_anchor_rounds_half_to_even_and_pads_large_crops() {
        let exact = TvSize::Exact {
            width: 56,
            height: 35,
        };
        // (56 − 47)/2 = 4.5 → 4; (35 − 31)/2 = 2.
        let (pad, r) = tv(exact, 47, 31, false).crop_rect(56, 35);
        assert_eq!((pad, r.x0, r.y0), (Padding::default(), 4, 2));
        // (57 − 46)/2 = 5.5 → 6.
        assert_eq!(tv(exact, 46, 31, false).crop_rect(57, 35).1.x0, 6);
        // A 35x33 crop of 30x30: borders (2, 1, 3, 2), then the crop at the origin.
        let (pad, r) = tv(exact, 35, 33, false).crop_rect(30, 30);
        assert_eq!((pad.left, pad.top, pad.right, pad.bottom), (2, 1, 3, 2));
        assert_eq!((r.x0, r.y0), (0, 0));
    }

    #[test]
    fn shorter_side_sizes_truncate_like_python() {
        assert_eq!(TvSize::Shorter(33).output(97, 61), (52, 33));
        assert_eq!(TvSize::Shorter(33).output(45, 80), (33, 58));
        assert_eq!(TvSize::Shorter(33).output(64, 64), (33, 33));
    }

    #[test]
    fn stages_larger_than_the_largest_decodable_frame_are_refused() {
        let t = tv(TvSize::Shorter(256), 256, 256, false);
        assert!(matches!(t.geometry(8192, 1), Err(ImageError::Geometry(_))));
        let t = EvalTransform::albumentations(256, 0.95, false).unwrap();
        assert!(matches!(t.geometry(1, 8192), Err(ImageError::Geometry(_))));
        assert!(t.geometry(8192, 4608).is_ok());
    }

    #[test]
    fn fractional_crop_is_at_least_one_pixel() {
        let t = EvalTransform::albumentations(1, 0.5, false).unwrap();
        let g = t.geometry(1, 1).unwrap();
        assert_eq!((g.crop.width, g.crop.height), (1, 1));
    }
}
