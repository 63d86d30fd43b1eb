//! What every door hands the inference queue: one checked [`Request`] (the served layout the
//! door resolved and a generic observation whose views, frame counts and frame sizes the door
//! checked against it), built from its wire format (HTTP JSON, ZMQ and websocket msgpack)
//! before it is queued; the queue never holds bytes, the engine does not check them again.

use crate::rtc::RtcPlan;
use crate::session::SessionKey;
use gr00t_embodiment::layout::Layout;
use gr00t_embodiment::observation::Observation;
use gr00t_model::Rtc;
use std::sync::Arc;

/// One request of any door.
#[derive(Debug, Clone)]
pub struct Request {
    /// The served layout the observation is of, as the door resolved its tag
    /// ([`crate::layouts::Layouts::resolve`]).
    pub layout: Arc<Layout>,
    /// The observation in the generic layout, frames decoded and checked against `layout` by
    /// the door (a view sent with its current frame only is completed from the session's frame
    /// history).
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

impl PartialEq for Request {
    /// Requests are equal when they are of the same served tag and all else is equal (a
    /// layout is the checkpoint's, read once: its tag names it).
    fn eq(&self, other: &Request) -> bool {
        self.tag() == other.tag()
            && self.observation == other.observation
            && self.return_normalized == other.return_normalized
            && self.decode_ms == other.decode_ms
            && self.rtc == other.rtc
            && self.session == other.session
            && self.session_token == other.session_token
    }
}

impl Request {
    /// A request of `observation`, checked against the served `layout`, no normalised chunk,
    /// nothing decoded by the door.
    pub fn new(layout: Arc<Layout>, observation: Observation) -> Request {
        Request {
            layout,
            observation,
            return_normalized: false,
            decode_ms: 0.0,
            rtc: None,
            session: None,
            session_token: None,
        }
    }

    /// The embodiment tag the observation is of.
    pub fn tag(&self) -> &str {
        self.layout.tag()
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
