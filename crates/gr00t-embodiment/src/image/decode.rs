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
use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader, Limits};
use std::io::Cursor;
use std::sync::atomic::{AtomicU64, Ordering};

/// Largest accepted width or height, checked on the declared size before any pixel is decoded.
pub const MAX_DECODE_DIMENSION: u32 = 8192;

/// Largest decoder allocation (a 8192×8192 RGBA16 image needs 512 MiB; RGB8 192 MiB).
const MAX_DECODE_ALLOC: u64 = 512 * 1024 * 1024;

/// Pixels an image may declare unless `--max-image-pixels` says otherwise: 4096×4096 (a 4K
/// camera frame is 8.3 M; one such frame decodes to 48 MiB of RGB8).
pub const DEFAULT_MAX_PIXELS: u64 = 4096 * 4096;

/// The process's pixel cap (`--max-image-pixels`), checked on the header before decoding.
static MAX_PIXELS: AtomicU64 = AtomicU64::new(DEFAULT_MAX_PIXELS);

/// Sets the pixel cap every later header check applies (the server's start-up).
pub fn set_max_pixels(pixels: u64) {
    MAX_PIXELS.store(pixels.max(1), Ordering::Relaxed);
}

/// The pixel cap in force.
pub fn max_pixels() -> u64 {
    MAX_PIXELS.load(Ordering::Relaxed)
}

/// Decodes a base64 string (standard alphabet, padding optional) holding PNG or JPEG bytes.
pub fn decode_base64_frame(s: &str) -> Result<Frame, ImageError> {
    decode_frame_bytes(&decode_base64(s)?)
}

/// The bytes of a base64 string (standard alphabet, padding optional).
pub fn decode_base64(s: &str) -> Result<Vec<u8>, ImageError> {
    STANDARD_PAD_INDIFFERENT
        .decode(s.trim())
        .map_err(|e| ImageError::Base64(e.to_string()))
}

/// Decodes PNG or JPEG bytes into an RGB8 frame.
pub fn decode_frame_bytes(bytes: &[u8]) -> Result<Frame, ImageError> {
    EncodedFrame::read_header(bytes)?.decode()
}

/// A PNG or JPEG file whose header has been read and is within the decoder limits; its pixels
/// are not decoded yet, so a caller can refuse the declared size first.
#[derive(Debug, Clone, Copy)]
pub struct EncodedFrame<'a> {
    bytes: &'a [u8],
    format: ImageFormat,
    width: usize,
    height: usize,
}

impl<'a> EncodedFrame<'a> {
    /// Reads the format and the header's dimensions (no pixel data is read or allocated);
    /// refuses other formats and sizes over [`MAX_DECODE_DIMENSION`] or the allocation limit.
    pub fn read_header(bytes: &'a [u8]) -> Result<EncodedFrame<'a>, ImageError> {
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
        // `into_decoder` parses the header and checks the dimension limits; the allocation
        // limit is checked here on the declared size, as `decode` would before allocating.
        let decoder = reader(bytes, format).into_decoder().map_err(decode_error)?;
        let (width, height) = decoder.dimensions();
        let pixels = u64::from(width) * u64::from(height);
        if pixels > max_pixels() {
            return Err(ImageError::TooLarge(format!(
                "{width}x{height} is {pixels} pixels, more than {} (--max-image-pixels)",
                max_pixels()
            )));
        }
        if decoder.total_bytes() > MAX_DECODE_ALLOC {
            return Err(ImageError::TooLarge(format!(
                "{width}x{height} needs {} bytes, more than {MAX_DECODE_ALLOC}",
                decoder.total_bytes()
            )));
        }
        Ok(EncodedFrame {
            bytes,
            format,
            width: width as usize,
            height: height as usize,
        })
    }

    /// Width declared in the header.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Height declared in the header.
    pub fn height(&self) -> usize {
        self.height
    }

    /// Decodes the pixels into an RGB8 frame of the header's size.
    pub fn decode(&self) -> Result<Frame, ImageError> {
        let img = reader(self.bytes, self.format)
            .decode()
            .map_err(decode_error)?;
        // The checks made on the header must hold for the pixels too.
        if (img.width() as usize, img.height() as usize) != (self.width, self.height) {
            return Err(ImageError::Decode(format!(
                "the header says {}x{}, the pixels are {}x{}",
                self.width,
                self.height,
                img.width(),
                img.height()
            )));
        }
        to_frame(img)
    }
}

/// A reader of `bytes` with the decoder limits set.
fn reader(bytes: &[u8], format: ImageFormat) -> ImageReader<Cursor<&[u8]>> {
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_DECODE_DIMENSION);
    limits.max_image_height = Some(MAX_DECODE_DIMENSION);
    limits.max_alloc = Some(MAX_DECODE_ALLOC);
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    reader.limits(limits);
    reader
}

fn decode_error(e: image::ImageError) -> ImageError {
    match e {
        image::ImageError::Limits(l) => ImageError::TooLarge(format!(
            "{l} (at most {MAX_DECODE_DIMENSION}x{MAX_DECODE_DIMENSION} pixels)"
        )),
        image::ImageError::Unsupported(u) => ImageError::Decode(u.to_string()),
        other => ImageError::Decode(other.to_string()),
    }
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
