//! Errors of the model crate.

use crate::rtc::RtcError;
use std::path::{Path, PathBuf};

/// Everything that can go wrong while loading or running the model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A checkpoint file is missing or malformed; names the file and what is wrong.
    #[error("{}: {problem}", path.display())]
    File { path: PathBuf, problem: String },
    /// A file could not be opened, read or written; names the file and the operation.
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A JSON file (or the JSON written to one) is malformed; names the file and the key path.
    #[error("{}: malformed JSON{}: {source}", path.display(), at.as_ref().map(|a| format!(" at {a}")).unwrap_or_default())]
    Json {
        path: PathBuf,
        at: Option<String>,
        #[source]
        source: serde_json::Error,
    },
    /// A file's header (a safetensors header or one of its entries) does not read or parse.
    #[error("{}: {problem}: {source}", path.display())]
    Header {
        path: PathBuf,
        problem: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A config built into the binary does not parse (a build defect, named).
    #[error("the built-in {what} is malformed: {source}")]
    BuiltIn {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// A tensor computation failed.
    #[error("tensor error: {0}")]
    Candle(#[from] candle_core::Error),
    /// The inputs handed to the network are inconsistent.
    #[error("invalid model input: {0}")]
    Input(String),
    /// The RTC options are invalid; names the request field.
    #[error("invalid RTC options: {0}")]
    Rtc(#[from] RtcError),
}

impl Error {
    /// A problem with one file.
    pub fn file(path: impl AsRef<Path>, problem: impl Into<String>) -> Error {
        Error::File {
            path: path.as_ref().to_path_buf(),
            problem: problem.into(),
        }
    }

    /// `path`'s header is `problem` (truncated, malformed), because of `source`.
    pub fn header(
        path: impl AsRef<Path>,
        problem: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Error {
        Error::Header {
            path: path.as_ref().to_path_buf(),
            problem: problem.into(),
            source: source.into(),
        }
    }

    /// The `action` (open, read, write, create) on one file failed.
    pub fn io(path: impl AsRef<Path>, action: &'static str, source: std::io::Error) -> Error {
        Error::Io {
            path: path.as_ref().to_path_buf(),
            action,
            source,
        }
    }
}

/// A setting (flag or environment variable) that names none of its choices.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingError {
    /// `--cpu-kernel` names no CPU kernel.
    #[error("{0:?} is not a CPU kernel; use auto, amx, avx512bf16, avx512vnni, avx512, avxvnni, avx2 or library")]
    CpuKernel(String),
    /// `--dit-backend` names no denoise backend.
    #[error("{0:?} is not a denoise backend; use reference or fused")]
    DenoiseBackend(String),
    /// `--int8` names no stage.
    #[error("{0:?} is not a stage; use a list of vision, llm, adapter, dit, or all or none")]
    Int8Stage(String),
}

/// Result with the model crate's error.
pub type Result<T> = std::result::Result<T, Error>;
