//! `gr00t check-dtype` end to end on the tiny checkpoints, each run in its own Hugging Face
//! cache: int8 passes and `--dtype auto` then picks it (`/info` says why); a deliberately broken
//! quantisation (`--int8-levels 2`) fails, and `serve --dtype int8` warns of it; folders of
//! request bodies are read, a dataset folder and a missing `--dtype` are refused (exit 2).
//! `--dtype int8` answers repeat bit for bit and do not depend on the thread count.

mod support;
use support::test_server;

use gr00t_fixtures::{case_dir, http_client, multi_checkpoint, multi_dir, tiny_checkpoint};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use test_server::Server;

/// An empty Hugging Face cache of this test's own.
fn cache(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gr00t-check-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `gr00t args…` with `HF_HUB_CACHE=cache` and `env`.
fn gr00t_in(cache: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gr00t"))
        .args(args)
        .env("HF_HUB_CACHE", cache)
        .env("RUST_LOG", "info")
        .envs(env.iter().copied())
        .output()
        .expect("run gr00t")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn check(cache: &Path, checkpoint: &Path, extra: &[&str]) -> (Option<i32>, Value) {
    let ckpt = checkpoint.to_str().unwrap();
    let args = [&["check-dtype", "--checkpoint", ckpt, "--json"], extra].concat();
    let out = gr00t_in(cache, &args, &[]);
    let (stdout, stderr) = text(&out);
    let report = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}{stderr}"));
    // The check does not tell its user to run the check it is running.
    assert!(!stderr.contains("the accuracy check has"), "{stderr}");
    (out.status.code(), report)
}

fn verdict_files(cache: &Path) -> Vec<PathBuf> {
    let dir = cache.join("gr00t-rs").join("dtype-checks");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    files
}

#[test]
fn int8_passes_then_auto_picks_it_and_a_broken_quantisation_fails() {
    let hub = cache("int8");
    let tiny = tiny_checkpoint();
    let case1 = case_dir("case1").join("request.json");

    // Before any check, `--dtype int8` warns that none has run, and auto does not pick int8.
    let server = Server::start_with_env(
        &tiny,
        0,
        &["--dtype", "auto"],
        &[("HF_HUB_CACHE", hub.to_str().unwrap())],
    );
    let info = http_client::get(&server.http, "/info").unwrap().json();
    assert_ne!(info["dtype"], "int8", "{info}");
    assert!(
        info["dtype_reason"]
            .as_str()
            .unwrap()
            .contains("no passed int8 check"),
        "{info}"
    );
    drop(server);
    let server = Server::start_with_env(
        &tiny,
        0,
        &["--dtype", "int8"],
        &[("HF_HUB_CACHE", hub.to_str().unwrap())],
    );
    assert_eq!(
        http_client::get(&server.http, "/info").unwrap().json()["int8_check"],
        "not run"
    );
    assert!(
        server.log_text().contains("has not been run"),
        "{}",
        server.log_text()
    );
    drop(server);

    // The demo plus case1 through f32 and int8: every group within the gate.
    let (code, report) = check(
        &hub,
        &tiny,
        &["--dtype", "int8", "--observations", case1.to_str().unwrap()],
    );
    assert_eq!(code, Some(0), "{report}");
    let verdict = &report["verdict"];
    assert_eq!(verdict["passed"], true);
    assert_eq!(verdict["dtype"], "int8");
    assert_eq!(verdict["stages"], "adapter,dit", "the default stages");
    assert_eq!(verdict["observations"], 2);
    assert_eq!(verdict["groups"], 6, "3 DROID groups × 2 observations");
    let checks = report["checks"].as_array().unwrap();
    let cases: Vec<&str> = checks.iter().map(|c| c["case"].as_str().unwrap()).collect();
    assert!(
        cases.contains(&"demo") && cases.contains(&"request.json"),
        "{cases:?}"
    );
    for c in checks {
        assert!(
            c["pcc"].as_f64().unwrap() >= 0.9999 && c["pass"] == true,
            "{c}"
        );
        // int8, not f32 twice: the answers differ, a little.
        assert!(c["max_abs"].as_f64().unwrap() > 0.0, "{c}");
    }
    assert_eq!(verdict_files(&hub).len(), 1);

    // `--dtype auto` now picks int8, and says why.
    let server = Server::start_with_env(
        &tiny,
        0,
        &["--dtype", "auto"],
        &[("HF_HUB_CACHE", hub.to_str().unwrap())],
    );
    let info = http_client::get(&server.http, "/info").unwrap().json();
    assert_eq!(info["dtype"], "int8", "{info}");
    assert_eq!(info["int8_stages"], serde_json::json!(["adapter", "dit"]));
    assert_eq!(info["int8_check"], "passed");
    assert!(
        info["dtype_reason"]
            .as_str()
            .unwrap()
            .contains("check-dtype"),
        "{info}"
    );
    let kernel = info["int8_kernel"].as_str().unwrap();
    assert!(
        ["amx", "avx512vnni", "avxvnni", "avx2", "scalar"].contains(&kernel),
        "{kernel}"
    );
    assert!(!server.log_text().contains("has not been run"));
    drop(server);

    // Other stages are another verdict: not run yet.
    let ckpt = tiny.to_str().unwrap();
    let req = case1.to_str().unwrap();
    let out = gr00t_in(
        &hub,
        &[
            "predict",
            "--checkpoint",
            ckpt,
            "--request",
            req,
            "--dtype",
            "int8",
            "--int8",
            "llm",
        ],
        &[],
    );
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("has not been run"), "{stderr}");

    // One level each side (weights −1, 0, 1 × scale): the check fails, exit 1, and `--dtype int8` warns.
    let (code, report) = check(&hub, &tiny, &["--dtype", "int8", "--int8-levels", "1"]);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["verdict"]["passed"], false);
    assert!(report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["pass"] == false));
    // Failed together, each stage is checked alone, and its verdict kept.
    let per_stage = report["per_stage"].as_array().unwrap();
    let stages: Vec<&str> = per_stage
        .iter()
        .map(|v| v["stages"].as_str().unwrap())
        .collect();
    assert_eq!(stages, ["adapter", "dit"], "{report}");
    assert!(per_stage.iter().any(|v| v["passed"] == false), "{report}");
    assert_eq!(verdict_files(&hub).len(), 3, "{:?}", verdict_files(&hub));
    let out = gr00t_in(
        &hub,
        &[
            "predict",
            "--checkpoint",
            ckpt,
            "--request",
            req,
            "--dtype",
            "int8",
        ],
        &[],
    );
    let (_, stderr) = text(&out);
    assert!(stderr.contains("has FAILED"), "{stderr}");
    let out = gr00t_in(
        &hub,
        &[
            "predict",
            "--checkpoint",
            ckpt,
            "--request",
            req,
            "--dtype",
            "auto",
        ],
        &[],
    );
    assert!(
        !text(&out).1.contains("precision int8"),
        "auto after a failed check"
    );

    // The human-readable table names the gate and the verdict.
    let out = gr00t_in(
        &hub,
        &["check-dtype", "--checkpoint", ckpt, "--dtype", "bf16"],
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("PCC ≥ 0.9999") && stdout.contains("PASSED: bf16"),
        "{stdout}"
    );
    std::fs::remove_dir_all(&hub).unwrap();
}

#[test]
fn a_folder_of_requests_is_read_and_bad_input_is_refused() {
    let hub = cache("folder");
    let dir = hub.join("observations");
    std::fs::create_dir_all(&dir).unwrap();
    for case in ["case_simpler_env_google_1", "case_new_embodiment_1"] {
        let body = std::fs::read(multi_dir().join(case).join("request.json")).unwrap();
        std::fs::write(dir.join(format!("{case}.json")), body).unwrap();
    }
    std::fs::write(dir.join("notes.txt"), "not a request").unwrap();
    let multi = multi_checkpoint();
    let (code, report) = check(
        &hub,
        &multi,
        &["--dtype", "int8", "--observations", dir.to_str().unwrap()],
    );
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(
        report["verdict"]["observations"], 3,
        "the demo and two files"
    );
    // Each group names the embodiment that answered its observation.
    let answered = |case: &str| -> Vec<String> {
        let checks = report["checks"].as_array().unwrap();
        let of_case = checks.iter().filter(|c| c["case"] == case);
        of_case
            .map(|c| c["embodiment"].as_str().unwrap().to_string())
            .collect()
    };
    let google = answered("case_simpler_env_google_1.json");
    let new = answered("case_new_embodiment_1.json");
    assert!(
        !google.is_empty() && google.iter().all(|e| e == "simpler_env_google"),
        "{google:?}"
    );
    assert!(
        !new.is_empty() && new.iter().all(|e| e == "new_embodiment"),
        "{new:?}"
    );

    let ckpt = multi.to_str().unwrap();
    let run = |args: &[&str]| {
        let out = gr00t_in(
            &hub,
            &[&["check-dtype", "--checkpoint", ckpt], args].concat(),
            &[],
        );
        (out.status.code(), text(&out).1)
    };
    let (code, stderr) = run(&["--dtype", "f32"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--dtype int8 or --dtype bf16"), "{stderr}");
    std::fs::create_dir_all(dir.join("meta")).unwrap();
    std::fs::write(dir.join("meta").join("info.json"), "{}").unwrap();
    let dataset = ["--dtype", "int8", "--observations", dir.to_str().unwrap()];
    let (code, stderr) = run(&dataset);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("LeRobot") && stderr.contains("--embodiment TAG"),
        "{stderr}"
    );
    // With the embodiment the built-in tool reads it, and refuses an empty info.json (or, on a
    // machine without its Python packages, says what it needs).
    let (code, stderr) = run(&[&dataset[..], &["--embodiment", "new_embodiment"]].concat());
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("tools/episode_requests.py failed") && stderr.contains("pyarrow"),
        "{stderr}"
    );
    let bad = hub.join("bad.json");
    std::fs::write(&bad, r#"{"state": {}}"#).unwrap();
    let (code, stderr) = run(&["--dtype", "int8", "--observations", bad.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("observation bad.json"), "{stderr}");
    std::fs::remove_dir_all(&hub).unwrap();
}

/// `gr00t predict --dtype int8 --int8 all` of case2: the same bits on 1 and 2 threads, and
/// again.
#[test]
fn int8_answers_repeat_and_do_not_depend_on_the_thread_count() {
    let hub = cache("threads");
    let ckpt = tiny_checkpoint();
    let req = case_dir("case2").join("request.json");
    let args = [
        "predict",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--request",
        req.to_str().unwrap(),
        "--dtype",
        "int8",
        "--int8",
        "all",
    ];
    let actions = |threads: &str| {
        let out = gr00t_in(&hub, &args, &[("RAYON_NUM_THREADS", threads)]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let v: Value = serde_json::from_str(&stdout).unwrap();
        v["actions"].to_string()
    };
    let one = actions("1");
    assert_eq!(one, actions("2"), "1 vs 2 threads");
    assert_eq!(one, actions("1"), "repeat");
    std::fs::remove_dir_all(&hub).unwrap();
}

/// The outlier channels' gain: real Qwen3 activations reach ~10³ on a few channels. (At ×64
/// the tiny network's actions still pass plain int8 in the LLM: max|Δ|/max|ref| 4.1·10⁻³.)
const GAIN: f32 = 1024.0;

/// Copies `from` (a checkpoint folder) into `to`, but for its weights.
fn copy_but_weights(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let dest = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_but_weights(&path, &dest);
        } else if path.file_name().unwrap() != "model.safetensors" {
            std::fs::copy(&path, &dest).unwrap();
        }
    }
}

/// The tiny checkpoint with the activation outliers real Qwen3 weights have: in every LLM
/// layer and vision block two channels of each norm's output ×[`GAIN`], and the input columns
/// of the linear layers that norm feeds /[`GAIN`]. Powers of two: the f32 network is the same bit for bit.
fn outlier_checkpoint(to: &Path) -> PathBuf {
    use candle_core::{DType, Device, Tensor};
    let tiny = tiny_checkpoint();
    copy_but_weights(&tiny, to);
    let tensors =
        candle_core::safetensors::load(tiny.join("model.safetensors"), &Device::Cpu).unwrap();
    let (llm, vision) = ([3usize, 17], [5usize, 40]);
    let scaled = |t: &Tensor, channels: &[usize], by: f32| {
        let dims = t.dims().to_vec();
        let k = *dims.last().unwrap();
        let mut v: Vec<f32> = t
            .to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        for row in v.chunks_exact_mut(k) {
            for &c in channels {
                row[c] *= by;
            }
        }
        Tensor::from_vec(v, dims, &Device::Cpu)
            .unwrap()
            .to_dtype(t.dtype())
            .unwrap()
    };
    let mut changed = 0;
    let out: std::collections::HashMap<String, Tensor> = tensors
        .into_iter()
        .map(|(name, t)| {
            let ends = |s: &[&str]| s.iter().any(|e| name.ends_with(e));
            let t = if name.contains("language_model.layers.") {
                if ends(&["input_layernorm.weight", "post_attention_layernorm.weight"]) {
                    scaled(&t, &llm, GAIN)
                } else if ends(&[
                    "q_proj.weight",
                    "k_proj.weight",
                    "v_proj.weight",
                    "gate_proj.weight",
                    "up_proj.weight",
                ]) {
                    scaled(&t, &llm, 1.0 / GAIN)
                } else {
                    return (name, t);
                }
            } else if name.contains("visual.blocks.") {
                if ends(&["norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"]) {
                    scaled(&t, &vision, GAIN)
                } else if ends(&["attn.qkv.weight", "mlp.linear_fc1.weight"]) {
                    scaled(&t, &vision, 1.0 / GAIN)
                } else {
                    return (name, t);
                }
            } else {
                return (name, t);
            };
            changed += 1;
            (name, t)
        })
        .collect();
    assert!(changed >= 20, "{changed} tensors changed");
    candle_core::safetensors::save(&out, to.join("model.safetensors")).unwrap();
    to.to_path_buf()
}

/// SmoothQuant (`--int8-smooth`) on the tiny checkpoint with injected activation outliers:
/// the f32 answers are unchanged, plain int8 fails the gate in the LLM and in the vision tower,
/// smoothed int8 (calibrated on the demo) passes, and so does the LLM with the layers the
/// outliers feed kept f32 (`--int8-keep`); the calibration is kept for `serve`, which refuses
/// `--int8-smooth` without one and says in `/info` that it smooths.
#[test]
fn smoothing_passes_where_activation_outliers_fail_plain_int8() {
    let hub = cache("smooth");
    let ckpt = outlier_checkpoint(&hub.join("outliers"));
    let case1 = case_dir("case1").join("request.json");
    let obs = ["--observations", case1.to_str().unwrap()];

    // The same f32 network: case1's actions are the original checkpoint's, bit for bit.
    let predict = |checkpoint: &Path, extra: &[&str]| {
        let args = [
            &[
                "predict",
                "--checkpoint",
                checkpoint.to_str().unwrap(),
                "--request",
                case1.to_str().unwrap(),
            ][..],
            extra,
        ]
        .concat();
        let out = gr00t_in(&hub, &args, &[]);
        (out.status.code(), text(&out))
    };
    let (code, (original, _)) = predict(&tiny_checkpoint(), &[]);
    assert_eq!(code, Some(0));
    let (_, (injected, _)) = predict(&ckpt, &[]);
    let actions = |s: &str| serde_json::from_str::<Value>(s).unwrap()["actions"].to_string();
    assert_eq!(actions(&original), actions(&injected));

    // Before any calibration, --int8-smooth is refused, saying what to run.
    let (code, (_, stderr)) = predict(&ckpt, &["--dtype", "int8", "--int8-smooth"]);
    assert_ne!(code, Some(0));
    assert!(
        stderr.contains("check-dtype") && stderr.contains("--int8-smooth"),
        "{stderr}"
    );

    for stage in ["llm", "vision"] {
        let int8 = ["--dtype", "int8", "--int8", stage];
        let (code, plain) = check(&hub, &ckpt, &[&int8[..], &obs].concat());
        assert_eq!(code, Some(1), "plain int8 in {stage} must fail: {plain}");
        let (code, smooth) = check(&hub, &ckpt, &[&int8[..], &obs, &["--int8-smooth"]].concat());
        assert_eq!(
            code,
            Some(0),
            "smoothed int8 in {stage} must pass: {smooth}"
        );
        assert_eq!(smooth["verdict"]["stages"], format!("{stage}+smooth"));
        let worst = |r: &Value| r["verdict"]["worst_rel"].as_f64().unwrap();
        eprintln!(
            "{stage}: worst max|Δ|/max|ref| plain {:.3e}, smoothed {:.3e}; worst PCC plain {}, smoothed {}",
            worst(&plain),
            worst(&smooth),
            plain["verdict"]["worst_pcc"],
            smooth["verdict"]["worst_pcc"]
        );
    }
    // The other remedy: the layers the outlier norms feed kept f32, the rest of the LLM int8.
    let kept = "q_proj,k_proj,v_proj,gate_proj,up_proj";
    let (code, keep) = check(
        &hub,
        &ckpt,
        &[
            &["--dtype", "int8", "--int8", "llm", "--int8-keep", kept][..],
            &obs,
        ]
        .concat(),
    );
    assert_eq!(code, Some(0), "int8 llm but {kept} must pass: {keep}");
    assert_eq!(keep["verdict"]["stages"], format!("llm+keep({kept})"));
    let calibrations = verdict_files(&hub)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("int8-calibration"))
        .count();
    assert_eq!(calibrations, 1, "{:?}", verdict_files(&hub));

    // Served smoothed: /info says so, and the check passed for these stages.
    let server = Server::start_with_env(
        &ckpt,
        0,
        &["--dtype", "int8", "--int8", "llm", "--int8-smooth"],
        &[("HF_HUB_CACHE", hub.to_str().unwrap())],
    );
    let info = http_client::get(&server.http, "/info").unwrap().json();
    assert_eq!(info["int8_smooth"], true, "{info}");
    assert_eq!(info["int8_keep"], serde_json::json!([]), "{info}");
    assert_eq!(info["int8_check"], "passed", "{info}");
    drop(server);
    std::fs::remove_dir_all(&hub).unwrap();
}
