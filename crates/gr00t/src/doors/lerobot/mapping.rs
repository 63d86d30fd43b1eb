//! LeRobot's features onto a served embodiment (`--lerobot-map FILE`): which of the robot's
//! motors make each state key, which camera each view, and the order in which the decoded
//! action keys make the robot's action vector. A robot client's `RemotePolicyConfig` is checked
//! against it; its `TimedObservation`s become the engine's generic observation; the decoded
//! chunk becomes `TimedAction`s.
//!
//! ```json
//! {
//!   "embodiment": "new_embodiment",
//!   "state": {"single_arm": ["shoulder_pan.pos", "shoulder_lift.pos", "elbow_flex.pos",
//!                            "wrist_flex.pos", "wrist_roll.pos"],
//!             "gripper": ["gripper.pos"]},
//!   "video": {"front": "front", "wrist": "wrist"},
//!   "action": ["single_arm", "gripper"]
//! }
//! ```
//!
//! `state` maps each state key to motor names of `observation.state` (in the key's order);
//! `video` maps each view to a camera (`observation.images.<camera>`); `action` lists the action
//! keys whose values, concatenated, follow the robot's `action_features` order (LeRobot's client
//! reads `action[i]` as its i-th action feature). The instruction is the observation's `task`.

use super::objects::{ObsValue, RemotePolicyConfig, TimedAction, TimedObservation};
use crate::doors::wire::ndarray::DType;
use gr00t_embodiment::image::Frame;
use gr00t_embodiment::layout::Layout;
use gr00t_embodiment::observation::{NoiseSource, Observation};
use gr00t_embodiment::response::ActionGroups;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};

/// How a LeRobot robot's features make one served embodiment's observation and actions.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeRobotMap {
    /// The served embodiment tag the robot is.
    pub embodiment: String,
    /// Each state key → the motor names (`observation.state` names) that fill it, in order.
    pub state: BTreeMap<String, Vec<String>>,
    /// Each view → the camera (`observation.images.<camera>`) that fills it.
    pub video: BTreeMap<String, String>,
    /// The action keys in the robot's `action_features` order.
    pub action: Vec<String>,
}

/// The prefix of a camera's feature name.
const IMAGES: &str = "observation.images.";

impl LeRobotMap {
    /// Reads a map file (JSON); errors name the file.
    pub fn load(path: &std::path::Path) -> Result<LeRobotMap, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Checks the map against the served layout it names: every state key with as many motors
    /// as its width, every view, action keys the embodiment decodes.
    pub fn check_layout(&self, layout: &Layout) -> Result<(), String> {
        let spec = &layout.spec;
        if spec.tag != self.embodiment {
            return Err(format!(
                "the LeRobot map is for {:?}, not {:?}",
                self.embodiment, spec.tag
            ));
        }
        let served: Vec<(&str, usize)> = spec.state.keys().collect();
        let want = |k: &str| served.iter().find(|(s, _)| *s == k).map(|(_, w)| *w);
        for (key, names) in &self.state {
            match want(key) {
                None => {
                    return Err(format!(
                        "state key {key:?} is not {:?}'s (it has {served:?})",
                        spec.tag
                    ))
                }
                Some(w) if w != names.len() => {
                    return Err(format!(
                        "state key {key:?} is {w} wide; the map gives it {} motors",
                        names.len()
                    ))
                }
                Some(_) => {}
            }
        }
        if let Some((key, _)) = served.iter().find(|(k, _)| !self.state.contains_key(*k)) {
            return Err(format!(
                "the map gives state key {key:?} no motors (served: {served:?})"
            ));
        }
        let views: Vec<&String> = self.video.keys().collect();
        let mut spec_views: Vec<&String> = spec.views.iter().collect();
        spec_views.sort();
        if views != spec_views {
            return Err(format!(
                "the map's views {views:?} are not {:?}'s {:?}",
                spec.tag, spec.views
            ));
        }
        let actions: Vec<&str> = spec.actions.keys().map(|(k, _, _)| k).collect();
        if let Some(k) = self.action.iter().find(|k| !actions.contains(&k.as_str())) {
            return Err(format!(
                "action key {k:?} is not {:?}'s (it decodes {actions:?})",
                spec.tag
            ));
        }
        Ok(())
    }

    /// Checks a client's `RemotePolicyConfig` against the map and the served layout; the
    /// refusal says what is served.
    pub fn check_config(&self, config: &RemotePolicyConfig, layout: &Layout) -> Result<(), String> {
        let served = || self.describe(layout);
        if config.policy_type != "groot" {
            return Err(format!(
                "policy_type {:?} is not served: this server serves groot ({})",
                config.policy_type,
                served()
            ));
        }
        let horizon = layout.spec.actions.horizon();
        if config.actions_per_chunk < 1 || config.actions_per_chunk > horizon as i64 {
            return Err(format!(
                "actions_per_chunk {} is outside 1..={horizon} ({})",
                config.actions_per_chunk,
                served()
            ));
        }
        let feature = |name: &str| {
            config
                .lerobot_features
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, f)| f)
        };
        let state_names: &[String] = feature("observation.state").map_or(&[], |f| &f.names);
        for name in self.state.values().flatten() {
            if !state_names.contains(name) {
                return Err(format!(
                    "the robot's observation.state has no {name:?} (it has {state_names:?}; {})",
                    served()
                ));
            }
        }
        for camera in self.video.values() {
            let Some(f) = feature(&format!("{IMAGES}{camera}")) else {
                return Err(format!("the robot has no camera {camera:?} ({})", served()));
            };
            match f.shape.as_slice() {
                &[h, w, 3] => layout
                    .frames
                    .frame_size(w, h)
                    .map_err(|e| format!("camera {camera:?} ({w}x{h}): {e}"))?,
                other => {
                    return Err(format!(
                        "camera {camera:?} has shape {other:?}, not (height, width, 3)"
                    ))
                }
            }
        }
        Ok(())
    }

    /// What is served, for refusals: the embodiment, its state motors, cameras and horizon.
    pub fn describe(&self, layout: &Layout) -> String {
        let motors: Vec<&String> = self.state.values().flatten().collect();
        let cameras: Vec<&String> = self.video.values().collect();
        format!(
            "served: embodiment {:?}, motors {motors:?}, cameras {cameras:?}, up to {} actions per chunk",
            layout.spec.tag,
            layout.spec.actions.horizon()
        )
    }

    /// The engine's observation of a robot's `TimedObservation`: motor values by name, one frame
    /// per view (its current one, moved out of the observation, not copied), the `task`; `Err`
    /// names the observation's key at fault.
    pub fn observation(
        &self,
        obs: TimedObservation,
        noise: NoiseSource,
    ) -> Result<Observation, (String, String)> {
        let mut values: HashMap<String, ObsValue> = obs.observation.into_iter().collect();
        let field = |key: &str| format!("TimedObservation.observation['{key}']");
        let state = self
            .state
            .iter()
            .map(|(key, names)| {
                let values = names
                    .iter()
                    .map(|name| match values.get(name) {
                        Some(ObsValue::Number(x)) => Ok(*x as f32),
                        Some(_) => Err((field(name), "is not a number".to_string())),
                        None => Err((
                            field(name),
                            format!("is missing (state key {key:?} needs it)"),
                        )),
                    })
                    .collect::<Result<Vec<f32>, _>>()?;
                Ok((key.clone(), values))
            })
            .collect::<Result<Vec<_>, (String, String)>>()?;
        let mut images: Vec<(String, Vec<Frame>)> = Vec::with_capacity(self.video.len());
        for (view, camera) in &self.video {
            let frame = match values.remove(camera) {
                Some(ObsValue::Array(a))
                    if a.dtype == DType::U8 && a.shape.len() == 3 && a.shape[2] == 3 =>
                {
                    Frame::new(a.shape[1], a.shape[0], a.data)
                        .map_err(|e| (field(camera), e.to_string()))?
                }
                Some(ObsValue::Array(a)) => {
                    return Err((
                        field(camera),
                        format!(
                            "is a {} array of shape {:?}, not (height, width, 3) uint8",
                            a.dtype.name(),
                            a.shape
                        ),
                    ))
                }
                Some(_) => return Err((field(camera), "is not an image array".to_string())),
                // A camera that feeds an earlier view too: that view's frame.
                None => match self.video.values().zip(&images).find(|(c, _)| *c == camera) {
                    Some((_, (_, frames))) => frames[0].clone(),
                    None => {
                        return Err((
                            field(camera),
                            format!("is missing (view {view:?} needs it)"),
                        ))
                    }
                },
            };
            images.push((view.clone(), vec![frame]));
        }
        let instruction = match values.remove("task") {
            Some(ObsValue::Text(t)) => t,
            Some(_) => return Err((field("task"), "is not a str".to_string())),
            None => return Err((field("task"), "is missing (the instruction)".to_string())),
        };
        Ok(Observation {
            images,
            state,
            instruction,
            noise,
        })
    }

    /// The decoded chunk as `TimedAction`s, as LeRobot's policy server times them for the
    /// observation taken at `timestamp` after `timestep`: the first `n` steps, step `i` at
    /// `timestamp + i·dt` and timestep `timestep + i`, each the action keys' values concatenated
    /// in the map's order.
    pub fn timed_actions(
        &self,
        actions: &ActionGroups,
        (timestamp, timestep): (f64, i64),
        n: usize,
        dt: f64,
    ) -> Vec<TimedAction> {
        let rows = self
            .action
            .iter()
            .map(|k| actions.rows(k).len())
            .min()
            .unwrap_or(0)
            .min(n);
        (0..rows)
            .map(|i| TimedAction {
                timestamp: timestamp + i as f64 * dt,
                timestep: timestep + i as i64,
                action: self
                    .action
                    .iter()
                    .flat_map(|k| actions.rows(k)[i].iter().copied())
                    .collect(),
            })
            .collect()
    }
}
