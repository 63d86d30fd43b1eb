//! The action groups of a response (docs/API.md); the response itself is `gr00t-core`'s.

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
