//! `gr00t-loadgen`: N concurrent clients against a running `gr00t serve`, each sending its own
//! distinct request (seed, instruction and state vary per client) R times and checking every
//! answer's actions bit-for-bit against that request's solo answer (taken first, one at a time).
//! 503s are retried after their `Retry-After`; a monitor samples `/info`'s queue depth.
//! Prints a JSON summary; exits 1 on any wrong answer or unexpected status.

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const USAGE: &str = "usage: gr00t-loadgen --addr HOST:PORT --fixtures DIR [--clients 16] \
[--requests 200] [--token TOKEN] [--max-seconds S]";

struct Args {
    addr: String,
    fixtures: String,
    clients: usize,
    requests: usize,
    token: Option<String>,
    max_seconds: f64,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        addr: "127.0.0.1:20000".into(),
        fixtures: "tests/fixtures/gr00t_n17_tiny".into(),
        clients: 16,
        requests: 200,
        token: None,
        max_seconds: f64::INFINITY,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || {
            it.next()
                .ok_or_else(|| format!("{k} needs a value\n{USAGE}"))
        };
        match k.as_str() {
            "--addr" => a.addr = v()?,
            "--fixtures" => a.fixtures = v()?,
            "--clients" => a.clients = v()?.parse().map_err(|e| format!("--clients: {e}"))?,
            "--requests" => a.requests = v()?.parse().map_err(|e| format!("--requests: {e}"))?,
            "--token" => a.token = Some(v()?),
            "--max-seconds" => {
                a.max_seconds = v()?.parse().map_err(|e| format!("--max-seconds: {e}"))?
            }
            _ => return Err(USAGE.into()),
        }
    }
    Ok(a)
}

/// One HTTP/1.1 exchange on a fresh connection: (status, Retry-After, body).
fn http(
    addr: &str,
    method: &str,
    path: &str,
    body: &[u8],
    token: Option<&str>,
) -> std::io::Result<(u16, Option<u64>, Vec<u8>)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(600)))?;
    let _ = s.set_nodelay(true);
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no response head"))?;
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("bad status line"))?;
    let retry = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("retry-after")
            .then(|| v.trim().parse().ok())?
    });
    // The server answers with Content-Length (no chunking) and closes.
    Ok((status, retry, raw[end + 4..].to_vec()))
}

/// Client `k`'s own request: fixture case k % 4, its own seed, instruction and state.
fn client_request(fixtures: &str, k: usize) -> Result<Vec<u8>, String> {
    let path = format!("{fixtures}/case{}/request.json", k % 4);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let mut v: Value = serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    let o = v.as_object_mut().ok_or("request is not an object")?;
    o.remove("noise");
    o.insert("seed".into(), json!(1000 + k as u64));
    let instr = o["instruction"].as_str().unwrap_or("").to_string();
    o.insert("instruction".into(), json!(format!("{instr} (client {k})")));
    if let Some(Value::Object(state)) = o.get_mut("state") {
        for (_, vals) in state.iter_mut() {
            if let Value::Array(xs) = vals {
                for (i, x) in xs.iter_mut().enumerate() {
                    let f = x.as_f64().unwrap_or(0.0);
                    *x = json!(f + 0.001 * (k as f64) * ((i % 3) as f64 - 1.0));
                }
            }
        }
    }
    serde_json::to_vec(&v).map_err(|e| e.to_string())
}

fn actions(body: &[u8]) -> Result<Value, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("answer not JSON: {e}"))?;
    Ok(v["actions"].clone())
}

fn pct(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

#[derive(Default)]
struct Tally {
    ok: usize,
    wrong: usize,
    busy_503: usize,
    other: Vec<String>,
    latency_ms: Vec<f64>,
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let token = a.token.as_deref();
    // Solo answers, one request at a time.
    let mut reqs = Vec::new();
    let mut solo = Vec::new();
    for k in 0..a.clients {
        let body = client_request(&a.fixtures, k).unwrap_or_else(|e| panic!("{e}"));
        let (st, _, b) = http(&a.addr, "POST", "/predict", &body, token).expect("solo request");
        assert_eq!(st, 200, "solo request {k}: {}", String::from_utf8_lossy(&b));
        solo.push(actions(&b).expect("solo answer"));
        reqs.push(body);
    }
    let distinct = {
        let mut s: Vec<String> = solo.iter().map(|v| v.to_string()).collect();
        s.sort();
        s.dedup();
        s.len()
    };
    eprintln!(
        "{} solo answers ({distinct} distinct); loading…",
        solo.len()
    );

    let done = Arc::new(AtomicBool::new(false));
    let max_waiting = Arc::new(AtomicUsize::new(0));
    let monitor = {
        let (addr, done, max_waiting) = (a.addr.clone(), done.clone(), max_waiting.clone());
        let token = a.token.clone();
        std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !done.load(Ordering::SeqCst) {
                if let Ok((200, _, b)) = http(&addr, "GET", "/info", b"", token.as_deref()) {
                    if let Ok(v) = serde_json::from_slice::<Value>(&b) {
                        let w = v["queue"]["waiting"].as_u64().unwrap_or(0) as usize;
                        max_waiting.fetch_max(w, Ordering::SeqCst);
                        samples.push(w);
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            samples
        })
    };
    let tally = Arc::new(Mutex::new(Tally::default()));
    let t0 = Instant::now();
    let handles: Vec<_> = (0..a.clients)
        .map(|k| {
            let (addr, body, want) = (a.addr.clone(), reqs[k].clone(), solo[k].clone());
            let (tally, token, n) = (tally.clone(), a.token.clone(), a.requests);
            let max_s = a.max_seconds;
            std::thread::spawn(move || {
                let mut mine = Tally::default();
                for _ in 0..n {
                    // A time budget stops every client early (reported as answers_ok < total).
                    if t0.elapsed().as_secs_f64() > max_s {
                        break;
                    }
                    let start = Instant::now();
                    loop {
                        match http(&addr, "POST", "/predict", &body, token.as_deref()) {
                            Ok((200, _, b)) => {
                                mine.latency_ms.push(start.elapsed().as_secs_f64() * 1e3);
                                match actions(&b) {
                                    Ok(got) if got == want => mine.ok += 1,
                                    _ => mine.wrong += 1,
                                }
                                break;
                            }
                            Ok((503, retry, _)) => {
                                mine.busy_503 += 1;
                                // The documented back-off: wait what Retry-After says.
                                std::thread::sleep(Duration::from_secs(retry.unwrap_or(1)));
                            }
                            Ok((st, _, b)) => {
                                mine.other
                                    .push(format!("{st}: {}", String::from_utf8_lossy(&b)));
                                break;
                            }
                            Err(e) => {
                                mine.other.push(format!("io: {e}"));
                                break;
                            }
                        }
                    }
                }
                let mut t = tally.lock().unwrap_or_else(|p| p.into_inner());
                t.ok += mine.ok;
                t.wrong += mine.wrong;
                t.busy_503 += mine.busy_503;
                t.other.extend(mine.other);
                t.latency_ms.extend(mine.latency_ms);
            })
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
    let wall = t0.elapsed().as_secs_f64();
    done.store(true, Ordering::SeqCst);
    let samples = monitor.join().unwrap_or_default();
    let mut t = std::mem::take(&mut *tally.lock().unwrap_or_else(|p| p.into_inner()));
    t.latency_ms.sort_by(f64::total_cmp);
    let summary = json!({
        "clients": a.clients,
        "requests_per_client": a.requests,
        "distinct_requests": distinct,
        "answers_ok": t.ok,
        "answers_wrong": t.wrong,
        "retried_503": t.busy_503,
        "other_failures": t.other.len(),
        "other_failure_samples": t.other.iter().take(5).collect::<Vec<_>>(),
        "wall_s": wall,
        "throughput_rps": t.ok as f64 / wall,
        "latency_ms": {
            "p50": pct(&t.latency_ms, 0.50),
            "p90": pct(&t.latency_ms, 0.90),
            "p99": pct(&t.latency_ms, 0.99),
            "max": t.latency_ms.last().copied().unwrap_or(f64::NAN),
        },
        "queue_waiting_max": max_waiting.load(Ordering::SeqCst),
        "queue_waiting_mean": samples.iter().sum::<usize>() as f64 / samples.len().max(1) as f64,
        "queue_samples": samples.len(),
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&summary).unwrap_or_default()
    );
    if t.wrong > 0 || !t.other.is_empty() {
        std::process::exit(1);
    }
}
