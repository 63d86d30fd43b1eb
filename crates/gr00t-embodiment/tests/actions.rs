//! Action decoding parity: `head.action_pred` + raw state → `decode.unnormalized.*`, `output.*`.

use gr00t_embodiment::actions::{
    decode_actions, ActionDecoder, ActionError, RelativeFormat, Representation,
};
use gr00t_fixtures::{max_abs_diff, tiny_checkpoint, Taps, CASES};
use gr00t_model::checkpoint::{KeyStats, Statistics};
use gr00t_model::Checkpoint;
use support::droid_state;

mod support;

const TAG: &str = "oxe_droid_relative_eef_relative_joint";
const KEYS: [&str; 3] = ["eef_9d", "gripper_position", "joint_position"];

fn checkpoint() -> Checkpoint {
    Checkpoint::open(tiny_checkpoint()).expect("tiny checkpoint")
}

/// How many values of `ours` equal upstream's bit for bit.
fn bit_exact(ours: &[f32], want: &[f32]) -> usize {
    ours.iter()
        .zip(want)
        .filter(|(a, b)| a.to_bits() == b.to_bits())
        .count()
}

fn raw_state(taps: &Taps) -> Vec<(&'static str, Vec<f32>)> {
    KEYS.iter()
        .map(|k| (*k, taps.f32s(&format!("input.state.{k}"))))
        .collect()
}

#[test]
fn fixture_decode_matches_within_1e5() {
    let ckpt = checkpoint();
    let dec = ActionDecoder::new(&ckpt.statistics, &ckpt.processor, TAG).unwrap();
    assert_eq!(dec.horizon(), 40);
    let mut worst_unnorm = 0.0f32;
    let mut worst_out = 0.0f32;
    for case in CASES {
        let taps = Taps::load(case);
        let pred = taps.f32s("head.action_pred");
        let state = raw_state(&taps);
        let raw: Vec<(&str, &[f32])> = state.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        let out = dec.decode(&pred, &raw).unwrap();
        assert_eq!(
            out.groups
                .iter()
                .map(|g| g.key.as_str())
                .collect::<Vec<_>>(),
            KEYS
        );
        for g in &out.groups {
            let want_u = taps.f32s(&format!("decode.unnormalized.{}", g.key));
            let want_o = taps.f32s(&format!("output.{}", g.key));
            assert_eq!(g.unnormalized.len(), want_u.len(), "{case} {}", g.key);
            let du = max_abs_diff(&g.unnormalized, &want_u);
            let dout = max_abs_diff(&g.actions, &want_o);
            let (exact_u, exact_o) = (
                bit_exact(&g.unnormalized, &want_u),
                bit_exact(&g.actions, &want_o),
            );
            eprintln!(
                "{case} {:<16} unnormalized max|Δ| {du:.3e} ({exact_u}/{} exact), output max|Δ| {dout:.3e} ({exact_o}/{} exact)",
                g.key,
                want_u.len(),
                want_o.len()
            );
            assert!(du <= 1e-5, "{case} {}: unnormalized max|Δ| {du:e}", g.key);
            assert!(dout <= 1e-5, "{case} {}: output max|Δ| {dout:e}", g.key);
            worst_unnorm = worst_unnorm.max(du);
            worst_out = worst_out.max(dout);
        }
    }
    eprintln!("worst: unnormalized {worst_unnorm:.3e}, output {worst_out:.3e}");
}

#[test]
fn bundled_taps_are_the_rows_edition() {
    // The first edition decoded `output.eef_9d` with columns; the corrected taps say rows.
    for case in CASES {
        let meta = Taps::metadata(case);
        let convention = meta.get("eef_9d_convention").map(String::as_str);
        assert!(
            convention.is_some_and(|c| c.starts_with("rot6d = first two rows")),
            "{case}: eef_9d_convention {convention:?}"
        );
    }
}

#[test]
fn normalized_is_the_unclipped_model_slice() {
    let ckpt = checkpoint();
    let taps = Taps::load("case0");
    let pred = taps.f32s("head.action_pred");
    let state = raw_state(&taps);
    let raw: Vec<(&str, &[f32])> = state.iter().map(|(k, v)| (*k, v.as_slice())).collect();
    let out = decode_actions(&pred, &raw, &ckpt.statistics, &ckpt.processor, TAG).unwrap();
    let joint = out.get("joint_position").unwrap();
    for step in 0..40 {
        assert_eq!(
            joint.normalized[step * 7..step * 7 + 7],
            pred[step * 132 + 10..step * 132 + 17]
        );
    }
    let grip = out.get("gripper_position").unwrap();
    assert_eq!(grip.rows().count(), 40);
    assert!(
        out.groups
            .iter()
            .flat_map(|g| &g.normalized)
            .any(|x| x.abs() > 1.0),
        "no saturation exercised"
    );
    assert!(out.get("base").is_none());
}

#[test]
fn representations_come_from_the_processor_config() {
    let ckpt = checkpoint();
    let dec = ActionDecoder::new(&ckpt.statistics, &ckpt.processor, TAG).unwrap();
    let keys: Vec<_> = dec
        .keys()
        .map(|(k, d, r)| (k.to_string(), d, r.clone()))
        .collect();
    let rel = |s: &str, f| Representation::Relative {
        state_key: s.into(),
        format: f,
    };
    assert_eq!(
        keys,
        vec![
            (
                "eef_9d".to_string(),
                9,
                rel("eef_9d", RelativeFormat::XyzRot6d)
            ),
            ("gripper_position".to_string(), 1, Representation::Absolute),
            (
                "joint_position".to_string(),
                7,
                rel("joint_position", RelativeFormat::Delta)
            ),
        ]
    );
    assert_eq!(
        dec.required_states().collect::<Vec<_>>(),
        vec![("eef_9d", 9), ("joint_position", 7)]
    );
}

/// The relative-action statistics of `key` in `stats`, to edit.
fn relative_stats<'a>(stats: &'a mut Statistics, key: &str) -> &'a mut KeyStats {
    stats
        .by_tag
        .get_mut(TAG)
        .and_then(|g| g.get_mut("relative_action"))
        .and_then(|k| k.get_mut(key))
        .unwrap()
}

/// Statistics whose relative eef_9d bounds are both `rel`, so every step decodes to exactly `rel`.
fn pinned_eef_stats(ckpt: &Checkpoint, rel: [f64; 9]) -> Statistics {
    let mut stats = ckpt.statistics.clone();
    let ks = relative_stats(&mut stats, "eef_9d");
    ks.min = vec![rel.to_vec()];
    ks.max = vec![rel.to_vec()];
    stats
}

#[test]
fn pose_composition_is_t_ref_times_t_rel_with_row_rot6d() {
    let ckpt = checkpoint();
    let pred = vec![0.3f32; 40 * 132];
    let grip = [0.5f32];
    let joint = [0.0f32; 7];

    // Identity relative pose: the absolute pose is the state's (with its rot6d orthonormalised).
    let stats = pinned_eef_stats(&ckpt, [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
    let eef = [0.4f32, -0.1, 0.3, 0.0, 2.0, 0.0, -3.0, 0.0, 0.0]; // rows scaled by 2 and 3
    let raw = droid_state(&eef, &grip, &joint);
    let out = decode_actions(&pred, &raw, &stats, &ckpt.processor, TAG).unwrap();
    for row in out.get("eef_9d").unwrap().rows() {
        assert_eq!(row, [0.4, -0.1, 0.3, 0.0, 1.0, 0.0, -1.0, 0.0, 0.0]);
    }

    // Reference: Rz(90°) at (0.5, 0, 0); relative: Rz(90°) and 1 along the reference x axis.
    // Rz(90°) = [[0,-1,0],[1,0,0],[0,0,1]], so its rot6d (rows) is [0,-1,0, 1,0,0].
    // T_ref·T_rel = Rz(180°) at Rz(90°)·(1, 0, 0) + (0.5, 0, 0) = (0.5, 1, 0).
    let stats = pinned_eef_stats(&ckpt, [1.0, 0.0, 0.0, 0.0, -1.0, 0.0, 1.0, 0.0, 0.0]);
    let eef = [0.5f32, 0.0, 0.0, 0.0, -1.0, 0.0, 1.0, 0.0, 0.0];
    let raw = droid_state(&eef, &grip, &joint);
    let out = decode_actions(&pred, &raw, &stats, &ckpt.processor, TAG).unwrap();
    let want = [0.5f32, 1.0, 0.0, -1.0, 0.0, 0.0, 0.0, -1.0, 0.0];
    for row in out.get("eef_9d").unwrap().rows() {
        let d = max_abs_diff(row, &want);
        assert!(d < 1e-7, "{row:?} vs {want:?}");
    }
}

#[test]
fn per_step_relative_statistics_are_used_row_by_row() {
    let ckpt = checkpoint();
    let mut stats = ckpt.statistics.clone();
    let ks = relative_stats(&mut stats, "joint_position");
    // Step k: [k, k + 2], so a normalised 0 decodes to k + 1.
    ks.min = (0..40).map(|k| vec![k as f64; 7]).collect();
    ks.max = (0..40).map(|k| vec![k as f64 + 2.0; 7]).collect();
    let pred = vec![0.0f32; 40 * 132];
    let eef = [0.5f32, 0.0, 0.3, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0];
    let grip = [0.5f32];
    let joint = [0.25f32; 7];
    let raw = droid_state(&eef, &grip, &joint);
    let out = decode_actions(&pred, &raw, &stats, &ckpt.processor, TAG).unwrap();
    let j = out.get("joint_position").unwrap();
    for (k, row) in j.unnormalized.chunks_exact(7).enumerate() {
        assert!(row.iter().all(|&x| x == k as f32 + 1.0));
    }
    for (k, row) in j.rows().enumerate() {
        assert!(row.iter().all(|&x| x == k as f32 + 1.25));
    }
    // Too few rows is a configuration error.
    let ks = relative_stats(&mut stats, "joint_position");
    ks.min.truncate(3);
    ks.max.truncate(3);
    assert!(matches!(
        ActionDecoder::new(&stats, &ckpt.processor, TAG),
        Err(ActionError::Config(_))
    ));
}

#[test]
fn absolute_mode_uses_action_percentiles_and_ignores_state() {
    let ckpt = checkpoint();
    let mut proc = ckpt.processor.clone();
    proc.use_relative_action = false;
    let dec = ActionDecoder::new(&ckpt.statistics, &proc, TAG).unwrap();
    assert_eq!(dec.required_states().count(), 0);
    let pred = vec![-1.0f32; 40 * 132];
    let out = dec.decode(&pred, &[]).unwrap();
    let q01 = &ckpt
        .statistics
        .get(TAG, "action", "joint_position")
        .unwrap()
        .q01[0];
    let j = out.get("joint_position").unwrap();
    assert_eq!(j.actions, j.unnormalized);
    for row in j.rows() {
        let want: Vec<f32> = q01.iter().map(|&x| x as f32).collect();
        assert_eq!(row, &want[..]);
    }
}

#[test]
fn bad_inputs_are_reported() {
    let ckpt = checkpoint();
    let dec = ActionDecoder::new(&ckpt.statistics, &ckpt.processor, TAG).unwrap();
    let pred = vec![0.0f32; 40 * 132];
    let eef = [0.5f32, 0.0, 0.3, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0];
    let grip = [0.5f32];
    let joint = [0.0f32; 7];
    let ok = droid_state(&eef, &grip, &joint);
    assert!(dec.decode(&pred, &ok).is_ok());
    assert!(matches!(
        dec.decode(&pred[..132 * 39], &ok),
        Err(ActionError::Shape(_))
    ));
    assert!(matches!(
        dec.decode(&pred[..100], &ok),
        Err(ActionError::Shape(_))
    ));
    assert_eq!(
        dec.decode(&pred, &ok[..2]),
        Err(ActionError::MissingState("joint_position".into()))
    );
    let short = [0.0f32; 5];
    assert_eq!(
        dec.decode(
            &pred,
            &[("eef_9d", &eef[..]), ("joint_position", &short[..])]
        ),
        Err(ActionError::StateLength {
            key: "joint_position".into(),
            expected: 7,
            got: 5
        })
    );
    let nan = [0.0, 0.0, f32::INFINITY, 0.0, 0.0, 0.0, 0.0];
    assert_eq!(
        dec.decode(&pred, &[("eef_9d", &eef[..]), ("joint_position", &nan[..])]),
        Err(ActionError::NonFiniteState("joint_position".into()))
    );
    let flat = [0.5f32, 0.0, 0.3, 1.0, 0.0, 0.0, 2.0, 0.0, 0.0]; // parallel rows
    assert!(matches!(
        dec.decode(
            &pred,
            &[("eef_9d", &flat[..]), ("joint_position", &joint[..])]
        ),
        Err(ActionError::DegenerateRotation(_))
    ));
    assert!(matches!(
        ActionDecoder::new(&ckpt.statistics, &ckpt.processor, "no_such_tag"),
        Err(ActionError::Config(_))
    ));
}
