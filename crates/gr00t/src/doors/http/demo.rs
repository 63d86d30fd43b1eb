//! The shipped demo: fixture case0's request and the reference actions NVIDIA's code computed
//! for it with the checkpoint named by digest. Used for warm-up, the start-up self-check and
//! `GET /demo`.

use serde::Deserialize;
use std::collections::BTreeMap;

/// The demo `/predict` body (frames, state, instruction, reference noise).
pub const DEMO_REQUEST: &str = include_str!("../../../../../assets/demo/request.json");
/// The reference answer: `{"actions": {...}, "checkpoint_digest": "...", ...}`.
pub const DEMO_REFERENCE: &str = include_str!("../../../../../assets/demo/reference.json");

/// The `/demo` body: `{"request": ..., "reference": ...}`, both embedded verbatim.
pub fn demo_body() -> String {
    format!("{{\"request\":{DEMO_REQUEST},\"reference\":{DEMO_REFERENCE}}}")
}

/// The part of the reference the self-check needs.
#[derive(Debug, Deserialize)]
pub struct Reference {
    /// Digest of the checkpoint the actions belong to.
    pub checkpoint_digest: String,
    /// Per group, `[horizon][dim]`.
    pub actions: BTreeMap<String, Vec<Vec<f32>>>,
}

/// Parses the embedded reference.
pub fn reference() -> Result<Reference, serde_json::Error> {
    serde_json::from_str(DEMO_REFERENCE)
}

/// Largest |Δ| between answered groups and the reference; `None` if a group or shape differs.
pub fn max_abs_diff(reference: &Reference, groups: &[(&str, &Vec<Vec<f32>>)]) -> Option<f32> {
    if groups.len() != reference.actions.len() {
        return None;
    }
    let mut worst = 0.0f32;
    for (name, rows) in groups {
        let want = reference.actions.get(*name)?;
        if want.len() != rows.len() {
            return None;
        }
        for (a, b) in rows.iter().zip(want) {
            if a.len() != b.len() {
                return None;
            }
            for (x, y) in a.iter().zip(b) {
                worst = worst.max((x - y).abs());
            }
        }
    }
    Some(worst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_assets_are_consistent() {
        let body: serde_json::Value = serde_json::from_str(&demo_body()).unwrap();
        let req = &body["request"];
        assert!(req["images"]["exterior_image_1_left"]
            .as_array()
            .is_some_and(|a| a.len() == 2));
        assert_eq!(req["noise"].as_array().map(|r| r.len()), Some(40));
        let r = reference().unwrap();
        assert_eq!(r.checkpoint_digest.len(), 64);
        let dims: Vec<(String, usize, usize)> = r
            .actions
            .iter()
            .map(|(k, v)| (k.clone(), v.len(), v[0].len()))
            .collect();
        assert_eq!(
            dims,
            vec![
                ("eef_9d".to_string(), 40, 9),
                ("gripper_position".to_string(), 40, 1),
                ("joint_position".to_string(), 40, 7)
            ]
        );
        let groups: Vec<(&str, &Vec<Vec<f32>>)> =
            r.actions.iter().map(|(k, v)| (k.as_str(), v)).collect();
        assert_eq!(max_abs_diff(&r, &groups), Some(0.0));
        assert_eq!(max_abs_diff(&r, &groups[..2]), None);
    }
}
