//! State normalisation parity with `proc.state`.

use gr00t_embodiment::state::{normalize_state, StateError, StateNormalizer};
use gr00t_fixtures::{request_json, tiny_checkpoint, Taps, CASES};
use gr00t_model::checkpoint::{KeyStats, Statistics};
use gr00t_model::Checkpoint;
use std::collections::BTreeMap;
use support::droid_state;

mod support;

const TAG: &str = "oxe_droid_relative_eef_relative_joint";
const KEYS: [&str; 3] = ["eef_9d", "gripper_position", "joint_position"];

fn checkpoint() -> Checkpoint {
    Checkpoint::open(tiny_checkpoint()).expect("tiny checkpoint")
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn fixture_state_is_bit_exact_from_taps_and_requests() {
    let ckpt = checkpoint();
    let norm = StateNormalizer::new(&ckpt.statistics, &ckpt.processor, TAG).unwrap();
    assert_eq!(
        norm.keys().collect::<Vec<_>>(),
        vec![
            ("eef_9d", 9),
            ("gripper_position", 1),
            ("joint_position", 7)
        ]
    );
    for case in CASES {
        let taps = Taps::load(case);
        let want = taps.f32s("proc.state");
        assert_eq!(want.len(), 132);

        let from_taps: Vec<(&str, Vec<f32>)> = KEYS
            .iter()
            .map(|k| (*k, taps.f32s(&format!("input.state.{k}"))))
            .collect();
        let raw: Vec<(&str, &[f32])> = from_taps.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        let ours = norm.normalize(&raw).unwrap();
        assert_eq!(bits(&ours), bits(&want), "{case}: from taps");

        // request.json floats parse to exactly the tap values.
        let req: serde_json::Value = serde_json::from_str(&request_json(case)).unwrap();
        let from_req: Vec<(&str, Vec<f32>)> = KEYS
            .iter()
            .rev() // order of the keys in the request does not matter
            .map(|k| {
                let v = req["state"][*k].as_array().unwrap();
                (*k, v.iter().map(|x| x.as_f64().unwrap() as f32).collect())
            })
            .collect();
        let raw: Vec<(&str, &[f32])> = from_req.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        let ours = normalize_state(&raw, &ckpt.statistics, &ckpt.processor, TAG).unwrap();
        assert_eq!(bits(&ours), bits(&want), "{case}: from request.json");
        let clipped = ours[..17].iter().filter(|x| x.abs() == 1.0).count();
        eprintln!("{case}: 17 values bit-exact, {clipped} at ±1");
    }
}

#[test]
fn case1_exercises_clipping() {
    let ckpt = checkpoint();
    let taps = Taps::load("case1");
    let joints = taps.f32s("input.state.joint_position");
    let eef = taps.f32s("input.state.eef_9d");
    let grip = taps.f32s("input.state.gripper_position");
    let raw = droid_state(&eef, &grip, &joints);
    let clipped = normalize_state(&raw, &ckpt.statistics, &ckpt.processor, TAG).unwrap();
    // joint_position[1] is above q99 and [3] below q01 (fixtures README).
    assert_eq!(clipped[10 + 1], 1.0);
    assert_eq!(clipped[10 + 3], -1.0);
    let mut proc = ckpt.processor.clone();
    proc.clip_outliers = false;
    let unclipped = normalize_state(&raw, &ckpt.statistics, &proc, TAG).unwrap();
    assert!(unclipped[11] > 1.0 && unclipped[13] < -1.0);
}

#[test]
fn min_max_without_percentiles_and_constant_dims() {
    let mut stats = Statistics::default();
    let ks = |lo: Vec<f64>, hi: Vec<f64>, qlo: Vec<f64>, qhi: Vec<f64>| KeyStats {
        min: vec![lo],
        max: vec![hi],
        q01: vec![qlo],
        q99: vec![qhi],
        mean: Vec::new(),
        std: Vec::new(),
    };
    let mut keys = BTreeMap::new();
    keys.insert(
        "eef_9d".to_string(),
        ks(vec![0.0; 9], vec![2.0; 9], vec![0.5; 9], vec![1.5; 9]),
    );
    // A constant dimension (isclose(hi, lo)) and a near-constant one within rtol.
    keys.insert(
        "gripper_position".to_string(),
        ks(vec![0.3], vec![0.3], vec![0.3], vec![0.3 + 1e-7]),
    );
    keys.insert(
        "joint_position".to_string(),
        ks(vec![-1.0; 7], vec![1.0; 7], vec![-1.0; 7], vec![1.0; 7]),
    );
    let mut groups = BTreeMap::new();
    groups.insert("state".to_string(), keys);
    stats.by_tag.insert(TAG.to_string(), groups);
    let ckpt = checkpoint();
    let mut proc = ckpt.processor.clone();

    let eef = [1.0f32; 9];
    let grip = [5.0f32];
    let joint = [0.25f32; 7];
    let raw = droid_state(&eef, &grip, &joint);
    let q = normalize_state(&raw, &stats, &proc, TAG).unwrap();
    assert_eq!(q[0], 0.0); // (1 − 0.5)/(1.5 − 0.5)·2 − 1
    assert_eq!(q[9], 0.0); // isclose(q99, q01)
    assert_eq!(q[10], 0.25);
    proc.use_percentiles = false;
    let m = normalize_state(&raw, &stats, &proc, TAG).unwrap();
    assert_eq!(m[0], 0.0); // (1 − 0)/(2 − 0)·2 − 1
    assert_eq!(m[9], 0.0); // min == max
    assert!(m[17..].iter().all(|&x| x == 0.0));
}

#[test]
fn bad_inputs_are_reported() {
    let ckpt = checkpoint();
    let norm = StateNormalizer::new(&ckpt.statistics, &ckpt.processor, TAG).unwrap();
    let eef = [0.5f32; 9];
    let grip = [0.5f32];
    let joint = [0.0f32; 7];
    let short = [0.0f32; 6];
    let nan = [0.0, f32::NAN, 0.0, 0.0, 0.0, 0.0, 0.0];
    assert_eq!(
        norm.normalize(&[("eef_9d", &eef), ("gripper_position", &grip)]),
        Err(StateError::MissingKey("joint_position".into()))
    );
    assert_eq!(
        norm.normalize(&[
            ("eef_9d", &eef),
            ("gripper_position", &grip),
            ("joint_position", &short)
        ]),
        Err(StateError::WrongLength {
            key: "joint_position".into(),
            expected: 7,
            got: 6
        })
    );
    assert_eq!(
        norm.normalize(&[
            ("eef_9d", &eef),
            ("gripper_position", &grip),
            ("joint_position", &nan)
        ]),
        Err(StateError::NonFinite {
            key: "joint_position".into(),
            index: 1
        })
    );
    assert_eq!(
        norm.normalize(&[
            ("eef_9d", &eef),
            ("gripper_position", &grip),
            ("joint_position", &joint),
            ("base", &grip)
        ]),
        Err(StateError::UnknownKey("base".into()))
    );
    assert_eq!(
        norm.normalize(&[
            ("eef_9d", &eef),
            ("eef_9d", &eef),
            ("gripper_position", &grip),
            ("joint_position", &joint)
        ]),
        Err(StateError::DuplicateKey("eef_9d".into()))
    );
    assert!(matches!(
        StateNormalizer::new(&ckpt.statistics, &ckpt.processor, "no_such_tag"),
        Err(StateError::Config(_))
    ));
}
