//! An attacker on the loopback against the real `gr00t serve` (tiny checkpoint, HTTP + ZMQ +
//! websocket doors): hostile ZMTP frames, floods of idle connections on every door, clients
//! that never finish their handshake or message, an oversized websocket message. Every door
//! must stay up and keep answering; the figures are printed (`--nocapture`). Every wait is a
//! bounded socket read; nothing sleeps to let time pass.

use gr00t_fixtures::http_client as test_client;
mod support;
use support::{test_server, zmtp_client};

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use test_server::{fd_limit, u64s, Server};
use zmtp_client::{closed_within, greeting, long_header, ready, Req, PING};

const SECOND: Duration = Duration::from_secs(1);

/// All three doors on free ports, no status page, plus `extra`.
fn start(extra: &[&str]) -> Server {
    let doors = ["--no-ui", "--zmq-port", "0", "--ws-port", "0"];
    Server::start(&[&doors[..], extra].concat())
}

fn zmq(s: &Server) -> &str {
    s.zmq.as_deref().expect("zmq address")
}

fn ws(s: &Server) -> &str {
    s.ws.as_deref().expect("ws address")
}

/// `/health` and a ZMQ ping on a fresh connection, each answered within a second; the slower
/// of the two.
fn both_answer_within_a_second(s: &Server) -> Duration {
    let t0 = Instant::now();
    let health = test_client::get(&s.http, "/health").expect("GET /health");
    assert_eq!(health.status, 200);
    let http = t0.elapsed();
    let t1 = Instant::now();
    let mut c = Req::connect(zmq(s), SECOND).expect("ZMQ handshake within 1 s");
    let pong = c.call(PING).expect("ZMQ ping answered within 1 s");
    assert!(pong.windows(2).any(|w| w == b"ok"), "{pong:?}");
    let slowest = http.max(t1.elapsed());
    assert!(slowest < SECOND, "answered in {slowest:?}");
    slowest
}

#[test]
fn a_73_byte_zmq_packet_closes_its_connection_and_every_door_stays_up() {
    for token in [None, Some("s3cret")] {
        let extra: Vec<&str> = token.map(|t| vec!["--api-token", t]).unwrap_or_default();
        let s = start(&extra);
        // The greeting, then a long frame header declaring 1 TB: 73 bytes.
        let packet = [greeting(), long_header(1 << 40)].concat();
        assert_eq!(packet.len(), 73);
        // The same header after a complete handshake.
        let after_ready = [greeting(), ready(), long_header(1 << 40)].concat();
        for (what, bytes) in [("73 bytes", packet), ("after READY", after_ready)] {
            let mut c = TcpStream::connect(zmq(&s)).unwrap();
            let t0 = Instant::now();
            c.write_all(&bytes).unwrap();
            assert!(closed_within(&mut c, 5 * SECOND), "{what}: still open");
            println!("{what} (token {token:?}): refused in {:?}", t0.elapsed());
        }
        assert_eq!(test_client::get(ws(&s), "/healthz").unwrap().status, 200);
        both_answer_within_a_second(&s);
        assert!(
            s.log_shows("over the limit of 16777216", 5 * SECOND),
            "{}",
            s.log_text()
        );
    }
}

#[test]
fn a_64_mib_zmq_message_is_refused_at_its_header_with_rss_bounded() {
    let s = start(&[]);
    both_answer_within_a_second(&s);
    let before = s.rss_kb();
    let mut c = Req::connect(zmq(&s), 5 * SECOND).unwrap();
    let t0 = Instant::now();
    c.tcp
        .write_all(&zmtp_client::frame(b"", true, false))
        .unwrap();
    c.tcp.write_all(&long_header(64 << 20)).unwrap();
    // Then the 64 MiB themselves, as far as the server lets them in.
    let chunk = vec![0x90u8; 1 << 20];
    let mut sent = 0usize;
    while sent < 64 << 20 {
        if c.tcp.write_all(&chunk).is_err() {
            break;
        }
        sent += chunk.len();
    }
    assert!(closed_within(&mut c.tcp, 5 * SECOND));
    let refused = t0.elapsed();
    let grown = s.rss_kb().saturating_sub(before);
    println!(
        "64 MiB message: closed after {:.1} MiB written, {refused:?}; server RSS {before} kB, \
         +{grown} kB",
        sent as f64 / (1 << 20) as f64
    );
    assert!(sent < 64 << 20, "the server read the whole message");
    assert!(grown < 16 << 10, "RSS grew {grown} kB");
    both_answer_within_a_second(&s);
}

#[test]
fn idle_floods_on_every_door_stay_under_the_caps_and_the_doors_answer() {
    const CAP: usize = 64;
    let s = start(&[
        "--max-connections",
        "64",
        "--ws-max-connections",
        "64",
        "--zmq-max-connections",
        "64",
        "--idle-timeout-s",
        "600",
        "--handshake-timeout-s",
        "600",
    ]);
    let info = test_client::get(&s.http, "/info").unwrap().json();
    let caps = &info["limits"]["connections"];
    assert_eq!(u64s(caps, &["http", "ws", "zmq"]), [Some(64); 3], "{caps}");
    // The server raised its soft file limit to the hard one.
    assert!(caps["open_files"].as_u64().unwrap() >= fd_limit() as u64);
    let fds_before = s.open_fds();
    let rss_before = s.rss_kb();
    // 5,000 per door when this process's files allow, else what fits.
    let per_door = 5_000.min(fd_limit().saturating_sub(512) / 3);
    assert!(per_door >= 500, "fd limit too low: {}", fd_limit());
    let mut idle = Vec::new();
    let mut slowest = Duration::ZERO;
    let mut max_fds = 0;
    for (door, addr) in [
        ("http", s.http.clone()),
        ("ws", ws(&s).into()),
        ("zmq", zmq(&s).into()),
    ] {
        for i in 0..per_door {
            idle.push(TcpStream::connect(&addr).expect("connect"));
            if i % 500 == 499 {
                max_fds = max_fds.max(s.open_fds());
                slowest = slowest.max(both_answer_within_a_second(&s));
            }
        }
        println!(
            "{door}: {per_door} idle connections; server fds {} (before {fds_before}), RSS {} kB",
            s.open_fds(),
            s.rss_kb()
        );
    }
    // The three doors' caps and the probes' own connections, nothing more.
    max_fds = max_fds.max(s.open_fds());
    assert!(
        max_fds <= fds_before + 3 * CAP + 16,
        "server held {max_fds} fds (before {fds_before}, caps 3 × {CAP})"
    );
    // Handshaken idle clients are capped the same way: websocket upgrades and ZMQ READYs.
    let mut shaken = Vec::new();
    let shakes = (per_door / 5).min(1000);
    for i in 0..shakes {
        let (c, _) = tungstenite::client(
            format!("ws://{}/", ws(&s)),
            TcpStream::connect(ws(&s)).unwrap(),
        )
        .expect("websocket handshake");
        shaken.push(c);
        shaken_zmq(&s, &mut idle);
        if i % 100 == 99 {
            max_fds = max_fds.max(s.open_fds());
            slowest = slowest.max(both_answer_within_a_second(&s));
        }
    }
    max_fds = max_fds.max(s.open_fds());
    println!(
        "after {shakes} websocket and {shakes} ZMQ handshakes: server fds {} (max {max_fds}), \
         RSS {} kB (before {rss_before} kB); slowest /health or ZMQ ping {slowest:?}",
        s.open_fds(),
        s.rss_kb()
    );
    assert!(
        max_fds <= fds_before + 3 * CAP + 16,
        "server held {max_fds} fds"
    );
    drop((idle, shaken));
    both_answer_within_a_second(&s);
}

/// One ZMQ connection that completes its handshake and then idles (kept in `keep`).
fn shaken_zmq(s: &Server, keep: &mut Vec<TcpStream>) {
    let mut c = TcpStream::connect(zmq(s)).unwrap();
    c.write_all(&[greeting(), ready()].concat()).unwrap();
    keep.push(c);
}

#[test]
fn handshakes_messages_and_idle_connections_are_timed_out_on_zmq_and_websocket() {
    let s = start(&[
        "--handshake-timeout-s",
        "1",
        "--idle-timeout-s",
        "4",
        "--body-timeout-s",
        "1",
    ]);
    let within = 10 * SECOND;
    // Connected, silent: no greeting (ZMQ), no upgrade request (websocket).
    for addr in [zmq(&s), ws(&s)] {
        let mut c = TcpStream::connect(addr).unwrap();
        let t0 = Instant::now();
        assert!(
            closed_within(&mut c, within),
            "{addr}: silent connection kept"
        );
        println!("{addr}: silent connection closed after {:?}", t0.elapsed());
    }
    // A greeting trickled without READY: the handshake deadline still holds.
    let mut c = TcpStream::connect(zmq(&s)).unwrap();
    c.write_all(&greeting()).unwrap();
    assert!(closed_within(&mut c, within), "greeting without READY kept");
    // Handshaken, then idle past --idle-timeout-s.
    let mut c = Req::connect(zmq(&s), within).unwrap();
    let t0 = Instant::now();
    assert!(
        closed_within(&mut c.tcp, within),
        "idle ZMQ connection kept"
    );
    println!("idle ZMQ connection closed after {:?}", t0.elapsed());
    // A message begun and never finished: --body-timeout-s.
    let mut c = Req::connect(zmq(&s), within).unwrap();
    c.tcp
        .write_all(&zmtp_client::frame(b"", true, false))
        .unwrap();
    c.tcp.write_all(&long_header(1000)).unwrap();
    c.tcp.write_all(&[0x90; 10]).unwrap();
    let t0 = Instant::now();
    assert!(closed_within(&mut c.tcp, within), "half a message kept");
    // Well before the idle timeout would have closed it.
    assert!(t0.elapsed() < 3 * SECOND, "{:?}", t0.elapsed());
    // An upgraded websocket, idle.
    let (mut w, _) = tungstenite::client(
        format!("ws://{}/", ws(&s)),
        TcpStream::connect(ws(&s)).unwrap(),
    )
    .unwrap();
    w.get_ref().set_read_timeout(Some(within)).unwrap();
    let t0 = Instant::now();
    loop {
        match w.read() {
            Ok(tungstenite::Message::Binary(_)) => continue, // the metadata frame
            Ok(tungstenite::Message::Close(_)) => break,
            Ok(other) => panic!("{other:?}"),
            Err(tungstenite::Error::Io(e)) if e.kind() == std::io::ErrorKind::WouldBlock => {
                panic!("idle websocket kept past {within:?}")
            }
            Err(_) => break,
        }
    }
    println!("idle websocket closed after {:?}", t0.elapsed());
    assert!(t0.elapsed() < within);
    both_answer_within_a_second(&s);
}

#[test]
fn an_oversized_websocket_message_gets_close_1009_and_the_next_client_is_served() {
    let s = start(&["--max-body-mb", "1"]);
    let (mut w, _) = tungstenite::client(
        format!("ws://{}/", ws(&s)),
        TcpStream::connect(ws(&s)).unwrap(),
    )
    .unwrap();
    w.get_ref()
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    assert!(matches!(w.read().unwrap(), tungstenite::Message::Binary(_)));
    w.send(tungstenite::Message::Binary(vec![0u8; 2 << 20].into()))
        .unwrap();
    let code = match w.read() {
        Ok(tungstenite::Message::Close(Some(f))) => u16::from(f.code),
        Ok(other) => panic!("expected a close frame, got {other:?}"),
        Err(e) => panic!("no close frame: {e}"),
    };
    assert_eq!(code, 1009);
    let (_, meta) = tungstenite::client(
        format!("ws://{}/", ws(&s)),
        TcpStream::connect(ws(&s)).unwrap(),
    )
    .unwrap();
    assert_eq!(meta.status(), 101);
    both_answer_within_a_second(&s);
}

#[test]
fn zmq_routing_envelopes_are_capped_and_a_large_one_is_never_echoed() {
    let s = start(&[]);
    let frame = zmtp_client::frame;
    // A proxy's envelope (two routing ids, the delimiter): answered behind the same envelope.
    let mut c = Req::connect(zmq(&s), 5 * SECOND).unwrap();
    let message = [
        frame(b"proxy-1", true, false),
        frame(&[7u8; 255], true, false),
        frame(b"", true, false),
        frame(PING, false, false),
    ]
    .concat();
    c.tcp.write_all(&message).unwrap();
    assert_eq!(c.read_frame().unwrap(), (false, b"proxy-1".to_vec()));
    assert_eq!(c.read_frame().unwrap(), (false, vec![7u8; 255]));
    assert_eq!(c.read_frame().unwrap(), (false, Vec::new()));
    let pong = c.read_frame().unwrap().1;
    assert!(pong.windows(2).any(|w| w == b"ok"), "{pong:?}");
    // A 6 MiB routing frame, or five small ones: the connection closes and nothing of the
    // envelope comes back.
    let big = vec![b'e'; 6 << 20];
    let five: Vec<u8> = (0..5).flat_map(|_| frame(b"id", true, false)).collect();
    for (what, envelope) in [
        ("6 MiB frame", frame(&big, true, false)),
        ("5 frames", five),
    ] {
        let mut c = Req::connect(zmq(&s), 5 * SECOND).unwrap();
        let message = [envelope, frame(b"", true, false), frame(PING, false, false)].concat();
        c.tcp.write_all(&message).unwrap();
        let mut back = 0usize;
        let mut buf = [0u8; 65536];
        loop {
            match c.tcp.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => back += n,
                Err(e) => panic!("{what}: not closed: {e}"),
            }
        }
        assert!(back < 1024, "{what}: {back} bytes came back");
    }
    assert!(
        s.log_shows("a routing envelope of", 5 * SECOND),
        "{}",
        s.log_text()
    );
    both_answer_within_a_second(&s);
}

#[test]
fn a_pipelining_zmq_peer_whose_messages_each_arrive_in_time_is_kept() {
    let s = start(&["--body-timeout-s", "2"]);
    let mut c = Req::connect(zmq(&s), 10 * SECOND).unwrap();
    let frame = zmtp_client::frame;
    // Message 1 begins; 1.2 s later it ends in the same write that begins message 2, which
    // ends 1.2 s after that: each took 1.2 s of a 2 s limit, together 2.4 s.
    c.tcp.write_all(&frame(b"", true, false)).unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    let end_and_begin = [frame(PING, false, false), frame(b"", true, false)].concat();
    c.tcp.write_all(&end_and_begin).unwrap();
    for _ in 0..2 {
        c.read_frame().unwrap(); // delimiter, then the pong
    }
    std::thread::sleep(Duration::from_millis(1200));
    c.tcp.write_all(&frame(PING, false, false)).unwrap();
    assert_eq!(c.read_frame().unwrap(), (false, Vec::new()), "closed");
    let pong = c.read_frame().unwrap().1;
    assert!(pong.windows(2).any(|w| w == b"ok"), "{pong:?}");
}

#[test]
fn a_zmq_peer_that_never_reads_its_replies_is_closed_after_the_write_timeout() {
    let s = start(&["--write-timeout-s", "1"]);
    let mut c = Req::connect(zmq(&s), 10 * SECOND).unwrap();
    // Pings pipelined and never read: their pongs fill the socket buffers, then a reply stalls.
    let one = [
        zmtp_client::frame(b"", true, false),
        zmtp_client::frame(PING, false, false),
    ]
    .concat();
    let burst: Vec<u8> = one.repeat(50_000);
    let waited = write_until_the_reply_stalls(&s, &mut c.tcp, &burst, "a reply was not read");
    println!("stalled reply closed after {waited:?}");
}

/// Writes `burst` up to 8 times to a peer that never reads, until the server stops reading it;
/// then the log must show `logged` within 1.0 s of `--write-timeout-s 1` and both doors still
/// answer. The time from the first write to the log line.
fn write_until_the_reply_stalls(
    s: &Server,
    tcp: &mut TcpStream,
    burst: &[u8],
    logged: &str,
) -> Duration {
    tcp.set_write_timeout(Some(2 * SECOND)).unwrap();
    let t0 = Instant::now();
    for _ in 0..8 {
        if tcp.write_all(burst).is_err() {
            break; // the server stopped reading: its reply is stalled
        }
    }
    assert!(
        s.log_shows(&format!("{logged} within 1.0 s"), 15 * SECOND),
        "{}",
        s.log_text()
    );
    let waited = t0.elapsed();
    both_answer_within_a_second(s);
    waited
}

#[test]
fn http_bodies_that_never_come_do_not_pin_the_door() {
    let s = start(&["--max-connections", "16"]);
    // Every slot holds a POST head declaring a body that never comes (under the 30 s body
    // timeout): the connections are not busy, so a new one evicts one of them.
    let head = format!(
        "POST /predict HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: 100000\r\n\r\n",
        s.http
    );
    let mut stalled = Vec::new();
    for _ in 0..16 {
        let mut c = TcpStream::connect(&s.http).unwrap();
        c.write_all(head.as_bytes()).unwrap();
        stalled.push(c);
    }
    std::thread::sleep(Duration::from_millis(300)); // the heads are read
    for _ in 0..3 {
        both_answer_within_a_second(&s);
    }
    drop(stalled);
}

/// One keep-alive request on an open connection: its status, the body read to its length.
fn keep_alive_get(c: &mut TcpStream, host: &str, path: &str) -> std::io::Result<u16> {
    write!(c, "GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n")?;
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        if c.read(&mut byte)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        raw.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&raw).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    c.read_exact(&mut body)?;
    Ok(head[9..12].parse().unwrap_or(0))
}

#[test]
fn a_flood_of_fresh_connections_does_not_evict_robots_between_their_steps() {
    let s = start(&["--max-connections", "8", "--zmq-max-connections", "8"]);
    // The robots: a keep-alive HTTP client and a ZMQ client, each one step answered.
    let mut http = TcpStream::connect(&s.http).unwrap();
    http.set_read_timeout(Some(5 * SECOND)).unwrap();
    assert_eq!(keep_alive_get(&mut http, &s.http, "/health").unwrap(), 200);
    let mut robot = Req::connect(zmq(&s), 5 * SECOND).unwrap();
    robot.call(PING).unwrap();
    // Between their steps: 40 fresh connections on each door that never say a word. At the
    // cap each one evicts an earlier one of them, never a robot.
    let mut flood = Vec::new();
    for _ in 0..40 {
        flood.push(TcpStream::connect(&s.http).unwrap());
        flood.push(TcpStream::connect(zmq(&s)).unwrap());
    }
    // The last of the flood is accepted (the cap made room) before the robots step again.
    both_answer_within_a_second(&s);
    for step in 0..3 {
        let status = keep_alive_get(&mut http, &s.http, "/health");
        assert_eq!(status.ok(), Some(200), "HTTP robot, step {step}");
        let pong = robot.call(PING);
        assert!(pong.is_ok(), "ZMQ robot, step {step}: {pong:?}");
    }
    drop(flood);
}

#[test]
fn http_replies_that_are_never_read_close_after_the_write_timeout() {
    let s = start(&["--write-timeout-s", "1"]);
    let mut c = TcpStream::connect(&s.http).unwrap();
    // Requests pipelined and never read: their answers fill the socket buffers, then one
    // stalls.
    let one = format!("GET /metrics HTTP/1.1\r\nHost: {}\r\n\r\n", s.http);
    let burst = one.repeat(20_000);
    let waited =
        write_until_the_reply_stalls(&s, &mut c, burst.as_bytes(), "http: a reply was not read");
    println!("stalled HTTP answer closed after {waited:?}");
}

#[test]
fn lingering_closes_hold_no_slot_of_the_door() {
    let s = start(&["--ws-max-connections", "2", "--max-body-mb", "1"]);
    // Both slots: clients refused with 1009 that keep their sockets open, so each close
    // lingers (5 s) on the server.
    let mut refused = Vec::new();
    for _ in 0..2 {
        let (mut w, _) = tungstenite::client(
            format!("ws://{}/", ws(&s)),
            TcpStream::connect(ws(&s)).unwrap(),
        )
        .unwrap();
        w.get_ref().set_read_timeout(Some(10 * SECOND)).unwrap();
        assert!(matches!(w.read().unwrap(), tungstenite::Message::Binary(_)));
        w.send(tungstenite::Message::Binary(vec![0u8; 2 << 20].into()))
            .unwrap();
        match w.read() {
            Ok(tungstenite::Message::Close(Some(f))) => assert_eq!(u16::from(f.code), 1009),
            other => panic!("expected close 1009, got {other:?}"),
        }
        refused.push(w);
    }
    // A fresh client is upgraded at once, not after the lingers.
    let t0 = Instant::now();
    let tcp = TcpStream::connect(ws(&s)).unwrap();
    tcp.set_read_timeout(Some(10 * SECOND)).unwrap();
    let (mut w, meta) = tungstenite::client(format!("ws://{}/", ws(&s)), tcp).unwrap();
    assert_eq!(meta.status(), 101);
    assert!(matches!(w.read().unwrap(), tungstenite::Message::Binary(_)));
    let waited = t0.elapsed();
    println!("fresh websocket served after {waited:?} beside two lingering closes");
    assert!(waited < SECOND, "waited {waited:?}");
    drop(refused);
}

#[test]
fn bodies_below_the_minimum_rate_are_refused_long_before_the_body_timeout() {
    // Default --body-timeout-s (30) and --min-body-rate (16 KiB/s after 2 s).
    let s = start(&[]);
    let mut c = TcpStream::connect(&s.http).unwrap();
    c.set_read_timeout(Some(20 * SECOND)).unwrap();
    let head = format!(
        "POST /predict HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: 100000\r\n\r\n{{\"observation\"",
        s.http
    );
    let t0 = Instant::now();
    c.write_all(head.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    let http = t0.elapsed();
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("--min-body-rate"), "{text}");
    // A ZMQ message begun and stalled the same way.
    let mut z = Req::connect(zmq(&s), 5 * SECOND).unwrap();
    z.tcp
        .write_all(&zmtp_client::frame(b"", true, false))
        .unwrap();
    z.tcp.write_all(&long_header(100_000)).unwrap();
    z.tcp.write_all(&[0x90; 10]).unwrap();
    let t1 = Instant::now();
    assert!(
        closed_within(&mut z.tcp, 20 * SECOND),
        "stalled message kept"
    );
    let zmq_wait = t1.elapsed();
    println!("stalled HTTP body refused after {http:?}, ZMQ message closed after {zmq_wait:?}");
    assert!(http < 10 * SECOND && zmq_wait < 10 * SECOND);
    assert!(
        s.log_shows("(--min-body-rate)", 5 * SECOND),
        "{}",
        s.log_text()
    );
    both_answer_within_a_second(&s);
}
