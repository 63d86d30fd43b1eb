//! What every door answers from: the response of one request with its stage timings. Each
//! door writes it in its own shape (the HTTP door's JSON body is `doors::http::reply`).

pub use gr00t_embodiment::response::ActionGroups;

/// Stage timings in milliseconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TimingMs {
    /// Base64 + image decode.
    pub decode: f64,
    /// Resize, patchify, tokenise, state normalisation.
    pub encode: f64,
    /// The model forward (vision, LLM, adapter, denoise).
    pub device: f64,
    /// Un-normalisation and relative → absolute.
    pub decode_actions: f64,
    /// Whole request.
    pub total: f64,
    /// Vision tower.
    pub vision: Option<f64>,
    /// LLM.
    pub llm: Option<f64>,
    /// VL adapter.
    pub adapter: Option<f64>,
    /// Flow-matching loop.
    pub denoise: Option<f64>,
}

/// Where a session stands after a request.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionReply {
    /// Observations answered in the session, this one included.
    pub step: u64,
    /// Time since the session's previous observation began computing, ms (none for its
    /// first).
    pub since_last_ms: Option<f64>,
}

/// The answer to one valid request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PredictResponse {
    /// Physical action chunk.
    pub actions: ActionGroups,
    /// Steps in the chunk (40 for DROID; the embodiment's action horizon).
    pub action_horizon: usize,
    /// The embodiment tag served.
    pub embodiment: String,
    /// VLM sequence length.
    pub seq_len: usize,
    /// `"seed"` or `"client"`.
    pub noise_source: &'static str,
    /// The seed used, or null for client noise.
    pub seed: Option<u64>,
    /// Model-space chunk before un-normalisation, valid dims only (on request).
    pub actions_normalized: Option<ActionGroups>,
    /// Stage timings.
    pub timing_ms: TimingMs,
    /// Time the request waited for the inference thread, ms.
    pub queue_ms: f64,
    /// Time from the server having the observation to its answer, ms (waiting included).
    pub observation_age_ms: f64,
    /// Which previous chunk RTC used: `request`, `session`, or `none` (a session's first
    /// chunk); absent without RTC options.
    pub rtc_source: Option<&'static str>,
    /// The request's session after it (absent outside a session).
    pub session: Option<SessionReply>,
    /// The session's token (absent outside a session): a client that echoes it as
    /// `session_token` is told when the server no longer holds this session (409).
    pub session_token: Option<String>,
    /// The model's whole normalised chunk, `horizon × action_dim` row-major and padded like
    /// upstream's `action_pred` (what RTC reads as the previous chunk); no door sends it.
    pub chunk: Vec<f32>,
}
