//! The error type of the image pipeline.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use std::fmt;

/// Why an image could not be decoded or processed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageError {
    /// The string is not valid base64.
    Base64(String),
    /// The bytes are not a PNG or JPEG file.
    UnsupportedFormat(String),
    /// The declared dimensions exceed the decoder limits.
    TooLarge(String),
    /// The file is a PNG/JPEG but cannot be decoded (truncated, corrupt, unsupported variant).
    Decode(String),
    /// The frame's size or aspect ratio cannot go through the pipeline.
    Geometry(String),
    /// The processor configuration is unusable.
    Config(String),
}

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageError::Base64(m) => write!(f, "invalid base64: {m}"),
            ImageError::UnsupportedFormat(m) => write!(f, "unsupported image format: {m}"),
            ImageError::TooLarge(m) => write!(f, "image too large: {m}"),
            ImageError::Decode(m) => write!(f, "cannot decode image: {m}"),
            ImageError::Geometry(m) => write!(f, "bad image geometry: {m}"),
            ImageError::Config(m) => write!(f, "bad image processor config: {m}"),
        }
    }
}

impl std::error::Error for ImageError {}
