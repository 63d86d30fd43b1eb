//! RoboArena's DROID evaluation dialect (`roboarena/policy_server.py`, the evaluation client's
//! `websocket_client_policy.py`): openpi's DROID observation plus `endpoint` (`"infer"` or
//! `"reset"`) and, when the server asks for it, `session_id`. `infer` answers openpi's reply
//! map (`actions` `[40, 8]`), `reset` the text frame `reset successful`.
//!
//! With a `session_id` the frame history is that session's, shared by every connection that
//! names it, for at most `MAX_SESSIONS` sessions (the least recently used one is dropped);
//! without one it is the connection's, as for plain openpi clients.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::droid_obs::{DroidObservation, FrameHistory};
use super::WsContext;
use crate::doors::wire::msgpack_numpy::{decode_array, get, type_name};
use gr00t_core::request::RawRequest;
use rmpv::Value;
use std::collections::VecDeque;

/// Sessions whose frame history is kept (~5.5 MB each at 180x320).
pub const MAX_SESSIONS: usize = 16;

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
pub fn endpoint(v: &Value) -> Result<Endpoint, String> {
    let name = match v {
        Value::String(s) => s.as_str(),
        Value::Binary(b) => std::str::from_utf8(b).ok(),
        _ => None,
    };
    match name {
        Some("infer") => Ok(Endpoint::Infer),
        Some("reset") => Ok(Endpoint::Reset),
        Some(other) => Err(format!(
            "endpoint must be 'infer' or 'reset'. Got '{other}'"
        )),
        None => Err(format!(
            "endpoint must be 'infer' or 'reset'. Got {}",
            type_name(v)
        )),
    }
}

/// The history key of `session_id`: a str, an int, or an integer numpy array of one element
/// (RoboArena's `np.zeros(1, np.int32)`), the last two as their decimal text. `None` when
/// absent or nil.
pub fn session_key(v: Option<&Value>) -> Result<Option<String>, String> {
    let bad = |v: &Value| {
        format!(
            "session_id must be a str, an int or an int array of one element. Got {}",
            type_name(v)
        )
    };
    let Some(v) = v else { return Ok(None) };
    match v {
        Value::Nil => Ok(None),
        Value::String(s) => s
            .as_str()
            .map(|s| Some(s.to_string()))
            .ok_or_else(|| "session_id is not valid UTF-8".to_string()),
        Value::Integer(i) => Ok(Some(i.to_string())),
        Value::Map(m) if get(m, "__npgeneric__").is_some() => match get(m, "data") {
            Some(Value::Integer(i)) => Ok(Some(i.to_string())),
            _ => Err(bad(v)),
        },
        _ => match decode_array(v) {
            Some((_, Ok(a))) => match a.int_values().as_deref() {
                Some([one]) => Ok(Some(one.to_string())),
                _ => Err(format!(
                    "session_id must be a str, an int or an int array of one element. Got a {} \
                     array of shape {}",
                    a.dtype.name(),
                    a.shape_text()
                )),
            },
            Some((_, Err(e))) => Err(format!("session_id: {e}")),
            None => Err(bad(v)),
        },
    }
}

/// Frame histories by session, least recently used first.
#[derive(Debug)]
pub struct Sessions {
    max: usize,
    entries: VecDeque<(String, FrameHistory)>,
}

impl Default for Sessions {
    fn default() -> Sessions {
        Sessions::new(MAX_SESSIONS)
    }
}

impl Sessions {
    /// An empty store that keeps at most `max` sessions.
    pub fn new(max: usize) -> Sessions {
        Sessions {
            max: max.max(1),
            entries: VecDeque::new(),
        }
    }

    /// Applies session `id`'s history to `obs` (a new session starts empty, dropping the least
    /// recently used one when full) and marks it most recently used.
    pub fn resolve(&mut self, id: &str, obs: DroidObservation) -> RawRequest {
        let mut history = match self.entries.iter().position(|(k, _)| k == id) {
            Some(i) => self.entries.remove(i).map(|(_, h)| h).unwrap_or_default(),
            None => {
                while self.entries.len() >= self.max {
                    if let Some((dropped, _)) = self.entries.pop_front() {
                        tracing::info!("websocket: dropped the frame history of session {dropped}");
                    }
                }
                FrameHistory::default()
            }
        };
        let req = history.resolve(obs);
        self.entries.push_back((id.to_string(), history));
        req
    }

    /// Forgets session `id`; whether it was kept.
    pub fn remove(&mut self, id: &str) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(k, _)| k != id);
        self.entries.len() != before
    }

    /// Whether session `id` is kept.
    #[cfg(test)]
    pub fn contains(&self, id: &str) -> bool {
        self.entries.iter().any(|(k, _)| k == id)
    }
}

fn sessions(ctx: &WsContext) -> std::sync::MutexGuard<'_, Sessions> {
    // A panic elsewhere cannot leave the store half-updated: each call is one push or remove.
    ctx.sessions.lock().unwrap_or_else(|e| e.into_inner())
}

/// `reset`: forgets the session's frames, or the connection's without a session.
pub fn reset(ctx: &WsContext, connection: &mut FrameHistory, session: Option<&str>) {
    match session {
        Some(id) => {
            sessions(ctx).remove(id);
        }
        None => *connection = FrameHistory::default(),
    }
}

/// `infer`: the request with its t−15 frames from the session's history, or the connection's.
pub fn resolve(
    ctx: &WsContext,
    connection: &mut FrameHistory,
    session: Option<&str>,
    obs: DroidObservation,
) -> RawRequest {
    match session {
        Some(id) => sessions(ctx).resolve(id, obs),
        None => connection.resolve(obs),
    }
}
