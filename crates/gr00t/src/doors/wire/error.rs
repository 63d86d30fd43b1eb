//! Why the wire layer could not read a message or write its reply: one type for the ZMQ and
//! websocket doors, each mapping it once to its wire (the ZMQ `{"error"}` dict, the websocket
//! error message). The texts are upstream's assertion texts, byte for byte.

use gr00t_core::error::FieldError;

/// Why a message was not read, or a reply not written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WireError {
    /// The client's bytes or message are wrong; `field` names the key at fault (empty: the
    /// bytes or the message as a whole). The text names it too, in upstream's words.
    #[error("{message}")]
    Invalid {
        /// The key at fault, e.g. `video.ego_view` or `options.seed`; empty when none is.
        field: String,
        /// The whole text the client sees.
        message: String,
    },
    /// An option the core refused (the RTC options), naming its field.
    #[error(transparent)]
    Field(#[from] FieldError),
    /// The server could not write its reply (the responses do not fit the schema).
    #[error("{0}")]
    Reply(String),
}

impl WireError {
    /// The client's `field` is wrong; `message` is the whole text.
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> WireError {
        WireError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The key at fault, as the client sent it (empty: none is; the bytes, the message as a
    /// whole, or the server's reply).
    pub fn field_at_fault(&self) -> &str {
        match self {
            WireError::Invalid { field, .. } => field,
            WireError::Field(e) => &e.field,
            WireError::Reply(_) => "",
        }
    }

    /// The bytes or the message as a whole are wrong (no one key is at fault).
    pub fn bytes(message: impl Into<String>) -> WireError {
        WireError::field("", message)
    }
}

impl From<String> for WireError {
    /// A text about the bytes or the message as a whole.
    fn from(message: String) -> WireError {
        WireError::bytes(message)
    }
}

impl From<&str> for WireError {
    /// A text about the bytes or the message as a whole.
    fn from(message: &str) -> WireError {
        WireError::bytes(message)
    }
}
