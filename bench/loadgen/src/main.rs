//! `gr00t-loadgen`: N concurrent clients against a running `gr00t serve`, each sending its own
//! distinct request (seed, instruction and state vary per client) R times and checking every
//! answer's actions bit-for-bit against that request's solo answer (taken first, one at a time).
//! 503s are retried after their `Retry-After`; a monitor samples `/info`'s queue depth.
//! Prints a JSON summary; exits 1 on any wrong answer or unexpected status.
//!
//! Behind a load balancer (`bench/fleet/`): each client is one robot with its own session, sent
//! as `X-Session-Id: robot-<k>`; refused or reset connections are retried like 503s (a replica
//! going away is retryable); the replica that answered (`X-Gr00t-Replica`) is recorded per
//! answer, and `--answers-out FILE` writes one JSON line per answer for the fault analysis.
//!
//! `--episode N`: each robot runs episodes of N steps in its server-side session, every step
//! with RTC against the session's last chunk (no chunk sent), and `POST /reset` (with the
//! session's token) between episodes. Every step after an episode's first echoes the
//! `session_token` of the answer before, which locks the session to it: when the server no
//! longer holds that session (another replica, or a restarted one) it answers 409 `session
//! restarted`, and the robot starts a new episode under a new session id (`robot-<k>.<n>`: a
//! replica may still hold the old one, locked to a token the robot no longer has, until it
//! expires). An episode's first step must be step 1 of a fresh session; one that lands on an
//! earlier visit's state (a replica that still holds it) is reset and sent again, or, locked
//! (409 `session locked`), moves to a new session id. An answer is right when it equals the
//! solo answer of that step.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const USAGE: &str = "usage: gr00t-loadgen --addr HOST:PORT --fixtures DIR [--clients 16] \
[--requests 200] [--token TOKEN] [--max-seconds S] [--solo-addr HOST:PORT] \
[--answers-out FILE] [--max-attempts 50] [--episode N]";

struct Args {
    addr: String,
    fixtures: String,
    clients: usize,
    requests: usize,
    token: Option<String>,
    max_seconds: f64,
    /// Where the solo answers come from (default `addr`).
    solo_addr: Option<String>,
    answers_out: Option<String>,
    /// Attempts per request (503s and connection errors) before it counts as lost.
    max_attempts: usize,
    /// Steps per session episode (0: plain requests, no RTC).
    episode: usize,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        addr: "127.0.0.1:20000".into(),
        fixtures: "tests/fixtures/gr00t_n17_tiny".into(),
        clients: 16,
        requests: 200,
        token: None,
        max_seconds: f64::INFINITY,
        solo_addr: None,
        answers_out: None,
        max_attempts: 50,
        episode: 0,
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
            "--solo-addr" => a.solo_addr = Some(v()?),
            "--answers-out" => a.answers_out = Some(v()?),
            "--max-attempts" => {
                a.max_attempts = v()?.parse().map_err(|e| format!("--max-attempts: {e}"))?
            }
            "--episode" => a.episode = v()?.parse().map_err(|e| format!("--episode: {e}"))?,
            _ => return Err(USAGE.into()),
        }
    }
    Ok(a)
}

/// One answer: status, `Retry-After`, `X-Gr00t-Replica`, body.
struct Reply {
    status: u16,
    retry: Option<u64>,
    replica: Option<String>,
    body: Vec<u8>,
}

/// One HTTP/1.1 exchange on a fresh connection, with `X-Session-Id` when `session` is given.
fn http(
    addr: &str,
    method: &str,
    path: &str,
    body: &[u8],
    token: Option<&str>,
    session: Option<&str>,
) -> std::io::Result<Reply> {
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
    if let Some(id) = session {
        head.push_str(&format!("X-Session-Id: {id}\r\n"));
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
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    // The server answers with Content-Length (no chunking) and closes.
    Ok(Reply {
        status,
        retry: header("retry-after").and_then(|v| v.parse().ok()),
        replica: header("x-gr00t-replica"),
        body: raw[end + 4..].to_vec(),
    })
}

/// Client `k`'s own request: fixture case k % 4, its own seed, instruction and state; with
/// `rtc`, the RTC steps that join onto the session's last chunk.
fn client_request(fixtures: &str, k: usize, rtc: bool) -> Result<Vec<u8>, String> {
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
    if rtc {
        o.insert("rtc_overlap_steps".into(), json!(24));
        o.insert("rtc_frozen_steps".into(), json!(4));
        o.insert("action_horizon".into(), json!(32));
    }
    serde_json::to_vec(&v).map_err(|e| e.to_string())
}

/// `POST /reset` of `session` (carrying its `session_token`, which a locked session needs),
/// retried like a request; whether it was answered.
fn reset(
    addr: &str,
    token: Option<&str>,
    (session, session_token): (&str, Option<&str>),
    max_attempts: usize,
) -> bool {
    let body = json!({ "session_id": session, "session_token": session_token }).to_string();
    for _ in 0..max_attempts {
        match http(
            addr,
            "POST",
            "/reset",
            body.as_bytes(),
            token,
            Some(session),
        ) {
            Ok(r) if r.status == 200 => return true,
            Ok(r) if r.status == 503 => {
                std::thread::sleep(Duration::from_secs(r.retry.unwrap_or(1)))
            }
            Ok(_) => return false,
            Err(e) if retryable(&e) => std::thread::sleep(Duration::from_millis(200)),
            Err(_) => return false,
        }
    }
    false
}

/// The step an answer reports (`session.step`; 0 outside a session) and its session token.
fn session_of(body: &[u8]) -> (usize, Option<String>) {
    let v = serde_json::from_slice::<Value>(body).unwrap_or_default();
    let step = v["session"]["step"].as_u64().unwrap_or(0) as usize;
    (step, v["session_token"].as_str().map(str::to_string))
}

/// `body` echoing `token` as its `session_token` (as is without one).
fn with_token(body: &[u8], token: Option<&str>) -> Vec<u8> {
    let Some(t) = token else {
        return body.to_vec();
    };
    let mut v: Value = serde_json::from_slice(body).unwrap_or_default();
    v["session_token"] = json!(t);
    serde_json::to_vec(&v).unwrap_or_default()
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
    /// Refused, reset or cut connections that were retried.
    conn_errors: usize,
    other: Vec<String>,
    latency_ms: Vec<f64>,
    /// Answers per replica.
    replicas: BTreeMap<String, usize>,
    /// Session resets sent (episode ends and stale sessions).
    resets: usize,
    /// Answers from a stale session (an earlier visit's state on a replica), reset and resent.
    stale: usize,
    /// 409 `session restarted`: the session token named a session the server did not hold.
    restarted: usize,
}

/// One answered request, for `--answers-out`.
struct Answer {
    t_s: f64,
    client: usize,
    replica: String,
    attempts: usize,
    latency_ms: f64,
    ok: bool,
    /// The session step the server reported (0 outside episodes).
    step: usize,
}

/// The session id client `k` sends.
fn session_id(k: usize) -> String {
    format!("robot-{k}")
}

/// Robot `k`'s session id after it moved on `moves` times (a locked or lost session left
/// behind).
fn moved_session_id(k: usize, moves: usize) -> String {
    match moves {
        0 => session_id(k),
        n => format!("{}.{n}", session_id(k)),
    }
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
    let solo_addr = a.solo_addr.clone().unwrap_or_else(|| a.addr.clone());
    let mut reqs = Vec::new();
    // Per client, the answer of each session step (one, step 0, without episodes).
    let mut solo: Vec<Vec<Value>> = Vec::new();
    let steps = a.episode.max(1);
    for k in 0..a.clients {
        let body = client_request(&a.fixtures, k, a.episode > 0).unwrap_or_else(|e| panic!("{e}"));
        let session = (a.episode > 0).then(|| format!("solo-{}", session_id(k)));
        if let Some(id) = &session {
            assert!(reset(&solo_addr, token, (id, None), 1), "solo reset {id}");
        }
        let mut answers = Vec::new();
        for _ in 0..steps {
            let r = http(
                &solo_addr,
                "POST",
                "/predict",
                &body,
                token,
                session.as_deref(),
            )
            .expect("solo request");
            let text = String::from_utf8_lossy(&r.body);
            assert_eq!(r.status, 200, "solo request {k}: {text}");
            answers.push(actions(&r.body).expect("solo answer"));
        }
        solo.push(answers);
        reqs.push(body);
    }
    let distinct = {
        let mut s: Vec<String> = solo.iter().flatten().map(|v| v.to_string()).collect();
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
                if let Ok(r) = http(&addr, "GET", "/info", b"", token.as_deref(), None) {
                    if let (200, Ok(v)) = (r.status, serde_json::from_slice::<Value>(&r.body)) {
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
    let answers = Arc::new(Mutex::new(Vec::<Answer>::new()));
    // Each session's replicas in answer order, consecutive repeats merged.
    let paths = Arc::new(Mutex::new(vec![Vec::<String>::new(); a.clients]));
    let t0 = Instant::now();
    let t0_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let handles: Vec<_> = (0..a.clients)
        .map(|k| {
            let (addr, body, want) = (a.addr.clone(), reqs[k].clone(), solo[k].clone());
            let (tally, token, n) = (tally.clone(), a.token.clone(), a.requests);
            let (answers, paths) = (answers.clone(), paths.clone());
            let (max_s, max_attempts, episode) = (a.max_seconds, a.max_attempts, a.episode);
            std::thread::spawn(move || {
                let mut session = session_id(k);
                let mut moves = 0;
                // Resets the session for a new episode (with its token); whether the reset
                // was answered.
                let start_over = |mine: &mut Tally, session: &str, session_token: Option<&str>| {
                    let held = (session, session_token);
                    let done = reset(&addr, token.as_deref(), held, max_attempts);
                    if done {
                        mine.resets += 1;
                    } else {
                        mine.other.push(format!("{session}: reset not answered"));
                    }
                    done
                };
                let mut mine = Tally::default();
                let mut log = Vec::new();
                let mut path: Vec<String> = Vec::new();
                // Steps answered in this episode, and the token its last answer carried.
                let mut done_steps = 0;
                let mut token_of_session: Option<String> = None;
                if episode > 0 && !reset(&addr, token.as_deref(), (&session, None), max_attempts) {
                    mine.other.push(format!("{session}: reset not answered"));
                }
                for _ in 0..n {
                    if episode > 0 && done_steps == episode {
                        start_over(&mut mine, &session, token_of_session.as_deref());
                        done_steps = 0;
                        token_of_session = None;
                    }
                    // A time budget stops every client early (reported as answers_ok < total).
                    if t0.elapsed().as_secs_f64() > max_s {
                        break;
                    }
                    let start = Instant::now();
                    let mut attempts = 0;
                    loop {
                        attempts += 1;
                        if attempts > max_attempts {
                            mine.other
                                .push(format!("lost after {max_attempts} attempts"));
                            break;
                        }
                        let sent = with_token(&body, token_of_session.as_deref());
                        let r = http(
                            &addr,
                            "POST",
                            "/predict",
                            &sent,
                            token.as_deref(),
                            Some(&session),
                        );
                        match r {
                            Ok(r) if r.status == 200 => {
                                let (step, session_token) = if episode > 0 {
                                    session_of(&r.body)
                                } else {
                                    (0, None)
                                };
                                // An episode's first step (no token) must begin a session: an
                                // earlier visit's state is reset and the step sent again.
                                // With the token the server itself refuses anything else (409).
                                let fresh_needed = token_of_session.is_none();
                                if episode > 0 && fresh_needed && step != 1 {
                                    mine.stale += 1;
                                    if !start_over(&mut mine, &session, None) {
                                        break;
                                    }
                                    done_steps = 0;
                                    continue;
                                }
                                if episode > 0 && step != done_steps + 1 {
                                    mine.other.push(format!(
                                        "{session}: step {step} after {done_steps} with the token"
                                    ));
                                    break;
                                }
                                token_of_session = session_token;
                                let ms = start.elapsed().as_secs_f64() * 1e3;
                                mine.latency_ms.push(ms);
                                let expected = want.get(step.max(1) - 1);
                                let good = matches!(
                                    (actions(&r.body), expected),
                                    (Ok(got), Some(w)) if got == *w
                                );
                                done_steps = step;
                                if good {
                                    mine.ok += 1;
                                } else {
                                    mine.wrong += 1;
                                }
                                let replica = r.replica.unwrap_or_else(|| "?".into());
                                *mine.replicas.entry(replica.clone()).or_default() += 1;
                                if path.last() != Some(&replica) {
                                    path.push(replica.clone());
                                }
                                log.push(Answer {
                                    t_s: t0.elapsed().as_secs_f64(),
                                    client: k,
                                    replica,
                                    attempts,
                                    latency_ms: ms,
                                    ok: good,
                                    step,
                                });
                                break;
                            }
                            Ok(r)
                                if r.status == 409
                                    && token_of_session.is_some()
                                    && String::from_utf8_lossy(&r.body)
                                        .contains("session restarted") =>
                            {
                                // The session is gone here (another or a restarted replica,
                                // which may hold an earlier visit's session locked to a token
                                // this robot no longer has): a new episode in a new session.
                                mine.restarted += 1;
                                moves += 1;
                                session = moved_session_id(k, moves);
                                done_steps = 0;
                                token_of_session = None;
                            }
                            Ok(r)
                                if r.status == 409
                                    && token_of_session.is_none()
                                    && String::from_utf8_lossy(&r.body)
                                        .contains("session locked") =>
                            {
                                // An earlier visit's session, locked to its token: move on.
                                mine.stale += 1;
                                moves += 1;
                                session = moved_session_id(k, moves);
                                done_steps = 0;
                            }
                            Ok(r) if r.status == 503 => {
                                mine.busy_503 += 1;
                                // The documented back-off: wait what Retry-After says.
                                std::thread::sleep(Duration::from_secs(r.retry.unwrap_or(1)));
                            }
                            Ok(r) => {
                                let text = String::from_utf8_lossy(&r.body);
                                mine.other.push(format!("{}: {text}", r.status));
                                break;
                            }
                            Err(e) if retryable(&e) => {
                                // A replica (or the balancer) going away: try again shortly.
                                mine.conn_errors += 1;
                                std::thread::sleep(Duration::from_millis(200));
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
                t.conn_errors += mine.conn_errors;
                t.resets += mine.resets;
                t.stale += mine.stale;
                t.restarted += mine.restarted;
                t.other.extend(mine.other);
                t.latency_ms.extend(mine.latency_ms);
                for (r, n) in mine.replicas {
                    *t.replicas.entry(r).or_default() += n;
                }
                drop(t);
                answers
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend(log);
                paths.lock().unwrap_or_else(|p| p.into_inner())[k] = path;
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
    let paths = std::mem::take(&mut *paths.lock().unwrap_or_else(|p| p.into_inner()));
    let one_replica = paths.iter().filter(|p| p.len() == 1).count();
    // Where each session started (the balancer's placement).
    let mut sessions_by_replica = BTreeMap::<String, usize>::new();
    for p in &paths {
        if let Some(first) = p.first() {
            *sessions_by_replica.entry(first.clone()).or_default() += 1;
        }
    }
    let moved: Vec<Value> = paths
        .iter()
        .enumerate()
        .filter(|(_, p)| p.len() > 1)
        .map(|(k, p)| json!({"session": session_id(k), "replicas": p}))
        .collect();
    if let Some(file) = &a.answers_out {
        let mut log = std::mem::take(&mut *answers.lock().unwrap_or_else(|p| p.into_inner()));
        log.sort_by(|x, y| x.t_s.total_cmp(&y.t_s));
        let lines: String = log
            .iter()
            .map(|x| {
                let v = json!({"t_s": x.t_s, "t_unix": t0_unix + x.t_s, "session": session_id(x.client), "replica": x.replica,
                               "attempts": x.attempts, "latency_ms": x.latency_ms, "ok": x.ok, "step": x.step});
                format!("{v}\n")
            })
            .collect();
        if let Err(e) = std::fs::write(file, lines) {
            eprintln!("{file}: {e}");
            std::process::exit(2);
        }
    }
    let summary = json!({
        "clients": a.clients,
        "requests_per_client": a.requests,
        "distinct_requests": distinct,
        "answers_ok": t.ok,
        "answers_wrong": t.wrong,
        "retried_503": t.busy_503,
        "retried_connection_errors": t.conn_errors,
        "episode_steps": a.episode,
        "session_resets": t.resets,
        "stale_session_answers_resent": t.stale,
        "session_restarted_409": t.restarted,
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
        "answers_by_replica": t.replicas,
        "sessions_by_replica": sessions_by_replica,
        "sessions_on_one_replica": one_replica,
        "sessions_moved": moved,
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

/// Connection errors a client retries: refused (nothing listening), reset or cut short (the
/// peer died mid-request). A request the server never answered was not applied.
fn retryable(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
    ) || e.to_string() == "no response head"
}
