//! Prediction answers by door and outcome (`gr00t_predict_requests_total{door=...}`): every door
//! counts its answers here and the HTTP door's `/metrics` renders them. A module of its own so
//! that the doors share it without importing one another.

use gr00t_core::InferError;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The door that answered, as the `door` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Door {
    /// `POST /predict` (and the other prediction routes).
    Http,
    /// ZMQ `get_action`.
    Zmq,
    /// A websocket observation (openpi, RoboArena `infer`, vLLM-Omni `infer`).
    Ws,
}

impl Door {
    /// Every door, in the order they are rendered.
    pub const ALL: [Door; 3] = [Door::Http, Door::Zmq, Door::Ws];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Door::Http => "http",
            Door::Zmq => "zmq",
            Door::Ws => "ws",
        }
    }
}

/// Request fields a 400 may name; anything else is counted as `other` (clients choose unknown
/// field names, and a label must not grow without bound).
const KNOWN_FIELDS: [&str; 16] = [
    "body",
    "content-type",
    "images",
    "images.exterior_image_1_left",
    "images.wrist_image_left",
    "instruction",
    "state",
    "state.eef_9d",
    "state.gripper_position",
    "state.joint_position",
    "seed",
    "noise",
    "return_normalized",
    "tokenizer",
    "session_id",
    "x-session-id",
];

/// How a prediction request ended, as the `outcome`/`code`/`field` labels (the HTTP status, or
/// the one HTTP would have answered, on every door).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// 200.
    Ok,
    /// 400, with the (normalised) field at fault.
    BadRequest(String),
    /// 413.
    TooLarge,
    /// 503: the queue was full.
    Busy,
    /// 500.
    Internal,
    /// Any other status.
    Other(u16),
}

impl Outcome {
    /// Classifies a status code; `field` is the refused field of a 400, if any.
    pub fn from_status(status: u16, field: Option<&str>) -> Outcome {
        match status {
            200 => Outcome::Ok,
            400 => Outcome::BadRequest(field_label(field.unwrap_or(""))),
            413 => Outcome::TooLarge,
            503 => Outcome::Busy,
            500 => Outcome::Internal,
            other => Outcome::Other(other),
        }
    }

    /// The `outcome` label value.
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::BadRequest(_) => "bad_request",
            Outcome::TooLarge => "too_large",
            Outcome::Busy => "busy",
            Outcome::Internal => "error",
            Outcome::Other(_) => "other",
        }
    }

    /// The HTTP status.
    pub fn code(&self) -> u16 {
        match self {
            Outcome::Ok => 200,
            Outcome::BadRequest(_) => 400,
            Outcome::TooLarge => 413,
            Outcome::Busy => 503,
            Outcome::Internal => 500,
            Outcome::Other(c) => *c,
        }
    }
}

/// A refused field reduced to a bounded label: array indices dropped (`noise[3][7]` → `noise`),
/// unknown names → `other`, no field → `none`.
pub fn field_label(field: &str) -> String {
    let base: String = {
        let mut out = String::with_capacity(field.len());
        let mut depth = 0usize;
        for c in field.chars() {
            match c {
                '[' => depth += 1,
                ']' => depth = depth.saturating_sub(1),
                _ if depth == 0 => out.push(c),
                _ => {}
            }
        }
        out
    };
    if base.is_empty() {
        return "none".into();
    }
    if KNOWN_FIELDS.contains(&base.as_str()) {
        return base;
    }
    match base.split_once('.') {
        Some((top, _)) if KNOWN_FIELDS.contains(&top) => top.to_string(),
        _ => "other".into(),
    }
}

impl Outcome {
    /// A request the msgpack doors refused while reading it (their texts name the field; the
    /// label does not try to parse it out).
    pub fn refused() -> Outcome {
        Outcome::BadRequest("other".into())
    }

    /// The outcome of a request the queue or the engine did not answer, as HTTP maps it.
    pub fn of_error(e: &InferError) -> Outcome {
        match e {
            InferError::Invalid(f) => Outcome::BadRequest(field_label(&f.field)),
            InferError::Busy { .. } => Outcome::Busy,
            InferError::Superseded => Outcome::Other(409),
            InferError::Stopped | InferError::Internal(_) => Outcome::Internal,
        }
    }
}

/// Answers counted by door and outcome; shared by every door.
#[derive(Debug, Default)]
pub struct Answers {
    counts: Mutex<BTreeMap<(Door, Outcome), u64>>,
}

impl Answers {
    /// Counts one answer of `door`.
    pub fn count(&self, door: Door, outcome: Outcome) {
        // Every update is one increment: the map stays consistent after a panic elsewhere.
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        *counts.entry((door, outcome)).or_insert(0) += 1;
    }

    /// The counts now.
    pub fn snapshot(&self) -> BTreeMap<(Door, Outcome), u64> {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gr00t_embodiment::request::RequestError;

    #[test]
    fn field_labels_stay_bounded() {
        assert_eq!(field_label("state.eef_9d"), "state.eef_9d");
        assert_eq!(
            field_label("images.wrist_image_left[1]"),
            "images.wrist_image_left"
        );
        assert_eq!(field_label("images.front_cam"), "images");
        assert_eq!(field_label("noise[39][131]"), "noise");
        assert_eq!(field_label("my_custom_key"), "other");
        assert_eq!(field_label(""), "none");
    }

    #[test]
    fn errors_map_to_the_outcomes_http_answers() {
        let invalid = InferError::Invalid(RequestError::new("noise[3][7]", "bad"));
        assert_eq!(
            Outcome::of_error(&invalid),
            Outcome::BadRequest("noise".into())
        );
        let busy = InferError::Busy {
            capacity: 4,
            retry_after_s: 1,
        };
        assert_eq!(Outcome::of_error(&busy).code(), 503);
        assert_eq!(Outcome::of_error(&InferError::Superseded).code(), 409);
        assert_eq!(Outcome::of_error(&InferError::Stopped).name(), "error");
        assert_eq!(Outcome::refused().code(), 400);
    }

    #[test]
    fn answers_are_counted_per_door() {
        let a = Answers::default();
        a.count(Door::Zmq, Outcome::Ok);
        a.count(Door::Zmq, Outcome::Ok);
        a.count(Door::Ws, Outcome::refused());
        let s = a.snapshot();
        assert_eq!(s.get(&(Door::Zmq, Outcome::Ok)), Some(&2));
        assert_eq!(s.get(&(Door::Ws, Outcome::refused())), Some(&1));
        assert_eq!(s.get(&(Door::Http, Outcome::Ok)), None);
    }
}
