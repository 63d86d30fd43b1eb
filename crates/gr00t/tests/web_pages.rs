//! What a web page in the operator's browser can make of a `gr00t serve` on loopback: the
//! requests a page can send without asking the server first (a form or `text/plain` POST, a
//! `fetch` with a Blob body and no type, a websocket from its own origin) and DNS rebinding
//! (a page whose domain now resolves to 127.0.0.1). Also how the API token is given.

use gr00t_fixtures::http_client as test_client;
mod support;
use support::test_server;

use gr00t_fixtures::{request_json, tiny_checkpoint};
use serde_json::{json, Value};
use std::net::TcpStream;
use test_client::{exchange, HttpResponse};
use test_server::Server;

const EVIL: &str = "http://evil.example";

/// A request with this `Host` and these headers (raw, as a browser would write it).
fn raw(
    addr: &str,
    method: &str,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> HttpResponse {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    exchange(addr, head.as_bytes(), body).expect("exchange")
}

fn observation(session: &str) -> Vec<u8> {
    let mut v: Value = serde_json::from_str(&request_json("case0")).unwrap();
    v["session_id"] = json!(session);
    serde_json::to_vec(&v).unwrap()
}

fn sessions_created(s: &Server) -> u64 {
    let info = test_client::get(&s.http, "/info").unwrap().json();
    info["sessions"]["created"].as_u64().unwrap()
}

fn header<'a>(r: &'a HttpResponse, name: &str) -> Option<&'a str> {
    r.headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn a_page_of_another_site_can_neither_drive_nor_read_a_tokenless_server() {
    let s = Server::start(&["--no-ui", "--ws-port", "0"]);
    let host = s.http.clone();
    let obs = observation("arm");
    // A fetch with a Blob body carries no content type: refused, and no session begins.
    let r = raw(&s.http, "POST", "/predict", &host, &[], &obs);
    assert_eq!(
        (r.status, r.json()["field"].clone()),
        (415, json!("content-type"))
    );
    let r = raw(
        &s.http,
        "POST",
        "/predict",
        &host,
        &[("Content-Type", "text/plain")],
        &obs,
    );
    assert_eq!(r.status, 415);
    assert_eq!(sessions_created(&s), 0);
    // A page's POSTs carry its origin: refused whatever their type.
    let reset = br#"{"session_id": "arm"}"#;
    for ct in ["text/plain", "application/json"] {
        let h = [("Content-Type", ct), ("Origin", EVIL)];
        let r = raw(&s.http, "POST", "/reset", &host, &h, reset);
        assert_eq!(
            (r.status, r.json()["field"].clone()),
            (403, json!("origin")),
            "{ct}"
        );
        let r = raw(&s.http, "POST", "/predict", &host, &h, &obs);
        assert_eq!(r.status, 403, "{ct}");
    }
    assert_eq!(sessions_created(&s), 0);
    // DNS rebinding: the page's own name in Host (and Origin) is not one of this server's.
    let rebound = "evil.example:20000";
    let r = raw(&s.http, "GET", "/info", rebound, &[], b"");
    assert_eq!((r.status, r.json()["field"].clone()), (421, json!("host")));
    assert!(r.json()["error"]
        .as_str()
        .unwrap()
        .contains("--allowed-host evil.example"));
    let h = [
        ("Origin", "http://evil.example:20000"),
        ("Content-Type", "application/json"),
    ];
    assert_eq!(
        raw(&s.http, "POST", "/predict", rebound, &h, &obs).status,
        421
    );
    // The server's own page (same origin), localhost and plain clients pass.
    let own = format!("http://{host}");
    let h = [
        ("Origin", own.as_str()),
        ("Content-Type", "application/json"),
    ];
    assert_eq!(
        raw(&s.http, "POST", "/predict", &host, &h, &obs).status,
        200
    );
    let port = host.rsplit(':').next().unwrap();
    let local = format!("localhost:{port}");
    assert_eq!(raw(&s.http, "GET", "/info", &local, &[], b"").status, 200);
    assert_eq!(sessions_created(&s), 1);
    // The websocket port: a page's handshake carries its origin too.
    let ws = s.ws.clone().unwrap();
    let handshake = |host: &str, origin: Option<&str>| {
        let mut h = vec![
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ];
        if let Some(o) = origin {
            h.push(("Origin", o));
        }
        let mut head = format!("GET / HTTP/1.1\r\nHost: {host}\r\n");
        for (k, v) in h {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let mut c = TcpStream::connect(&ws).unwrap();
        std::io::Write::write_all(&mut c, head.as_bytes()).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 512];
        let n = std::io::Read::read(&mut c, &mut buf).unwrap();
        let text = String::from_utf8_lossy(&buf[..n]).to_string();
        text.split(' ')
            .nth(1)
            .unwrap_or("")
            .parse::<u16>()
            .unwrap_or(0)
    };
    assert_eq!(handshake(&ws, Some(EVIL)), 403);
    assert_eq!(handshake("evil.example:8000", None), 421);
    assert_eq!(handshake(&ws, None), 101);
    assert_eq!(handshake(&ws, Some(&format!("http://{ws}"))), 101);
}

#[test]
fn allowed_origins_get_cors_and_allowed_hosts_pass() {
    let s = Server::start(&[
        "--no-ui",
        "--cors-origin",
        "https://lab.example",
        "--allowed-host",
        "robot-pc.local",
    ]);
    let host = s.http.clone();
    let lab = "https://lab.example";
    let pre = [
        ("Origin", lab),
        ("Access-Control-Request-Method", "POST"),
        ("Access-Control-Request-Headers", "content-type"),
    ];
    let r = raw(&s.http, "OPTIONS", "/predict", &host, &pre, b"");
    assert_eq!(r.status, 204);
    assert_eq!(header(&r, "access-control-allow-origin"), Some(lab));
    let h = [("Origin", lab), ("Content-Type", "application/json")];
    let r = raw(
        &s.http,
        "POST",
        "/predict",
        &host,
        &h,
        &observation("lab-arm"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(header(&r, "access-control-allow-origin"), Some(lab));
    // Other origins still not.
    let h = [("Origin", EVIL), ("Content-Type", "application/json")];
    assert_eq!(
        raw(&s.http, "POST", "/predict", &host, &h, b"{}").status,
        403
    );
    let r = raw(
        &s.http,
        "OPTIONS",
        "/predict",
        &host,
        &[("Origin", EVIL)],
        b"",
    );
    assert_eq!(r.status, 403);
    assert_eq!(
        raw(&s.http, "GET", "/info", "robot-pc.local:20000", &[], b"").status,
        200
    );
    assert_eq!(
        raw(&s.http, "GET", "/info", "other.local", &[], b"").status,
        421
    );
}

#[test]
fn the_token_comes_from_a_file_or_the_environment_and_warns_on_the_command_line() {
    let dir = std::env::temp_dir().join(format!("gr00t-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, "fr0m-f1le\n").unwrap();
    let file = file.to_str().unwrap().to_string();
    let ckpt = tiny_checkpoint();
    let warned = |s: &Server| s.log_text().contains("puts the token on the command line");
    let bearer = |s: &Server, t: &str| {
        let auth = format!("Bearer {t}");
        let h = [("Authorization", auth.as_str())];
        raw(&s.http, "GET", "/info", &s.http, &h, b"").status
    };
    let s = Server::start_in(&ckpt, 0, &["--no-ui", "--api-token-file", &file]);
    assert_eq!(
        (bearer(&s, "fr0m-f1le"), bearer(&s, "x"), warned(&s)),
        (200, 401, false)
    );
    // With a token, a name the server does not know is no longer refused: the page has no token.
    let h = [("Authorization", "Bearer fr0m-f1le")];
    assert_eq!(
        raw(&s.http, "GET", "/info", "evil.example", &h, b"").status,
        200
    );
    drop(s);
    let env = [("GR00T_API_TOKEN", "fr0m-env")];
    let s = Server::start_with_env(&ckpt, 0, &["--no-ui"], &env);
    assert_eq!((bearer(&s, "fr0m-env"), warned(&s)), (200, false));
    drop(s);
    let s = Server::start_in(&ckpt, 0, &["--no-ui", "--api-token", "0n-the-line"]);
    assert_eq!((bearer(&s, "0n-the-line"), warned(&s)), (200, true));
    assert!(
        !s.log_text().contains("0n-the-line"),
        "the token was logged"
    );
    drop(s);
    // Open to the network without a token: a loud warning.
    let s = Server::start_in(&ckpt, 0, &["--no-ui", "--host", "0.0.0.0"]);
    assert!(
        s.log_text().contains("WITHOUT --api-token"),
        "{}",
        s.log_text()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
