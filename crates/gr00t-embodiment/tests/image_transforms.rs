//! Both eval-transform paths (albumentations, torchvision; with and without the letterbox)
//! against upstream's own transforms run on synthetic frames
//! (`tests/fixtures/image_transforms`, `tools/goldens/image_transforms.py`): every uint8 stage
//! bit-exact, configs read through `ProcessorConfig` as `processor_config.json` holds them.

use gr00t_embodiment::image::{decode_frame_bytes, AugStages, EvalTransform, Frame};
use gr00t_fixtures::repo_root;
use gr00t_model::checkpoint::ProcessorConfig;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::PathBuf;

fn fixture_dir() -> PathBuf {
    repo_root().join("tests/fixtures/image_transforms")
}

fn manifest() -> Value {
    let text = std::fs::read_to_string(fixture_dir().join("manifest.json")).expect("manifest");
    serde_json::from_str(&text).expect("manifest json")
}

fn png(rel: &str) -> Frame {
    let bytes = std::fs::read(fixture_dir().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    decode_frame_bytes(&bytes).expect("png")
}

fn sha256(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn stage<'a>(stages: &'a AugStages, input: &'a Frame, name: &str) -> &'a Frame {
    match name {
        "letterboxed" => stages.letterboxed.as_ref().unwrap_or(input),
        "resized" => &stages.resized,
        "cropped" => &stages.cropped,
        "output" => &stages.output,
        other => panic!("unknown stage {other}"),
    }
}

/// Compares one stage: size, then bytes (against the PNG where stored, else the SHA-256).
fn check_stage(what: &str, ours: &Frame, want: &Value) -> Result<(), String> {
    let size = (
        want["width"].as_u64().unwrap() as usize,
        want["height"].as_u64().unwrap() as usize,
    );
    if (ours.width, ours.height) != size {
        return Err(format!(
            "{what}: {}x{}, upstream {}x{}",
            ours.width, ours.height, size.0, size.1
        ));
    }
    if let Some(rel) = want["png"].as_str() {
        let reference = png(rel);
        let diffs = ours
            .data
            .iter()
            .zip(&reference.data)
            .filter(|(a, b)| a != b)
            .count();
        let max = ours
            .data
            .iter()
            .zip(&reference.data)
            .map(|(&a, &b)| (a as i32 - b as i32).abs())
            .max()
            .unwrap_or(0);
        if diffs > 0 {
            return Err(format!(
                "{what}: {diffs} of {} values differ (max |Δ| {max})",
                ours.data.len()
            ));
        }
    }
    if sha256(&ours.data) != want["sha256"].as_str().unwrap() {
        return Err(format!("{what}: SHA-256 differs"));
    }
    Ok(())
}

#[test]
fn every_stage_of_every_config_matches_upstream() {
    let m = manifest();
    let cases = m["cases"].as_array().unwrap();
    assert!(cases.len() >= 60, "{} cases", cases.len());
    let mut failures = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for case in cases {
        let cfg_name = case["config"].as_str().unwrap();
        let input_name = case["input"].as_str().unwrap();
        let cfg: ProcessorConfig =
            serde_json::from_value(m["configs"][cfg_name].clone()).expect("config");
        let t = EvalTransform::from_processor_config(&cfg).expect("transform");
        let input = png(&format!("inputs/{input_name}.png"));
        let size = &case["input_size"];
        assert_eq!(
            [input.width as u64, input.height as u64],
            [size[0].as_u64().unwrap(), size[1].as_u64().unwrap()]
        );
        let stages = t.apply(&input).expect("apply");
        let g = t.geometry(input.width, input.height).unwrap();
        assert_eq!(g.output, (stages.output.width, stages.output.height));
        let names: Vec<&str> = case["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(names.contains(&"letterboxed"), cfg.letter_box_transform);
        for want in case["stages"].as_array().unwrap() {
            let name = want["name"].as_str().unwrap();
            let what = format!("{cfg_name}/{input_name}/{name}");
            if let Err(e) = check_stage(&what, stage(&stages, &input, name), want) {
                failures.push(e);
            }
            seen.insert(name.to_string());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(seen.len(), 4, "{seen:?}");
}

#[test]
fn fixture_covers_both_paths_letterbox_and_every_input_shape() {
    let m = manifest();
    let configs = m["configs"].as_object().unwrap();
    let has = |alb: bool, lb: bool| {
        configs.values().any(|c| {
            c["use_albumentations"].as_bool() == Some(alb)
                && c["letter_box_transform"].as_bool() == Some(lb)
        })
    };
    assert!(has(true, true) && has(true, false) && has(false, true) && has(false, false));
    let cases = m["cases"].as_array().unwrap();
    let shapes: Vec<(u64, u64)> = cases
        .iter()
        .map(|c| {
            (
                c["input_size"][0].as_u64().unwrap(),
                c["input_size"][1].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(shapes.iter().any(|(w, h)| w > h), "landscape");
    assert!(shapes.iter().any(|(w, h)| w < h), "portrait");
    assert!(shapes.iter().any(|(w, h)| w == h), "square");
    assert!(shapes.iter().any(|(w, h)| w % 2 == 1 && h % 2 == 1), "odd");
    // The released sizes: DROID 320x180 lands on 256x256 with the letterbox and on torchvision.
    for cfg in ["alb_256_lb", "tv_256_230", "tv_256_230_lb"] {
        let case = cases
            .iter()
            .find(|c| c["config"] == cfg && c["input"] == "droid_320x180")
            .unwrap();
        let out = case["stages"].as_array().unwrap().last().unwrap();
        assert_eq!(
            (out["width"].as_u64(), out["height"].as_u64()),
            (Some(256), Some(256))
        );
    }
}
