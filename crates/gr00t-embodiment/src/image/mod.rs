//! Image pipeline: decode → eval transform (albumentations or torchvision, optional letterbox)
//! → Qwen smart resize → patch rows.
//!
//! Every stage reproduces the reference (OpenCV 4.11 `INTER_AREA`, torch uint8 antialiased
//! bicubic and bilinear, the Qwen2-VL fast image processor) bit for bit; see the module of each
//! stage.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod area;
pub mod augment;
pub mod bicubic;
pub mod decode;
mod error;
pub mod pipeline;
pub mod qwen;

pub use augment::{AugGeometry, AugStages, CropRect, EvalTransform, ResizeKind, TvSize};
pub use decode::{
    decode_base64, decode_base64_frame, decode_frame_bytes, EncodedFrame, MAX_DECODE_DIMENSION,
};
pub use error::ImageError;
pub use pipeline::{
    FrameGeometry, FrameStages, ImagePipeline, PreparedFrame, ProcessedImages, DROID_GRID_THW,
};
pub use qwen::{smart_resize, QwenImageProcessor};

/// Black borders around a frame, in pixels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Padding {
    /// Columns added on the left.
    pub left: usize,
    /// Rows added on top.
    pub top: usize,
    /// Columns added on the right.
    pub right: usize,
    /// Rows added at the bottom.
    pub bottom: usize,
}

impl Padding {
    /// The size of a `width`×`height` frame once padded.
    pub fn apply(&self, (width, height): (usize, usize)) -> (usize, usize) {
        (
            width.saturating_add(self.left).saturating_add(self.right),
            height.saturating_add(self.top).saturating_add(self.bottom),
        )
    }
}

/// An RGB8 frame, row-major HWC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// `height·width·3` bytes, RGB, row-major.
    pub data: Vec<u8>,
}

impl Frame {
    /// A frame from HWC RGB8 bytes; refuses empty frames and a wrong byte count.
    pub fn new(width: usize, height: usize, data: Vec<u8>) -> Result<Frame, ImageError> {
        let frame = Frame {
            width,
            height,
            data,
        };
        frame.check()?;
        Ok(frame)
    }

    /// Checks that the frame is non-empty and holds exactly `height·width·3` bytes.
    pub fn check(&self) -> Result<(), ImageError> {
        if self.width == 0 || self.height == 0 {
            return Err(ImageError::Geometry(format!(
                "empty frame ({}x{})",
                self.width, self.height
            )));
        }
        let expected = self
            .width
            .checked_mul(self.height)
            .and_then(|n| n.checked_mul(3));
        if expected != Some(self.data.len()) {
            return Err(ImageError::Geometry(format!(
                "frame {}x{} holds {} bytes, expected {}x{}x3",
                self.width,
                self.height,
                self.data.len(),
                self.height,
                self.width
            )));
        }
        Ok(())
    }

    /// The pixels as planar CHW (`3·height·width` bytes), the layout torch tensors use.
    pub fn to_chw(&self) -> Vec<u8> {
        // Derived from the bytes so an inconsistent frame cannot index out of bounds.
        let plane = self.data.len() / 3;
        let mut out = vec![0u8; self.data.len()];
        for (i, px) in self.data.chunks_exact(3).enumerate() {
            out[i] = px[0];
            out[plane + i] = px[1];
            out[2 * plane + i] = px[2];
        }
        out
    }

    /// The frame with `p`'s black (zero) borders added.
    pub fn pad(&self, p: Padding) -> Result<Frame, ImageError> {
        self.check()?;
        if p == Padding::default() {
            return Ok(self.clone());
        }
        let width = self
            .width
            .checked_add(p.left)
            .and_then(|w| w.checked_add(p.right));
        let height = self
            .height
            .checked_add(p.top)
            .and_then(|h| h.checked_add(p.bottom));
        let (Some(width), Some(height)) = (width, height) else {
            return Err(ImageError::Geometry(format!(
                "padding {p:?} overflows a {}x{} frame",
                self.width, self.height
            )));
        };
        let mut data = vec![0u8; width * height * 3];
        let row = self.width * 3;
        for (y, src) in self.data.chunks_exact(row).enumerate() {
            let start = ((y + p.top) * width + p.left) * 3;
            data[start..start + row].copy_from_slice(src);
        }
        Ok(Frame {
            width,
            height,
            data,
        })
    }

    /// A `width`×`height` sub-image starting at (`x0`, `y0`); errors when it does not fit.
    pub fn crop(
        &self,
        x0: usize,
        y0: usize,
        width: usize,
        height: usize,
    ) -> Result<Frame, ImageError> {
        self.check()?;
        let fits_x = x0.checked_add(width).is_some_and(|e| e <= self.width);
        let fits_y = y0.checked_add(height).is_some_and(|e| e <= self.height);
        if width == 0 || height == 0 || !fits_x || !fits_y {
            return Err(ImageError::Geometry(format!(
                "crop {width}x{height} at ({x0}, {y0}) does not fit a {}x{} frame",
                self.width, self.height
            )));
        }
        let mut data = Vec::with_capacity(width * height * 3);
        for y in y0..y0 + height {
            let start = (y * self.width + x0) * 3;
            data.extend_from_slice(&self.data[start..start + width * 3]);
        }
        Ok(Frame {
            width,
            height,
            data,
        })
    }
}
