//! Errors of the model crate.

use crate::rtc::RtcError;
use std::fmt;
use std::path::{Path, PathBuf};

/// Everything that can go wrong while loading or running the model.
#[derive(Debug)]
pub enum Error {
    /// A checkpoint file is missing or malformed; names the file and what is wrong.
    File { path: PathBuf, problem: String },
    /// A tensor computation failed.
    Candle(candle_core::Error),
    /// The inputs handed to the network are inconsistent.
    Input(String),
    /// The RTC options are invalid; names the request field.
    Rtc(RtcError),
}

impl Error {
    /// A problem with one file.
    pub fn file(path: impl AsRef<Path>, problem: impl Into<String>) -> Error {
        Error::File {
            path: path.as_ref().to_path_buf(),
            problem: problem.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::File { path, problem } => write!(f, "{}: {problem}", path.display()),
            Error::Candle(e) => write!(f, "tensor error: {e}"),
            Error::Input(m) => write!(f, "invalid model input: {m}"),
            Error::Rtc(e) => write!(f, "invalid RTC options: {e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<candle_core::Error> for Error {
    fn from(e: candle_core::Error) -> Error {
        Error::Candle(e)
    }
}

impl From<RtcError> for Error {
    fn from(e: RtcError) -> Error {
        Error::Rtc(e)
    }
}

/// Result with the model crate's error.
pub type Result<T> = std::result::Result<T, Error>;
