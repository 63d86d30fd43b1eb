//! `gr00t predict` and `gr00t serve` (HTTP) on the image-pipeline cases of
//! `tests/fixtures/gr00t_n17_tiny_extra` (`letter_box_transform: true`; the torchvision path),
//! each on its checkpoint variant: NVIDIA's actions within the DROID gate.

#[path = "../src/server/test_client.rs"]
mod test_client;
#[path = "../src/protocols/test_server.rs"]
mod test_server;

use gr00t_fixtures::{
    extra_case_checkpoint, extra_dir, max_abs_diff, MultiCase, EXTRA_IMAGE_CASES,
};
use std::process::Command;
use test_client::post_json;
use test_server::Server;

/// Every action key of a response against the case's `action.<key>` (≤ 1e-5·max(1, max|ref|)).
fn assert_actions(name: &str, case: &MultiCase, resp: &serde_json::Value) {
    assert_eq!(resp["embodiment"], case.tag.as_str(), "{name}");
    let actions = resp["actions"].as_object().unwrap();
    assert_eq!(actions.len(), 7, "{name}");
    for (key, rows) in actions {
        let ours: Vec<f32> = rows
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r.as_array().unwrap().iter())
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        let want = case.outputs.f32s(&format!("action.{key}"));
        assert_eq!(ours.len(), want.len(), "{name} {key}");
        let scale = want.iter().fold(1.0f32, |m, x| m.max(x.abs()));
        let d = max_abs_diff(&ours, &want);
        eprintln!("{name} {key:<8} max|Δ| {d:.2e}");
        assert!(d <= 1e-5 * scale, "{name} {key}: max|Δ| {d:e}");
    }
}

#[test]
fn http_serves_the_letterbox_and_torchvision_cases() {
    for name in EXTRA_IMAGE_CASES {
        let case = MultiCase::load_extra(name);
        let server = Server::start_in(&extra_case_checkpoint(name), 0, &[]);
        let body = std::fs::read(extra_dir().join(name).join("request.json")).unwrap();
        let r = post_json(&server.http, "/predict", &body).expect("POST");
        assert_eq!(r.status, 200, "{name}");
        assert_actions(name, &case, &r.json());
    }
}

#[test]
fn predict_runs_the_letterbox_and_torchvision_cases() {
    for name in EXTRA_IMAGE_CASES {
        let case = MultiCase::load_extra(name);
        let ckpt = extra_case_checkpoint(name).display().to_string();
        let request = extra_dir().join(name).join("request.json");
        let out = Command::new(env!("CARGO_BIN_EXE_gr00t"))
            .args(["predict", "--checkpoint", &ckpt, "--request"])
            .arg(&request)
            .output()
            .expect("run gr00t");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let resp: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_actions(name, &case, &resp);
    }
}
