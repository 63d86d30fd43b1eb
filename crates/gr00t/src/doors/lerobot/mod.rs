//! LeRobot's async inference (`lerobot.async_inference.robot_client`), whose every payload is a
//! pickle (or, after LeRobot PR #3048, safetensors + JSON): the restricted pickle reader
//! ([`pickle`]), which builds values and never runs anything, the objects read from it
//! ([`objects`], [`numpy`]), the reply's writer ([`reply`]) and the safe form ([`safe`]). The
//! gRPC door that uses them is to come (issue 46).
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod error;
pub mod grpc;
pub mod mapping;
pub mod numpy;
pub mod objects;
pub mod pickle;
pub mod reply;
pub mod robots;
pub mod safe;

use error::PayloadError;
use objects::{RemotePolicyConfig, TimedAction, TimedObservation};
use pickle::Limits;

/// The form a client speaks; its replies are written in the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Stock LeRobot: pickle.
    Pickle,
    /// LeRobot PR #3048: safetensors + JSON.
    Safe,
}

impl Form {
    /// The form of a payload, by its first byte.
    pub fn of(bytes: &[u8]) -> Form {
        if safe::is_safe(bytes) {
            Form::Safe
        } else {
            Form::Pickle
        }
    }
}

/// Reads a `SendPolicyInstructions` payload in either form.
pub fn read_config(
    bytes: &[u8],
    limits: &Limits,
) -> Result<(Form, RemotePolicyConfig), PayloadError> {
    let form = Form::of(bytes);
    let config = match form {
        Form::Pickle => objects::config_from_pickle(bytes, limits)?,
        Form::Safe => safe::config_from_safe(bytes, limits.max_bytes)?,
    };
    Ok((form, config))
}

/// Reads a `SendObservations` payload in either form.
pub fn read_observation(
    bytes: &[u8],
    limits: &Limits,
) -> Result<(Form, TimedObservation), PayloadError> {
    let form = Form::of(bytes);
    let observation = match form {
        Form::Pickle => objects::observation_from_pickle(bytes, limits)?,
        Form::Safe => safe::observation_from_safe(bytes, limits.max_bytes)?,
    };
    Ok((form, observation))
}

/// Writes a `GetActions` reply in `form`.
pub fn write_actions(form: Form, actions: &[TimedAction]) -> Result<Vec<u8>, PayloadError> {
    match form {
        Form::Pickle => Ok(reply::actions_to_pickle(actions)),
        Form::Safe => safe::actions_to_safe(actions),
    }
}

#[cfg(test)]
mod payload_tests;
#[cfg(test)]
mod tests;
