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
    let (code, stderr) = run(&["--dtype", "int8", "--observations", dir.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("LeRobot"), "{stderr}");
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
