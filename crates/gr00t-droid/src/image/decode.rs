//! base64 → PNG/JPEG bytes → RGB8 [`Frame`], converting other pixel layouts the way PIL's
//! `Image.convert("RGB")` does (the reference decodes with PIL).
//!
//! JPEG goes through the `image` crate's decoder, which is not libjpeg-turbo: decoded JPEG pixels
//! may differ from PIL's by a few LSB. PNG decoding is exact.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::{Frame, ImageError};
use base64::engine::general_purpose::STANDARD_PAD_INDIFFERENT;
use base64::Engine;
use image::{DynamicImage, ImageFormat, ImageReader, Limits};
use std::io::Cursor;

/// Largest accepted width or height, checked on the declared size before any pixel is decoded.
pub const MAX_DECODE_DIMENSION: u32 = 8192;

/// Largest decoder allocation (a 8192×8192 RGBA16 image needs 512 MiB; RGB8 192 MiB).
const MAX_DECODE_ALLOC: u64 = 512 * 1024 * 1024;

/// Decodes a base64 string (standard alphabet, padding optional) holding PNG or JPEG bytes.
pub fn decode_base64_frame(s: &str) -> Result<Frame, ImageError> {
    let bytes = STANDARD_PAD_INDIFFERENT
        .decode(s.trim())
        .map_err(|e| ImageError::Base64(e.to_string()))?;
    decode_frame_bytes(&bytes)
}

/// Decodes PNG or JPEG bytes into an RGB8 frame.
pub fn decode_frame_bytes(bytes: &[u8]) -> Result<Frame, ImageError> {
    let format = match image::guess_format(bytes) {
        Ok(f @ (ImageFormat::Png | ImageFormat::Jpeg)) => f,
        Ok(other) => {
            return Err(ImageError::UnsupportedFormat(format!(
                "{other:?} (only PNG and JPEG are accepted)"
            )))
        }
        Err(_) => {
            return Err(ImageError::UnsupportedFormat(
                "not a PNG or JPEG file".to_string(),
            ))
        }
    };
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_DECODE_DIMENSION);
    limits.max_image_height = Some(MAX_DECODE_DIMENSION);
    limits.max_alloc = Some(MAX_DECODE_ALLOC);
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    reader.limits(limits);
    let img = reader.decode().map_err(|e| match e {
        image::ImageError::Limits(l) => ImageError::TooLarge(format!(
            "{l} (at most {MAX_DECODE_DIMENSION}x{MAX_DECODE_DIMENSION} pixels)"
        )),
        image::ImageError::Unsupported(u) => ImageError::Decode(u.to_string()),
        other => ImageError::Decode(other.to_string()),
    })?;
    to_frame(img)
}

/// PIL `convert("RGB")`: alpha dropped (no compositing), gray replicated, 16-bit RGB/LA reduced to
/// the high byte (PIL's `;16B` unpackers), 16-bit gray (`I;16`) clipped at 255.
fn to_frame(img: DynamicImage) -> Result<Frame, ImageError> {
    let (width, height) = (img.width() as usize, img.height() as usize);
    let data: Vec<u8> = match img {
        DynamicImage::ImageRgb8(b) => b.into_raw(),
        DynamicImage::ImageRgba8(b) => b
            .into_raw()
            .chunks_exact(4)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect(),
        DynamicImage::ImageLuma8(b) => b.into_raw().iter().flat_map(|&v| [v, v, v]).collect(),
        DynamicImage::ImageLumaA8(b) => b
            .into_raw()
            .chunks_exact(2)
            .flat_map(|p| [p[0], p[0], p[0]])
            .collect(),
        DynamicImage::ImageRgb16(b) => b.into_raw().iter().map(|&v| (v >> 8) as u8).collect(),
        DynamicImage::ImageRgba16(b) => b
            .into_raw()
            .chunks_exact(4)
            .flat_map(|p| [(p[0] >> 8) as u8, (p[1] >> 8) as u8, (p[2] >> 8) as u8])
            .collect(),
        DynamicImage::ImageLuma16(b) => b
            .into_raw()
            .iter()
            .flat_map(|&v| {
                let g = v.min(255) as u8;
                [g, g, g]
            })
            .collect(),
        DynamicImage::ImageLumaA16(b) => b
            .into_raw()
            .chunks_exact(2)
            .flat_map(|p| {
                let g = (p[0] >> 8) as u8;
                [g, g, g]
            })
            .collect(),
        other => other.to_rgb8().into_raw(),
    };
    Frame::new(width, height, data)
}
