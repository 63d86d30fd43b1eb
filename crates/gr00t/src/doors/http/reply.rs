//! The `/predict` answer's JSON body (docs/API.md) of the core's response: the door's shape,
//! written from the response without copying its actions.

use gr00t_core::response::{ActionGroups, PredictResponse, SessionReply, TimingMs};
use serde::Serialize;

/// The JSON body answered to a valid `/predict` (also `gr00t predict`'s output).
#[derive(Serialize)]
pub struct PredictBody<'a> {
    /// Physical action chunk.
    actions: &'a ActionGroups,
    /// Steps in the chunk (40 for DROID; the embodiment's action horizon).
    action_horizon: usize,
    /// The embodiment tag served.
    embodiment: &'a str,
    /// VLM sequence length.
    seq_len: usize,
    /// `"seed"` or `"client"`.
    noise_source: &'static str,
    /// The seed used, or null for client noise.
    seed: Option<u64>,
    /// Model-space chunk before un-normalisation, valid dims only (on request).
    #[serde(skip_serializing_if = "Option::is_none")]
    actions_normalized: Option<&'a ActionGroups>,
    /// Stage timings.
    timing_ms: TimingBody<'a>,
    /// Time the request waited for the inference thread, ms.
    queue_ms: f64,
    /// Time from the server having the observation to its answer, ms.
    observation_age_ms: f64,
    /// `request`, `session` or `none`; absent without RTC options.
    #[serde(skip_serializing_if = "Option::is_none")]
    rtc_source: Option<&'static str>,
    /// The request's session after it (absent outside a session).
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<SessionBody>,
    /// The session's token (absent outside a session).
    #[serde(skip_serializing_if = "Option::is_none")]
    session_token: Option<&'a str>,
}

impl<'a> From<&'a PredictResponse> for PredictBody<'a> {
    fn from(r: &'a PredictResponse) -> PredictBody<'a> {
        PredictBody {
            actions: &r.actions,
            action_horizon: r.action_horizon,
            embodiment: &r.embodiment,
            seq_len: r.seq_len,
            noise_source: r.noise_source,
            seed: r.seed,
            actions_normalized: r.actions_normalized.as_ref(),
            timing_ms: TimingBody(&r.timing_ms),
            queue_ms: r.queue_ms,
            observation_age_ms: r.observation_age_ms,
            rtc_source: r.rtc_source,
            session: r.session.as_ref().map(SessionBody::from),
            session_token: r.session_token.as_deref(),
        }
    }
}

/// `timing_ms`: the stages in milliseconds; the network's four only where measured.
pub struct TimingBody<'a>(pub &'a TimingMs);

/// `timing_ms`'s fields.
#[derive(Serialize)]
struct TimingFields {
    decode: f64,
    encode: f64,
    device: f64,
    decode_actions: f64,
    total: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    vision: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    llm: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    adapter: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    denoise: Option<f64>,
}

impl Serialize for TimingBody<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        TimingFields {
            decode: t.decode,
            encode: t.encode,
            device: t.device,
            decode_actions: t.decode_actions,
            total: t.total,
            vision: t.vision,
            llm: t.llm,
            adapter: t.adapter,
            denoise: t.denoise,
        }
        .serialize(serializer)
    }
}

/// `session`: where the request's session stands.
#[derive(Serialize)]
struct SessionBody {
    step: u64,
    since_last_ms: Option<f64>,
}

impl From<&SessionReply> for SessionBody {
    fn from(s: &SessionReply) -> SessionBody {
        SessionBody {
            step: s.step,
            since_last_ms: s.since_last_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn response() -> PredictResponse {
        PredictResponse {
            actions: ActionGroups(vec![("gripper".into(), vec![vec![0.5]; 2])]),
            action_horizon: 2,
            embodiment: "tag".into(),
            seq_len: 7,
            noise_source: "seed",
            seed: Some(3),
            timing_ms: TimingMs {
                decode: 1.0,
                encode: 2.0,
                device: 3.0,
                decode_actions: 4.0,
                total: 10.0,
                ..TimingMs::default()
            },
            queue_ms: 0.5,
            observation_age_ms: 11.0,
            chunk: vec![9.0; 4],
            ..PredictResponse::default()
        }
    }

    #[test]
    fn the_body_has_the_documented_fields_and_leaves_out_the_absent_ones() {
        let r = response();
        let body = serde_json::to_value(PredictBody::from(&r)).unwrap();
        assert_eq!(
            body,
            json!({
                "actions": {"gripper": [[0.5], [0.5]]},
                "action_horizon": 2,
                "embodiment": "tag",
                "seq_len": 7,
                "noise_source": "seed",
                "seed": 3,
                "timing_ms": {"decode": 1.0, "encode": 2.0, "device": 3.0,
                              "decode_actions": 4.0, "total": 10.0},
                "queue_ms": 0.5,
                "observation_age_ms": 11.0,
            })
        );
        let r = PredictResponse {
            noise_source: "client",
            seed: None,
            actions_normalized: Some(r.actions.clone()),
            rtc_source: Some("session"),
            session: Some(SessionReply {
                step: 4,
                since_last_ms: None,
            }),
            session_token: Some("t0k".into()),
            timing_ms: TimingMs {
                vision: Some(5.0),
                llm: Some(6.0),
                adapter: Some(7.0),
                denoise: Some(8.0),
                ..r.timing_ms.clone()
            },
            ..r
        };
        let body = serde_json::to_value(PredictBody::from(&r)).unwrap();
        assert_eq!(body["seed"], json!(null));
        assert_eq!(body["noise_source"], "client");
        assert_eq!(
            body["actions_normalized"],
            json!({"gripper": [[0.5], [0.5]]})
        );
        assert_eq!(body["rtc_source"], "session");
        assert_eq!(body["session"], json!({"step": 4, "since_last_ms": null}));
        assert_eq!(body["session_token"], "t0k");
        assert_eq!(
            body["timing_ms"],
            json!({"decode": 1.0, "encode": 2.0, "device": 3.0, "decode_actions": 4.0,
                   "total": 10.0, "vision": 5.0, "llm": 6.0, "adapter": 7.0, "denoise": 8.0})
        );
        // The RTC chunk is the engine's, never sent.
        assert!(body.get("chunk").is_none());
    }
}
