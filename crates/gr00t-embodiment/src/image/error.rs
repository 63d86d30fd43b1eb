//! The error type of the image pipeline.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

/// Why an image could not be decoded or processed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// The string is not valid base64.
    #[error("invalid base64: {0}")]
    Base64(String),
    /// The bytes are not a PNG or JPEG file.
    #[error("unsupported image format: {0}")]
    UnsupportedFormat(String),
    /// The declared dimensions exceed the decoder limits.
    #[error("image too large: {0}")]
    TooLarge(String),
    /// The file is a PNG/JPEG but cannot be decoded (truncated, corrupt, unsupported variant).
    #[error("cannot decode image: {0}")]
    Decode(String),
    /// The frame's size or aspect ratio cannot go through the pipeline.
    #[error("bad image geometry: {0}")]
    Geometry(String),
    /// The processor configuration is unusable.
    #[error("bad image processor config: {0}")]
    Config(String),
}
