//! Sessions and latest-wins over HTTP on the tiny fixture: two robots' interleaved streams
//! (each step's RTC against its own session's last chunk) answer bit for bit what each
//! stream answers alone; a robot posting faster than the server computes gets 409 for every
//! observation a newer one replaced, and every answer it does get is its own observation's.

use gr00t_fixtures::http_client as test_client;
mod support;
use support::test_server;

use serde_json::{json, Value as Json};
use std::sync::{Arc, Barrier};
use test_server::{request, u64s, Server};

/// A robot's observation `step` (case `case`, seed per step), in session `id`, with RTC
/// against the session's last chunk after the first step.
fn observation(case: &str, step: u64, id: Option<&str>) -> Json {
    let mut b = request(case);
    let o = b.as_object_mut().unwrap();
    o.remove("noise");
    o.insert("seed".into(), json!(100 + step));
    o.insert("return_normalized".into(), json!(true));
    if let Some(id) = id {
        o.insert("session_id".into(), json!(id));
        o.insert("rtc_overlap_steps".into(), json!(24));
        o.insert("rtc_frozen_steps".into(), json!(4));
        o.insert("action_horizon".into(), json!(32));
    }
    b
}

/// `POST /predict` of `body` with the header `x-session-id: id`.
fn post_as(s: &Server, id: &str, body: &Json) -> test_client::HttpResponse {
    let headers = [("content-type", "application/json"), ("x-session-id", id)];
    let body = serde_json::to_vec(body).unwrap();
    test_client::request(&s.http, "POST", "/predict", &headers, &body).unwrap()
}

/// What an answer says about the robot's actions (timings and session counters aside).
fn actions(r: &Json) -> (Json, Json) {
    (r["actions"].clone(), r["actions_normalized"].clone())
}

#[test]
fn interleaved_robots_answer_what_each_alone_answers() {
    let s = Server::start(&[]);
    let robots = [("case0", "arm-a"), ("case1", "arm-b")];
    const STEPS: u64 = 3;
    // Each robot alone, in its own session.
    let alone: Vec<Vec<Json>> = robots
        .iter()
        .map(|(case, id)| {
            (0..STEPS)
                .map(|k| s.predict_json(&observation(case, k, Some(id))))
                .collect()
        })
        .collect();
    // RTC joined each chunk to the previous one: the session's chunk was used.
    for stream in &alone {
        assert!(stream[0].get("rtc_source") == Some(&json!("none")));
        for (k, r) in stream.iter().enumerate().skip(1) {
            assert_eq!(r["rtc_source"], json!("session"), "{r}");
            assert_eq!(r["session"]["step"], json!(k + 1));
        }
    }
    // A step without RTC differs: the check above is not vacuous.
    let no_rtc = s.predict_json(&observation("case0", 1, None));
    assert_ne!(actions(&no_rtc), actions(&alone[0][1]));

    // Interleaved, in fresh sessions: a1 b1 a2 b2 a3 b3.
    for k in 0..STEPS {
        for (r, (case, id)) in robots.iter().enumerate() {
            let fresh = format!("{id}-again");
            let got = s.predict_json(&observation(case, k, Some(&fresh)));
            assert_eq!(
                actions(&got),
                actions(&alone[r][k as usize]),
                "{id} step {k} interleaved"
            );
        }
    }
    // The X-Session-Id header names a session as the body does.
    let head = |k: u64| {
        let body = serde_json::to_vec(&observation("case0", k, None)).unwrap();
        let mut b: Json = serde_json::from_slice(&body).unwrap();
        let o = b.as_object_mut().unwrap();
        o.insert("rtc_overlap_steps".into(), json!(24));
        o.insert("rtc_frozen_steps".into(), json!(4));
        o.insert("action_horizon".into(), json!(32));
        let r = post_as(&s, "arm-h", &b);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    for k in 0..STEPS {
        assert_eq!(
            actions(&head(k)),
            actions(&alone[0][k as usize]),
            "header step {k}"
        );
    }
    let mut clash = observation("case0", 0, Some("arm-a"));
    clash["session_id"] = json!("arm-x");
    let r = post_as(&s, "arm-a", &clash);
    assert_eq!(
        (r.status, r.json()["field"].clone()),
        (400, json!("session_id"))
    );
    let info = test_client::get(&s.http, "/info").unwrap().json();
    assert_eq!(info["sessions"]["active"], json!(5), "{}", info["sessions"]);
}

#[test]
fn a_robot_posting_faster_than_the_server_gets_its_newest_answers_only() {
    let s = Server::start(&[]);
    const BURST: u64 = 8;
    // Each observation's answer when computed on its own.
    let solo: Vec<Json> = (0..BURST)
        .map(|k| actions(&s.predict_json(&observation("case0", k, None))))
        .map(|(a, n)| json!([a, n]))
        .collect();
    // One robot (one session) posts 8 observations at once.
    let barrier = Arc::new(Barrier::new(BURST as usize));
    let threads: Vec<_> = (0..BURST)
        .map(|k| {
            let (http, barrier) = (s.http.clone(), barrier.clone());
            let mut body = observation("case0", k, None);
            body["session_id"] = json!("fast-robot");
            std::thread::spawn(move || {
                let bytes = serde_json::to_vec(&body).unwrap();
                barrier.wait();
                test_client::post_json(&http, "/predict", &bytes).unwrap()
            })
        })
        .collect();
    let answers: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let mut served = 0;
    let mut superseded = 0;
    for (k, r) in answers.iter().enumerate() {
        match r.status {
            200 => {
                served += 1;
                let (a, n) = actions(&r.json());
                assert_eq!(
                    json!([a, n]),
                    solo[k],
                    "observation {k} got another's answer"
                );
                assert!(r.json()["queue_ms"].as_f64().unwrap() >= 0.0);
                let age = r.json()["observation_age_ms"].as_f64().unwrap();
                assert!(age >= r.json()["timing_ms"]["device"].as_f64().unwrap());
            }
            409 => {
                superseded += 1;
                let e = r.json()["error"].as_str().unwrap().to_string();
                assert!(e.starts_with("superseded by a newer observation"), "{e}");
            }
            other => panic!("observation {k}: {other} {}", r.text()),
        }
    }
    println!("burst of {BURST}: {served} answered, {superseded} superseded");
    // One computes while the rest arrive; of those only the newest waits.
    assert!(
        served >= 1 && superseded >= 1,
        "{served} answered, {superseded} superseded"
    );
    let info = test_client::get(&s.http, "/info").unwrap().json();
    assert_eq!(info["queue"]["waiting"], json!(0));
    assert_eq!(info["queue"]["superseded"], json!(superseded));
    // Warm-up aside, the solo runs and the answered ones are all that was computed.
    assert_eq!(info["queue"]["served"], json!(BURST + served));
    let metrics = test_client::get(&s.http, "/metrics").unwrap().text();
    assert!(
        metrics.contains(&format!("gr00t_superseded_requests_total {superseded}")),
        "{metrics}"
    );
}

#[test]
fn a_session_supplies_the_older_frames_of_a_robot_sending_only_t() {
    let s = Server::start(&[]);
    let case0 = request("case0");
    // case0's own pair is [t−15, t]: send t−15 alone first, then t alone.
    let only = |t: usize, id: Option<&str>| {
        let mut b = case0.clone();
        for cam in test_server::CAMERAS {
            let f = b["images"][cam][t].clone();
            b["images"][cam] = json!([f]);
        }
        if let Some(id) = id {
            b["session_id"] = json!(id);
        }
        b
    };
    // The first observation of a session is paired with itself.
    let first = s.predict_json(&only(0, Some("cam-robot")));
    let mut paired = case0.clone();
    for cam in test_server::CAMERAS {
        let f = paired["images"][cam][0].clone();
        paired["images"][cam] = json!([f.clone(), f]);
    }
    assert_eq!(first["actions"], s.predict_json(&paired)["actions"]);
    // The second gets the first's frames as t−15: exactly case0 as sent whole.
    let second = s.predict_json(&only(1, Some("cam-robot")));
    let whole = s.predict_json(&case0);
    assert_eq!(second["actions"], whole["actions"]);
    assert_ne!(second["actions"], first["actions"]);
    // A refused observation between two leaves the session as it was.
    s.predict_json(&only(0, Some("cam-robot-2")));
    let mut bad = only(1, Some("cam-robot-2"));
    bad["state"]["joint_position"] = json!([0.0]);
    assert_eq!(s.post_predict(&bad).status, 400);
    let again = s.predict_json(&only(1, Some("cam-robot-2")));
    assert_eq!(again["actions"], whole["actions"]);
    assert_eq!(again["session"]["step"], json!(2));
    // Without a session a lone frame is refused, naming the camera.
    let r = s.post_predict(&only(1, None));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["field"], json!("images.exterior_image_1_left"));
}

/// The answer's `session_token`.
fn token_of(r: &Json) -> String {
    r["session_token"]
        .as_str()
        .unwrap_or_else(|| panic!("no session_token: {r}"))
        .to_string()
}

#[test]
fn refused_observations_create_no_session_and_evict_no_robot() {
    let s = Server::start(&["--max-sessions", "2"]);
    let robot = s.predict_json(&observation("case0", 0, Some("robot")));
    assert_eq!(robot["session"]["step"], json!(1));
    // 50 observations refused in 50 new sessions: 52 tokens of instruction (refused before
    // the model) and a degenerate rotation (refused after it).
    let long = "pick ".repeat(52);
    for i in 0..50 {
        let mut b = observation("case1", 0, Some(&format!("x{i}")));
        if i % 2 == 0 {
            b["instruction"] = json!(long);
        } else {
            b["state"]["eef_9d"] = json!([0.4, 0.1, 0.3, 0, 0, 0, 0, 0, 0]);
        }
        let r = s.post_predict(&b);
        assert_eq!(r.status, 400, "{}", r.text());
        let want = if i % 2 == 0 {
            "instruction"
        } else {
            "degenerate rotation"
        };
        assert!(r.text().contains(want), "{}", r.text());
    }
    let info = test_client::get(&s.http, "/info").unwrap().json();
    let st = &info["sessions"];
    assert_eq!(
        u64s(st, &["active", "created", "evicted"]),
        [Some(1), Some(1), Some(0)],
        "{st}"
    );
    // The robot's session is intact: its next step joins its last chunk.
    let next = s.predict_json(&observation("case0", 1, Some("robot")));
    assert_eq!(
        (next["session"]["step"].clone(), next["rtc_source"].clone()),
        (json!(2), json!("session"))
    );
    // And a refused observation of its own session leaves it as it was.
    let mut bad = observation("case0", 2, Some("robot"));
    bad["instruction"] = json!(long);
    assert_eq!(s.post_predict(&bad).status, 400);
    let third = s.predict_json(&observation("case0", 2, Some("robot")));
    assert_eq!(third["session"]["step"], json!(3));
}

#[test]
fn an_echoed_session_token_tells_a_client_its_session_restarted() {
    let mut s = Server::start(&[]);
    let port: u16 = s.http.rsplit(':').next().unwrap().parse().unwrap();
    let step = |s: &Server, k: u64, token: Option<&str>| {
        let mut b = observation("case0", k, Some("arm"));
        if let Some(t) = token {
            b["session_token"] = json!(t);
        }
        s.post_predict(&b)
    };
    // Clients that send no token behave as before.
    let first = step(&s, 0, None).json();
    let token = token_of(&first);
    assert_eq!(token.len(), 32);
    let second = step(&s, 1, Some(&token));
    assert_eq!(second.status, 200, "{}", second.text());
    assert_eq!(token_of(&second.json()), token);
    assert_eq!(second.json()["session"]["step"], json!(2));
    // A token of another incarnation: 409, and the session is not touched.
    let r = step(&s, 2, Some("0123456789abcdef0123456789abcdef"));
    assert_eq!(
        (r.status, r.json()["field"].clone()),
        (409, json!("session_token"))
    );
    // The token came back once: the session is locked to it. Another client that knows only
    // the id neither advances nor resets it (409 naming session_token, nothing computed).
    let r = step(&s, 2, None);
    assert_eq!(
        (r.status, r.json()["field"].clone()),
        (409, json!("session_token")),
        "{}",
        r.text()
    );
    assert!(r.text().contains("session locked"), "{}", r.text());
    let reset = test_client::post_json(&s.http, "/reset", br#"{"session_id": "arm"}"#).unwrap();
    assert_eq!(reset.status, 409, "{}", reset.text());
    assert!(reset.text().contains("session locked"), "{}", reset.text());
    let info = test_client::get(&s.http, "/info").unwrap().json();
    assert_eq!(
        u64s(&info["sessions"], &["locked", "restarted"]),
        [Some(2), Some(1)]
    );
    let third = step(&s, 2, Some(&token)).json();
    assert_eq!(third["session"]["step"], json!(3));
    // Reset with the token: the old token names a session the server no longer holds.
    let body = json!({"session_id": "arm", "session_token": token}).to_string();
    let reset = test_client::post_json(&s.http, "/reset", body.as_bytes()).unwrap();
    assert_eq!(reset.json()["reset"], json!(true), "{}", reset.text());
    let r = step(&s, 2, Some(&token));
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.json()["error"]
        .as_str()
        .unwrap()
        .starts_with("session restarted"));
    let again = step(&s, 0, None).json();
    assert_eq!(again["session"]["step"], json!(1));
    let token = token_of(&again);
    // The server restarts (same port): the session and its token are gone, and it says so.
    drop(s);
    s = Server::start_on(port, &[]);
    let r = step(&s, 1, Some(&token));
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.text().contains("holds no session"), "{}", r.text());
    // Without the token the robot starts over: step 1, RTC from nothing.
    let fresh = step(&s, 1, None).json();
    assert_eq!(
        (
            fresh["session"]["step"].clone(),
            fresh["rtc_source"].clone()
        ),
        (json!(1), json!("none"))
    );
    assert_ne!(token_of(&fresh), token);
    let metrics = test_client::get(&s.http, "/metrics").unwrap().text();
    assert!(
        metrics.contains("gr00t_sessions_restarted_total 1"),
        "{metrics}"
    );
}

#[test]
fn frame_histories_stay_within_their_budget_dropping_the_least_recently_used() {
    let s = Server::start(&["--max-history-mb", "1"]);
    let case0 = request("case0");
    let lone = |id: &str| {
        let mut b = case0.clone();
        for cam in test_server::CAMERAS {
            let f = b["images"][cam][1].clone();
            b["images"][cam] = json!([f]);
        }
        b["session_id"] = json!(id);
        b
    };
    let sessions = || test_client::get(&s.http, "/info").unwrap().json()["sessions"].clone();
    let first = s.predict_json(&lone("robot-0"));
    let token = token_of(&first);
    let per_session = sessions()["history_bytes"].as_u64().unwrap();
    assert!(per_session > 0, "{}", sessions());
    assert_eq!(sessions()["max_history_mb"], json!(1));
    // One more session than 1 MiB of histories holds: the least recently used goes.
    let fit = (1u64 << 20) / per_session;
    for i in 1..=fit {
        s.predict_json(&lone(&format!("robot-{i}")));
    }
    let st = sessions();
    assert!(
        st["history_bytes"].as_u64().unwrap() <= 1 << 20,
        "{st} (one session holds {per_session} bytes)"
    );
    assert_eq!(
        u64s(&st, &["active", "evicted", "evicted_for_history"]),
        [Some(fit), Some(1), Some(1)],
        "{st}"
    );
    // robot-0 was the one dropped: its token says so.
    let mut next = lone("robot-0");
    next["session_token"] = json!(token);
    let r = s.post_predict(&next);
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.text().contains("holds no session"), "{}", r.text());
    let metrics = test_client::get(&s.http, "/metrics").unwrap().text();
    let held = st["history_bytes"].as_u64().unwrap();
    assert!(
        metrics.contains(&format!("gr00t_sessions_history_bytes {held}")),
        "{metrics}"
    );
}

/// A base64 PNG of `width`×`height` with a gradient shifted by `shift` (so that resizing has
/// work to do).
fn gradient_png_b64(width: u32, height: u32, shift: u32) -> String {
    use base64::Engine;
    let img = image::RgbImage::from_fn(width, height, |x, y| {
        image::Rgb([
            ((x + shift) % 256) as u8,
            (y % 256) as u8,
            ((x + y) % 256) as u8,
        ])
    });
    let mut png = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    base64::engine::general_purpose::STANDARD.encode(png)
}

#[test]
fn a_history_keeps_frames_at_most_at_the_models_size_whatever_size_they_were_sent_at() {
    let s = Server::start(&[]);
    let lone = |id: &str, frame: &str| {
        let mut b = request("case0");
        for cam in test_server::CAMERAS {
            b["images"][cam] = json!([frame]);
        }
        b["session_id"] = json!(id);
        b
    };
    let held = || {
        test_client::get(&s.http, "/info").unwrap().json()["sessions"]["history_bytes"]
            .as_u64()
            .unwrap()
    };
    // One session sends 320x180 frames, another 1280x720 ones (16 times the pixels).
    s.predict_json(&lone("small", &gradient_png_b64(320, 180, 0)));
    let small = held();
    let (large_a, large_b) = (
        gradient_png_b64(1280, 720, 0),
        gradient_png_b64(1280, 720, 7),
    );
    s.predict_json(&lone("large", &large_a));
    let large = held() - small;
    let raw_large = 2 * 1280 * 720 * 3;
    println!("history of one observation: {small} bytes (320x180 sent), {large} (1280x720 sent)");
    // Frames smaller than the model's input are kept as sent (they are the smaller form);
    // larger ones are kept at the model's size: a fraction of their raw size.
    assert_eq!(small, 2 * 320 * 180 * 3);
    assert!(
        large > small && large * 4 < raw_large,
        "{large} bytes kept for {raw_large} raw"
    );
    // The kept form gives the model what the frame as sent gives it: the next step, drawing
    // t−15 from the history, answers what the pair sent whole answers.
    let next = s.predict_json(&lone("large", &large_b));
    let mut whole = lone("whole", &large_a);
    for cam in test_server::CAMERAS {
        whole["images"][cam] = json!([large_a, large_b]);
    }
    whole.as_object_mut().unwrap().remove("session_id");
    assert_eq!(next["actions"], s.predict_json(&whole)["actions"]);
}

/// A `POST /predict` whose head (with `Expect: 100-continue`) is sent and stamped by the
/// server, its body held back until [`HeldPost::finish`].
struct HeldPost {
    tcp: std::net::TcpStream,
    body: Vec<u8>,
}

impl HeldPost {
    fn begin(http: &str, body: &Json) -> HeldPost {
        use std::io::{Read, Write};
        let body = serde_json::to_vec(body).unwrap();
        let mut tcp = std::net::TcpStream::connect(http).unwrap();
        tcp.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        let head = format!(
            "POST /predict HTTP/1.1\r\nHost: {http}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nExpect: 100-continue\r\n\r\n",
            body.len()
        );
        tcp.write_all(head.as_bytes()).unwrap();
        // The server asks for the body once its guard has the head (and its arrival).
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while !got.ends_with(b"\r\n\r\n") {
            assert_eq!(tcp.read(&mut byte).unwrap(), 1, "closed: {got:?}");
            got.push(byte[0]);
        }
        let got = String::from_utf8_lossy(&got);
        assert!(got.starts_with("HTTP/1.1 100"), "{got}");
        HeldPost { tcp, body }
    }

    /// Sends the body; the answer.
    fn finish(mut self) -> test_client::HttpResponse {
        use std::io::{Read, Write};
        self.tcp.write_all(&self.body).unwrap();
        // One answer, then the connection stays open: read until it is whole.
        let mut raw = Vec::new();
        let mut buf = [0u8; 65536];
        loop {
            if let Some(r) = test_client::parse(&raw) {
                return r;
            }
            let n = self.tcp.read(&mut buf).unwrap();
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&raw));
            raw.extend_from_slice(&buf[..n]);
        }
    }
}

#[test]
fn latest_wins_by_when_an_observation_reached_the_server_not_when_its_parse_ended() {
    let s = Server::start(&[]);
    let step = |k: u64| {
        let mut b = observation("case0", k, None);
        b["session_id"] = json!("arm-order");
        b
    };
    let first = s.predict_json(&step(0));
    // Steps 1 and 2 reach the server, then step 3 does and is answered before their bodies
    // (and so their parses) are done.
    let (second, third) = (
        HeldPost::begin(&s.http, &step(1)),
        HeldPost::begin(&s.http, &step(2)),
    );
    let fourth = s.post_predict(&step(3));
    let (second, third) = (second.finish(), third.finish());
    let codes = [200, second.status, third.status, fourth.status];
    assert_eq!(
        codes,
        [200, 409, 409, 200],
        "{} {}",
        second.text(),
        third.text()
    );
    for r in [second, third] {
        let e = r.json()["error"].as_str().unwrap().to_string();
        assert!(r.status == 409 && e.starts_with("superseded"), "{e}");
    }
    // Step 3's own answer, as when computed alone.
    let alone = s.predict_json(&observation("case0", 3, None));
    assert_eq!(actions(&fourth.json()), actions(&alone));
    assert_eq!(fourth.json()["session"]["step"], json!(2));
    assert_ne!(actions(&first), actions(&alone));
}
