//! `gr00t predict` and `gr00t serve` (HTTP) on the image-pipeline cases of
//! `tests/fixtures/gr00t_n17_tiny_extra` (`letter_box_transform: true`; the torchvision path),
//! each on its checkpoint variant: NVIDIA's actions within the DROID gate.

use gr00t_fixtures::http_client as test_client;
mod support;
use support::{cli, test_server};

use gr00t_fixtures::{extra_case_checkpoint, extra_dir, json_rows, MultiCase, EXTRA_IMAGE_CASES};
use test_client::post_json;
use test_server::Server;

/// Every action key of a response against the case's `action.<key>` (≤ 1e-5·max(1, max|ref|)).
fn assert_actions(name: &str, case: &MultiCase, resp: &serde_json::Value) {
    assert_eq!(resp["embodiment"], case.tag.as_str(), "{name}");
    let actions = resp["actions"].as_object().unwrap();
    assert_eq!(actions.len(), 7, "{name}");
    for (key, rows) in actions {
        let d = case.assert_action(key, &json_rows(rows));
        eprintln!("{name} {key:<8} max|Δ| {d:.2e}");
    }
}

#[test]
fn http_serves_the_letterbox_and_torchvision_cases() {
    for name in EXTRA_IMAGE_CASES {
        let case = MultiCase::load_extra(name);
        let server = Server::start_in(&extra_case_checkpoint(name), 0, &[]);
        let body = std::fs::read(case.request_path()).unwrap();
        let r = post_json(&server.http, "/predict", &body).expect("POST");
        assert_eq!(r.status, 200, "{name}");
        assert_actions(name, &case, &r.json());
    }
}

#[test]
fn predict_runs_the_letterbox_and_torchvision_cases() {
    for name in EXTRA_IMAGE_CASES {
        let case = MultiCase::load_extra(name);
        let resp = cli::predict(&extra_case_checkpoint(name), &case.request_path(), &[]);
        assert_actions(name, &case, &resp);
    }
}

/// A torchvision config without `image_target_size` (upstream's `Resize(size=None)` raises) is
/// refused at start-up, naming the file and the key.
#[test]
fn torchvision_without_target_size_is_refused_at_startup() {
    let src = extra_case_checkpoint("case_torchvision_1");
    let dir = std::env::temp_dir().join(format!("gr00t-tv-no-target-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for name in [
        "config.json",
        "model.safetensors",
        "statistics.json",
        "embodiment_id.json",
    ] {
        std::fs::copy(src.join(name), dir.join(name)).unwrap();
    }
    std::fs::create_dir_all(dir.join("backbone")).unwrap();
    for e in std::fs::read_dir(src.join("backbone")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.join("backbone").join(p.file_name().unwrap())).unwrap();
    }
    let text = std::fs::read_to_string(src.join("processor_config.json")).unwrap();
    let mut cfg: serde_json::Value = serde_json::from_str(&text).unwrap();
    cfg["processor_kwargs"]["image_target_size"] = serde_json::Value::Null;
    std::fs::write(dir.join("processor_config.json"), cfg.to_string()).unwrap();
    let request = extra_dir().join("case_torchvision_1/request.json");
    let (ckpt, request) = (dir.to_str().unwrap(), request.to_str().unwrap());
    let out = cli::gr00t(&["predict", "--checkpoint", ckpt, "--request", request]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("processor_config.json: processor_kwargs.image_target_size"),
        "{stderr}"
    );
}
