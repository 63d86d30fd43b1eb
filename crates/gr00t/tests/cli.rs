//! The `gr00t` command line: `predict` prints the fixture's actions for its request, refuses a
//! bad request with exit 2 and a JSON error, and names a missing checkpoint; `synth-checkpoint`
//! writes a checkpoint that `predict` can run and that declares itself synthetic.

mod support;
use support::cli;

use cli::{gr00t, json_stdout, predict};
use gr00t_fixtures::{json_rows, max_abs_diff, tiny_checkpoint, MultiCase, Taps};
use std::process::Command;

fn tiny() -> String {
    tiny_checkpoint().display().to_string()
}

/// The response's action group `key` (`[[f32; D]; 40]`), flattened.
fn action_group(resp: &serde_json::Value, key: &str) -> Vec<f32> {
    json_rows(&resp["actions"][key])
}

/// `gr00t predict` of the fixture case2 request on the tiny checkpoint with `extra` flags;
/// asserts it succeeds and returns the response JSON.
fn predict_case2(extra: &[&str]) -> serde_json::Value {
    let request = gr00t_fixtures::case_dir("case2").join("request.json");
    predict(&tiny_checkpoint(), &request, extra)
}

fn request_path(case: &str) -> String {
    gr00t_fixtures::case_dir(case)
        .join("request.json")
        .display()
        .to_string()
}

#[test]
fn predict_prints_reference_actions() {
    let resp = predict_case2(&[]);
    let taps = Taps::load("case2");
    for key in ["eef_9d", "gripper_position", "joint_position"] {
        let ours = action_group(&resp, key);
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

/// `--dtype bf16` runs the same chain in bf16 (what GPUs serve) within the bf16 gate.
#[test]
fn predict_in_bf16_stays_within_the_bf16_gate() {
    let resp = predict_case2(&["--dtype", "bf16"]);
    let taps = Taps::load("case2");
    let mut worst = 0f32;
    for key in ["eef_9d", "gripper_position", "joint_position"] {
        let ours = action_group(&resp, key);
        let reference = taps.f32s(&format!("output.{key}"));
        let r = gr00t_fixtures::pearson(&ours, &reference);
        assert!(r >= 0.999, "{key}: r = {r}");
        worst = worst.max(max_abs_diff(&ours, &reference));
    }
    // Not the f32 answer: bf16 rounding shows (f32 is within 1e-5 of the reference).
    assert!(worst > 1e-5, "bf16 answer is suspiciously exact: {worst:e}");
}

/// `--device cuda` on a CPU-only build is refused before any loading, naming the fix; a
/// misspelt device is a usage error.
#[test]
fn cuda_device_on_a_cpu_build_is_refused_with_the_fix() {
    if cfg!(feature = "cuda") {
        return;
    }
    let args = [
        "predict",
        "--checkpoint",
        &tiny(),
        "--request",
        &request_path("case2"),
    ];
    let out = gr00t(&[&args[..], &["--device", "cuda:0"]].concat());
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("without CUDA") && err.contains("build-cuda.sh"),
        "{err}"
    );
    let out = gr00t(&[&args[..], &["--device", "tpu"]].concat());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cpu, cuda or cuda:N"));
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
    let resp = json_stdout("case0", &out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("SYNTHETIC"));
    assert_eq!(
        resp["actions"]["joint_position"].as_array().unwrap().len(),
        40
    );
    // The synthetic checkpoint carries the base checkpoint's pretrain layouts too; XDOF has
    // zero-width wrist keys, which decode to empty rows.
    let request = dir.join("xdof.json");
    std::fs::write(&request, xdof_request().to_string()).unwrap();
    let resp = predict(&dir, &request, &[]);
    for (key, width) in [
        ("left_wrist_eef", 0),
        ("left_gripper_pos", 1),
        ("right_joint_pos", 6),
    ] {
        let rows = resp["actions"][key].as_array().unwrap();
        assert_eq!(rows.len(), 40, "{key}");
        assert!(
            rows.iter().all(|r| r.as_array().unwrap().len() == width),
            "{key}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An XDOF request: three 320×240 views × 2 frames, its six state keys.
fn xdof_request() -> serde_json::Value {
    use base64::Engine as _;
    let mut png = Vec::new();
    image::RgbImage::from_pixel(320, 240, image::Rgb([120, 60, 30]))
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    let frame = base64::engine::general_purpose::STANDARD.encode(&png);
    let views: serde_json::Map<String, serde_json::Value> =
        ["top_camera", "left_camera", "right_camera"]
            .iter()
            .map(|v| {
                (
                    format!("{v}-images-rgb_320_240"),
                    serde_json::json!([frame, frame]),
                )
            })
            .collect();
    serde_json::json!({
        "embodiment": "xdof_relative_eef_relative_joint",
        "images": views,
        "state": {
            "left_wrist_eef": [], "right_wrist_eef": [],
            "left_gripper_pos": [0.1], "right_gripper_pos": [0.2],
            "left_joint_pos": vec![0.1; 6], "right_joint_pos": vec![0.2; 6]
        },
        "instruction": "fold the towel",
        "seed": 3
    })
}

#[test]
fn predict_runs_every_multi_embodiment_case() {
    let ckpt = gr00t_fixtures::multi_checkpoint();
    for name in gr00t_fixtures::MULTI_CASES {
        let case = MultiCase::load(name);
        let resp = predict(&ckpt, &case.request_path(), &[]);
        assert_eq!(resp["embodiment"], case.tag.as_str());
        for (key, _) in resp["actions"].as_object().unwrap() {
            if key == "head_pose" {
                continue; // near-π rotation vectors: compared as rotations in tests/embodiments.rs
            }
            case.assert_action(key, &action_group(&resp, key));
        }
    }
}

/// A replica id that could not be a header is refused before the model loads, from the flag
/// or from $GR00T_REPLICA_ID (the flag wins; an empty variable counts as unset).
#[test]
fn serve_refuses_a_bad_replica_id_before_loading() {
    let serve = |flag: Option<&str>, env: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gr00t"));
        c.args([
            "serve",
            "--checkpoint",
            "/nonexistent-checkpoint",
            "--port",
            "0",
        ]);
        if let Some(id) = flag {
            c.args(["--replica-id", id]);
        }
        match env {
            Some(v) => c.env("GR00T_REPLICA_ID", v),
            None => c.env_remove("GR00T_REPLICA_ID"),
        };
        let out = c.output().expect("run gr00t");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (flag, env) in [
        (Some("bad id"), None),
        (None, Some("bad id")),
        (Some("a/b"), Some("ok")),
    ] {
        let (code, err) = serve(flag, env);
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains("--replica-id ") && err.contains("A-Z a-z 0-9"),
            "{err}"
        );
        assert!(
            !err.contains("nonexistent-checkpoint"),
            "loaded first: {err}"
        );
    }
    // A good id from either source gets past the check to the (missing) checkpoint.
    for (flag, env) in [
        (Some("gr00t-0"), Some("bad id")),
        (None, Some("")),
        (None, Some("pod-1")),
    ] {
        let (code, err) = serve(flag, env);
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains("nonexistent-checkpoint") && !err.contains("--replica-id"),
            "{err}"
        );
    }
}

/// `gr00t predict` on the LIBERO-like and 4×4-EEF cases of `gr00t_n17_tiny_extra` (the 4×4 key
/// comes back as 16 rows of 16, upstream's `[1, 16, 4, 4]` row-major).
#[test]
fn predict_runs_every_extra_case() {
    let ckpt = gr00t_fixtures::extra_checkpoint("checkpoint");
    for name in gr00t_fixtures::EXTRA_CASES {
        let case = MultiCase::load_extra(name);
        let resp = predict(&ckpt, &case.request_path(), &[]);
        assert_eq!(resp["embodiment"], case.tag.as_str());
        let keys: Vec<&String> = resp["actions"].as_object().unwrap().keys().collect();
        assert_eq!(
            keys.len(),
            if case.tag == "libero_sim" { 7 } else { 2 },
            "{name}"
        );
        for key in keys {
            case.assert_action(key, &action_group(&resp, key));
        }
    }
}

/// Without weights (an empty Hugging Face cache, no --checkpoint) `serve` exits 2 with one
/// message: the gated licence and HF_TOKEN, `pull`, `--checkpoint`, and the bundled test
/// checkpoint (labelled as meaningless for a robot), named as the command was run.
#[test]
fn serve_without_weights_says_how_to_get_them_and_how_to_try_it() {
    let cache = std::env::temp_dir().join(format!("gr00t-empty-hub-{}", std::process::id()));
    std::fs::create_dir_all(&cache).unwrap();
    for (cargo, command) in [
        (None, "gr00t"),
        (Some("cargo"), "cargo run --release -p gr00t --"),
    ] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gr00t"));
        c.args(["serve", "--port", "0"])
            .env("HF_HUB_CACHE", &cache)
            .env_remove("CARGO");
        if let Some(v) = cargo {
            c.env("CARGO", v);
        }
        let out = c.output().expect("run gr00t");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        for part in [
            "no GR00T N1.7-3B weights",
            "https://huggingface.co/nvidia/GR00T-N1.7-3B",
            "HF_TOKEN",
            &format!("{command} pull"),
            &format!("{command} serve --checkpoint DIR"),
            "TEST checkpoint",
            "mean nothing",
            "tests/fixtures/gr00t_n17_tiny/checkpoint",
        ] {
            assert!(err.contains(part), "{part:?} missing from:\n{err}");
        }
        assert_eq!(err.matches("pull").count(), 1, "repeats itself:\n{err}");
    }
    std::fs::remove_dir_all(&cache).unwrap();
}

/// A taken ZMQ, websocket or LeRobot port fails at once, before the model loads (the checkpoint is
/// never opened), naming the port.
#[test]
fn serve_fails_on_a_taken_port_before_loading() {
    let taken = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let map = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/lerobot_so101.json"
    );
    for (flag, what) in [
        ("--zmq-port", "ZMQ"),
        ("--ws-port", "websockets"),
        ("--lerobot-port", "LeRobot gRPC"),
    ] {
        let mut args = vec![
            "serve",
            "--checkpoint",
            "/nonexistent-checkpoint",
            "--port",
            "0",
            flag,
            &port,
        ];
        if flag == "--lerobot-port" {
            args.extend(["--lerobot-map", map]);
        }
        let out = gr00t(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("cannot listen for {what} on 127.0.0.1:{port}")),
            "{err}"
        );
        assert!(
            !err.contains("nonexistent-checkpoint"),
            "loaded first: {err}"
        );
    }
}

/// A LeRobot map file that cannot be read, or is not a map, is refused before the model loads,
/// naming the file; `--lerobot-port` without a map is refused by the command line.
#[test]
fn serve_refuses_a_bad_lerobot_map_before_loading() {
    let dir = std::env::temp_dir().join(format!("gr00t-lerobot-map-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("map.json");
    std::fs::write(
        &bad,
        r#"{"embodiment": "new_embodiment", "state": {}, "cameras": {}}"#,
    )
    .unwrap();
    for (path, needle) in [
        (dir.join("missing.json"), "missing.json"),
        (bad.clone(), "unknown field `cameras`"),
    ] {
        let path = path.to_string_lossy().to_string();
        let out = gr00t(&[
            "serve",
            "--checkpoint",
            "/nonexistent-checkpoint",
            "--port",
            "0",
            "--lerobot-port",
            "0",
            "--lerobot-map",
            &path,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("--lerobot-map") && err.contains(needle),
            "{err}"
        );
        assert!(
            !err.contains("nonexistent-checkpoint"),
            "loaded first: {err}"
        );
    }
    let out = gr00t(&["serve", "--lerobot-port", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--lerobot-map"));
    std::fs::remove_dir_all(&dir).ok();
}

/// The compute knobs are flags that also read their `GR00T_…` variable (the flag wins); a bad
/// value is refused by the command line before anything loads, and the effective settings
/// are what `predict` then runs with (the cache off, the reference backend: same actions).
#[test]
fn compute_knobs_are_flags_with_their_variables() {
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gr00t"));
        c.args(args);
        for k in [
            "GR00T_CPU_KERNEL",
            "GR00T_DIT_BACKEND",
            "GR00T_VISION_CACHE",
        ] {
            c.env_remove(k);
        }
        c.envs(env.iter().copied());
        c.output().expect("run gr00t")
    };
    for (args, env, said) in [
        (
            &["--cpu-kernel", "sse"][..],
            &[][..],
            "\"sse\" is not a CPU kernel",
        ),
        (
            &[][..],
            &[("GR00T_CPU_KERNEL", "sse")][..],
            "\"sse\" is not a CPU kernel",
        ),
        (
            &[][..],
            &[("GR00T_DIT_BACKEND", "fast")][..],
            "\"fast\" is not a denoise backend",
        ),
        (&["--vision-cache", "lots"][..], &[][..], "--vision-cache"),
    ] {
        let mut all = vec!["predict", "--checkpoint", "/nonexistent", "--request", "-"];
        all.extend_from_slice(args);
        let out = run(&all, env);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {err}");
        assert!(err.contains(said), "{args:?} {env:?}: {err}");
        assert!(!err.contains("/nonexistent"), "loaded first: {err}");
    }
    let help = String::from_utf8(run(&["serve", "--help"], &[]).stdout).unwrap();
    for var in [
        "GR00T_CPU_KERNEL",
        "GR00T_DIT_BACKEND",
        "GR00T_VISION_CACHE",
    ] {
        assert!(
            help.contains(&format!("env: {var}")),
            "{var} missing from serve --help"
        );
    }
    // The settings in effect, as `bench --json` (and /info) report them.
    let bench = |args: &[&str], env: &[(&str, &str)]| {
        let tiny = tiny();
        let mut all = vec!["bench", "--checkpoint", &tiny, "--runs", "1", "--json"];
        all.extend_from_slice(args);
        let out = run(&all, env);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let plain = bench(&[], &[]);
    assert_eq!(plain["denoise_backend"], "fused", "{plain}");
    assert_eq!(plain["vision_cache_images"], 16, "{plain}");
    let flags = [
        "--dit-backend",
        "reference",
        "--vision-cache",
        "0",
        "--cpu-kernel",
        "library",
    ];
    for got in [
        bench(&flags, &[]),
        bench(
            &[],
            &[
                ("GR00T_DIT_BACKEND", "reference"),
                ("GR00T_VISION_CACHE", "0"),
                ("GR00T_CPU_KERNEL", "library"),
            ],
        ),
        // The flag wins over the variable.
        bench(
            &flags,
            &[("GR00T_DIT_BACKEND", "fused"), ("GR00T_CPU_KERNEL", "auto")],
        ),
    ] {
        assert_eq!(got["denoise_backend"], "reference", "{got}");
        assert_eq!(got["vision_cache_images"], 0, "{got}");
        assert_eq!(got["cpu_kernel"], "library", "{got}");
    }
    // An int8 level caps the int8 kernel and the f32 one as such a CPU runs them.
    let got = bench(&["--dtype", "int8", "--cpu-kernel", "library"], &[]);
    assert_eq!(got["int8_kernel"], "scalar", "{got}");
    assert_eq!(got["cpu_kernel"], "library", "{got}");
    let got = bench(&["--dtype", "int8"], &[("GR00T_CPU_KERNEL", "avxvnni")]);
    assert!(
        ["avxvnni", "avx2", "scalar"].contains(&got["int8_kernel"].as_str().unwrap()),
        "{got}"
    );
    assert!(
        ["avx2", "library"].contains(&got["cpu_kernel"].as_str().unwrap()),
        "{got}"
    );
}
