//! Why a LeRobot payload was refused, in either form.

use super::pickle::PickleError;

/// Why a LeRobot payload was refused. Nothing in it was executed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PayloadError {
    /// The pickle itself was refused.
    #[error(transparent)]
    Pickle(#[from] PickleError),
    /// The safetensors + JSON form is malformed.
    #[error("malformed safetensors + JSON payload: {0}")]
    Safe(String),
    /// A field is missing or not what LeRobot sends.
    #[error("{field}: {what}")]
    Invalid {
        /// The field (`TimedObservation.observation['front']`).
        field: String,
        /// What is wrong with it.
        what: String,
    },
}

impl PayloadError {
    /// A field's refusal.
    pub fn invalid(field: &str, what: String) -> PayloadError {
        PayloadError::Invalid {
            field: field.to_string(),
            what,
        }
    }
}
