//! Fault injection against the real `gr00t serve` on the tiny checkpoint, over loopback:
//! vanishing clients, slow bodies, a 100 MiB body, clients that send a whole refused body before
//! reading, thousands of idle connections and the HTTP bearer token. SIGTERM during a request is covered by
//! `tests/server.rs::sigterm_finishes_the_request_in_flight_and_exits_zero`.
//! Every wait is bounded by a socket timeout or a deadline; nothing sleeps to let time pass.

use gr00t_fixtures::http_client as test_client;
mod support;
use support::test_server;

use gr00t_fixtures::request_json;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};
use test_client::{exchange, get, parse, post_json, request, HttpResponse};
use test_server::{fd_limit, Server};

/// `gr00t serve` on the tiny checkpoint without the status page, killed on drop.
fn start(extra: &[&str]) -> Server {
    Server::start(&[&["--no-ui"], extra].concat())
}

/// What these tests ask of the server.
trait Probe {
    /// POST `/predict`.
    fn predict(&self, body: &[u8]) -> HttpResponse;
    /// GET `/health`'s status.
    fn health(&self) -> u16;
}

impl Probe for Server {
    fn predict(&self, body: &[u8]) -> HttpResponse {
        post_json(&self.http, "/predict", body).expect("POST /predict")
    }

    fn health(&self) -> u16 {
        get(&self.http, "/health").expect("GET /health").status
    }
}

fn body(case: &str, seed: u64) -> Vec<u8> {
    let mut v: Value = serde_json::from_str(&request_json(case)).unwrap();
    let o = v.as_object_mut().unwrap();
    o.remove("noise");
    o.insert("seed".into(), seed.into());
    serde_json::to_vec(&v).unwrap()
}

/// The answer's actions (what must be bit-identical between runs).
fn actions(r: &HttpResponse) -> Value {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["actions"].clone()
}

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    s
}

fn head(len: usize, extra: &str) -> String {
    format!(
        "POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {len}\r\n{extra}\r\n"
    )
}

#[test]
fn a_client_vanishing_mid_request_leaves_the_next_request_unaffected() {
    let s = start(&[]);
    let b = body("case1", 11);
    let solo = actions(&s.predict(&b));

    // Whole request sent, then gone before the answer: the work finishes or is dropped.
    let mut c = connect(&s.http);
    c.write_all(head(b.len(), "").as_bytes()).unwrap();
    c.write_all(&b).unwrap();
    c.shutdown(Shutdown::Both).unwrap();
    drop(c);
    // Half a body, then gone.
    let mut c = connect(&s.http);
    c.write_all(head(b.len(), "").as_bytes()).unwrap();
    c.write_all(&b[..b.len() / 2]).unwrap();
    drop(c);
    // Headers only, then gone.
    let mut c = connect(&s.http);
    c.write_all(head(b.len(), "").as_bytes()).unwrap();
    drop(c);

    let again = actions(&s.predict(&b));
    assert_eq!(again, solo, "answer changed after vanishing clients");
    let other = actions(&s.predict(&body("case2", 5)));
    assert_ne!(other, solo);
    assert_eq!(s.health(), 200);
}

#[test]
fn a_slow_body_gets_408_and_does_not_hold_the_worker() {
    let s = start(&["--body-timeout-s", "1"]);
    let b = body("case0", 3);
    let mut slow = connect(&s.http);
    slow.write_all(head(b.len(), "").as_bytes()).unwrap();
    slow.write_all(&b[..100]).unwrap();
    // While that body stalls, others are served (the body is read before it is queued).
    let r = s.predict(&b);
    assert_eq!(r.status, 200, "{}", r.text());
    // The stalled one is answered 408 and its connection closed (read to EOF, bounded by the
    // socket's read timeout).
    let mut raw = Vec::new();
    let _ = slow.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("--body-timeout-s"), "{text}");
    assert_eq!(s.health(), 200);
    assert_eq!(actions(&s.predict(&b)), actions(&r));
}

#[test]
fn a_100_mib_body_gets_413_and_the_server_stays_fine() {
    let s = start(&[]);
    let b = body("case0", 9);
    let solo = actions(&s.predict(&b));
    let rss_before = s.rss_kb();
    let big = vec![b' '; 100 << 20];

    // Declared length: refused before the body is read.
    let r = exchange(
        &s.http,
        head(big.len(), "Connection: close\r\n").as_bytes(),
        &big,
    )
    .expect("413 answer");
    assert_eq!(r.status, 413, "{}", r.text());
    // Chunked, no length: refused once the limit is crossed.
    let h = "POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    let r = exchange(&s.http, h.as_bytes(), &chunked(&big)).expect("413 answer");
    assert_eq!(r.status, 413, "{}", r.text());

    assert_eq!(s.health(), 200);
    assert_eq!(actions(&s.predict(&b)), solo);
    // At most the 16 MiB limit was ever buffered, never the 100 MiB.
    let grown_mb = s.rss_kb().saturating_sub(rss_before) / 1024;
    assert!(grown_mb < 64, "RSS grew by {grown_mb} MiB");
}

/// How many sockets this process may open (the soft `RLIMIT_NOFILE`).
#[test]
fn thousands_of_idle_connections_are_capped_and_health_still_answers() {
    const CAP: usize = 64;
    let s = start(&["--max-connections", "64", "--idle-timeout-s", "600"]);
    let fds_before = s.open_fds();
    // 10,000 when the fd limit allows (the figure), else what fits with headroom.
    let n = 10_000.min(fd_limit().saturating_sub(256));
    assert!(n >= 1000, "fd limit too low for this test: {}", fd_limit());
    let mut idle = Vec::with_capacity(n);
    let mut max_fds = 0;
    for i in 0..n {
        let c = TcpStream::connect(&s.http).expect("connect idle socket");
        idle.push(c);
        if i % 500 == 0 {
            max_fds = max_fds.max(s.open_fds());
        }
    }
    // Every connection is open on our side, idle; the server holds at most CAP of them.
    let r = get(&s.http, "/health").expect("health with thousands of idle sockets");
    assert_eq!(r.status, 200);
    max_fds = max_fds.max(s.open_fds());
    assert!(
        max_fds <= fds_before + CAP + 8,
        "server held {max_fds} fds (before: {fds_before}, cap {CAP})"
    );
    let r = s.predict(&body("case3", 1));
    assert_eq!(r.status, 200, "{}", r.text());
    drop(idle);
    assert_eq!(s.health(), 200);
}

#[test]
fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let s = start(&["--idle-timeout-s", "1"]);
    let mut c = connect(&s.http);
    let t0 = Instant::now();
    let mut buf = [0u8; 16];
    // EOF (0 bytes) or a reset: the server closed it; bounded by the 120 s read timeout.
    let n = c.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0);
    assert!(t0.elapsed() < Duration::from_secs(60));
    assert_eq!(s.health(), 200);
}

#[test]
fn api_token_guards_every_http_route_but_health() {
    let s = start(&["--api-token", "s3cret"]);
    let b = body("case0", 4);
    for auth in [None, Some("Bearer wrong"), Some("Api-Key s3cret")] {
        let headers: Vec<(&str, &str)> = auth.map(|a| ("Authorization", a)).into_iter().collect();
        let mut h = headers.clone();
        h.push(("Content-Type", "application/json"));
        let r = request(&s.http, "POST", "/predict", &h, &b).unwrap();
        assert_eq!(r.status, 401, "{auth:?}: {}", r.text());
        assert!(r.json()["error"].as_str().unwrap().contains("Bearer"));
        let r = request(&s.http, "GET", "/info", &headers, b"").unwrap();
        assert_eq!(r.status, 401, "{auth:?}");
    }
    assert_eq!(s.health(), 200);
    let ok = [
        ("Authorization", "Bearer s3cret"),
        ("Content-Type", "application/json"),
    ];
    let r = request(&s.http, "POST", "/predict", &ok, &b).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let r = request(&s.http, "GET", "/info", &ok[..1], b"").unwrap();
    assert_eq!(r.status, 200);
    assert!(
        !s.log_text().contains("s3cret"),
        "token leaked into the log"
    );
}

/// Like Python's `urllib`/`requests`: the whole request is written before a byte of the answer
/// is read. A write error (the server reset the connection) fails the test.
fn write_all_then_read(c: &mut TcpStream, what: &str, rest: &[u8]) -> HttpResponse {
    c.write_all(rest)
        .unwrap_or_else(|e| panic!("{what}: writing the body failed: {e}"));
    let mut raw = Vec::new();
    c.read_to_end(&mut raw)
        .unwrap_or_else(|e| panic!("{what}: reading the answer failed: {e}"));
    parse(&raw).unwrap_or_else(|| panic!("{what}: no answer: {:?}", String::from_utf8_lossy(&raw)))
}

/// A fresh connection writing a whole `POST /predict` of `body`, then reading the answer.
fn post_whole(addr: &str, what: &str, body: &[u8]) -> HttpResponse {
    let mut c = connect(addr);
    write_all_then_read(
        &mut c,
        what,
        &[head(body.len(), "").as_bytes(), body].concat(),
    )
}

fn chunked(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 64);
    for part in body.chunks(1 << 20) {
        out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// Waits (bounded) until the server's log has a line containing `needle`.
fn wait_for_log(s: &Server, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !s.log_text().contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in the log:\n{}",
            s.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_client_writing_a_40_mib_body_before_reading_gets_the_413() {
    let s = start(&[]);
    let b = body("case1", 21);
    let solo = actions(&s.predict(&b));
    let big = vec![b' '; 40 << 20];

    // Declared length over the 16 MiB limit: answered before the body is read.
    let r = post_whole(&s.http, "declared", &big);
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(r.json()["field"], "body", "{}", r.text());
    assert!(r.json()["error"].as_str().unwrap().contains("limit"));

    // Chunked: answered once the limit is crossed, with the rest still coming.
    let h = "POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Transfer-Encoding: chunked\r\n\r\n";
    let mut c = connect(&s.http);
    let r = write_all_then_read(&mut c, "chunked", &[h.as_bytes(), &chunked(&big)].concat());
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(r.json()["field"], "body", "{}", r.text());

    assert_eq!(s.health(), 200);
    assert_eq!(actions(&s.predict(&b)), solo);
}

#[test]
fn a_client_finishing_a_slow_body_before_reading_gets_the_408() {
    let s = start(&["--body-timeout-s", "1"]);
    let b = body("case2", 8);
    let solo = actions(&s.predict(&b));
    // 12 MiB (under the limit): more than the socket buffers hold, so a reset would show.
    let slow = vec![b' '; 12 << 20];
    let mut c = connect(&s.http);
    c.write_all(head(slow.len(), "").as_bytes()).unwrap();
    c.write_all(&slow[..100]).unwrap();
    // The server gives up on the body; this client does not look, and sends the rest.
    wait_for_log(&s, "408 refused");
    let r = write_all_then_read(&mut c, "slow", &slow[100..]);
    assert_eq!(r.status, 408, "{}", r.text());
    assert_eq!(r.json()["field"], "body", "{}", r.text());
    assert!(r.text().contains("--body-timeout-s"), "{}", r.text());
    assert_eq!(s.health(), 200);
    assert_eq!(actions(&s.predict(&b)), solo);
}

#[test]
fn the_lingering_close_stops_reading_after_four_body_limits() {
    let s = start(&["--max-body-mb", "1"]);
    let mut c = connect(&s.http);
    c.write_all(head(1 << 30, "").as_bytes()).unwrap();
    // The server discards at most 4 MiB after its 413, then closes: writing 1 GiB must fail
    // (reset) long before it is all written.
    let chunk = vec![b' '; 1 << 20];
    let mut sent = 0usize;
    let failed = (0..1024).any(|_| match c.write_all(&chunk) {
        Ok(()) => {
            sent += chunk.len();
            false
        }
        Err(_) => true,
    });
    assert!(failed, "the server read a whole 1 GiB body");
    assert!(sent < 64 << 20, "{} MiB were accepted", sent >> 20);
    assert_eq!(s.health(), 200);
}

#[test]
fn an_8_mb_instruction_gets_the_long_instruction_400_and_changes_nothing() {
    let s = start(&[]);
    let b = body("case3", 2);
    let solo = actions(&s.predict(&b));
    let mut v: Value = serde_json::from_slice(&b).unwrap();
    for instruction in [
        "pick up the block ".repeat(15),
        "pick up the block ".repeat(450_000),
    ] {
        v["instruction"] = instruction.into();
        let r = s.predict(&serde_json::to_vec(&v).unwrap());
        assert_eq!(r.status, 400, "{}", r.text());
        assert_eq!(r.json()["field"], "instruction");
        let error = r.json()["error"].as_str().unwrap().to_string();
        assert!(error.ends_with("at most 51 are allowed"), "{error}");
    }
    assert_eq!(actions(&s.predict(&b)), solo);
}

#[test]
fn a_client_sending_a_whole_body_without_the_token_reads_the_401() {
    let s = start(&["--api-token", "s3cret"]);
    // 12 MiB (under the limit), written before reading.
    let big = vec![b' '; 12 << 20];
    let r = post_whole(&s.http, "401", &big);
    assert_eq!(r.status, 401, "{}", r.text());
    assert!(r.json()["error"].as_str().unwrap().contains("Bearer"));
    assert_eq!(s.health(), 200);
}
