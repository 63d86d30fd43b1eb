//! Why a request got no actions: one type for every door, each door mapping it once to its
//! wire (HTTP status and JSON, ZMQ `{"error"}`, websocket text frame).

use gr00t_embodiment::error::EmbodimentError;
use gr00t_embodiment::observation::RequestError;
use std::fmt;
use std::sync::Arc;

/// The client's field at fault and what is wrong with it.
pub type FieldError = RequestError;

/// The one refusal of an embodiment this server does not serve, on every door (`embodiment:
/// "X" is not served here; served: [...]`): `name` as the client sent it (cut to a prefix by
/// the door where it may be long) and the tags served.
pub fn not_served<'a>(name: &str, served: impl IntoIterator<Item = &'a str>) -> RequestError {
    let served: Vec<&str> = served.into_iter().collect();
    RequestError::new(
        "embodiment",
        format!("{name:?} is not served here; served: {served:?}"),
    )
}

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
    /// The session is locked to the token an earlier request of it carried, and this request
    /// (or reset) did not carry it (HTTP 409).
    #[error("session locked: {0}")]
    SessionLocked(String),
    /// The inference thread is gone (HTTP 500).
    #[error("internal error: the inference worker has stopped")]
    Stopped,
    /// Something failed inside the server (HTTP 500).
    #[error("internal error: {0}")]
    Internal(#[source] InternalError),
}

impl InferError {
    /// A failure inside the server that has no cause but itself.
    pub fn internal(message: impl Into<String>) -> InferError {
        InferError::Internal(InternalError::new(message))
    }

    /// A failure inside the server, caused by `cause` (kept as the error's source).
    pub fn caused_by(cause: impl std::error::Error + Send + Sync + 'static) -> InferError {
        InferError::Internal(InternalError::caused_by(cause))
    }
}

impl From<EmbodimentError> for InferError {
    /// The client's refusal stays the client's; the rest is the server's, its cause kept.
    fn from(e: EmbodimentError) -> InferError {
        match e {
            EmbodimentError::Invalid(e) => InferError::Invalid(e),
            other => InferError::caused_by(other),
        }
    }
}

/// What failed inside the server, and the error that caused it where there is one. Shared, so
/// every waiter of a request gets the same error; its text is the cause's where there is one.
#[derive(Debug, Clone)]
pub struct InternalError {
    message: String,
    cause: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl InternalError {
    /// A failure described by `message` alone.
    pub fn new(message: impl Into<String>) -> InternalError {
        InternalError {
            message: message.into(),
            cause: None,
        }
    }

    /// A failure caused by `cause`, worded as it words itself.
    pub fn caused_by(cause: impl std::error::Error + Send + Sync + 'static) -> InternalError {
        InternalError {
            message: cause.to_string(),
            cause: Some(Arc::new(cause)),
        }
    }

    /// The failure's text.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for InternalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for InternalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_deref()
            .map(|c| c as &(dyn std::error::Error + 'static))
    }
}

impl PartialEq for InternalError {
    /// Equal when they say the same (a cause is compared by its text).
    fn eq(&self, other: &InternalError) -> bool {
        self.message == other.message
    }
}

/// Why the engine could not be loaded: the checkpoint, the tokenizer, the served layouts, the
/// device or the weights, each with its cause.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// `--embodiment` names no tag of the checkpoint, or it has none this server can serve.
    #[error("{0}")]
    Embodiments(String),
    /// A served layout does not load from the checkpoint's files.
    #[error(transparent)]
    Embodiment(#[from] EmbodimentError),
    /// The tokenizer does not load.
    #[error(transparent)]
    Tokenizer(#[from] gr00t_embodiment::prompt::PromptError),
    /// The checkpoint's image transform is unusable.
    #[error(transparent)]
    Images(#[from] gr00t_embodiment::image::ImageError),
    /// `--device` cannot be opened.
    #[error(transparent)]
    Device(#[from] crate::device::DeviceError),
    /// The checkpoint or its weights do not load.
    #[error(transparent)]
    Model(#[from] gr00t_model::Error),
    /// `--int8-smooth` without this checkpoint's calibration, or with an unreadable one.
    #[error("{0}")]
    Calibration(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    #[test]
    fn an_internal_error_keeps_its_cause_and_its_text() {
        let cause = EmbodimentError::Tokenizer("vocab missing".into());
        let e = InferError::from(cause.clone());
        assert_eq!(
            e.to_string(),
            "internal error: tokenizer failure: vocab missing"
        );
        // InferError → InternalError → the embodiment error, found by type.
        let inner = e.source().and_then(Error::source).expect("the cause");
        assert_eq!(inner.downcast_ref::<EmbodimentError>(), Some(&cause));
        // Cloned to every waiter, the cause is shared.
        let copy = e.clone();
        assert_eq!(copy, e);
        assert!(InferError::internal("no cause")
            .source()
            .unwrap()
            .source()
            .is_none());
    }

    #[test]
    fn one_text_for_an_embodiment_not_served() {
        let e = super::not_served("REAL_G1", ["oxe_droid", "unitree_g1"]);
        assert_eq!(e.field, "embodiment");
        assert_eq!(
            e.to_string(),
            "embodiment: \"REAL_G1\" is not served here; served: [\"oxe_droid\", \"unitree_g1\"]"
        );
    }
}
