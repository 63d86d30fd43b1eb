//! The whole request chain on the tiny fixture model: request JSON → processor → network →
//! decoded physical actions, against the reference's final actions for every case.
//!
//! The network runs on `GR00T_TEST_DEVICE` (default cpu; `cuda[:N]` with the cuda feature),
//! so the same gates check a GPU build.

use candle_core::DType;
use gr00t_embodiment::embodiment::EmbodimentProcessor;
use gr00t_embodiment::prompt::PromptEncoder;
use gr00t_embodiment::response::ActionGroups;
use gr00t_fixtures::{max_abs_diff, pearson, Taps};
use gr00t_model::taps::Recorder;
use gr00t_model::{Checkpoint, Gr00tModel};

mod support;
use support::encode;

/// The generic processor of the DROID tag.
fn droid_processor(ck: &Checkpoint, prompt: PromptEncoder) -> EmbodimentProcessor {
    EmbodimentProcessor::new(ck, prompt, gr00t_embodiment::EMBODIMENT_TAG).unwrap()
}

struct Pipeline {
    processor: EmbodimentProcessor,
    model: Gr00tModel,
}

impl Pipeline {
    fn load() -> Pipeline {
        Pipeline::load_in(DType::F32)
    }

    /// The pipeline with the network computing in `dtype` on the test device.
    fn load_in(dtype: DType) -> Pipeline {
        let ck = Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
        let prompt = PromptEncoder::load(gr00t_fixtures::tokenizer_path()).unwrap();
        let device = gr00t_fixtures::test_device();
        Pipeline {
            processor: droid_processor(&ck, prompt),
            model: Gr00tModel::load_with(&ck, &device, dtype, None).unwrap(),
        }
    }

    fn run(&self, body: &[u8]) -> (ActionGroups, ActionGroups, Vec<f32>) {
        let obs = support::observation(&self.processor, body).unwrap();
        let enc = self.processor.encode(&obs).unwrap();
        let out = self
            .model
            .forward(&enc.inputs, &Recorder::disabled())
            .unwrap();
        let d = self.processor.decode(&out.action_pred, &obs).unwrap();
        (
            ActionGroups::from_decoded(&d, false),
            ActionGroups::from_decoded(&d, true),
            out.action_pred,
        )
    }
}

/// Whether the two runs' values agree bit for bit.
fn bit_identical(a: &[f32], b: &[f32]) -> bool {
    a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn flat(rows: &[Vec<f32>]) -> Vec<f32> {
    rows.iter().flatten().copied().collect()
}

/// Per action group against the case's `output.*` tap: name, Pearson r, max |Δ| and the
/// reference's max |value|.
fn group_agreement(actions: &ActionGroups, taps: &Taps) -> Vec<(&'static str, f64, f32, f32)> {
    [
        ("eef_9d", actions.rows("eef_9d")),
        ("gripper_position", actions.rows("gripper_position")),
        ("joint_position", actions.rows("joint_position")),
    ]
    .into_iter()
    .map(|(key, ours)| {
        let reference = taps.f32s(&format!("output.{key}"));
        let ours = flat(ours);
        let scale = gr00t_fixtures::max_abs(&reference);
        (
            key,
            pearson(&ours, &reference),
            max_abs_diff(&ours, &reference),
            scale,
        )
    })
    .collect()
}

#[test]
fn request_json_to_actions_matches_reference_for_every_case() {
    let p = Pipeline::load();
    for case in gr00t_fixtures::CASES {
        let taps = Taps::load(case);
        let (actions, normalized, action_pred) =
            p.run(gr00t_fixtures::request_json(case).as_bytes());
        // The network output itself (its gate: r ≥ 0.99999 on action_pred).
        let r = pearson(&action_pred, &taps.f32s("head.action_pred"));
        assert!(r >= 0.99999, "{case}: action_pred r = {r}");
        for (key, r, d, scale) in group_agreement(&actions, &taps) {
            eprintln!("f32 {case} {key}: r = {r:.9}, max|Δ| = {d:.3e}");
            // Issue gate for the chain from the request JSON alone: r ≥ 0.9999 per group.
            assert!(r >= 0.9999, "{case} {key}: r = {r}, max|Δ| = {d:e}");
            assert!(d <= 1e-4 * scale.max(1.0), "{case} {key}: max|Δ| = {d:e}");
        }
        assert_eq!(actions.rows("eef_9d").len(), 40);
        assert_eq!(normalized.rows("joint_position")[0].len(), 7);
        // Normalised chunk = the valid dims of action_pred.
        assert_eq!(
            normalized.rows("eef_9d")[3],
            action_pred[3 * 132..3 * 132 + 9].to_vec()
        );
    }
}

/// `--dtype bf16`: on the CPU bf16 products (activations rounded to bf16 at each linear's
/// input, f32 everywhere else; `vdpbf16ps` on AVX512-BF16 CPUs), on a GPU bf16 activations.
/// Every action group of every case stays within the bf16 gate against the fp32 reference:
/// r ≥ 0.99999 and max|Δ| ≤ 1e-2·max|ref|. Prints the figures.
#[test]
fn bf16_compute_keeps_every_action_group_within_the_bf16_gate() {
    let p = Pipeline::load_in(DType::BF16);
    let f32 = Pipeline::load();
    let device = p.model.device().clone();
    for case in gr00t_fixtures::CASES {
        let taps = Taps::load(case);
        let body = gr00t_fixtures::request_json(case);
        let (actions, _, action_pred) = p.run(body.as_bytes());
        let r = pearson(&action_pred, &taps.f32s("head.action_pred"));
        eprintln!(
            "bf16 on {device:?} {case} action_pred: 1 - r = {:.2e}",
            1.0 - r
        );
        for (key, r, d, scale) in group_agreement(&actions, &taps) {
            eprintln!(
                "bf16 on {device:?} {case} {key}: 1 - r = {:.2e}, max|Δ| = {d:.3e} ({:.2e} of max|ref|)",
                1.0 - r,
                d / scale
            );
            assert!(r >= 0.99999, "{case} {key}: r = {r}, max|Δ| = {d:e}");
            assert!(
                d <= 1e-2 * scale,
                "{case} {key}: max|Δ| = {d:e}, max|ref| = {scale}"
            );
        }
        // The products really are rounded: not the f32 network's bits.
        let (_, _, f32_pred) = f32.run(body.as_bytes());
        assert_ne!(action_pred, f32_pred, "{case}: bf16 gave the f32 actions");
    }
}

/// bf16 repeats are bit-identical (the kernel's chains do not depend on the batch, the threads
/// or what ran before).
#[test]
fn bf16_repeats_are_bit_identical() {
    let p = Pipeline::load_in(DType::BF16);
    let a = gr00t_fixtures::request_json("case1");
    let b = gr00t_fixtures::request_json("case3");
    let first_a = p.run(a.as_bytes()).2;
    let _ = p.run(b.as_bytes());
    let again_a = p.run(a.as_bytes()).2;
    assert!(bit_identical(&first_a, &again_a));
}

#[test]
fn interleaved_requests_are_bit_identical() {
    let p = Pipeline::load();
    let a = gr00t_fixtures::request_json("case1");
    let b = gr00t_fixtures::request_json("case3");
    let first_a = p.run(a.as_bytes()).2;
    let first_b = p.run(b.as_bytes()).2;
    assert_ne!(first_a, first_b);
    for _ in 0..2 {
        let again_a = p.run(a.as_bytes()).2;
        let again_b = p.run(b.as_bytes()).2;
        assert!(bit_identical(&first_a, &again_a));
        assert!(bit_identical(&first_b, &again_b));
    }
}

#[test]
fn seeded_request_uses_torch_noise() {
    let p = Pipeline::load();
    // case1 was generated with seed 42's noise: dropping `noise` and sending `seed: 42`
    // must reproduce the same inputs exactly.
    let mut v: serde_json::Value =
        serde_json::from_str(&gr00t_fixtures::request_json("case1")).unwrap();
    let explicit = encode(&p.processor, v.to_string().as_bytes()).unwrap();
    v.as_object_mut().unwrap().remove("noise");
    v["seed"] = serde_json::json!(42);
    let seeded = encode(&p.processor, v.to_string().as_bytes()).unwrap();
    assert_eq!(explicit.inputs, seeded.inputs);
}

#[test]
fn image_and_instruction_refusals_name_the_field() {
    let p = Pipeline::load();
    let base: serde_json::Value =
        serde_json::from_str(&gr00t_fixtures::request_json("case0")).unwrap();
    let refuse =
        |v: &serde_json::Value| encode(&p.processor, v.to_string().as_bytes()).unwrap_err();
    let mut v = base.clone();
    v["images"]["wrist_image_left"][1] = serde_json::json!("!!!not base64!!!");
    assert_eq!(refuse(&v).field, "images.wrist_image_left[1]");
    // A square PNG: valid image, wrong aspect.
    let mut png = Vec::new();
    image::RgbImage::new(320, 320)
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    use base64::Engine as _;
    let mut v = base.clone();
    v["images"]["exterior_image_1_left"][0] =
        serde_json::json!(base64::engine::general_purpose::STANDARD.encode(&png));
    let e = refuse(&v);
    assert_eq!(e.field, "images.exterior_image_1_left[0]");
    let mut v = base.clone();
    v["instruction"] = serde_json::json!("pick up the block ".repeat(15));
    let e = refuse(&v);
    assert_eq!(e.field, "instruction");
    assert!(e.message.contains("tokens"), "{}", e.message);
    let mut v = base;
    v["instruction"] = serde_json::json!("?!.,");
    assert_eq!(refuse(&v).field, "instruction");
}

/// The DROID processor follows the checkpoint's eval transform: with the letterbox (or on the
/// torchvision path at 256x256) its 320x180 frames land on 16x16 patches, 64 tokens each.
#[test]
fn droid_processor_follows_letterbox_and_torchvision_configs() {
    let body = gr00t_fixtures::request_json("case0");
    for letterbox in [true, false] {
        let mut ck = Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
        ck.processor.letter_box_transform = letterbox;
        if !letterbox {
            ck.processor.use_albumentations = false;
        }
        let prompt = PromptEncoder::load(gr00t_fixtures::tokenizer_path()).unwrap();
        let processor = droid_processor(&ck, prompt);
        let enc = encode(&processor, body.as_bytes()).unwrap();
        assert_eq!(
            enc.inputs.image_grid_thw,
            vec![[1, 16, 16]; 4],
            "{letterbox}"
        );
        assert_eq!(
            enc.inputs.pixel_values.len(),
            4 * 256 * enc.inputs.patch_dim
        );
    }
}
