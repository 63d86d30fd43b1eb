//! The image-pipeline cases of `tests/fixtures/gr00t_n17_tiny_extra` end to end (NVIDIA's
//! `Gr00tPolicy.get_action` on the tiny model): `letter_box_transform: true` with a portrait and
//! a 16:9 view, and the torchvision path (`use_albumentations: false`), each on its own
//! checkpoint variant. Frames after the eval transform and every processor input exact, the
//! network and the decoded actions within the DROID gates.

use gr00t_embodiment::image::ImagePipeline;
use gr00t_fixtures::{extra_case_checkpoint, max_abs_diff, pearson, MultiCase, EXTRA_IMAGE_CASES};
use gr00t_model::taps::Recorder;
use gr00t_model::{Checkpoint, Gr00tModel};
use support::{assert_inputs_match, case_observation as observation, case_processor};

mod support;

#[test]
fn letterbox_and_torchvision_cases_match_nvidia_end_to_end() {
    for name in EXTRA_IMAGE_CASES {
        let case = MultiCase::load_extra(name);
        let ckpt = Checkpoint::open(extra_case_checkpoint(name)).unwrap();
        let proc_cfg = &ckpt.processor;
        match name {
            "case_letterbox_1" => {
                assert!(proc_cfg.use_albumentations && proc_cfg.letter_box_transform)
            }
            _ => assert!(!proc_cfg.use_albumentations && !proc_cfg.letter_box_transform),
        }
        let proc = case_processor(&ckpt, &case);
        let obs = observation(&case);
        // The views differ in aspect (portrait 240x320 and 16:9 320x180): both reach 256x256.
        let sizes: Vec<(usize, usize)> = obs
            .images
            .iter()
            .map(|(_, f)| (f[0].width, f[0].height))
            .collect();
        assert!(
            sizes.contains(&(240, 320)) && sizes.contains(&(320, 180)),
            "{sizes:?}"
        );

        // proc.images_after_aug_u8: the frames (time-major, views in config order) bit-exact.
        let pipe = ImagePipeline::from_checkpoint(&ckpt).unwrap();
        let views = &ckpt.processor.modality_configs[&case.tag]
            .video
            .modality_keys;
        let mut after_aug = Vec::new();
        for view in views {
            let frames = &obs.images.iter().find(|(v, _)| v == view).unwrap().1;
            assert_eq!(frames.len(), 1, "{name}: one frame per view");
            let stages = pipe.frame_stages(&frames[0]).unwrap();
            assert_eq!(
                stages.aug.letterboxed.is_some(),
                proc_cfg.letter_box_transform
            );
            after_aug.extend(stages.aug.output.to_chw());
        }
        let out = &case.outputs;
        assert_eq!(
            out.dims("proc.images_after_aug_u8"),
            [views.len(), 3, 256, 256]
        );
        let want = out.u8s("proc.images_after_aug_u8");
        let differ = after_aug.iter().zip(&want).filter(|(a, b)| a != b).count();
        assert_eq!(after_aug.len(), want.len(), "{name}");
        assert_eq!(
            differ, 0,
            "{name}: {differ} bytes of proc.images_after_aug_u8 differ"
        );

        // Processor inputs: exact.
        let enc = proc.encode(&obs).unwrap();
        assert_inputs_match(name, &enc.inputs, out);
        assert_eq!(
            enc.inputs.image_grid_thw,
            [[1, 16, 16]; 2],
            "{name}: 64 tokens a frame"
        );

        // Network and decode: within the DROID gates.
        let ids: Vec<usize> = ckpt.embodiment_ids.values().copied().collect();
        let model = Gr00tModel::load_with(
            &ckpt,
            &gr00t_fixtures::test_device(),
            candle_core::DType::F32,
            Some(&ids),
        )
        .unwrap();
        let fwd = model.forward(&enc.inputs, &Recorder::disabled()).unwrap();
        let want_pred = out.f32s("head.action_pred");
        let r = pearson(&fwd.action_pred, &want_pred);
        let d = max_abs_diff(&fwd.action_pred, &want_pred);
        eprintln!("{name}: action_pred r {r:.9}, max|Δ| {d:.2e}");
        assert!(r >= 0.99999, "{name}: action_pred r {r}");
        let scale_pred = want_pred.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        assert!(d <= 1e-3 * scale_pred, "{name}: action_pred max|Δ| {d}");
        let decoded = proc.decode(&fwd.action_pred, &obs).unwrap();
        assert_eq!(decoded.groups.len(), 7, "{name}");
        for g in &decoded.groups {
            let want = out.f32s(&format!("action.{}", g.key));
            assert_eq!(g.actions.len(), want.len(), "{name} {}", g.key);
            let r = pearson(&g.actions, &want);
            let d = max_abs_diff(&g.actions, &want);
            let scale = want.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            eprintln!("  {:<8} r {r:.9}, max|Δ| {d:.2e}", g.key);
            assert!(d <= 1e-5 * scale.max(1.0), "{name} {}: max|Δ| {d}", g.key);
            if want.iter().any(|&x| x != want[0]) {
                assert!(r >= 0.9999, "{name} {}: r {r}", g.key);
            }
        }
    }
}

/// The same cases' frames on the released (no letterbox, albumentations) variant: the portrait
/// and 16:9 views no longer reach one size, refused naming the second view as upstream fails.
#[test]
fn mixed_aspect_views_without_letterbox_are_refused() {
    let case = MultiCase::load_extra("case_letterbox_1");
    let ckpt = Checkpoint::open(gr00t_fixtures::extra_checkpoint("checkpoint")).unwrap();
    assert!(ckpt.processor.use_albumentations && !ckpt.processor.letter_box_transform);
    let proc = case_processor(&ckpt, &case);
    let err = proc.encode(&observation(&case)).unwrap_err();
    let err = err.invalid().expect("the client's fault");
    let views = &ckpt.processor.modality_configs[&case.tag]
        .video
        .modality_keys;
    assert_eq!(err.field, format!("images.{}[0]", views[1]), "{err}");
    assert!(err.to_string().contains("letter_box_transform"), "{err}");
}
