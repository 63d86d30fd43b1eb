//! What every door hands the inference queue: one typed [`Request`] (a tag and a generic
//! observation), built from its wire format (HTTP JSON, ZMQ and websocket msgpack) before it
//! is queued; the queue never holds bytes.

use crate::rtc::RtcPlan;
use crate::session::SessionKey;
use gr00t_embodiment::observation::Observation;
use gr00t_model::Rtc;

/// One request of any door.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The embodiment tag the observation is of.
    pub tag: String,
    /// The observation in the generic layout, frames decoded (a view sent with its current
    /// frame only is completed from the session's frame history).
    pub observation: Observation,
    /// Also return the normalised chunk.
    pub return_normalized: bool,
    /// Time the door spent decoding the request before queueing it, ms (counted in the
    /// response's `timing_ms.decode` and `total`).
    pub decode_ms: f64,
    /// Real-time chunking, validated by the door ([`crate::rtc::RtcOptions::plan`]).
    pub rtc: Option<RtcPlan>,
    /// The client's session ([`crate::session`]): its last chunk serves RTC, and a newer
    /// observation of it replaces this one while this one waits.
    pub session: Option<SessionKey>,
    /// The session token the client echoed: the request is refused if the server no longer
    /// holds that session ([`crate::InferError::SessionRestarted`]).
    pub session_token: Option<String>,
}

impl Request {
    /// A request of `observation` for embodiment `tag`, no normalised chunk, nothing decoded
    /// by the door.
    pub fn new(tag: impl Into<String>, observation: Observation) -> Request {
        Request {
            tag: tag.into(),
            observation,
            return_normalized: false,
            decode_ms: 0.0,
            rtc: None,
            session: None,
            session_token: None,
        }
    }

    /// The request with real-time chunking against a chunk of its own.
    pub fn with_rtc(mut self, rtc: Option<Rtc>) -> Request {
        self.rtc = rtc.map(RtcPlan::Chunk);
        self
    }

    /// The request with real-time chunking as planned by the door.
    pub fn with_rtc_plan(mut self, rtc: Option<RtcPlan>) -> Request {
        self.rtc = rtc;
        self
    }

    /// The request in the client's session.
    pub fn in_session(mut self, session: Option<SessionKey>) -> Request {
        self.session = session;
        self
    }

    /// The request continuing the session incarnation `token` names (none: any).
    pub fn with_session_token(mut self, token: Option<String>) -> Request {
        self.session_token = token;
        self
    }
}
