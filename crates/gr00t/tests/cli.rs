//! The `gr00t` command line: `predict` prints the fixture's actions for its request, refuses a
//! bad request with exit 2 and a JSON error, and names a missing checkpoint; `synth-checkpoint`
//! writes a checkpoint that `predict` can run and that declares itself synthetic.

use gr00t_fixtures::{max_abs_diff, Taps};
use std::process::{Command, Output};

fn gr00t(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gr00t"))
        .args(args)
        .output()
        .expect("run gr00t")
}

fn tiny() -> String {
    gr00t_fixtures::tiny_checkpoint().display().to_string()
}

fn request_path(case: &str) -> String {
    gr00t_fixtures::case_dir(case)
        .join("request.json")
        .display()
        .to_string()
}

#[test]
fn predict_prints_reference_actions() {
    let out = gr00t(&[
        "predict",
        "--checkpoint",
        &tiny(),
        "--request",
        &request_path("case2"),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let resp: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let taps = Taps::load("case2");
    for key in ["eef_9d", "gripper_position", "joint_position"] {
        let ours: Vec<f32> = resp["actions"][key]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap() as f32)
            })
            .collect();
        let d = max_abs_diff(&ours, &taps.f32s(&format!("output.{key}")));
        assert!(d <= 1e-5, "{key}: max|Δ| {d:e}");
    }
    assert_eq!(resp["seq_len"], 474);
    assert_eq!(resp["action_horizon"], 40);
    assert_eq!(resp["embodiment"], "oxe_droid_relative_eef_relative_joint");
    assert_eq!(resp["noise_source"], "client");
    assert!(resp["seed"].is_null());
    assert!(resp.get("actions_normalized").is_none());
    for k in [
        "decode",
        "encode",
        "device",
        "decode_actions",
        "total",
        "vision",
        "llm",
        "adapter",
        "denoise",
    ] {
        assert!(
            resp["timing_ms"][k].as_f64().unwrap() >= 0.0,
            "timing_ms.{k}"
        );
    }
}

#[test]
fn predict_refuses_bad_request_with_exit_2() {
    let dir = std::env::temp_dir().join(format!("gr00t-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut v: serde_json::Value =
        serde_json::from_str(&gr00t_fixtures::request_json("case0")).unwrap();
    v["state"]["joint_position"] = serde_json::json!([0.0, 1.0]);
    let path = dir.join("bad.json");
    std::fs::write(&path, v.to_string()).unwrap();
    let out = gr00t(&[
        "predict",
        "--checkpoint",
        &tiny(),
        "--request",
        path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        err["error"]
            .as_str()
            .unwrap()
            .contains("state.joint_position"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn predict_names_missing_checkpoint_file() {
    let out = gr00t(&[
        "predict",
        "--checkpoint",
        "/nonexistent/ckpt",
        "--request",
        &request_path("case0"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/ckpt"), "{stderr}");
}

#[test]
fn synthetic_tiny_checkpoint_runs_and_says_so() {
    let dir = std::env::temp_dir().join(format!("gr00t-cli-synth-{}", std::process::id()));
    let out = gr00t(&[
        "synth-checkpoint",
        "--out",
        dir.to_str().unwrap(),
        "--size",
        "tiny",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("SYNTHETIC"));
    let out = gr00t(&[
        "predict",
        "--checkpoint",
        dir.to_str().unwrap(),
        "--request",
        &request_path("case0"),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("SYNTHETIC"));
    let resp: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        resp["actions"]["joint_position"].as_array().unwrap().len(),
        40
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
