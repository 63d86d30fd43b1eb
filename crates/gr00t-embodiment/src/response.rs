//! The `/predict` response of the HTTP contract (docs/API.md).

use crate::actions::DecodedActions;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

/// Physical action targets per action key, `[horizon][dim]`, in the embodiment's key order
/// (DROID: `eef_9d`, `gripper_position`, `joint_position`); serialised as a JSON object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ActionGroups(pub Vec<(String, Vec<Vec<f32>>)>);

impl ActionGroups {
    /// The rows of one key.
    pub fn get(&self, key: &str) -> Option<&Vec<Vec<f32>>> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The rows of one key, empty when the key is absent.
    pub fn rows(&self, key: &str) -> &[Vec<f32>] {
        self.get(key).map_or(&[], Vec::as_slice)
    }

    /// Keys and rows in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Vec<Vec<f32>>)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The final (or, with `normalized`, the model-space) chunk of every decoded key.
    pub fn from_decoded(decoded: &DecodedActions, normalized: bool) -> ActionGroups {
        ActionGroups(
            decoded
                .groups
                .iter()
                .map(|g| {
                    let flat = if normalized {
                        &g.normalized
                    } else {
                        &g.actions
                    };
                    // A zero-width key still has one (empty) row per step.
                    let rows = (0..decoded.horizon)
                        .map(|t| flat[t * g.dim..(t + 1) * g.dim].to_vec())
                        .collect();
                    (g.key.clone(), rows)
                })
                .collect(),
        )
    }

    /// Steps in the chunk.
    pub fn horizon(&self) -> usize {
        self.0.first().map_or(0, |(_, rows)| rows.len())
    }
}

impl Serialize for ActionGroups {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actions_normalized: Option<ActionGroups>,
    /// Stage timings.
    pub timing_ms: TimingMs,
}
