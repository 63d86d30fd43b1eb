//! DROID's names as the original `/predict` contract fixed them (docs/API.md): its two cameras,
//! their frame count and its three state keys, data that the doors' DROID dialects read.

/// Camera names of the DROID layout, in model order.
pub const CAMERAS: [&str; 2] = ["exterior_image_1_left", "wrist_image_left"];
/// The short names the status page labels DROID's cameras with.
pub const CAMERA_LABELS: [(&str, &str); 2] = [
    ("exterior_image_1_left", "exterior"),
    ("wrist_image_left", "wrist"),
];
/// Frames per camera: t−15 then t.
pub const FRAMES_PER_CAMERA: usize = 2;
/// State keys and widths, in model order.
pub const STATE_KEYS: [(&str, usize); 3] = [
    ("eef_9d", 9),
    ("gripper_position", 1),
    ("joint_position", 7),
];

/// The raw (un-normalised) arm state.
#[derive(Debug, Clone, PartialEq)]
pub struct RawState {
    /// xyz then the first two rows of the rotation matrix.
    pub eef_9d: [f32; 9],
    /// Gripper opening.
    pub gripper_position: [f32; 1],
    /// Seven joint angles.
    pub joint_position: [f32; 7],
}

impl RawState {
    /// The groups as owned `(key, values)` pairs, in model order (an observation's state).
    pub fn to_pairs(&self) -> Vec<(String, Vec<f32>)> {
        self.groups()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_vec()))
            .collect()
    }

    /// The groups by key, in model order.
    pub fn groups(&self) -> [(&'static str, &[f32]); 3] {
        [
            ("eef_9d", &self.eef_9d[..]),
            ("gripper_position", &self.gripper_position[..]),
            ("joint_position", &self.joint_position[..]),
        ]
    }
}
