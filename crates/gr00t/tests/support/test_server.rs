//! Test support shared by the end-to-end tests (`tests/{server,faults,zmq,websocket}.rs`,
//! through `tests/support/mod.rs`; not part of the binary): a `gr00t serve` child on the tiny
//! fixture checkpoint with its listener addresses, and the fixture case0 observation as raw
//! frames.
#![allow(dead_code)]

use gr00t_fixtures::http_client::{post_json, HttpResponse};
use gr00t_fixtures::{
    case_dir, json_f32s, json_rows, metric_sample, request_json, tiny_checkpoint, MultiCase, Taps,
};
use serde_json::Value as Json;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const STARTUP_TIMEOUT: Duration = Duration::from_secs(300);
/// The fixture's camera names in model order.
pub const CAMERAS: [&str; 2] = ["exterior_image_1_left", "wrist_image_left"];
/// Action groups in the order the fixture taps name them.
pub const GROUPS: [&str; 3] = ["eef_9d", "gripper_position", "joint_position"];

/// A `gr00t serve` child (killed on drop) and where it listens.
pub struct Server {
    child: Option<Child>,
    log: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
    /// `host:port` of the HTTP API.
    pub http: String,
    /// `host:port` of the ZMQ socket, when `--zmq-port` was given.
    pub zmq: Option<String>,
    /// `host:port` of the websocket listener, when `--ws-port` was given.
    pub ws: Option<String>,
}

impl Server {
    /// Starts the server on free ports with `extra` flags and waits until it is ready.
    pub fn start(extra: &[&str]) -> Server {
        Server::start_on(0, extra)
    }

    /// Starts the server asking for HTTP port `port` (0: any free one) and waits until ready.
    pub fn start_on(port: u16, extra: &[&str]) -> Server {
        Server::start_in(&tiny_checkpoint(), port, extra)
    }

    /// Starts the server on `checkpoint` (HTTP port `port`, 0: any) and waits until ready.
    pub fn start_in(checkpoint: &std::path::Path, port: u16, extra: &[&str]) -> Server {
        Server::start_with_env(checkpoint, port, extra, &[])
    }

    /// [`Server::start_in`] with these environment variables set.
    pub fn start_with_env(
        checkpoint: &std::path::Path,
        port: u16,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gr00t"))
            .arg("serve")
            .arg("--checkpoint")
            .arg(checkpoint)
            .args(["--port", &port.to_string()])
            .args(extra)
            // Packed-weight caches of test servers stay in the build folder, not the user's
            // Hugging Face cache (a test's own variable wins).
            .env("GR00T_WEIGHT_CACHE", test_weight_cache())
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn gr00t serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = channel();
        let sink = log.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
        let mut server = Server {
            child: Some(child),
            log,
            reader: Some(reader),
            http: String::new(),
            zmq: None,
            ws: None,
        };
        server.wait_ready(&rx);
        server
    }

    fn wait_ready(&mut self, lines: &Receiver<String>) {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = lines.recv_timeout(left).unwrap_or_else(|_| {
                panic!(
                    "server not ready within {STARTUP_TIMEOUT:?}:\n{}",
                    self.log_text()
                )
            });
            let after = |marker: &str| line.split(marker).nth(1).map(|a| a.trim().to_string());
            if let Some(a) = after("listening on http://") {
                self.http = a;
            }
            if let Some(a) = after("listening on tcp://") {
                self.zmq = Some(a);
            }
            if let Some(a) = after("listening on ws://") {
                self.ws = Some(a);
            }
            if line.trim_end() == "Application startup complete" {
                assert!(
                    !self.http.is_empty(),
                    "no HTTP address:\n{}",
                    self.log_text()
                );
                return;
            }
        }
    }

    /// The server's process id (0 once it has been waited for).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The process's resident memory (kB; 0 when unreadable).
    pub fn rss_kb(&self) -> u64 {
        proc_field(&format!("/proc/{}/status", self.pid()), "VmRSS:", 1).unwrap_or(0)
    }

    /// The process's open file descriptors.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// `POST /predict` with `body` as JSON.
    pub fn post_predict(&self, body: &Json) -> HttpResponse {
        post_json(&self.http, "/predict", &serde_json::to_vec(body).unwrap())
            .expect("POST /predict")
    }

    /// [`Server::post_predict`], which must answer 200: the response JSON.
    pub fn predict_json(&self, body: &Json) -> Json {
        let r = self.post_predict(body);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    }

    /// Everything the server logged so far.
    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Whether the log holds `needle` within `timeout` (the reader thread may lag the server
    /// on a loaded machine).
    #[allow(dead_code)]
    pub fn log_shows(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if self.log_text().contains(needle) {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits (bounded) for the process to exit by itself; returns its status and log.
    pub fn wait_exit(mut self, timeout: Duration) -> (ExitStatus, String) {
        let mut child = self.child.take().expect("child");
        let pid = child.id();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        match rx.recv_timeout(timeout) {
            Ok(status) => {
                // The reader ends at EOF, after the last line the process wrote.
                if let Some(r) = self.reader.take() {
                    let _ = r.join();
                }
                (status.expect("wait"), self.log_text())
            }
            Err(_) => {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
                panic!(
                    "server did not exit within {timeout:?}:\n{}",
                    self.log_text()
                )
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// This process's soft limit on open files (1024 when unreadable).
pub fn fd_limit() -> usize {
    proc_field("/proc/self/limits", "Max open files", 3).unwrap_or(1024)
}

/// Field `n` (split at white space) of the line starting with `prefix` in a `/proc` file.
fn proc_field<T: std::str::FromStr>(path: &str, prefix: &str, n: usize) -> Option<T> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find(|l| l.starts_with(prefix))?
        .split_whitespace()
        .nth(n)?
        .parse()
        .ok()
}

/// A fixture frame as (width, height, RGB8 HWC bytes), decoded from its PNG.
pub fn frame(case: &str, cam: &str, t: &str) -> (usize, usize, Vec<u8>) {
    let path = case_dir(case).join(format!("{cam}_{t}.png"));
    let img = image::open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .to_rgb8();
    (img.width() as usize, img.height() as usize, img.into_raw())
}

/// Both frames of a case's camera, `t-15` then `t0`, as (width, height, RGB8 `[2, H, W, 3]`).
pub fn both_frames(case: &str, cam: &str) -> (usize, usize, Vec<u8>) {
    let (w, h, mut data) = frame(case, cam, "t-15");
    data.extend(frame(case, cam, "t0").2);
    (w, h, data)
}

/// Each view of a multi-embodiment (or extra) case with its frames decoded, oldest first:
/// (view, `[T, H, W, 3]`, RGB8 bytes).
pub fn multi_video(case: &MultiCase) -> Vec<(String, Vec<usize>, Vec<u8>)> {
    case.video
        .iter()
        .map(|(view, files)| {
            let mut data = Vec::new();
            let (mut w, mut h) = (0, 0);
            for f in files {
                let path = case.dir.join(f);
                let img = image::open(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
                    .to_rgb8();
                (w, h) = (img.width() as usize, img.height() as usize);
                data.extend(img.into_raw());
            }
            (view.clone(), vec![files.len(), h, w, 3], data)
        })
        .collect()
}

/// The case's HTTP request body (`request.json`).
pub fn request(case: &str) -> Json {
    serde_json::from_str(&request_json(case)).expect("request.json")
}

/// A case as upstream's nested GR00T observation (the DROID ZMQ client's), its arrays in
/// `enc`: video `[1, 2, H, W, 3]`, state `[1, 1, D]`, the instruction as `[[text]]`.
pub fn nested_observation(
    case: &str,
    enc: fn(&gr00t::doors::wire::ndarray::NdArray) -> rmpv::Value,
) -> rmpv::Value {
    use gr00t::doors::wire::msgpack_numpy::str_map;
    use gr00t::doors::wire::ndarray::{DType, NdArray};
    use rmpv::Value;
    let video = |cam: &str| {
        let (w, h, data) = both_frames(case, cam);
        (
            Value::from(cam),
            enc(&NdArray::new(DType::U8, vec![1, 2, h, w, 3], data).unwrap()),
        )
    };
    let st = |g: &str| {
        let v = state(case, g);
        (
            Value::from(g),
            enc(&NdArray::from_f32(vec![1, 1, v.len()], &v)),
        )
    };
    let instruction = Value::from(request(case)["instruction"].as_str().unwrap());
    let key = "annotation.language.language_instruction";
    str_map([
        (
            "video",
            Value::Map(CAMERAS.iter().map(|c| video(c)).collect()),
        ),
        ("state", Value::Map(GROUPS.iter().map(|g| st(g)).collect())),
        (
            "language",
            str_map([(key, Value::Array(vec![Value::Array(vec![instruction])]))]),
        ),
    ])
}

/// A state group of the case as f32.
pub fn state(case: &str, group: &str) -> Vec<f32> {
    json_f32s(&request(case)["state"][group])
}

/// The case's noise, row-major `[40 × 132]`.
pub fn noise(case: &str) -> Vec<f32> {
    json_rows(&request(case)["noise"])
}

/// The fields `keys` of a JSON object as u64 (`None` where absent or not one).
pub fn u64s(v: &Json, keys: &[&str]) -> Vec<Option<u64>> {
    keys.iter().map(|k| v[k].as_u64()).collect()
}

/// The reference actions of a case for one group, `[40 × D]` row-major.
pub fn fixture_actions(case: &str, group: &str) -> Vec<f32> {
    Taps::load(case).f32s(&format!("output.{group}"))
}

/// The actions of an HTTP `/predict` response for one group, row-major.
pub fn http_actions(resp: &Json, group: &str) -> Vec<f32> {
    let rows = &resp["actions"][group];
    assert!(rows.is_array(), "actions.{group} missing: {resp}");
    json_rows(rows)
}

/// A `gr00t_predict_requests_total` sample of `door` in a `/metrics` text, with these labels
/// (`outcome`, `code`, `field`, in the server's order); 0 when absent.
pub fn answers(text: &str, labels: &str, door: &str) -> f64 {
    let series = format!("gr00t_predict_requests_total{{{labels},door=\"{door}\"}}");
    metric_sample(text, &series).unwrap_or(0.0)
}

/// The labels of an answered prediction in `gr00t_predict_requests_total`.
pub const ANSWERED: &str = "outcome=\"ok\",code=\"200\"";
/// The labels of a prediction refused with a 400 at `field` (its label).
pub fn refused_at(field: &str) -> String {
    format!("outcome=\"bad_request\",code=\"400\",field=\"{field}\"")
}

/// The counts of `door`'s answered predictions and of its 400s, whatever their field, in a
/// `/metrics` text.
pub fn door_answers(text: &str, door: &str) -> (f64, f64) {
    let refused: f64 = text
        .lines()
        .filter(|l| {
            l.starts_with("gr00t_predict_requests_total{outcome=\"bad_request\"")
                && l.contains(&format!("door=\"{door}\"}}"))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    (answers(text, ANSWERED, door), refused)
}

/// [`stage_count`] of each of `stages`.
pub fn stage_counts(text: &str, stages: &[&str]) -> Vec<f64> {
    stages.iter().map(|s| stage_count(text, s)).collect()
}

/// The observation count of `stage`'s latency histogram in a `/metrics` text; 0 when absent.
pub fn stage_count(text: &str, stage: &str) -> f64 {
    let series = format!("gr00t_stage_duration_seconds_count{{stage=\"{stage}\"}}");
    metric_sample(text, &series).unwrap_or(0.0)
}

/// Stops the server with SIGTERM and returns the `gr00t::request` log lines of `door` it wrote,
/// in order (the whole log is read to its end).
pub fn request_lines(s: Server, door: &str) -> Vec<String> {
    let _ = Command::new("kill")
        .args(["-TERM", &s.pid().to_string()])
        .status();
    let (_, log) = s.wait_exit(Duration::from_secs(60));
    let door = format!("door=\"{door}\"");
    log.lines()
        .filter(|l| l.contains("gr00t::request") && l.contains(&door))
        .map(str::to_string)
        .collect()
}

/// The packed-weight cache folder of the test servers: in the build folder.
pub fn test_weight_cache() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("weight-cache")
}
