//! Image pipeline: decode → albumentations eval transform → Qwen smart resize → patch rows.

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
