//! Why a request got no actions: one type for every door, each door mapping it once to its
//! wire (HTTP status and JSON, ZMQ `{"error"}`, websocket text frame).

use crate::device::DeviceSpec;
use crate::session::MAX_SESSION_ID_BYTES;
use gr00t_embodiment::error::EmbodimentError;
use gr00t_embodiment::observation::RequestError;
use gr00t_model::SettingError;

/// The client's field at fault and what is wrong with it.
pub type FieldError = RequestError;

/// Why a request was not answered with actions.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InferError {
    /// The client's request is invalid (HTTP 400), naming the field.
    #[error(transparent)]
    Invalid(#[from] FieldError),
    /// The queue is full (HTTP 503); a retry after `retry_after_s` is likely to be queued.
    #[error(
        "server busy: {capacity} requests already wait for the model; retry in {retry_after_s} s"
    )]
    Busy {
        /// Requests that may wait behind the one in flight.
        capacity: usize,
        /// Seconds until a retry is likely to be queued.
        retry_after_s: u64,
    },
    /// A newer observation of the same session replaced this one while it waited (HTTP 409).
    #[error("superseded by a newer observation")]
    Superseded,
    /// The request echoed a session token, and the server no longer holds that session, or
    /// holds another one of its name (HTTP 409); the text says which.
    #[error("session restarted: {0}")]
    SessionRestarted(String),
    /// The inference thread is gone (HTTP 500).
    #[error("internal error: the inference worker has stopped")]
    Stopped,
    /// Something failed inside the server (HTTP 500).
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<EmbodimentError> for InferError {
    /// The client's refusal stays the client's; the rest is the server's.
    fn from(e: EmbodimentError) -> InferError {
        match e {
            EmbodimentError::Invalid(e) => InferError::Invalid(e),
            other => InferError::Internal(other.to_string()),
        }
    }
}

/// Why `--device` (or `--cpu-kernel`) cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The name is no device.
    #[error("{0:?} is not a device; use cpu, cuda or cuda:N")]
    Unknown(String),
    /// A GPU was asked of a build without CUDA.
    #[error(
        "--device {0}: this gr00t was built without CUDA support; build it with \
         scripts/build-cuda.sh (cargo build --release -p gr00t --features cuda)"
    )]
    NoCuda(DeviceSpec),
    /// The GPU did not open (no such GPU, no driver); the cause without candle's backtrace.
    #[error("--device {spec}: cannot open the GPU: {cause}")]
    Gpu {
        /// The device asked for.
        spec: DeviceSpec,
        /// candle's reason.
        #[source]
        cause: candle_core::Error,
    },
    /// `--cpu-kernel` names no kernel.
    #[error(transparent)]
    Kernel(#[from] SettingError),
}

/// Why a client's session id (or session token) is refused; the door names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionIdError {
    /// Empty or longer than [`MAX_SESSION_ID_BYTES`].
    #[error("expected 1 to {max} bytes, got {0}", max = MAX_SESSION_ID_BYTES)]
    Length(usize),
    /// A byte outside printable ASCII (or a space).
    #[error("expected printable ASCII without spaces")]
    NotPrintable,
}

impl From<SessionIdError> for String {
    /// The text, for the doors that put it in a field's message.
    fn from(e: SessionIdError) -> String {
        e.to_string()
    }
}
