//! The `/predict` response of the HTTP contract (docs/API.md).

use serde::Serialize;

/// Physical action targets per group, `[horizon][dim]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActionGroups {
    /// Absolute end-effector pose: xyz then the first two rotation rows.
    pub eef_9d: Vec<Vec<f32>>,
    /// Absolute gripper opening.
    pub gripper_position: Vec<Vec<f32>>,
    /// Absolute joint targets.
    pub joint_position: Vec<Vec<f32>>,
}

/// Stage timings in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vision: Option<f64>,
    /// LLM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llm: Option<f64>,
    /// VL adapter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adapter: Option<f64>,
    /// Flow-matching loop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub denoise: Option<f64>,
}

/// The JSON body answered to a valid `/predict`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PredictResponse {
    /// Physical action chunk.
    pub actions: ActionGroups,
    /// 40.
    pub action_horizon: usize,
    /// `oxe_droid_relative_eef_relative_joint`.
    pub embodiment: String,
    /// VLM sequence length.
    pub seq_len: usize,
    /// `"seed"` or `"client"`.
    pub noise_source: &'static str,
    /// The seed used, or null for client noise.
    pub seed: Option<u64>,
    /// Model-space chunk before un-normalisation, valid dims only (on request).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actions_normalized: Option<ActionGroups>,
    /// Stage timings.
    pub timing_ms: TimingMs,
}
