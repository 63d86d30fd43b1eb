//! `gr00t serve --ws-port`: openpi's websocket policy protocol, spoken to by a client written
//! like openpi-client's `WebsocketClientPolicy` (msgpack-numpy with binary keys), against the
//! tiny fixture model: metadata on connect, case0 through the per-connection frame history
//! gives the fixture's actions and exactly HTTP's, errors are a text frame then close 1011, and
//! `GET /healthz` answers on the same port. On the multi-embodiment checkpoint, every case as
//! upstream's nested GR00T observation gives exactly HTTP's actions (and the goldens' within
//! their gates), with the refusals naming their field.

use gr00t::doors::wire::{msgpack_numpy, ndarray};
use gr00t_fixtures::http_client as test_client;
mod support;
use support::openpi_ws::{connect, connect_to, image, infer, observation, Ws};
use support::test_server;

use gr00t_fixtures::{json_rows, max_abs_diff, metric_value as metric, MultiCase};
use msgpack_numpy::{from_openpi_array, get, openpi_array, pack, str_map, unpack};
use ndarray::{DType, NdArray};
use rmpv::Value;
use std::time::Duration;
use test_server::{
    answers, both_frames, door_answers, fixture_actions, http_actions, multi_video, refused_at,
    request_lines, stage_counts, state, Server, CAMERAS, GROUPS,
};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::Message;

/// vLLM-Omni's path.
const VLLM_OMNI: &str = "/v1/realtime/robot/openpi";
/// A msgpack map's entries.
type Map = Vec<(Value, Value)>;

/// After a bad message: the error text frame, then close 1011.
fn expect_error(ws: &mut Ws, msg: Message) -> String {
    ws.send(msg).expect("send");
    let text = match ws.read().expect("error frame") {
        Message::Text(t) => t.to_string(),
        other => panic!("expected a text error frame, got {other:?}"),
    };
    match ws.read() {
        Ok(Message::Close(Some(f))) => assert_eq!(f.code, CloseCode::Error, "{text}"),
        other => panic!("expected close 1011 after {text:?}, got {other:?}"),
    }
    text
}

fn array(reply: &Value, key: &str) -> NdArray {
    let m = reply.as_map().expect("reply dict");
    let v = get(m, key).unwrap_or_else(|| panic!("no {key} in {reply}"));
    from_openpi_array(v)
        .expect("ndarray")
        .expect("valid ndarray")
}

fn groups(reply: &Value) -> Vec<Vec<f32>> {
    GROUPS
        .iter()
        .map(|g| {
            let a = array(reply, g);
            assert_eq!(a.dtype, DType::F32);
            assert_eq!(a.shape[0], 40);
            a.to_f32s()
        })
        .collect()
}

/// Messages whose `Value` would be huge or deep, with the refusal each gets: 16 MiB − 8 of
/// `nil`s in one array (under the 16 MiB message limit), 100 000 nested arrays, and a header
/// claiming 2³² − 1 items with nothing after it.
fn msgpack_bombs() -> Vec<(Vec<u8>, &'static str)> {
    let n = (16 << 20) - 8;
    let mut nils = vec![0xdd];
    nils.extend_from_slice(&(n as u32).to_be_bytes());
    nils.resize(5 + n, 0xc0);
    let mut deep = vec![0x91; 100_000];
    deep.push(0xc0);
    vec![
        (nils, "declares more than 65536 elements"),
        (deep, "nested deeper than 32 levels"),
        (
            vec![0xdd, 0xff, 0xff, 0xff, 0xff],
            "declares more than 65536 elements",
        ),
    ]
}

#[test]
fn websocket_serves_openpi_clients() {
    let s = Server::start(&["--ws-port", "0"]);
    let addr = s.ws.clone().expect("ws address");
    let health = test_client::get(&addr, "/healthz").expect("GET /healthz");
    assert_eq!((health.status, health.text().as_str()), (200, "OK\n"));

    let (mut ws, meta) = connect(&addr, None).unwrap();
    let meta = meta.as_map().expect("metadata dict").clone();
    assert_eq!(get(&meta, "action_horizon"), Some(&Value::from(40)));

    // The current frame only: the first observation is paired with itself, the second with
    // the first, which makes it exactly case0 ([t−15, t0]).
    let first = infer(&mut ws, &Value::Map(observation(Some("t-15"))));
    let reply = infer(&mut ws, &Value::Map(observation(Some("t0"))));
    let ours = groups(&reply);
    for (g, got) in GROUPS.iter().zip(&ours) {
        let d = max_abs_diff(got, &fixture_actions("case0", g));
        assert!(d <= 1e-5, "{g}: max|Δ| {d:.3e} > 1e-5");
    }
    assert_ne!(groups(&first), ours, "the history frame made no difference");
    let mut http_body = test_server::request("case0");
    http_body.as_object_mut().unwrap().remove("noise");
    http_body["seed"] = 0.into();
    let r = test_client::post_json(
        &s.http,
        "/predict",
        &serde_json::to_vec(&http_body).unwrap(),
    )
    .expect("POST /predict");
    assert_eq!(r.status, 200, "{}", r.text());
    let http: Vec<Vec<f32>> = GROUPS.iter().map(|g| http_actions(&r.json(), g)).collect();
    assert_eq!(ours, http, "websocket and HTTP differ");

    // actions = [joint_position | gripper_position] per step; timings as openpi reports them.
    let actions = array(&reply, "actions");
    assert_eq!(actions.shape, vec![40, 8]);
    let (joint, grip) = (&ours[2], &ours[1]);
    let want: Vec<f32> = joint
        .chunks(7)
        .zip(grip)
        .flat_map(|(j, g)| j.iter().chain([g]).copied())
        .collect();
    assert_eq!(actions.to_f32s(), want);
    let timing = |r: &Value| {
        get(r.as_map().unwrap(), "server_timing")
            .and_then(|t| t.as_map())
            .expect("server_timing")
            .clone()
    };
    assert!(get(&timing(&first), "infer_ms").is_some_and(|v| v.as_f64().is_some()));
    assert!(get(&timing(&first), "prev_total_ms").is_none());
    assert!(get(&timing(&reply), "prev_total_ms").is_some());
    // openpi's encoding: bin keys inside an array, str keys outside.
    let m = reply.as_map().unwrap();
    let Some(Value::Map(arr)) = get(m, "eef_9d") else {
        panic!("eef_9d")
    };
    assert!(arr.iter().all(|(k, _)| matches!(k, Value::Binary(_))));
    assert!(m.iter().all(|(k, _)| matches!(k, Value::String(_))));

    // Both frames in one array: no history needed, same answer on a fresh connection.
    let (mut ws2, _) = connect(&addr, None).unwrap();
    assert_eq!(
        groups(&infer(&mut ws2, &Value::Map(observation(None)))),
        ours
    );

    // Errors: a text frame with the reason, close 1011; the server takes new connections.
    let edit = |key: &str, v: Option<Value>| {
        let mut m: Vec<_> = observation(Some("t0"))
            .into_iter()
            .filter(|(k, _)| k.as_str() != Some(key))
            .collect();
        if let Some(v) = v {
            m.push((Value::from(key), v));
        }
        Message::Binary(pack(&Value::Map(m)).into())
    };
    let float_image = openpi_array(&NdArray::from_f32(vec![180, 320, 3], &vec![0.5; 172_800]));
    let square = image(vec![224, 224, 3], vec![0; 224 * 224 * 3]);
    let cases = vec![
        (
            edit("observation/wrist_image_left", Some(float_image)),
            "uint8",
        ),
        (
            edit("observation/exterior_image_1_left", Some(square)),
            "resize_with_pad",
        ),
        (
            edit("observation/joint_position", None),
            "observation/joint_position is missing",
        ),
        (
            Message::Binary(b"\xc1not msgpack".to_vec().into()),
            "msgpack",
        ),
        (Message::Text("hello".into()), "binary"),
    ];
    let cases = cases.into_iter().chain(
        msgpack_bombs()
            .into_iter()
            .map(|(b, want)| (Message::Binary(b.into()), want)),
    );
    for (msg, want) in cases {
        let (mut bad, _) = connect(&addr, None).unwrap();
        let text = expect_error(&mut bad, msg);
        assert!(text.contains(want), "{text:?} lacks {want:?}");
        assert!(!text.contains("Traceback"), "{text}");
    }
    assert_eq!(
        groups(&infer(&mut ws2, &Value::Map(observation(None)))),
        ours
    );
}

#[test]
fn websocket_requires_the_api_key_when_set() {
    let s = Server::start(&["--ws-port", "0", "--api-token", "k3y"]);
    let addr = s.ws.clone().expect("ws address");
    for key in [None, Some("nope")] {
        match connect(&addr, key) {
            Err(tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 401),
            Err(e) => panic!("expected 401, got {e}"),
            Ok(_) => panic!("handshake with key {key:?} was accepted"),
        }
    }
    let (_ws, meta) = connect(&addr, Some("k3y")).expect("handshake with the key");
    assert!(meta.as_map().is_some());
    let health = test_client::get(&addr, "/healthz").expect("GET /healthz");
    assert_eq!(health.status, 200);
}

/// RoboArena's message: `observation(Some(t))` plus `endpoint` and `session_id`.
fn arena(t: &str, session: &str) -> Value {
    let mut m = observation(Some(t));
    m.push((Value::from("endpoint"), Value::from("infer")));
    m.push((Value::from("session_id"), Value::from(session)));
    Value::Map(m)
}

#[test]
fn websocket_roboarena_sessions_and_reset() {
    // Behind a token, the connections that name a session share it.
    let s = Server::start(&["--ws-port", "0", "--api-token", "k3y"]);
    let addr = s.ws.clone().expect("ws address");
    let key = Some("k3y");
    let (mut a, meta) = connect(&addr, key).unwrap();
    let meta = meta.as_map().unwrap().clone();
    assert_eq!(
        get(&meta, "image_resolution"),
        Some(&Value::Array(vec![Value::from(180), Value::from(320)]))
    );
    assert_eq!(get(&meta, "needs_session_id"), Some(&Value::Boolean(true)));
    assert_eq!(get(&meta, "n_external_cameras"), Some(&Value::from(1)));
    assert_eq!(
        get(&meta, "action_space"),
        Some(&Value::from("joint_position"))
    );

    // t-15 on one connection and t0 on another, same session: case0.
    infer(&mut a, &arena("t-15", "ep"));
    let (mut b, _) = connect(&addr, key).unwrap();
    let ours = groups(&infer(&mut b, &arena("t0", "ep")));
    for (g, got) in GROUPS.iter().zip(&ours) {
        let d = max_abs_diff(got, &fixture_actions("case0", g));
        assert!(d <= 1e-5, "{g}: max|Δ| {d:.3e} > 1e-5");
    }
    // reset: the text frame, then the session starts over (t0 paired with itself).
    let reset = str_map([
        ("endpoint", Value::from("reset")),
        ("session_id", Value::from("ep")),
    ]);
    b.send(Message::Binary(pack(&reset).into())).unwrap();
    match b.read().unwrap() {
        Message::Text(t) => assert_eq!(t.as_str(), "reset successful"),
        other => panic!("expected the reset text frame, got {other:?}"),
    }
    let fresh = groups(&infer(&mut b, &arena("t0", "ep")));
    assert_ne!(fresh, ours, "reset kept the session's frames");
    assert_eq!(groups(&infer(&mut a, &arena("t0", "other"))), fresh);

    let mut bad = arena("t0", "ep");
    if let Value::Map(m) = &mut bad {
        m.retain(|(k, _)| k.as_str() != Some("endpoint"));
        m.push((Value::from("endpoint"), Value::from("teleport")));
    }
    let text = expect_error(&mut a, Message::Binary(pack(&bad).into()));
    assert!(
        text.contains("endpoint must be 'infer' or 'reset'"),
        "{text}"
    );
}

#[test]
fn websocket_roboarena_sessions_are_core_sessions() {
    let s = Server::start(&["--ws-port", "0", "--api-token", "k3y"]);
    let addr = s.ws.clone().expect("ws address");
    let bearer = [("authorization", "Bearer k3y")];
    let http = |method: &str, path: &str, body: &[u8]| {
        let headers = [bearer[0], ("content-type", "application/json")];
        test_client::request(&s.http, method, path, &headers, body).unwrap()
    };
    let metrics = || http("GET", "/metrics", b"").text();
    let sessions = || http("GET", "/info", b"").json()["sessions"].clone();
    // t-15 on a connection that then closes, t0 on a new one: the session outlives both.
    let (mut a, _) = connect(&addr, Some("k3y")).unwrap();
    let first = groups(&infer(&mut a, &arena("t-15", "ep")));
    a.close(None).unwrap();
    drop(a);
    let (mut b, _) = connect(&addr, Some("k3y")).unwrap();
    let ours = groups(&infer(&mut b, &arena("t0", "ep")));
    for (g, got) in GROUPS.iter().zip(&ours) {
        let d = max_abs_diff(got, &fixture_actions("case0", g));
        assert!(d <= 1e-5, "{g}: max|Δ| {d:.3e} > 1e-5");
    }
    // One core session (the connections' own ones named by none of their messages).
    let info = sessions();
    assert_eq!(
        (info["active"].as_u64(), info["created"].as_u64()),
        (Some(1), Some(1)),
        "{info}"
    );
    let text = metrics();
    assert_eq!(metric(&text, "gr00t_sessions_active"), 1.0);
    assert_eq!(metric(&text, "gr00t_sessions_created_total"), 1.0);
    // No HTTP session name reaches it: not "ep", not the old "roboarena-ep" key.
    for id in ["ep", "roboarena-ep", "roboarena/ep"] {
        let body = serde_json::json!({ "session_id": id }).to_string();
        let r = http("POST", "/reset", body.as_bytes()).json();
        assert_eq!(r["reset"], serde_json::json!(false), "{id}");
    }
    assert_eq!(sessions()["active"].as_u64(), Some(1));
    // The websocket's reset does.
    let ws_reset = str_map([
        ("endpoint", Value::from("reset")),
        ("session_id", Value::from("ep")),
    ]);
    b.send(Message::Binary(pack(&ws_reset).into())).unwrap();
    assert!(matches!(b.read().unwrap(), Message::Text(_)));
    assert_eq!(metric(&metrics(), "gr00t_sessions_reset_total"), 1.0);
    // Reset, the session starts over: t0 is paired with itself, as t-15 was at first.
    let fresh_reply = infer(&mut b, &arena("t0", "ep"));
    let fresh = groups(&fresh_reply);
    assert_ne!(fresh, ours, "the reset kept the session's frames");
    assert_ne!(fresh, first);
    assert_eq!(sessions()["active"].as_u64(), Some(1));
    // Echoing the session's token locks the session to it: another connection that names
    // "ep" without the token can neither step nor reset it; the holder can.
    let token = get(fresh_reply.as_map().unwrap(), "server_timing")
        .and_then(|t| get(t.as_map()?, "session_token"))
        .and_then(Value::as_str)
        .expect("server_timing.session_token")
        .to_string();
    let with_token = |mut v: Value| {
        if let Value::Map(m) = &mut v {
            m.push((Value::from("session_token"), Value::from(token.as_str())));
        }
        v
    };
    infer(&mut b, &with_token(arena("t0", "ep")));
    let (mut c, _) = connect(&addr, Some("k3y")).unwrap();
    let e = expect_error(&mut c, Message::Binary(pack(&arena("t0", "ep")).into()));
    assert!(e.contains("session locked"), "{e}");
    let (mut c, _) = connect(&addr, Some("k3y")).unwrap();
    let e = expect_error(&mut c, Message::Binary(pack(&ws_reset).into()));
    assert!(e.contains("session locked"), "{e}");
    b.send(Message::Binary(pack(&with_token(ws_reset.clone())).into()))
        .unwrap();
    assert!(matches!(b.read().unwrap(), Message::Text(_)));
    assert_eq!(metric(&metrics(), "gr00t_sessions_reset_total"), 2.0);
    assert_eq!(
        metric(&metrics(), "gr00t_sessions_locked_refusals_total"),
        2.0
    );
}

#[test]
fn without_a_token_a_roboarena_session_is_its_connections_own() {
    let s = Server::start(&["--ws-port", "0"]);
    let addr = s.ws.clone().expect("ws address");
    let sessions = || test_client::get(&s.http, "/info").unwrap().json()["sessions"].clone();
    // Alone on a fresh connection, t0 is paired with itself.
    let (mut alone, _) = connect(&addr, None).unwrap();
    let paired = groups(&infer(&mut alone, &arena("t0", "ep")));
    drop(alone);
    // Another client names the same session: its t-15 does not reach this connection's "ep".
    let (mut a, _) = connect(&addr, None).unwrap();
    infer(&mut a, &arena("t-15", "ep"));
    let (mut b, _) = connect(&addr, None).unwrap();
    assert_eq!(groups(&infer(&mut b, &arena("t0", "ep"))), paired);
    // On one connection the session works as before: t-15 then t0 is case0.
    let ours = groups(&infer(&mut a, &arena("t0", "ep")));
    for (g, got) in GROUPS.iter().zip(&ours) {
        let d = max_abs_diff(got, &fixture_actions("case0", g));
        assert!(d <= 1e-5, "{g}: max|Δ| {d:.3e} > 1e-5");
    }
    // A connection's named sessions end with it.
    a.close(None).unwrap();
    drop(a);
    b.close(None).unwrap();
    drop(b);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while sessions()["active"].as_u64() != Some(0) {
        assert!(std::time::Instant::now() < deadline, "{}", sessions());
        std::thread::yield_now();
    }
}

#[test]
fn websocket_answers_are_counted_in_metrics_by_door() {
    let s = Server::start(&["--ws-port", "0"]);
    let addr = s.ws.clone().expect("ws address");
    let metrics = || test_client::get(&s.http, "/metrics").unwrap().text();
    // An answered observation and a reset (not a prediction) on one connection, a refused one
    // on another, and vLLM-Omni's path.
    let (mut ws, _) = connect(&addr, None).unwrap();
    infer(&mut ws, &Value::Map(observation(None)));
    let reset = str_map([("endpoint", Value::from("reset"))]);
    ws.send(Message::Binary(pack(&reset).into())).unwrap();
    assert!(matches!(ws.read().unwrap(), Message::Text(_)));
    let mut no_prompt = observation(None);
    no_prompt.retain(|(k, _)| k.as_str() != Some("prompt"));
    let (mut bad, _) = connect(&addr, None).unwrap();
    let text = expect_error(
        &mut bad,
        Message::Binary(pack(&Value::Map(no_prompt)).into()),
    );
    assert!(text.contains("prompt"), "{text}");
    let (mut omni, _) = connect_to(&addr, VLLM_OMNI, None).unwrap();
    let e = infer(&mut omni, &str_map([("endpoint", Value::from("teleport"))]));
    assert_eq!(
        get(e.as_map().unwrap(), "type"),
        Some(&Value::from("error"))
    );
    let text = metrics();
    assert_eq!(door_answers(&text, "ws"), (1.0, 2.0), "{text}");
    // Each refusal counted by the key at fault, not as `other`.
    assert_eq!(answers(&text, &refused_at("prompt"), "ws"), 1.0, "{text}");
    assert_eq!(answers(&text, &refused_at("other"), "ws"), 0.0, "{text}");
    // The stage histograms: one computed answer, three answered messages (resets aside).
    let stages = stage_counts(&text, &["compute", "denoise", "request"]);
    assert_eq!(stages, [1.0, 1.0, 3.0], "{text}");
    // One log line per answered message (the reset aside), in order.
    let lines = request_lines(s, "ws");
    assert_eq!(lines.len(), 3, "{lines:#?}");
    for (line, head) in lines
        .iter()
        .zip(["WS openpi 200", "WS openpi 400", "WS vllm-omni 400"])
    {
        assert!(line.contains(head), "{head}: {line}");
    }
    assert!(lines[0].contains("denoise_ms="), "{}", lines[0]);
    assert!(lines[1].contains("prompt"), "{}", lines[1]);
    // The HTTP series did not move.
    assert_eq!(door_answers(&text, "http"), (0.0, 0.0), "{text}");
}

#[test]
fn websocket_vllm_omni_dialect() {
    let s = Server::start(&["--ws-port", "0"]);
    let addr = s.ws.clone().expect("ws address");
    let (mut ws, meta) = connect_to(&addr, "/v1/realtime/robot/openpi", None).unwrap();
    let meta = meta.as_map().unwrap().clone();
    assert_eq!(get(&meta, "action_horizon"), Some(&Value::from(40)));
    let keys: Vec<Value> = GROUPS.iter().map(|g| Value::from(*g)).collect();
    assert_eq!(get(&meta, "action_keys"), Some(&Value::Array(keys)));
    assert_eq!(
        get(&meta, "embodiment_tag"),
        Some(&Value::from("OXE_DROID_RELATIVE_EEF_RELATIVE_JOINT"))
    );

    // The nested GR00T observation in openpi arrays, seed 0 (case0's noise).
    let nested = |state_dtype: &str| {
        let video = CAMERAS
            .iter()
            .map(|cam| {
                let (w, h, data) = both_frames("case0", cam);
                (Value::from(*cam), image(vec![1, 2, h, w, 3], data))
            })
            .collect();
        let states = GROUPS
            .iter()
            .map(|g| {
                let v = state("case0", g);
                let a = if state_dtype == "<f4" {
                    NdArray::from_f32(vec![1, 1, v.len()], &v)
                } else {
                    let b = v.iter().flat_map(|x| (*x as f64).to_le_bytes()).collect();
                    NdArray::new(DType::parse("<f8").unwrap(), vec![1, 1, v.len()], b).unwrap()
                };
                (Value::from(*g), openpi_array(&a))
            })
            .collect();
        let lang = (
            "annotation.language.language_instruction",
            "Put the blue block in the green bowl",
        );
        omni_infer("robot-1", video, states, lang, 0)
    };
    let reply = infer(&mut ws, &nested("<f4"));
    let m = reply.as_map().expect("reply dict");
    assert_eq!(m.len(), 3, "only the action keys: {reply}");
    for (g, (_, v)) in GROUPS.iter().zip(m) {
        let a = from_openpi_array(v).unwrap().unwrap();
        assert_eq!((a.dtype, a.shape[..2].to_vec()), (DType::F32, vec![1, 40]));
        let d = max_abs_diff(&a.to_f32s(), &fixture_actions("case0", g));
        assert!(d <= 1e-5, "{g}: max|Δ| {d:.3e} > 1e-5");
    }
    // An error is a map, and the connection goes on.
    let e = infer(&mut ws, &nested("<f8"));
    let em = e.as_map().expect("error dict");
    assert_eq!(get(em, "type"), Some(&Value::from("error")));
    let msg = get(em, "message").and_then(|v| v.as_str()).unwrap();
    assert!(msg.contains("np.float32. Got float64"), "{msg}");
    assert_eq!(infer(&mut ws, &nested("<f4")), reply);
    // Messages too big for a Value: refused as error maps before decoding; the answer after
    // them is unchanged.
    for (bomb, want) in msgpack_bombs() {
        ws.send(Message::Binary(bomb.into())).expect("send");
        let e = match ws.read().expect("reply") {
            Message::Binary(b) => unpack(&b).expect("reply msgpack"),
            other => panic!("expected a binary error map, got {other:?}"),
        };
        let em = e.as_map().expect("error dict");
        assert_eq!(get(em, "type"), Some(&Value::from("error")));
        let msg = get(em, "message").and_then(|v| v.as_str()).unwrap();
        assert!(msg.contains(want), "{msg}");
    }
    assert_eq!(infer(&mut ws, &nested("<f4")), reply);
    let reset = infer(&mut ws, &str_map([("endpoint", Value::from("reset"))]));
    assert_eq!(
        reset,
        str_map([("status", Value::from("reset successful"))])
    );
}

#[test]
fn websocket_vllm_omni_serves_the_default_embodiment() {
    let s = Server::start_in(
        &gr00t_fixtures::multi_checkpoint(),
        0,
        &["--ws-port", "0", "--embodiment", "new_embodiment"],
    );
    let addr = s.ws.clone().expect("ws address");
    let (mut ws, meta) = connect_to(&addr, "/v1/realtime/robot/openpi", None).unwrap();
    let meta = meta.as_map().unwrap().clone();
    assert_eq!(
        get(&meta, "embodiment_tag"),
        Some(&Value::from("NEW_EMBODIMENT"))
    );
    assert_eq!(get(&meta, "action_horizon"), Some(&Value::from(16)));
    let keys = vec![Value::from("single_arm"), Value::from("gripper")];
    assert_eq!(get(&meta, "action_keys"), Some(&Value::Array(keys)));

    let case = MultiCase::load("case_new_embodiment_1");
    let body: serde_json::Value =
        serde_json::from_slice(&std::fs::read(case.request_path()).unwrap()).unwrap();
    let (video, states) = multi_video_state(&case, false);
    let lang = (case.language_key.as_str(), case.instruction.as_str());
    let obs = omni_infer("so101", video, states, lang, 3);
    let reply = infer(&mut ws, &obs);
    let m = reply.as_map().expect("reply dict");
    // The same observation over HTTP with the same seed: bit-identical.
    let mut http = body.clone();
    http.as_object_mut().unwrap().remove("noise");
    http["seed"] = serde_json::json!(3);
    let resp = test_client::post_json(&s.http, "/predict", http.to_string().as_bytes()).unwrap();
    assert_eq!(resp.status, 200, "{}", resp.text());
    let resp = resp.json();
    for (k, v) in m {
        let key = k.as_str().unwrap();
        let a = from_openpi_array(v).unwrap().unwrap();
        let want = json_rows(&resp["actions"][key]);
        assert_eq!(a.shape[..2], [1, 16], "{key}");
        assert_eq!(a.to_f32s(), want, "{key}: websocket vs HTTP");
    }
}

/// A multi-embodiment case's views `{view: u8 [1,T,H,W,3]}` and state `{key: f32 [1,1,D]}` in
/// openpi's msgpack-numpy (`unbatched`: `[T,H,W,3]` and `[1,D]`).
fn multi_video_state(case: &MultiCase, unbatched: bool) -> (Map, Map) {
    let batch = |mut shape: Vec<usize>| {
        if !unbatched {
            shape.insert(0, 1);
        }
        shape
    };
    let video = multi_video(case)
        .into_iter()
        .map(|(view, shape, data)| (Value::from(view), image(batch(shape), data)))
        .collect();
    let state = case
        .state
        .iter()
        .map(|(k, v)| {
            let a = NdArray::from_f32(batch(vec![1, v.len()]), v);
            (Value::from(k.as_str()), openpi_array(&a))
        })
        .collect();
    (video, state)
}

/// A vLLM-Omni `infer` message of robot `session`: the nested GR00T observation (its
/// language as `(key, instruction)`) with `seed`.
fn omni_infer(session: &str, video: Map, state: Map, lang: (&str, &str), seed: u64) -> Value {
    let instruction = Value::Array(vec![Value::Array(vec![Value::from(lang.1)])]);
    str_map([
        ("endpoint", Value::from("infer")),
        ("session_id", Value::from(session)),
        ("video", Value::Map(video)),
        ("state", Value::Map(state)),
        ("language", str_map([(lang.0, instruction)])),
        ("seed", Value::from(seed)),
    ])
}

/// A multi-embodiment case as upstream's nested observation in openpi's msgpack-numpy:
/// [`multi_video_state`], `language {key: [[instruction]]}`, the case's embodiment by its enum
/// name and its noise `[40, 132]`.
fn nested_observation(case: &MultiCase, unbatched: bool) -> Map {
    let (video, state) = multi_video_state(case, unbatched);
    let instruction = Value::Array(vec![Value::Array(vec![Value::from(
        case.instruction.as_str(),
    )])]);
    vec![
        (Value::from("video"), Value::Map(video)),
        (Value::from("state"), Value::Map(state)),
        (
            Value::from("language"),
            str_map([(case.language_key.as_str(), instruction)]),
        ),
        (
            Value::from("embodiment"),
            Value::from(case.tag.to_uppercase()),
        ),
        (
            Value::from("noise"),
            openpi_array(&NdArray::from_f32(vec![40, 132], &case.noise)),
        ),
    ]
}

/// The actions of an HTTP `/predict` response, row-major per key.
fn http_multi(s: &Server, case: &str) -> serde_json::Value {
    let path = gr00t_fixtures::multi_dir().join(case).join("request.json");
    let r = test_client::post_json(&s.http, "/predict", &std::fs::read(path).unwrap())
        .expect("POST /predict");
    assert_eq!(r.status, 200, "{case}: {}", r.text());
    r.json()
}

#[test]
fn websocket_serves_the_nested_gr00t_observation_for_every_embodiment() {
    let s = Server::start_in(&gr00t_fixtures::multi_checkpoint(), 0, &["--ws-port", "0"]);
    let addr = s.ws.clone().expect("ws address");
    let (mut ws, meta) = connect(&addr, None).unwrap();
    // The metadata frame is the openpi one, as before.
    let meta = meta.as_map().expect("metadata dict").clone();
    assert_eq!(
        get(&meta, "embodiment"),
        Some(&Value::from("oxe_droid_relative_eef_relative_joint"))
    );
    for (n, name) in gr00t_fixtures::MULTI_CASES.iter().enumerate() {
        let case = MultiCase::load(name);
        // Every other case unbatched: both are a batch of one.
        let reply = infer(&mut ws, &Value::Map(nested_observation(&case, n % 2 == 1)));
        let m = reply.as_map().unwrap_or_else(|| panic!("{name}: {reply}"));
        let http = http_multi(&s, name);
        let http_keys: Vec<&String> = http["actions"].as_object().unwrap().keys().collect();
        let keys: Vec<&str> = m
            .iter()
            .map(|(k, _)| k.as_str().unwrap())
            .filter(|k| !k.ends_with("_timing"))
            .collect();
        assert_eq!(
            keys.len(),
            http_keys.len(),
            "{name}: {keys:?} vs {http_keys:?}"
        );
        for key in keys {
            let a = array(&reply, key);
            let dims = case.outputs.dims(&format!("action.{key}"));
            assert_eq!((a.dtype, &a.shape), (DType::F32, &dims), "{name} {key}");
            let ours = a.to_f32s();
            assert_eq!(
                ours,
                http_actions(&http, key),
                "{name} {key}: websocket != HTTP"
            );
            let want = case.outputs.f32s(&format!("action.{key}"));
            if key == "head_pose" {
                // Near-π rotation vectors: the translation here; rotations in embodiments.rs.
                let xyz = |v: &[f32]| -> Vec<f32> {
                    v.chunks_exact(6).flat_map(|r| r[..3].to_vec()).collect()
                };
                assert!(max_abs_diff(&xyz(&ours), &xyz(&want)) <= 1e-5, "{name}");
                continue;
            }
            let scale = want.iter().fold(1.0f32, |m, x| m.max(x.abs()));
            let d = max_abs_diff(&ours, &want);
            assert!(d <= 1e-5 * scale, "{name} {key}: max|Δ| {d}");
        }
        for t in ["server_timing", "policy_timing"] {
            let timing = get(m, t).and_then(Value::as_map).expect(t);
            assert!(
                get(timing, "infer_ms").is_some_and(|v| v.as_f64().is_some()),
                "{t}"
            );
        }
        if n > 0 {
            let timing = get(m, "server_timing").and_then(Value::as_map).unwrap();
            assert!(get(timing, "prev_total_ms").is_some(), "{name}");
        }
    }

    // DROID (the default when no embodiment is named) in the nested form: case0 as HTTP gives
    // it, on the same connection as the openpi DROID keys.
    let mut droid = Vec::new();
    let video = CAMERAS
        .iter()
        .map(|cam| {
            let (w, h, data) = both_frames("case0", cam);
            (Value::from(*cam), image(vec![2, h, w, 3], data))
        })
        .collect();
    droid.push((Value::from("video"), Value::Map(video)));
    let st = GROUPS
        .iter()
        .map(|g| {
            let v = state("case0", g);
            (
                Value::from(*g),
                openpi_array(&NdArray::from_f32(vec![1, v.len()], &v)),
            )
        })
        .collect();
    droid.push((Value::from("state"), Value::Map(st)));
    droid.push((
        Value::from("language"),
        str_map([(
            "annotation.language.language_instruction",
            Value::Array(vec![Value::Array(vec![Value::from(
                "Put the blue block in the green bowl",
            )])]),
        )]),
    ));
    droid.push((Value::from("seed"), Value::from(0)));
    let reply = infer(&mut ws, &Value::Map(droid));
    let mut body = test_server::request("case0");
    body.as_object_mut().unwrap().remove("noise");
    body["seed"] = 0.into();
    let r = test_client::post_json(&s.http, "/predict", &serde_json::to_vec(&body).unwrap())
        .expect("POST /predict");
    assert_eq!(r.status, 200, "{}", r.text());
    for g in GROUPS {
        let a = array(&reply, g);
        assert_eq!(a.shape[..2], [1, 40], "{g}");
        assert_eq!(a.to_f32s(), http_actions(&r.json(), g), "DROID nested {g}");
    }
    let openpi = infer(&mut ws, &Value::Map(observation(None)));
    assert_eq!(
        groups(&openpi),
        GROUPS
            .iter()
            .map(|g| array(&reply, g).to_f32s())
            .collect::<Vec<_>>(),
        "the openpi DROID keys on the same connection"
    );

    // Refusals: the text frame naming the field, then close 1011 (openpi's contract).
    let case = MultiCase::load("case_new_embodiment_1");
    let edited = |edit: &dyn Fn(&mut Map)| {
        let mut m = nested_observation(&case, false);
        edit(&mut m);
        Message::Binary(pack(&Value::Map(m)).into())
    };
    let entry = |m: &mut Map, k: &str| -> Map {
        let i = m
            .iter()
            .position(|(key, _)| key.as_str() == Some(k))
            .unwrap();
        match &mut m[i].1 {
            Value::Map(inner) => std::mem::take(inner),
            _ => unreachable!(),
        }
    };
    let put = |m: &mut Map, k: &str, v: Map| {
        let i = m
            .iter()
            .position(|(key, _)| key.as_str() == Some(k))
            .unwrap();
        m[i].1 = Value::Map(v);
    };
    let cases: Vec<(Message, &str)> = vec![
        (
            edited(&|m| {
                m.retain(|(k, _)| k.as_str() != Some("embodiment"));
                m.push((Value::from("embodiment"), Value::from("REAL_G1")));
            }),
            "embodiment: \"REAL_G1\" is not served here",
        ),
        (
            edited(&|m| {
                let mut v = entry(m, "video");
                v.retain(|(k, _)| k.as_str() != Some("wrist"));
                put(m, "video", v);
            }),
            "Video key 'wrist' must be in observation",
        ),
        (
            edited(&|m| {
                let mut st = entry(m, "state");
                st.retain(|(k, _)| k.as_str() != Some("single_arm"));
                st.push((
                    Value::from("single_arm"),
                    openpi_array(&NdArray::from_f32(vec![1, 1, 2], &[0.0, 1.0])),
                ));
                put(m, "state", st);
            }),
            "State key 'single_arm' must have 5 values (D). Got 2",
        ),
        (
            edited(&|m| {
                m.retain(|(k, _)| k.as_str() != Some("noise"));
                m.push((
                    Value::from("noise"),
                    openpi_array(&NdArray::from_f32(vec![40, 7], &[0.0; 280])),
                ));
            }),
            "noise must have shape (40, 132)",
        ),
    ];
    for (msg, want) in cases {
        let (mut bad, _) = connect(&addr, None).unwrap();
        let text = expect_error(&mut bad, msg);
        assert!(text.contains(want), "{text:?} lacks {want:?}");
    }
    // New connections are still served.
    let (mut again, _) = connect(&addr, None).unwrap();
    let reply = infer(&mut again, &Value::Map(nested_observation(&case, true)));
    let a = array(&reply, "single_arm");
    assert_eq!(
        a.to_f32s(),
        http_actions(&http_multi(&s, "case_new_embodiment_1"), "single_arm")
    );
}

#[test]
fn no_other_door_reaches_a_websocket_connections_sessions() {
    let s = Server::start(&["--ws-port", "0"]);
    let addr = s.ws.clone().expect("ws address");
    // HTTP observations carrying only the t0 frame, in sessions named as a websocket
    // connection's or RoboArena's used to be (`ws-<n>`, `roboarena-<id>`) or look now.
    let case0 = test_server::request("case0");
    let pollute = |ids: &[String]| {
        for id in ids {
            let mut b = case0.clone();
            for cam in CAMERAS {
                b["images"][cam] = serde_json::json!([b["images"][cam][1].clone()]);
            }
            b["session_id"] = serde_json::json!(id);
            let body = serde_json::to_vec(&b).unwrap();
            let r = test_client::post_json(&s.http, "/predict", &body).unwrap();
            assert_eq!(r.status, 200, "{id}: {}", r.text());
        }
    };
    let mut ids: Vec<String> = (1..=12).map(|n| format!("ws-{n}")).collect();
    ids.extend(["roboarena-ep", "roboarena/ep", "ws/ep"].map(String::from));
    pollute(&ids);
    let fixture = |got: &[Vec<f32>]| {
        for (g, got) in GROUPS.iter().zip(got) {
            let d = max_abs_diff(got, &fixture_actions("case0", g));
            assert!(d <= 1e-5, "{g}: max|Δ| {d:.3e} > 1e-5");
        }
    };
    // A connection's own session: t-15, HTTP writes t0 again everywhere, then t0 is case0.
    let (mut a, _) = connect(&addr, None).unwrap();
    infer(&mut a, &Value::Map(observation(Some("t-15"))));
    pollute(&ids);
    fixture(&groups(&infer(
        &mut a,
        &Value::Map(observation(Some("t0"))),
    )));
    // RoboArena's "ep" the same way, on a second connection.
    let (mut b, _) = connect(&addr, None).unwrap();
    infer(&mut b, &arena("t-15", "ep"));
    pollute(&ids);
    fixture(&groups(&infer(&mut b, &arena("t0", "ep"))));
}

#[test]
fn a_huge_client_value_is_never_echoed_whole_to_the_client_or_the_log() {
    let s = Server::start(&["--ws-port", "0"]);
    let addr = s.ws.clone().expect("ws address");
    let huge = "t".repeat(3 << 20);
    let (mut omni, _) = connect_to(&addr, VLLM_OMNI, None).unwrap();
    let e = infer(
        &mut omni,
        &str_map([("endpoint", Value::from(huge.as_str()))]),
    );
    assert_eq!(
        get(e.as_map().unwrap(), "type"),
        Some(&Value::from("error"))
    );
    let reply = pack(&e);
    assert!(reply.len() < 1024, "a {} byte reply", reply.len());
    let text = String::from_utf8_lossy(&reply).into_owned();
    assert!(text.contains("(3145728 bytes)"), "{text}");
    // RoboArena's dialect on the openpi path, the same.
    let (mut ws, _) = connect(&addr, None).unwrap();
    let mut m = arena("t0", "ep");
    if let Value::Map(entries) = &mut m {
        entries.retain(|(k, _)| k.as_str() != Some("endpoint"));
        entries.push((Value::from("endpoint"), Value::from(huge.as_str())));
    }
    let text = expect_error(&mut ws, Message::Binary(pack(&m).into()));
    assert!(text.len() < 1024, "a {} byte error", text.len());
    let longest = s.log_text().lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 4096, "a {longest} byte log line");
}
