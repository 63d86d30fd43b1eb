//! End-to-end tests of `gr00t serve` and `gr00t pull`: the real binary on the tiny fixture
//! checkpoint, spoken to over real HTTP. Each test starts its own server (killed on drop).

use gr00t_fixtures::http_client as test_client;
mod support;
use support::test_server;

use base64::Engine as _;
use gr00t_fixtures::{max_abs_diff, request_json, Taps};
use serde_json::{json, Value};
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use test_client::{exchange, get, post_json, request, HttpResponse};
use test_server::{Server, GROUPS};

/// HTTP shorthands on the shared test server.
trait Http {
    /// POST `/predict`.
    fn post(&self, body: &[u8]) -> HttpResponse;
    /// GET `path`, asserting 200; the JSON body.
    fn get(&self, path: &str) -> Value;
}

impl Http for Server {
    fn post(&self, body: &[u8]) -> HttpResponse {
        post_json(&self.http, "/predict", body).expect("POST /predict")
    }

    fn get(&self, path: &str) -> Value {
        let r = get(&self.http, path).unwrap_or_else(|e| panic!("GET {path}: {e}"));
        assert_eq!(r.status, 200, "GET {path}: {}", r.text());
        r.json()
    }
}

fn case0() -> Value {
    serde_json::from_str(&request_json("case0")).expect("case0 request.json")
}

/// The response's action groups, flattened per group.
fn actions(resp: &Value) -> Vec<Vec<f32>> {
    GROUPS
        .iter()
        .map(|g| {
            let rows = resp["actions"][g]
                .as_array()
                .unwrap_or_else(|| panic!("actions.{g} missing: {resp}"));
            assert_eq!(rows.len(), 40, "actions.{g}");
            rows.iter()
                .flat_map(|r| {
                    r.as_array()
                        .expect("row")
                        .iter()
                        .map(|x| x.as_f64().expect("number") as f32)
                })
                .collect()
        })
        .collect()
}

fn assert_matches_case0(resp: &Value) {
    let taps = Taps::load("case0");
    for (g, ours) in GROUPS.iter().zip(actions(resp)) {
        let want = taps.f32s(&format!("output.{g}"));
        let d = max_abs_diff(&ours, &want);
        assert!(d <= 1e-5, "actions.{g}: max|Δ| {d:.3e} > 1e-5");
    }
}

fn expect_400(server: &Server, what: &str, body: &[u8], field: &str) {
    let r = server.post(body);
    assert_eq!(r.status, 400, "{what}: {}", r.text());
    let error = r.json()["error"].as_str().unwrap_or_default().to_string();
    assert!(
        error.contains(field),
        "{what}: error {error:?} does not name {field}"
    );
}

fn with(mut v: Value, edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    edit(&mut v);
    serde_json::to_vec(&v).unwrap()
}

fn square_png_b64() -> String {
    let img = image::RgbImage::from_pixel(320, 320, image::Rgb([90, 120, 150]));
    let mut png = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .expect("encode png");
    base64::engine::general_purpose::STANDARD.encode(png)
}

#[test]
fn predict_matches_fixture_and_refuses_bad_inputs() {
    let s = Server::start(&["--max-body-mb", "1"]);
    let valid = serde_json::to_vec(&case0()).unwrap();
    let r = s.post(&valid);
    assert_eq!(r.status, 200, "{}", r.text());
    let first = r.json();
    assert_matches_case0(&first);
    assert_eq!(first["action_horizon"], 40);
    assert_eq!(first["embodiment"], "oxe_droid_relative_eef_relative_joint");
    assert_eq!(first["seq_len"], 469);
    assert_eq!(first["noise_source"], "client");
    assert_eq!(first["seed"], Value::Null);
    for k in ["decode", "encode", "device", "decode_actions", "total"] {
        assert!(first["timing_ms"][k].is_number(), "timing_ms.{k}");
    }

    let (cam_key, cam) = ("exterior_image_1_left", "images.exterior_image_1_left");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "unknown camera",
            with(case0(), |v| {
                v["images"]["front_cam"] = v["images"]["wrist_image_left"].clone()
            }),
            "images.front_cam",
        ),
        (
            "one frame",
            with(case0(), |v| {
                v["images"][cam_key].as_array_mut().unwrap().truncate(1)
            }),
            cam,
        ),
        (
            "square frame",
            with(case0(), |v| {
                v["images"][cam_key][0] = square_png_b64().into()
            }),
            cam,
        ),
        (
            "undecodable frame",
            with(case0(), |v| {
                v["images"][cam_key][1] = "bm90IGFuIGltYWdl".into()
            }),
            cam,
        ),
        (
            "short state",
            with(case0(), |v| {
                v["state"]["joint_position"].as_array_mut().unwrap().pop();
            }),
            "state.joint_position",
        ),
        (
            "non-finite f32",
            with(case0(), |v| v["state"]["eef_9d"][0] = json!(1e39)),
            "state.eef_9d",
        ),
        (
            "long instruction",
            with(case0(), |v| {
                v["instruction"] = "pick ".repeat(60).trim().into()
            }),
            "instruction",
        ),
        (
            "noise rows",
            with(case0(), |v| v["noise"].as_array_mut().unwrap().truncate(39)),
            "noise",
        ),
        (
            "noise width",
            with(case0(), |v| {
                v["noise"][3].as_array_mut().unwrap().push(json!(0.5))
            }),
            "noise",
        ),
        (
            "seed and noise",
            with(case0(), |v| v["seed"] = json!(42)),
            "seed",
        ),
        ("bad JSON", valid[..1000].to_vec(), "body"),
    ];
    for (what, body, field) in &cases {
        expect_400(&s, what, body, field);
    }
    let r = request(
        &s.http,
        "POST",
        "/predict",
        &[("Content-Type", "text/plain")],
        &valid,
    )
    .unwrap();
    assert_eq!(r.status, 415, "text/plain: {}", r.text());
    assert_eq!(r.json()["field"], "content-type");

    // Over --max-body-mb 1: a complete body, and a declared length with no body behind it.
    let big = with(case0(), |v| v["instruction"] = "x".repeat(1 << 20).into());
    let r = s.post(&big);
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(r.json()["error"].as_str().unwrap().contains("body"));
    let head = "POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 50000000\r\nConnection: close\r\n\r\n";
    let r = exchange(&s.http, head.as_bytes(), b"{").unwrap();
    assert_eq!(r.status, 413, "{}", r.text());

    // Nothing above changed what a valid request gets.
    let again = s.post(&valid);
    assert_eq!(again.status, 200);
    assert_eq!(actions(&again.json()), actions(&first), "repeat differs");
}

#[test]
fn overload_answers_503_with_retry_after_and_recovers() {
    let s = Server::start(&["--queue", "1"]);
    let valid = Arc::new(serde_json::to_vec(&case0()).unwrap());
    let n = 6;
    let barrier = Arc::new(Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (addr, body, barrier) = (s.http.clone(), valid.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                post_json(&addr, "/predict", &body).expect("POST /predict")
            })
        })
        .collect();
    let answers: Vec<HttpResponse> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let mut ok = Vec::new();
    let mut busy = 0;
    for r in &answers {
        match r.status {
            200 => ok.push(actions(&r.json())),
            503 => {
                busy += 1;
                let retry: u64 = r
                    .header("retry-after")
                    .expect("Retry-After")
                    .parse()
                    .expect("seconds");
                assert!(retry >= 1);
                assert!(r.json()["error"].as_str().unwrap().contains("busy"));
            }
            other => panic!("status {other}: {}", r.text()),
        }
    }
    assert!(
        busy >= 1,
        "no 503 among {n} simultaneous requests with --queue 1"
    );
    assert!(!ok.is_empty(), "no request was served");
    assert!(ok.iter().all(|a| *a == ok[0]), "concurrent answers differ");
    let r = s.post(&valid);
    assert_eq!(r.status, 200);
    assert_matches_case0(&r.json());
}

#[test]
fn get_endpoints_and_demo_round_trip() {
    // The asked-for port is taken: the server moves up and says where it went.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let s = Server::start_on(taken_port, &[]);
    let port: u16 = s.http.rsplit(':').next().unwrap().parse().unwrap();
    assert!(
        port > taken_port && port <= taken_port.saturating_add(99),
        "{}",
        s.http
    );
    assert!(s.log_text().contains("is taken"), "{}", s.log_text());
    assert_eq!(s.get("/health"), json!({"status": "ok"}));
    let info = s.get("/info");
    for k in [
        "model_id",
        "revision",
        "embodiment",
        "action_horizon",
        "denoise_backend",
        "dtype",
        "device",
        "threads",
        "version",
        "checkpoint_digest",
        "synthetic_weights",
    ] {
        assert!(!info[k].is_null(), "/info lacks {k}: {info}");
    }
    // What is served, not the released model's name: the tiny checkpoint's folder.
    assert_eq!(info["model_id"], "gr00t_n17_tiny/checkpoint");
    assert_eq!(info["revision"], "local");
    // The f32 kernel's blocks come with the caches they were sized from.
    let blocks = info["cpu_blocks"].as_str().unwrap_or_default();
    assert!(
        blocks.starts_with("L1d ") && blocks.contains("L2 "),
        "{info}"
    );
    assert_eq!(info["embodiment"], "oxe_droid_relative_eef_relative_joint");
    assert_eq!(info["limits"]["queue"], 8);
    assert_eq!(info["limits"]["max_body_bytes"], 16 << 20);
    let models = s.get("/v1/models");
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"].as_array().map(Vec::len), Some(1));
    assert_eq!(models["data"][0]["id"], "gr00t_n17_tiny/checkpoint");

    let demo = s.get("/demo");
    let reference = &demo["reference"];
    assert_eq!(
        reference["checkpoint_digest"], info["checkpoint_digest"],
        "demo reference is for another checkpoint"
    );
    let r = s.post(&serde_json::to_vec(&demo["request"]).unwrap());
    assert_eq!(r.status, 200, "{}", r.text());
    for (g, ours) in GROUPS.iter().zip(actions(&r.json())) {
        let want: Vec<f32> = reference["actions"][g]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|row| {
                row.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap() as f32)
            })
            .collect();
        let d = max_abs_diff(&ours, &want);
        assert!(d <= 1e-5, "demo actions.{g}: max|Δ| {d:.3e}");
    }
    let r = get(&s.http, "/no-such-route").unwrap();
    assert_eq!(r.status, 404);
    assert!(r.json()["error"].is_string());
}

#[test]
fn sigterm_finishes_the_request_in_flight_and_exits_zero() {
    let s = Server::start(&[]);
    let addr = s.http.clone();
    let body = serde_json::to_vec(&case0()).unwrap();
    let in_flight =
        std::thread::spawn(move || post_json(&addr, "/predict", &body).expect("POST /predict"));
    // Bounded poll until the worker is computing it.
    let busy = (0..100_000).any(|_| s.get("/info")["queue"]["busy"] == true);
    assert!(busy, "the request never reached the worker");
    let pid = s.pid().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let r = in_flight.join().unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_matches_case0(&r.json());
    let (status, log) = s.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("SIGTERM received"), "{log}");
}

#[test]
fn pull_fails_fast_offline() {
    let home = std::env::temp_dir().join(format!("gr00t-pull-offline-{}", std::process::id()));
    let closed = gr00t_fixtures::unused_port();
    for endpoint in [
        format!("http://127.0.0.1:{closed}"),
        "https://hub.gr00t-test.invalid".into(),
    ] {
        let t0 = Instant::now();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gr00t"));
        cmd.arg("pull")
            .env("HF_ENDPOINT", &endpoint)
            .env("HF_HOME", &home)
            .env_remove("HF_HUB_CACHE");
        for k in gr00t::pull::PROXY_VARIABLES {
            cmd.env_remove(k);
        }
        let out = cmd.output().expect("run gr00t pull");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{endpoint}: {stderr}");
        assert!(
            stderr.contains("cannot reach the Hugging Face Hub"),
            "{endpoint}: {stderr}"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "{endpoint}: took {:?}",
            t0.elapsed()
        );
    }
    assert!(!home.exists(), "an offline pull must not create the cache");
}

#[test]
fn frames_over_max_image_pixels_are_refused_from_their_header_naming_the_view() {
    // case0's frames are 320×180 = 57 600 pixels: under a cap of 50 000 they are refused.
    let s = Server::start(&["--max-image-pixels", "50000"]);
    let body = serde_json::to_vec(&case0()).unwrap();
    let r = s.post(&body);
    let text = r.text();
    assert_eq!(r.status, 400, "{text}");
    assert!(
        text.contains("57600 pixels, more than 50000 (--max-image-pixels)"),
        "{text}"
    );
    assert!(text.contains("images."), "names the view: {text}");
    // At the default cap the same request is served.
    let s = Server::start(&[]);
    assert_eq!(s.post(&body).status, 200);
}
