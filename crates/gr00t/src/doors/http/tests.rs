//! In-process tests of the HTTP layer with stand-in predictors (the real model is exercised by
//! `tests/server.rs`): refusals, limits, overload, panics. Bodies are the tiny checkpoint's
//! DROID request with a script word as the instruction, parsed as served; the stand-in
//! predictor answers by that word.

use super::state::{AppState, Limits};
use crate::doors::browser::{BrowserOptions, BrowserRules};
use crate::doors::connections::{size_caps, ConnectionOptions, Timers};
use crate::doors::{DoorLimits, Stop};
use gr00t_core::info::EngineInfo;
use gr00t_core::layouts::Layouts;
use gr00t_core::queue::{self as worker, PredictFn};
use gr00t_core::request::Request;
use gr00t_core::response::{ActionGroups, PredictResponse, TimingMs};
use gr00t_core::InferError;
use gr00t_embodiment::observation::RequestError;
use gr00t_fixtures::http_client::{exchange, get, post_json, request};
use gr00t_model::Checkpoint;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

struct TestServer {
    addr: String,
    runtime: Option<tokio::runtime::Runtime>,
    worker: Option<worker::Worker>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // The runtime owns the router and its queue handle; the worker ends after it.
        drop(self.runtime.take());
        if let Some(w) = self.worker.take() {
            w.join();
        }
    }
}

fn info() -> EngineInfo {
    EngineInfo {
        model_id: "nvidia/GR00T-N1.7-3B".into(),
        revision: "2fc962b973bc".into(),
        checkpoint: "/nowhere".into(),
        checkpoint_digest: "0".repeat(64),
        synthetic_weights: false,
        embodiment: "oxe_droid_relative_eef_relative_joint".into(),
        embodiments: Vec::new(),
        embodiment_weights_mib: 0.0,
        action_horizon: 40,
        denoise_backend: "test".into(),
        vision_cache_images: 16,
        cpu_kernel: "test".into(),
        cpu_blocks: "test".into(),
        dtype: "f32".into(),
        dtype_reason: "the CPU default".into(),
        int8_stages: Vec::new(),
        int8_kernel: "none",
        int8_check: "none",
        int8_smooth: false,
        int8_keep: Vec::new(),
        device: "cpu".into(),
        threads: 1,
        version: "test".into(),
        weight_cache: "off".into(),
    }
}

fn start(predict: PredictFn, queue: usize, max_body_bytes: usize) -> TestServer {
    start_named(predict, queue, max_body_bytes, None)
}

fn start_named(
    predict: PredictFn,
    queue: usize,
    max_body_bytes: usize,
    replica: Option<&str>,
) -> TestServer {
    let p = prepare(predict, queue, max_body_bytes, replica);
    let (state, doors) = (p.state, p.doors);
    p.runtime
        .spawn(async move { super::serve(p.listener, state, &doors, Stop::new()).await });
    TestServer {
        addr: p.addr,
        runtime: Some(p.runtime),
        worker: Some(p.worker),
    }
}

/// A server's parts before it serves: its runtime, listener, state and door limits.
struct Prepared {
    runtime: tokio::runtime::Runtime,
    listener: tokio::net::TcpListener,
    addr: String,
    state: AppState,
    doors: DoorLimits,
    worker: worker::Worker,
}

fn prepare(
    predict: PredictFn,
    queue: usize,
    max_body_bytes: usize,
    replica: Option<&str>,
) -> Prepared {
    let (worker, handle) = worker::start(predict, queue).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let opts = ConnectionOptions::default();
    let caps = size_caps(&opts, false, false, false, 1 << 16);
    let limits = Limits {
        queue,
        max_body_bytes,
        connections: caps,
    };
    let state = match replica {
        None => AppState::new(handle, tiny_layouts(), info(), limits),
        Some(id) => AppState::with_observer(
            handle,
            tiny_layouts(),
            info(),
            limits,
            super::observe::Observer::new(Default::default()).unwrap(),
            Some(super::routes::replica_id(id).unwrap()),
        ),
    };
    // The door as served: its guard (browser rules, body deadline) in front of the routes.
    let doors = DoorLimits {
        max_message_bytes: max_body_bytes,
        caps,
        timers: Timers::new(&opts, max_body_bytes),
        body: crate::doors::connections::BodyPace::new(&opts),
        api_token: None,
        browser: Arc::new(BrowserRules::new(&BrowserOptions::default(), "127.0.0.1")),
    };
    Prepared {
        runtime,
        listener,
        addr,
        state,
        doors,
        worker,
    }
}

/// The tiny checkpoint's DROID layout, as the server reads bodies against it.
fn tiny_layouts() -> Layouts {
    let ckpt = Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
    Layouts::of_checkpoint(&ckpt, &[gr00t_embodiment::EMBODIMENT_TAG]).unwrap()
}

/// A valid DROID body (case3's, the smallest) whose instruction is `word`, the stand-in predictor's script.
fn body(word: &str) -> Vec<u8> {
    let mut v: serde_json::Value =
        serde_json::from_str(&gr00t_fixtures::request_json("case3")).unwrap();
    v["instruction"] = word.into();
    serde_json::to_vec(&v).unwrap()
}

/// The script word a stand-in request carries.
fn body_of(request: &Request) -> &[u8] {
    request.observation.instruction.as_bytes()
}

fn ok_response(seq_len: usize) -> PredictResponse {
    PredictResponse {
        actions: ActionGroups(vec![
            ("eef_9d".into(), vec![vec![0.5; 9]; 40]),
            ("gripper_position".into(), vec![vec![0.0; 1]; 40]),
            ("joint_position".into(), vec![vec![0.25; 7]; 40]),
        ]),
        action_horizon: 40,
        embodiment: "oxe_droid_relative_eef_relative_joint".into(),
        seq_len,
        noise_source: "seed",
        seed: Some(42),
        actions_normalized: None,
        timing_ms: TimingMs::default(),
        ..Default::default()
    }
}

/// Answers by instruction: `bad` → 400 on state.eef_9d, `panic` → panics, `fail` → internal
/// error, `block` → waits for a release, anything else → 200 with `seq_len` = its length.
fn scripted(started: Sender<()>, release: Receiver<()>) -> PredictFn {
    let release = Mutex::new(release);
    Box::new(move |request: Request, _| match body_of(&request) {
        b"bad" => Err(InferError::Invalid(RequestError::new(
            "state.eef_9d",
            "expected 9 numbers, got 8",
        ))),
        b"panic" => panic!("deliberate test panic"),
        b"fail" => Err(InferError::internal("device lost")),
        b"block" => {
            started.send(()).unwrap();
            release.lock().unwrap().recv().unwrap();
            Ok(ok_response(5))
        }
        other => Ok(ok_response(other.len())),
    })
}

fn simple_server(max_body_bytes: usize) -> TestServer {
    let (started, _) = channel();
    let (_, release) = channel();
    start(scripted(started, release), 2, max_body_bytes)
}

#[test]
fn health_says_loading_until_the_routes_are_switched_in() {
    let (started, _) = channel();
    let (_, release) = channel();
    let p = prepare(scripted(started, release), 2, 1 << 20, Some("replica-7"));
    let app = super::Switch::loading(Some(super::routes::replica_id("replica-7").unwrap()));
    let serving = super::serve_switch(p.listener, app.clone(), p.doors.clone(), Stop::new());
    p.runtime.spawn(serving);
    let health_is = |status: u16, word: &str| {
        let r = get(&p.addr, "/health").unwrap();
        let want = serde_json::json!({ "status": word });
        assert_eq!((r.status, r.json()), (status, want));
        assert_eq!(r.header("x-gr00t-replica"), Some("replica-7"));
    };
    health_is(503, "loading");
    // Any other request: 503 with a retry hint, its body never read.
    let r = post_json(&p.addr, "/predict", &body("hello")).unwrap();
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("5"));
    assert!(r.json()["error"].as_str().unwrap().contains("loading"));
    assert_eq!(get(&p.addr, "/info").unwrap().status, 503);
    // Through a proxy: closed unanswered, so the proxy tries another replica.
    let proxied = [
        ("X-Forwarded-For", "10.0.0.9"),
        ("Content-Type", "application/json"),
    ];
    let r = request(&p.addr, "POST", "/predict", &proxied, &body("hello"));
    assert!(
        r.is_err(),
        "answered through a proxy: {:?}",
        r.map(|r| r.status)
    );

    app.ready(super::guarded_routes(p.state, &p.doors));
    health_is(200, "ok");
    let r = post_json(&p.addr, "/predict", &body("hello")).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let r = request(&p.addr, "POST", "/predict", &proxied, &body("hello")).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    // The routes (and their queue handle) live in the switch and the runtime.
    drop((p.runtime, app));
    p.worker.join();
}

#[test]
fn get_endpoints_answer_json() {
    let s = simple_server(1 << 20);
    let r = get(&s.addr, "/health").unwrap();
    assert_eq!(
        (r.status, r.json()),
        (200, serde_json::json!({"status": "ok"}))
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    let i = get(&s.addr, "/info").unwrap().json();
    assert_eq!(i["model_id"], "nvidia/GR00T-N1.7-3B");
    assert_eq!(i["limits"]["queue"], 2);
    assert_eq!(i["limits"]["max_body_bytes"], 1 << 20);
    assert_eq!(i["queue"]["busy"], false);
    let m = get(&s.addr, "/v1/models").unwrap().json();
    assert_eq!(m["object"], "list");
    assert_eq!(m["data"][0]["id"], "nvidia/GR00T-N1.7-3B");
    let d = get(&s.addr, "/demo").unwrap().json();
    assert!(d["request"]["images"].is_object() && d["reference"]["actions"].is_object());
    let r = get(&s.addr, "/nope").unwrap();
    assert_eq!(r.status, 404);
    assert!(r.json()["error"].as_str().unwrap().contains("/nope"));
    let r = get(&s.addr, "/predict").unwrap();
    assert_eq!(r.status, 405);
    assert!(r.json()["error"].is_string());
}

#[test]
fn predict_outcomes_map_to_status_codes() {
    let s = simple_server(1 << 20);
    let r = post_json(&s.addr, "/predict", &body("ok")).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["seq_len"], 2);
    let r = post_json(&s.addr, "/predict", &body("bad")).unwrap();
    assert_eq!(r.status, 400);
    let j = r.json();
    assert_eq!(j["error"], "state.eef_9d: expected 9 numbers, got 8");
    assert_eq!(j["field"], "state.eef_9d");
    let r = post_json(&s.addr, "/predict", &body("fail")).unwrap();
    assert_eq!(r.status, 500);
    assert!(r.json()["error"].as_str().unwrap().contains("device lost"));
    let r = post_json(&s.addr, "/predict", &body("panic")).unwrap();
    assert_eq!(r.status, 500);
    assert!(r.json()["error"]
        .as_str()
        .unwrap()
        .contains("deliberate test panic"));
    // The server and its worker survive the panic.
    let r = post_json(&s.addr, "/predict", &body("one")).unwrap();
    assert_eq!((r.status, r.json()["seq_len"].as_u64()), (200, Some(3)));
}

#[test]
fn wrong_content_type_and_oversize_bodies_are_refused() {
    let s = simple_server(1000);
    let r = request(
        &s.addr,
        "POST",
        "/predict",
        &[("Content-Type", "text/plain")],
        b"{}",
    )
    .unwrap();
    assert_eq!(r.status, 415);
    assert!(r.json()["error"]
        .as_str()
        .unwrap()
        .starts_with("content-type:"));
    // Declared too large: refused before the body is read.
    let head = "POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 5000\r\nConnection: close\r\n\r\n";
    let r = exchange(&s.addr, head.as_bytes(), b"{").unwrap();
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["field"], "body");
    // Too large without a declared length (chunked): refused while reading.
    let chunk = vec![b' '; 600];
    let mut body = Vec::new();
    for _ in 0..2 {
        body.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        body.extend_from_slice(&chunk);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"0\r\n\r\n");
    let head = "POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    let r = exchange(&s.addr, head.as_bytes(), &body).unwrap();
    assert_eq!(r.status, 413);
    assert!(r.json()["error"].as_str().unwrap().contains("1000 bytes"));
    // Exactly at the limit is read and parsed (and refused as JSON, not for its size).
    let r = post_json(&s.addr, "/predict", &vec![b' '; 1000]).unwrap();
    assert_eq!((r.status, r.json()["field"].as_str()), (400, Some("body")));
    assert!(r.json()["error"].as_str().unwrap().contains("invalid JSON"));
}

#[test]
fn full_queue_answers_503_with_retry_after() {
    let (started_tx, started) = channel();
    let (release, release_rx) = channel();
    let s = start(scripted(started_tx, release_rx), 1, 1 << 20);
    let addr = Arc::new(s.addr.clone());
    let spawn = |word: &'static str| {
        let addr = addr.clone();
        std::thread::spawn(move || post_json(&addr, "/predict", &body(word)).unwrap())
    };
    let first = spawn("block");
    started.recv().unwrap(); // in flight
    let second = spawn("four");
    // Wait (bounded) until the second request sits in the queue.
    let queued = (0..2000).any(|_| get(&s.addr, "/info").unwrap().json()["queue"]["waiting"] == 1);
    assert!(queued, "second request never reached the queue");
    let r = post_json(&s.addr, "/predict", &body("ok")).unwrap();
    assert_eq!(r.status, 503);
    let retry: u64 = r
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!(retry >= 1);
    assert!(r.json()["error"].as_str().unwrap().contains("busy"));
    release.send(()).unwrap();
    assert_eq!(first.join().unwrap().status, 200);
    let r = second.join().unwrap();
    assert_eq!((r.status, r.json()["seq_len"].as_u64()), (200, Some(4)));
}

#[test]
fn every_response_names_the_replica_when_one_is_set() {
    let (started, _) = channel();
    let (_, release) = channel();
    let s = start_named(scripted(started, release), 2, 1 << 20, Some("gr00t-0"));
    let info = get(&s.addr, "/info").unwrap();
    assert_eq!(info.header("x-gr00t-replica"), Some("gr00t-0"));
    assert_eq!(info.json()["replica_id"], "gr00t-0");
    // Answers, refusals, probes and unknown paths alike: a balancer's client can always tell.
    for r in [
        post_json(&s.addr, "/predict", &body("ok")).unwrap(),
        post_json(&s.addr, "/predict", &body("bad")).unwrap(),
        get(&s.addr, "/health").unwrap(),
        get(&s.addr, "/nope").unwrap(),
    ] {
        assert_eq!(r.header("x-gr00t-replica"), Some("gr00t-0"), "{}", r.status);
    }
    // Without an id: no header, and /info says null.
    let s = simple_server(1 << 20);
    let info = get(&s.addr, "/info").unwrap();
    assert_eq!(info.header("x-gr00t-replica"), None);
    assert!(info.json()["replica_id"].is_null());
    // No --otlp-endpoint in this process: listed, as null.
    assert_eq!(
        info.json().get("otlp_endpoint"),
        Some(&serde_json::Value::Null)
    );
}
