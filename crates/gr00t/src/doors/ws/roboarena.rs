//! RoboArena's DROID evaluation dialect (`roboarena/policy_server.py`, the evaluation client's
//! `websocket_client_policy.py`): openpi's DROID observation plus `endpoint` (`"infer"` or
//! `"reset"`) and, when the server asks for it, `session_id`. `infer` answers openpi's reply
//! map (`actions` `[40, 8]`), `reset` the text frame `reset successful`.
//!
//! With a `session_id` the frame history (and the RTC chunk) is that session's: behind
//! `--api-token` shared by every connection that names it ([`session_key`]), otherwise the
//! naming connection's own; under `--session-ttl-s` and `--max-sessions` like every session.
//! Without one it is the connection's, as for plain openpi clients.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use crate::doors::wire::error::WireError;
use crate::doors::wire::msg::{Msg, View};
use crate::doors::wire::msgpack_numpy::type_name;
use gr00t_core::session::SessionKey;
use rmpv::Value;

/// The text frame that answers `reset`.
pub const RESET_REPLY: &str = "reset successful";

/// The `PolicyServerConfig` fields of the metadata frame. `image_resolution` (H, W) is 16:9:
/// the evaluation client resizes its 288x512 frames to it without padding, which keeps their
/// aspect; one exterior camera is `observation/exterior_image_1_left`.
pub fn config() -> Vec<(&'static str, Value)> {
    vec![
        (
            "image_resolution",
            Value::Array(vec![Value::from(180), Value::from(320)]),
        ),
        ("needs_wrist_camera", Value::Boolean(true)),
        ("n_external_cameras", Value::from(1)),
        ("needs_stereo_camera", Value::Boolean(false)),
        ("needs_session_id", Value::Boolean(true)),
        ("action_space", Value::from("joint_position")),
    ]
}

/// What a RoboArena message asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// Actions for this observation.
    Infer,
    /// Forget the session's (or the connection's) frames.
    Reset,
}

/// Reads `endpoint`.
pub fn endpoint<M: Msg>(v: &M) -> Result<Endpoint, WireError> {
    let name = match v.view() {
        View::String(_, s) => s,
        View::Binary(b) => std::str::from_utf8(b).ok(),
        _ => None,
    };
    match name {
        Some("infer") => Ok(Endpoint::Infer),
        Some("reset") => Ok(Endpoint::Reset),
        Some(other) => Err(WireError::field("endpoint", super::unknown_endpoint(other))),
        None => Err(WireError::field(
            "endpoint",
            format!("endpoint must be 'infer' or 'reset'. Got {}", type_name(v)),
        )),
    }
}

/// The namespace of the sessions RoboArena messages name: apart from every other door's.
pub const SESSIONS: &str = "roboarena";

/// The table key of a `session_id` named on the websocket's openpi path by an authenticated
/// client (behind `--api-token`): shared by the connections that name it. Without a token a
/// connection's named sessions are its own ([`gr00t_core::session::SessionKey::within`]).
pub fn session_key(id: &str) -> SessionKey {
    SessionKey::named(SESSIONS, id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_endpoint_is_quoted_short_and_a_huge_one_by_a_prefix() {
        let short = endpoint(&Value::from("infr")).unwrap_err().to_string();
        assert_eq!(short, "endpoint must be 'infer' or 'reset'. Got 'infr'");
        let huge = "z".repeat(3 << 20);
        let text = endpoint(&Value::from(huge.as_str()))
            .unwrap_err()
            .to_string();
        assert!(text.len() < 200, "{} bytes", text.len());
        assert!(text.ends_with("… (3145728 bytes)'"), "{text}");
    }
}
