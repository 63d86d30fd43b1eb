//! State encoding and action decoding of every embodiment of the multi-embodiment fixture
//! (`tests/fixtures/gr00t_n17_tiny_multi`, NVIDIA's N1.7 code): min-max with q01/q99 and clip,
//! mean/std (unclipped), sin/cos, zero-range dims; ABSOLUTE, RELATIVE NON_EEF, RELATIVE EEF in
//! XYZ_ROT6D and XYZ_ROTVEC; horizons 8, 16 and 40; per-step relative statistics.

use gr00t_embodiment::actions::ActionDecoder;
use gr00t_embodiment::pose;
use gr00t_embodiment::state::StateNormalizer;
use gr00t_fixtures::{
    max_abs_diff, multi_checkpoint, tiny_checkpoint, MultiCase, Taps, CASES, MULTI_CASES,
};
use gr00t_model::Checkpoint;

fn checkpoint() -> Checkpoint {
    Checkpoint::open(multi_checkpoint()).expect("multi checkpoint")
}

#[test]
fn state_encoding_matches_proc_state() {
    let ckpt = checkpoint();
    for name in MULTI_CASES {
        assert_state_bit_exact(&ckpt, &MultiCase::load(name));
    }
}

/// The case's raw state normalised bit for bit as upstream's `proc.state`.
fn assert_state_bit_exact(ckpt: &Checkpoint, case: &MultiCase) {
    let name = &case.name;
    let norm = StateNormalizer::new(&ckpt.statistics, &ckpt.processor, &case.tag).unwrap();
    let ours = norm.normalize(&case.raw_state()).unwrap();
    let want = case.outputs.f32s("proc.state");
    assert_eq!(ours.len(), want.len(), "{name}");
    let differ: Vec<(usize, f32, f32)> = ours
        .iter()
        .zip(&want)
        .enumerate()
        .filter(|(_, (a, b))| a.to_bits() != b.to_bits())
        .map(|(i, (a, b))| (i, *a, *b))
        .collect();
    assert!(
        differ.is_empty(),
        "{name}: (index, ours, reference) {differ:?}"
    );
}

#[test]
fn state_encodings_do_what_upstream_does() {
    let ckpt = checkpoint();
    // widowx_2: pad 0.25 with zero range → 0; gripper 2.1 by mean/std, not clipped.
    let case = MultiCase::load("case_simpler_env_widowx_2");
    let norm = StateNormalizer::new(&ckpt.statistics, &ckpt.processor, &case.tag).unwrap();
    let s = norm.normalize(&case.raw_state()).unwrap();
    assert_eq!(s[6], 0.0);
    assert!(s[7] > 3.6 && s[7] < 3.7, "gripper z-score {}", s[7]);
    // r1 pro: left_hand_joints (6) are sin/cos, 12 wide, raw values far outside any bounds.
    let case = MultiCase::load("case_real_r1_pro_sharpa_relative_eef_2");
    let norm = StateNormalizer::new(&ckpt.statistics, &ckpt.processor, &case.tag).unwrap();
    assert_eq!(
        norm.keys().map(|(_, d)| d).collect::<Vec<_>>(),
        [9, 9, 6, 6, 6]
    );
    let s = norm.normalize(&case.raw_state()).unwrap();
    let hand = &case
        .state
        .iter()
        .find(|(k, _)| k == "left_hand_joints")
        .unwrap()
        .1;
    for (i, &x) in hand.iter().enumerate() {
        assert_eq!(s[18 + i], (x as f64).sin() as f32);
        assert_eq!(s[24 + i], (x as f64).cos() as f32);
    }
    // With the global flag off the same key is min-max normalised and clipped.
    let mut proc = ckpt.processor.clone();
    proc.apply_sincos_state_encoding = false;
    let norm = StateNormalizer::new(&ckpt.statistics, &proc, &case.tag).unwrap();
    let off = norm.normalize(&case.raw_state()).unwrap();
    assert!(off[18..24].iter().all(|v| (-1.0..=1.0).contains(v)));
    assert!(
        off[36..].iter().all(|&v| v == 0.0),
        "36 wide without sin/cos"
    );
    // exclude_state: all zeros.
    proc.exclude_state = true;
    let norm = StateNormalizer::new(&ckpt.statistics, &proc, &case.tag).unwrap();
    assert!(norm
        .normalize(&case.raw_state())
        .unwrap()
        .iter()
        .all(|&v| v == 0.0));
}

#[test]
fn droid_state_is_unaffected_by_the_sincos_flag() {
    let multi = checkpoint();
    let tiny = Checkpoint::open(tiny_checkpoint()).unwrap();
    let tag = "oxe_droid_relative_eef_relative_joint";
    let a = StateNormalizer::new(&multi.statistics, &multi.processor, tag).unwrap();
    let b = StateNormalizer::new(&tiny.statistics, &tiny.processor, tag).unwrap();
    for case in CASES {
        let taps = Taps::load(case);
        let keys = ["eef_9d", "gripper_position", "joint_position"];
        let state: Vec<(&str, Vec<f32>)> = keys
            .iter()
            .map(|k| (*k, taps.f32s(&format!("input.state.{k}"))))
            .collect();
        let raw: Vec<(&str, &[f32])> = state.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        assert_eq!(a.normalize(&raw).unwrap(), b.normalize(&raw).unwrap());
    }
}

/// Whether two xyz + rotvec rows are the same pose (rotations compared as matrices: near π
/// the rotvec of a rotation can flip axis under a tiny perturbation).
fn same_rotvec_pose(a: &[f32], b: &[f32], tol: f64) -> bool {
    let m = |r: &[f32]| pose::rotvec_to_matrix([r[3] as f64, r[4] as f64, r[5] as f64]);
    let (ma, mb) = (m(a), m(b));
    let rot = ma
        .iter()
        .flatten()
        .zip(mb.iter().flatten())
        .all(|(x, y)| (x - y).abs() <= tol);
    rot && (0..3).all(|i| ((a[i] - b[i]) as f64).abs() <= tol)
}

#[test]
fn action_decoding_matches_every_case() {
    let ckpt = checkpoint();
    let mut worst = 0.0f32;
    for name in MULTI_CASES {
        let case = MultiCase::load(name);
        let dec = ActionDecoder::new(&ckpt.statistics, &ckpt.processor, &case.tag).unwrap();
        let pred = case.outputs.f32s("head.action_pred");
        let out = dec.decode(&pred, &case.raw_state()).unwrap();
        let horizon = case.outputs.dims("head.action_pred")[1].min(dec.horizon());
        for g in &out.groups {
            let want_u = case.outputs.f32s(&format!("decode.unnormalized.{}", g.key));
            let want_o = case.outputs.f32s(&format!("action.{}", g.key));
            assert_eq!(
                case.outputs.dims(&format!("action.{}", g.key)),
                [1, dec.horizon(), g.dim],
                "{name} {}",
                g.key
            );
            assert_eq!(g.actions.len(), horizon * g.dim);
            let du = max_abs_diff(&g.unnormalized, &want_u);
            assert!(du <= 1e-5, "{name} {}: unnormalized max|Δ| {du:e}", g.key);
            if g.key == "head_pose" {
                // Compare as poses; and the rows whose rotvec flipped must flip in ours too
                // (same sign of the dot product with the reference's).
                let mut flips = 0;
                for (a, b) in g.rows().zip(want_o.chunks_exact(6)) {
                    assert!(
                        same_rotvec_pose(a, b, 1e-5),
                        "{name} head_pose {a:?} vs {b:?}"
                    );
                    let dot: f32 = (3..6).map(|i| a[i] * b[i]).sum();
                    flips += usize::from(dot < 0.0);
                }
                eprintln!("{name} head_pose: {flips} rows flipped against the reference");
            } else {
                let d = max_abs_diff(&g.actions, &want_o);
                eprintln!("{name} {:<18} max|Δ| {d:.3e}", g.key);
                assert!(d <= 1e-5, "{name} {}: max|Δ| {d:e}", g.key);
                worst = worst.max(d);
            }
        }
    }
    eprintln!("worst action max|Δ| {worst:.3e}");
}

#[test]
fn eef_rot6d_outputs_are_orthonormal_rows() {
    let ckpt = checkpoint();
    let case = MultiCase::load("case_real_r1_pro_sharpa_relative_eef_2");
    let dec = ActionDecoder::new(&ckpt.statistics, &ckpt.processor, &case.tag).unwrap();
    let out = dec
        .decode(&case.outputs.f32s("head.action_pred"), &case.raw_state())
        .unwrap();
    for key in ["left_wrist_eef", "right_wrist_eef"] {
        for row in out.get(key).unwrap().rows() {
            let (r1, r2) = (&row[3..6], &row[6..9]);
            let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
            assert!((dot(r1, r1) - 1.0).abs() < 1e-6 && (dot(r2, r2) - 1.0).abs() < 1e-6);
            assert!(dot(r1, r2).abs() < 1e-6);
        }
    }
}

/// The LIBERO-like and 4×4-EEF cases of `tests/fixtures/gr00t_n17_tiny_extra`: state encoding
/// bit-exact, decoding within the same gates. Upstream returns the DEFAULT-format EEF key as
/// `[1, H, 4, 4]`; ours is the same values row-major as `[1, H, 16]`.
#[test]
fn extra_cases_encode_and_decode_like_upstream() {
    let ckpt = Checkpoint::open(gr00t_fixtures::extra_checkpoint("checkpoint")).unwrap();
    for name in gr00t_fixtures::EXTRA_CASES {
        let case = MultiCase::load_extra(name);
        assert_state_bit_exact(&ckpt, &case);

        let dec = ActionDecoder::new(&ckpt.statistics, &ckpt.processor, &case.tag).unwrap();
        assert_eq!(dec.horizon(), 16, "{name}");
        let out = dec
            .decode(&case.outputs.f32s("head.action_pred"), &case.raw_state())
            .unwrap();
        for g in &out.groups {
            let dims = case.outputs.dims(&format!("action.{}", g.key));
            assert_eq!(
                dims.iter().product::<usize>(),
                16 * g.dim,
                "{name} {}",
                g.key
            );
            let want_u = case.outputs.f32s(&format!("decode.unnormalized.{}", g.key));
            let du = max_abs_diff(&g.unnormalized, &want_u);
            assert!(du <= 1e-5, "{name} {}: unnormalized max|Δ| {du:e}", g.key);
            let want_o = case.outputs.f32s(&format!("action.{}", g.key));
            let d = max_abs_diff(&g.actions, &want_o);
            eprintln!("{name} {:<10} max|Δ| {d:.3e}", g.key);
            assert!(d <= 1e-5, "{name} {}: max|Δ| {d:e}", g.key);
        }
    }
}

#[test]
fn extra_upstream_facts_hold() {
    let ckpt = Checkpoint::open(gr00t_fixtures::extra_checkpoint("checkpoint")).unwrap();
    // LIBERO gripper actions are mean/std: not clipped (some |n| > 1 decode past ±(std + mean)).
    let case = MultiCase::load_extra("case_libero_sim_1");
    let stats = &ckpt.statistics;
    let dec = ActionDecoder::new(stats, &ckpt.processor, &case.tag).unwrap();
    let out = dec
        .decode(&case.outputs.f32s("head.action_pred"), &case.raw_state())
        .unwrap();
    let grip = &out.get("gripper").unwrap().actions;
    assert_eq!(grip, &case.outputs.f32s("action.gripper"));
    // Model output −3.33 at some step: n·std + mean = −2.98, well below mean − std = −0.81.
    let (mean, std) = (0.12f32, 0.93f32);
    let lowest = grip.iter().fold(f32::INFINITY, |m, &x| m.min(x));
    assert!(lowest < mean - 3.0 * std, "gripper min {lowest}: clipped?");
    // 4×4 EEF: the zero-width bottom row [0, 0, 0, 1] normalises to 0 and the returned poses
    // keep it; the rotation block comes back a rotation.
    for name in [
        "case_new_embodiment_eef4x4_1",
        "case_new_embodiment_eef4x4_2",
    ] {
        let case = MultiCase::load_extra(name);
        let s = case.outputs.f32s("proc.state");
        assert!(
            s[12..16].iter().all(|&v| v == 0.0),
            "{name}: {:?}",
            &s[12..16]
        );
        let dec = ActionDecoder::new(stats, &ckpt.processor, &case.tag).unwrap();
        let out = dec
            .decode(&case.outputs.f32s("head.action_pred"), &case.raw_state())
            .unwrap();
        for row in out.get("eef_pose").unwrap().rows() {
            assert_eq!(&row[12..], &[0.0, 0.0, 0.0, 1.0], "{name}");
            for i in 0..3 {
                for j in 0..3 {
                    let dot: f32 = (0..3).map(|k| row[4 * i + k] * row[4 * j + k]).sum();
                    let want = if i == j { 1.0 } else { 0.0 };
                    assert!((dot - want).abs() < 1e-5, "{name}: rows {i}·{j} = {dot}");
                }
            }
        }
    }
}

/// The refusals upstream showed on the extra fixture (`summary.json` `upstream_refusals`),
/// refused here too: per-step relative statistics with H ± 1 rows (upstream: a broadcast error
/// in decode; here: at construction), and a 4×4 EEF state whose rotation block has a
/// non-positive determinant (scipy `Rotation.from_matrix` refuses it; here: before inference,
/// naming the state key).
#[test]
fn extra_refusals_match_upstream() {
    let summary: serde_json::Value = serde_json::from_slice(
        &std::fs::read(gr00t_fixtures::extra_dir().join("summary.json")).unwrap(),
    )
    .unwrap();
    let refused: Vec<&str> = summary["upstream_refusals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["outcome"] == "refused")
        .map(|r| r["what"].as_str().unwrap())
        .collect();
    let ckpt = Checkpoint::open(gr00t_fixtures::extra_checkpoint("checkpoint")).unwrap();
    for (what, rows) in [
        ("relative_action stats with H+1 rows", 17),
        ("relative_action stats with H-1 rows", 15),
    ] {
        assert!(refused.contains(&what), "{refused:?}");
        let mut stats = ckpt.statistics.clone();
        let rel = stats
            .by_tag
            .get_mut("new_embodiment")
            .unwrap()
            .get_mut("relative_action")
            .unwrap()
            .get_mut("eef_pose")
            .unwrap();
        for v in [&mut rel.min, &mut rel.max, &mut rel.q01, &mut rel.q99] {
            v.resize(rows, v[0].clone());
        }
        let err = ActionDecoder::new(&stats, &ckpt.processor, "new_embodiment").unwrap_err();
        assert!(
            err.to_string().contains("expected 1 or 16 rows"),
            "{what}: {err}"
        );
    }
    // A reflected rotation block in the reference state (det −1).
    let dec = ActionDecoder::new(&ckpt.statistics, &ckpt.processor, "new_embodiment").unwrap();
    let case = MultiCase::load_extra("case_new_embodiment_eef4x4_1");
    let mut state = case.state.clone();
    let pose = &mut state.iter_mut().find(|(k, _)| k == "eef_pose").unwrap().1;
    for j in 0..3 {
        pose[8 + j] = -pose[8 + j]; // third row negated
    }
    let raw: Vec<(&str, &[f32])> = state
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect();
    let (key, err) = dec.check_references(&raw).unwrap_err();
    assert_eq!(key, "eef_pose");
    assert!(err.to_string().contains("degenerate rotation"), "{err}");
    assert!(dec
        .decode(&case.outputs.f32s("head.action_pred"), &raw)
        .is_err());
    dec.check_references(&case.raw_state()).unwrap();
}

/// The multi checkpoint with `edit` applied to its `processor_config.json` and
/// `statistics.json`, in a fresh temp folder (the other files linked).
fn edited_checkpoint(
    name: &str,
    edit: impl Fn(&mut serde_json::Value, &mut serde_json::Value),
) -> std::path::PathBuf {
    let src = multi_checkpoint();
    let dst = std::env::temp_dir().join(format!("gr00t-edited-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dst);
    std::fs::create_dir_all(&dst).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        let file = entry.file_name();
        if file != "processor_config.json" && file != "statistics.json" {
            std::os::unix::fs::symlink(entry.path(), dst.join(&file)).unwrap();
        }
    }
    let read = |f: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(src.join(f)).unwrap()).unwrap()
    };
    let (mut proc, mut stats) = (read("processor_config.json"), read("statistics.json"));
    edit(&mut proc, &mut stats);
    std::fs::write(dst.join("processor_config.json"), proc.to_string()).unwrap();
    std::fs::write(dst.join("statistics.json"), stats.to_string()).unwrap();
    dst
}

/// Layouts upstream cannot serve are refused at start-up with the file and the key: a horizon
/// over the model's 40, a state history, an unknown enum name, statistics missing for a key.
#[test]
fn unservable_layouts_are_refused_naming_file_and_key() {
    use gr00t_embodiment::layout::EmbodimentSpec;
    let tag = "new_embodiment";
    type Edit = fn(&mut serde_json::Value, &mut serde_json::Value);
    let cases: [(&str, Edit, &[&str]); 4] = [
        (
            "horizon",
            |p, _| {
                p["processor_kwargs"]["modality_configs"]["new_embodiment"]["action"]
                    ["delta_indices"] = (0..41).collect::<Vec<i64>>().into();
            },
            &["processor_config.json", "41", "40"],
        ),
        (
            "history",
            |p, _| {
                p["processor_kwargs"]["modality_configs"]["new_embodiment"]["state"]
                    ["delta_indices"] = serde_json::json!([-1, 0]);
            },
            &["processor_config.json", "state history"],
        ),
        (
            "enum",
            |p, _| {
                p["processor_kwargs"]["modality_configs"]["new_embodiment"]["action"]
                    ["action_configs"][0]["rep"] = "SIDEWAYS".into();
            },
            &["SIDEWAYS"],
        ),
        (
            "stats",
            |_, s| {
                s["new_embodiment"]["state"]
                    .as_object_mut()
                    .unwrap()
                    .remove("single_arm");
            },
            &["single_arm"],
        ),
    ];
    for (name, edit, needles) in cases {
        let dir = edited_checkpoint(name, edit);
        let err = match Checkpoint::open(&dir) {
            Err(e) => e.to_string(),
            Ok(ckpt) => match EmbodimentSpec::new(&ckpt, tag) {
                Err(e) => e.to_string(),
                Ok(_) => panic!("{name}: the edited layout was accepted"),
            },
        };
        for needle in needles {
            assert!(err.contains(needle), "{name}: {needle:?} not in {err}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
    // The unedited layout opens: the edits are what is refused.
    let ckpt = checkpoint();
    assert!(EmbodimentSpec::new(&ckpt, tag).is_ok());
}
