//! The GR00T eval transform (albumentations 1.4.18, `use_albumentations: true`):
//! `SmallestMaxSize(s, INTER_AREA)` → `FractionalCenterCrop(f)` → `SmallestMaxSize(s, INTER_AREA)`.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::area::resize_area;
use super::{Frame, ImageError};
use gr00t_model::checkpoint::ProcessorConfig;

/// Parameters of the eval transform.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvalTransform {
    /// `SmallestMaxSize` target for the shorter side (`shortest_image_edge`).
    pub shortest_edge: usize,
    /// Centre-crop fraction (`crop_fraction`).
    pub crop_fraction: f64,
}

/// The three outputs of the eval transform for one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AugStages {
    /// After the first `SmallestMaxSize` (`proc.aug_step1_resize_u8`).
    pub resized: Frame,
    /// After the centre crop (`proc.aug_step2_centercrop_u8`).
    pub cropped: Frame,
    /// After the second `SmallestMaxSize` (`proc.images_after_aug_u8`).
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

impl EvalTransform {
    /// Validated parameters.
    pub fn new(shortest_edge: usize, crop_fraction: f64) -> Result<EvalTransform, ImageError> {
        if shortest_edge == 0 {
            return Err(ImageError::Config(
                "shortest_image_edge must be positive".into(),
            ));
        }
        if !(crop_fraction > 0.0 && crop_fraction <= 1.0) {
            return Err(ImageError::Config(format!(
                "crop_fraction must be in (0, 1], got {crop_fraction}"
            )));
        }
        Ok(EvalTransform {
            shortest_edge,
            crop_fraction,
        })
    }

    /// From `processor_config.json`: `shortest_image_edge` (else `image_target_size[0]`) and
    /// `crop_fraction` (else `image_crop_size[0] / image_target_size[0]`), as upstream does.
    pub fn from_processor_config(cfg: &ProcessorConfig) -> Result<EvalTransform, ImageError> {
        if !cfg.use_albumentations {
            return Err(ImageError::Config(
                "use_albumentations = false (torchvision transforms) is not supported".into(),
            ));
        }
        if cfg.letter_box_transform {
            return Err(ImageError::Config(
                "letter_box_transform is not supported".into(),
            ));
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
            ImageError::Config("neither shortest_image_edge nor image_target_size is set".into())
        })?;
        let fraction = match (cfg.crop_fraction, crop0, target0) {
            (Some(f), _, _) => f,
            (None, Some(c), Some(t)) if t > 0 => c as f64 / t as f64,
            _ => {
                return Err(ImageError::Config(
                    "neither crop_fraction nor image_crop_size/image_target_size is set".into(),
                ))
            }
        };
        EvalTransform::new(edge, fraction)
    }

    /// Output (width, height) of `SmallestMaxSize`: `round(dim · s/min(w, h))` with Python's
    /// round-half-to-even, unchanged when the scale is exactly 1.
    pub fn smallest_max_size_dims(&self, width: usize, height: usize) -> (usize, usize) {
        let scale = self.shortest_edge as f64 / width.min(height) as f64;
        if scale == 1.0 {
            return (width, height);
        }
        let w = (width as f64 * scale).round_ties_even() as usize;
        let h = (height as f64 * scale).round_ties_even() as usize;
        (w, h)
    }

    /// The centre crop of a `width`×`height` image: size `int(dim·f)`, offset `(dim − c) // 2`.
    pub fn crop_rect(&self, width: usize, height: usize) -> CropRect {
        let cw = (width as f64 * self.crop_fraction) as usize;
        let ch = (height as f64 * self.crop_fraction) as usize;
        CropRect {
            x0: (width - cw.min(width)) / 2,
            y0: (height - ch.min(height)) / 2,
            width: cw,
            height: ch,
        }
    }

    /// `SmallestMaxSize` applied to a frame (a copy when the scale is 1).
    pub fn smallest_max_size(&self, frame: &Frame) -> Result<Frame, ImageError> {
        let (w, h) = self.smallest_max_size_dims(frame.width, frame.height);
        if (w, h) == (frame.width, frame.height) {
            frame.check()?;
            return Ok(frame.clone());
        }
        resize_area(frame, w, h)
    }

    /// Runs the whole eval transform on one frame, keeping every stage.
    pub fn apply(&self, frame: &Frame) -> Result<AugStages, ImageError> {
        let resized = self.smallest_max_size(frame)?;
        let r = self.crop_rect(resized.width, resized.height);
        let cropped = resized.crop(r.x0, r.y0, r.width, r.height)?;
        let output = self.smallest_max_size(&cropped)?;
        Ok(AugStages {
            resized,
            cropped,
            output,
        })
    }
}
