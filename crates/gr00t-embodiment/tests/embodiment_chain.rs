//! Every multi-embodiment case end to end on the tiny model: frames + state + instruction →
//! [`EmbodimentProcessor`](gr00t_embodiment::embodiment::EmbodimentProcessor) → network →
//! physical actions, against what NVIDIA's `Gr00tPolicy.get_action` returned
//! (`tests/fixtures/gr00t_n17_tiny_multi`).

use gr00t_embodiment::actions::{ActionGroup, DecodedActions};
use gr00t_embodiment::embodiment::{EncodedRequest, Observation};
use gr00t_embodiment::error::EmbodimentError;
use gr00t_embodiment::image::Frame;
use gr00t_embodiment::observation::{NoiseSource, RequestError};
use gr00t_embodiment::pose;
use gr00t_fixtures::{
    max_abs_diff, multi_checkpoint, pearson, MultiCase, EXTRA_CASES, MULTI_CASES,
};
use gr00t_model::taps::Recorder;
use gr00t_model::{Checkpoint, Gr00tModel};
use support::{assert_inputs_match, case_observation as observation, case_processor};

mod support;

#[test]
fn every_embodiment_matches_nvidia_end_to_end() {
    let cases: Vec<MultiCase> = MULTI_CASES.iter().map(|n| MultiCase::load(n)).collect();
    end_to_end(&multi_checkpoint(), &cases);
}

/// The LIBERO-like (2 views × [0], 256×256, 7 absolute actions with a mean/std gripper, H 16)
/// and 4×4-EEF cases of `gr00t_n17_tiny_extra`. The 4×4 key is `[1, 16, 4, 4]` upstream and
/// `[1, 16, 16]` here, the same values row-major.
#[test]
fn extra_embodiments_match_nvidia_end_to_end() {
    let cases: Vec<MultiCase> = EXTRA_CASES
        .iter()
        .map(|n| MultiCase::load_extra(n))
        .collect();
    end_to_end(&gr00t_fixtures::extra_checkpoint("checkpoint"), &cases);
}

/// (rotation, position) max|Δ| of two `[x, y, z, rotvec]` head poses. Near π a rotvec may
/// flip axis, so the rotations are compared as matrices.
fn head_pose_deltas(a: &[f32], b: &[f32]) -> (f64, f32) {
    let m = |r: &[f32]| pose::rotvec_to_matrix([r[3] as f64, r[4] as f64, r[5] as f64]);
    let dr = m(a)
        .iter()
        .flatten()
        .zip(m(b).iter().flatten())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    (dr, max_abs_diff(&a[..3], &b[..3]))
}

/// Every case of `cases` through its processor and the network loaded in `dtype`:
/// `check(case, encoded, action_pred, decoded)`.
fn run_cases(
    checkpoint: &std::path::Path,
    cases: &[MultiCase],
    dtype: candle_core::DType,
    mut check: impl FnMut(&MultiCase, &EncodedRequest, &[f32], &DecodedActions),
) {
    let ckpt = Checkpoint::open(checkpoint).unwrap();
    let ids: Vec<usize> = ckpt.embodiment_ids.values().copied().collect();
    let model =
        Gr00tModel::load_with(&ckpt, &gr00t_fixtures::test_device(), dtype, Some(&ids)).unwrap();
    for case in cases {
        let proc = case_processor(&ckpt, case);
        let obs = observation(case);
        let enc = proc.encode(&obs).unwrap();
        let fwd = model.forward(&enc.inputs, &Recorder::disabled()).unwrap();
        let decoded = proc.decode(&fwd.action_pred, &obs).unwrap();
        check(case, &enc, &fwd.action_pred, &decoded);
    }
}

/// Upstream's `action.{key}` of group `g`, checked to be as long as ours.
fn reference_group(case: &MultiCase, g: &ActionGroup) -> Vec<f32> {
    let want = case.outputs.f32s(&format!("action.{}", g.key));
    assert_eq!(g.actions.len(), want.len(), "{} {}", case.name, g.key);
    want
}

/// Each head pose of `g` within `rotation` (as matrices) and `position` of upstream's `want`.
fn assert_head_poses(name: &str, g: &ActionGroup, want: &[f32], rotation: f64, position: f32) {
    for (a, b) in g.rows().zip(want.chunks_exact(6)) {
        let (dr, dp) = head_pose_deltas(a, b);
        assert!(dr <= rotation, "{name} head_pose rotation max|Δ| {dr}");
        assert!(dp <= position, "{name} head_pose position max|Δ| {dp}");
    }
}

fn end_to_end(checkpoint: &std::path::Path, cases: &[MultiCase]) {
    let mut worst_r = 1.0f64;
    let mut worst_rel = 0.0f32;
    run_cases(
        checkpoint,
        cases,
        candle_core::DType::F32,
        |case, enc, action_pred, decoded| {
            let name = &case.name;
            let out = &case.outputs;
            // Inputs: exact.
            assert_inputs_match(name, &enc.inputs, out);
            // Network and decode: within the DROID gates.
            let want_pred = out.f32s("head.action_pred");
            let r = pearson(action_pred, &want_pred);
            let d = max_abs_diff(action_pred, &want_pred);
            eprintln!("{name}: action_pred r {r:.9}, max|Δ| {d:.2e}");
            assert!(r >= 0.99999, "{name}: action_pred r {r}");
            for g in &decoded.groups {
                let want = reference_group(case, g);
                if g.key == "head_pose" {
                    assert_head_poses(name, g, &want, 1e-4, 1e-5);
                    continue;
                }
                let r = pearson(&g.actions, &want);
                let d = max_abs_diff(&g.actions, &want);
                let scale = want.iter().fold(0.0f32, |m, x| m.max(x.abs())).max(1e-6);
                eprintln!("  {:<18} r {r:.9}, max|Δ| {d:.2e}", g.key);
                assert!(d <= 1e-5 * scale.max(1.0), "{name} {}: max|Δ| {d}", g.key);
                if want.iter().any(|&x| x != want[0]) {
                    assert!(r >= 0.9999, "{name} {}: r {r}", g.key);
                    worst_r = worst_r.min(r);
                }
                worst_rel = worst_rel.max(d / scale);
            }
        },
    );
    eprintln!("worst action r {worst_r:.9}, worst max|Δ|/max|ref| {worst_rel:.2e}");
}

/// `--dtype bf16` (on the CPU: every product's operands rounded to bf16, attention's too,
/// f32 accumulation and f32 elsewhere) on every multi-embodiment and extra case: each action
/// group within the bf16 gate against NVIDIA's fp32 actions, r ≥ 0.99999 and
/// max|Δ| ≤ 1e-2·max|ref| (head poses as rotations). Prints the worst group per case.
#[test]
fn bf16_keeps_every_embodiment_group_within_the_bf16_gate() {
    let multi: Vec<MultiCase> = MULTI_CASES.iter().map(|n| MultiCase::load(n)).collect();
    bf16_end_to_end(&multi_checkpoint(), &multi);
    let extra: Vec<MultiCase> = EXTRA_CASES
        .iter()
        .map(|n| MultiCase::load_extra(n))
        .collect();
    bf16_end_to_end(&gr00t_fixtures::extra_checkpoint("checkpoint"), &extra);
}

fn bf16_end_to_end(checkpoint: &std::path::Path, cases: &[MultiCase]) {
    let device = gr00t_fixtures::test_device();
    run_cases(
        checkpoint,
        cases,
        candle_core::DType::BF16,
        |case, _, _, decoded| {
            let name = &case.name;
            // (1 − r, max|Δ|/max|ref|) of the worst group.
            let (mut worst_1r, mut worst_rel) = (0f64, 0f32);
            for g in &decoded.groups {
                let want = reference_group(case, g);
                let scale = want.iter().fold(0.0f32, |m, x| m.max(x.abs())).max(1e-6);
                if g.key == "head_pose" {
                    assert_head_poses(name, g, &want, 1e-2, 1e-2 * scale);
                    continue;
                }
                let d = max_abs_diff(&g.actions, &want);
                assert!(
                    d <= 1e-2 * scale,
                    "{name} {}: max|Δ| {d:e}, max|ref| {scale}",
                    g.key
                );
                worst_rel = worst_rel.max(d / scale);
                if want.iter().any(|&x| x != want[0]) {
                    let r = pearson(&g.actions, &want);
                    assert!(r >= 0.99999, "{name} {}: r {r}", g.key);
                    worst_1r = worst_1r.max(1.0 - r);
                }
            }
            eprintln!(
                "bf16 on {device:?} {name}: worst group 1 - r = {worst_1r:.2e}, max|Δ| = {worst_rel:.2e} of max|ref|"
            );
        },
    );
}

#[test]
fn refusals_name_the_field() {
    let ckpt = Checkpoint::open(multi_checkpoint()).unwrap();
    let case = MultiCase::load("case_real_r1_pro_sharpa_relative_eef_1");
    let proc = case_processor(&ckpt, &case);
    let good = observation(&case);
    let field = |obs: &Observation| refused(proc.encode(obs)).field;

    let mut o = good.clone();
    o.images.retain(|(v, _)| v != "left_wrist_view");
    assert_eq!(field(&o), "images.left_wrist_view");
    let mut o = good.clone();
    o.images.push(("top_view".into(), vec![]));
    assert_eq!(field(&o), "images.top_view");
    let mut o = good.clone();
    o.images[0].1.pop();
    assert_eq!(field(&o), format!("images.{}", o.images[0].0));
    // A portrait frame in a landscape embodiment: not the same size after the transform.
    let mut o = good.clone();
    let f = &o.images[1].1[1];
    let (w, h) = (f.height, f.width);
    o.images[1].1[1] = Frame::new(w, h, vec![0; w * h * 3]).unwrap();
    let view = o.images[1].0.clone();
    let err = refused(proc.encode(&o));
    assert_eq!(err.field, format!("images.{view}[1]"), "{err}");
    assert!(err.to_string().contains("letter_box_transform"), "{err}");
    let mut o = good.clone();
    o.state.retain(|(k, _)| k != "head_pose");
    assert_eq!(field(&o), "state.head_pose");
    let mut o = good.clone();
    o.state[0].1.push(0.0);
    assert_eq!(field(&o), format!("state.{}", o.state[0].0));
    let mut o = good.clone();
    o.state[1].1[2] = f32::NAN;
    assert_eq!(field(&o), format!("state.{}[2]", o.state[1].0));
    let mut o = good.clone();
    o.noise = NoiseSource::Client(vec![0.0; 10]);
    assert_eq!(field(&o), "noise");
    let mut o = good;
    o.instruction = " ".into();
    assert_eq!(field(&o), "instruction");
}

/// A portrait view next to landscape ones: refused without the letterbox (as upstream fails),
/// served with it, every frame then 256x256 → 16x16 patches, 64 tokens.
#[test]
fn letterbox_serves_mixed_aspect_views() {
    let mut ckpt = Checkpoint::open(multi_checkpoint()).unwrap();
    ckpt.processor.letter_box_transform = true;
    let case = MultiCase::load("case_real_r1_pro_sharpa_relative_eef_1");
    let proc = case_processor(&ckpt, &case);
    let mut o = observation(&case);
    let f = &o.images[1].1[1];
    let (w, h) = (f.height, f.width);
    o.images[1].1[1] = Frame::new(w, h, vec![0; w * h * 3]).unwrap();
    let enc = proc.encode(&o).unwrap();
    let frames: usize = o.images.iter().map(|(_, f)| f.len()).sum();
    assert_eq!(enc.inputs.image_grid_thw, vec![[1, 16, 16]; frames]);
    assert_eq!(
        enc.inputs.pixel_values.len(),
        frames * 256 * enc.inputs.patch_dim
    );
}

/// The torchvision path squashes every frame to image_target_size, so any mix of sizes works.
#[test]
fn torchvision_path_lands_every_frame_on_the_target_size() {
    let mut ckpt = Checkpoint::open(multi_checkpoint()).unwrap();
    ckpt.processor.use_albumentations = false;
    ckpt.processor.image_target_size = Some(vec![240, 320]);
    ckpt.processor.image_crop_size = Some(vec![216, 288]);
    let case = MultiCase::load("case_real_r1_pro_sharpa_relative_eef_1");
    let proc = case_processor(&ckpt, &case);
    let mut o = observation(&case);
    o.images[1].1[1] = Frame::new(90, 160, vec![7; 90 * 160 * 3]).unwrap();
    let enc = proc.encode(&o).unwrap();
    let frames: usize = o.images.iter().map(|(_, f)| f.len()).sum();
    // 320x240 → smart_resize 320x256 (240/32 = 7.5 rounds to 8) → 16x20 patches, 80 tokens.
    assert_eq!(enc.inputs.image_grid_thw, vec![[1, 16, 20]; frames]);
}

/// A 4×4 EEF state whose rotation block is a reflection is refused before inference, naming
/// the state key (upstream: scipy's `from_matrix` refuses a non-positive determinant in decode).
#[test]
fn reflected_4x4_state_is_refused_naming_the_key() {
    let ckpt = Checkpoint::open(gr00t_fixtures::extra_checkpoint("checkpoint")).unwrap();
    let case = MultiCase::load_extra("case_new_embodiment_eef4x4_2");
    let proc = case_processor(&ckpt, &case);
    let mut obs = observation(&case);
    proc.encode(&obs).unwrap();
    let pose = &mut obs
        .state
        .iter_mut()
        .find(|(k, _)| k == "eef_pose")
        .unwrap()
        .1;
    pose[0] = -pose[0];
    pose[1] = -pose[1];
    pose[2] = -pose[2];
    let err = refused(proc.encode(&obs));
    assert_eq!(err.field, "state.eef_pose", "{err}");
}

/// The client's refusal of an encode that must fail for the client's fault.
fn refused<T: std::fmt::Debug>(r: Result<T, EmbodimentError>) -> RequestError {
    match r.unwrap_err() {
        EmbodimentError::Invalid(e) => e,
        other => panic!("not the client's fault: {other}"),
    }
}
