//! Why the embodiment layer could not build a layout or serve an observation: the client's
//! field at fault ([`RequestError`]), or the checkpoint's or the server's own failure, kept
//! apart so that no door mistakes one for the other.

use crate::actions::ActionError;
use crate::image::ImageError;
pub use crate::observation::RequestError;
use crate::state::StateError;

/// The embodiment layer's error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EmbodimentError {
    /// The client's observation is invalid; the field is named.
    #[error(transparent)]
    Invalid(#[from] RequestError),
    /// The checkpoint's files do not describe this layout (the file and the key named).
    #[error("{0}")]
    Checkpoint(String),
    /// The checkpoint's image transform is unusable.
    #[error(transparent)]
    Images(#[from] ImageError),
    /// The checkpoint's state statistics are unusable.
    #[error(transparent)]
    State(#[from] StateError),
    /// The model's chunk could not be decoded into actions.
    #[error(transparent)]
    Actions(#[from] ActionError),
    /// The tokenizer failed: the server's fault, not the instruction's.
    #[error("tokenizer failure: {0}")]
    Tokenizer(String),
}

impl EmbodimentError {
    /// The client's refusal, when the client is at fault.
    pub fn invalid(&self) -> Option<&RequestError> {
        match self {
            EmbodimentError::Invalid(e) => Some(e),
            _ => None,
        }
    }
}
