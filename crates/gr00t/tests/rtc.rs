//! Real-time chunking through every door, against the goldens of NVIDIA's own action head
//! (`tests/fixtures/rtc`: case0, noise seed 0, the previous chunk = the head's `action_pred`
//! with seed 42): HTTP `actions_normalized` within the action gates of each option set's
//! `action_pred`, the frozen rows equal to the previous chunk's exactly, no RTC unchanged;
//! the same request through ZMQ and both websocket forms bit-identical to HTTP; and bad
//! options refused on each door, naming the field.

use gr00t::doors::wire::{msgpack_numpy, ndarray};
use gr00t_fixtures::http_client as test_client;
mod support;
use support::{test_server, zmq_req};

use gr00t_fixtures::{json_rows, max_abs, max_abs_diff, pearson, rtc_goldens, RtcSetting};
use msgpack_numpy::{from_gr00t_array, from_openpi_array, get, gr00t_array, openpi_array};
use msgpack_numpy::{pack, str_map, unpack};
use ndarray::{DType, NdArray};
use rmpv::Value;
use serde_json::{json, Value as Json};
use std::net::TcpStream;
use test_server::{both_frames, nested_observation, request, state, Server, CAMERAS, GROUPS};
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket};
use zmq_req::{ZmqClient, TIMEOUT};

/// The action gates of the model's RTC tests: Pearson r, and max |Δ| relative to max |ref|.
const MIN_R: f64 = 0.99999;
const REL: f32 = 1e-3;
const H: usize = 40;
const A: usize = 132;
/// DROID's action values per row (eef_9d 9, gripper_position 1, joint_position 7).
const W: usize = 17;

/// A msgpack map's entries.
type Entries = Vec<(Value, Value)>;

type Setting = RtcSetting;

/// The first `rows` rows of a `[40, 132]` chunk, `width` values each.
fn cut(chunk: &[f32], rows: usize, width: usize) -> Vec<Vec<f32>> {
    (0..rows)
        .map(|r| chunk[r * A..r * A + width].to_vec())
        .collect()
}

/// The valid dims of a `[40, 132]` chunk, `[40 × 17]` row-major.
fn valid(chunk: &[f32]) -> Vec<f32> {
    cut(chunk, H, W).concat()
}

/// case0's body with seed 0 (the goldens' noise) and `return_normalized`, plus `extra`.
fn body(extra: Json) -> Json {
    let mut b = request("case0");
    let o = b.as_object_mut().unwrap();
    o.remove("noise");
    o.insert("seed".into(), json!(0));
    o.insert("return_normalized".into(), json!(true));
    for (k, v) in extra.as_object().unwrap() {
        o.insert(k.clone(), v.clone());
    }
    b
}

/// The RTC fields of a setting, `rows × width` of the previous chunk.
fn rtc_fields(prev: &[f32], s: &Setting, rows: usize, width: usize) -> Json {
    json!({
        "previous_chunk": cut(prev, rows, width),
        "action_horizon": s.action_horizon,
        "rtc_overlap_steps": s.overlap_steps,
        "rtc_frozen_steps": s.frozen_steps,
        "rtc_ramp_rate": s.ramp_rate,
    })
}

/// A response's groups (`actions` or `actions_normalized`) as `[40 × 17]` row-major, keys
/// concatenated per row.
fn chunk_of(resp: &Json, which: &str) -> Vec<f32> {
    let groups: Vec<Vec<f32>> = GROUPS.iter().map(|g| json_rows(&resp[which][g])).collect();
    let dims: Vec<usize> = groups.iter().map(|g| g.len() / H).collect();
    (0..H)
        .flat_map(|t| {
            groups
                .iter()
                .zip(&dims)
                .flat_map(move |(g, &d)| g[t * d..(t + 1) * d].to_vec())
        })
        .collect()
}

/// Physical actions per group, in GROUPS order.
fn http_groups(resp: &Json) -> Vec<Vec<f32>> {
    GROUPS
        .iter()
        .map(|g| json_rows(&resp["actions"][g]))
        .collect()
}

fn refused(s: &Server, extra: Json, field: &str) {
    let r = s.post_predict(&body(extra.clone()));
    assert_eq!(r.status, 400, "{extra}: {}", r.text());
    assert_eq!(r.json()["field"], json!(field), "{extra}: {}", r.text());
}

// ZMQ -----------------------------------------------------------------------------------------

struct Zmq(ZmqClient);

impl Zmq {
    fn connect(addr: &str) -> Zmq {
        Zmq(ZmqClient::connect(addr))
    }

    /// `get_action` of case0 (upstream's nested form, `.npy` arrays) with these options.
    fn get_action(&mut self, options: Value) -> Value {
        let obs = nested_observation("case0", gr00t_array);
        let data = str_map([("observation", obs), ("options", options)]);
        self.0.call("get_action", Some(data), None)
    }
}

/// The RTC keys of a setting as msgpack entries, the chunk `[1, rows, width]` in `enc`.
fn rtc_entries(
    prev: &[f32],
    s: &Setting,
    rows: usize,
    width: usize,
    enc: fn(&NdArray) -> Value,
) -> Entries {
    let flat = cut(prev, rows, width).concat();
    let mut entries = vec![(
        Value::from("previous_chunk"),
        enc(&NdArray::from_f32(vec![1, rows, width], &flat)),
    )];
    entries.extend(steps_entries(s));
    entries
}

fn zmq_groups(reply: &Value) -> Vec<Vec<f32>> {
    let Value::Array(pair) = reply else {
        panic!("not [actions, info]: {reply}")
    };
    let m = pair[0].as_map().unwrap();
    GROUPS
        .iter()
        .map(|g| {
            from_gr00t_array(get(m, g).unwrap())
                .unwrap()
                .unwrap()
                .to_f32s()
        })
        .collect()
}

fn zmq_error(reply: &Value) -> String {
    match reply.as_map().and_then(|m| get(m, "error")) {
        Some(Value::String(s)) => s.as_str().unwrap().to_string(),
        _ => panic!("not an error: {reply}"),
    }
}

// Websocket -----------------------------------------------------------------------------------

type Ws = WebSocket<TcpStream>;

fn ws_connect(addr: &str) -> Ws {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let req = format!("ws://{addr}/").into_client_request().unwrap();
    let (mut ws, _) = tungstenite::client(req, stream).unwrap_or_else(|_| panic!("handshake"));
    assert!(matches!(ws.read().unwrap(), Message::Binary(_)), "metadata");
    ws
}

/// One message on a fresh connection: the reply map, or the error text.
fn ws_send(addr: &str, msg: Entries) -> Result<Value, String> {
    let mut ws = ws_connect(addr);
    ws.send(Message::Binary(pack(&Value::Map(msg)).into()))
        .unwrap();
    match ws.read().unwrap() {
        Message::Binary(b) => Ok(unpack(&b).unwrap()),
        Message::Text(t) => Err(t.to_string()),
        other => panic!("unexpected {other:?}"),
    }
}

/// openpi's DROID keys: both frames `[2,H,W,3]`, state as f32 arrays, seed 0.
fn ws_droid_keys() -> Entries {
    let mut m: Entries = CAMERAS
        .iter()
        .map(|cam| {
            let (w, h, data) = both_frames("case0", cam);
            let a = NdArray::new(DType::U8, vec![2, h, w, 3], data).unwrap();
            (Value::from(format!("observation/{cam}")), openpi_array(&a))
        })
        .collect();
    for g in GROUPS {
        let v = state("case0", g);
        let a = NdArray::from_f32(vec![v.len()], &v);
        m.push((Value::from(format!("observation/{g}")), openpi_array(&a)));
    }
    m.push((
        Value::from("prompt"),
        Value::from("Put the blue block in the green bowl"),
    ));
    m.push((Value::from("__noise_seed__"), Value::from(0)));
    m
}

/// Upstream's nested observation, unbatched, with `seed` 0 beside it.
fn ws_nested() -> Entries {
    let Value::Map(mut m) = nested_observation("case0", openpi_array) else {
        unreachable!()
    };
    m.push((Value::from("seed"), Value::from(0)));
    m
}

fn ws_groups(reply: &Value) -> Vec<Vec<f32>> {
    let m = reply.as_map().unwrap_or_else(|| panic!("{reply}"));
    GROUPS
        .iter()
        .map(|g| {
            from_openpi_array(get(m, g).unwrap())
                .unwrap()
                .unwrap()
                .to_f32s()
        })
        .collect()
}

#[test]
fn rtc_options_on_every_door() {
    let (taps, settings) = rtc_goldens();
    let prev = taps.f32s("previous_chunk");
    let s = Server::start(&["--zmq-port", "0", "--ws-port", "0"]);
    let (zmq_addr, ws_addr) = (s.zmq.clone().unwrap(), s.ws.clone().unwrap());

    // No RTC: within the gates of the golden's plain run, and bit-identical to an overlap of 0
    // (the model's plain path).
    let plain = s.predict_json(&body(json!({})));
    let golden_plain = valid(&taps.f32s("action_pred.plain"));
    let ours = chunk_of(&plain, "actions_normalized");
    let r = pearson(&ours, &golden_plain);
    let d = max_abs_diff(&ours, &golden_plain);
    println!("plain: r {r:.7}, max|Δ| {d:.3e}");
    assert!(
        r >= MIN_R && d <= REL * max_abs(&golden_plain),
        "plain r {r} Δ {d}"
    );
    let zero = rtc_fields(&prev, &settings[0], H, W);
    let mut zero = zero.as_object().unwrap().clone();
    zero.insert("rtc_overlap_steps".into(), json!(0));
    zero.insert("rtc_frozen_steps".into(), json!(0));
    let zero = s.predict_json(&body(Json::Object(zero)));
    assert_eq!(
        zero["actions"], plain["actions"],
        "overlap 0 is the plain answer"
    );

    // Each golden option set: the full padded chunk ([40 or ah rows, 132]); the last set
    // sends only its ah rows and leaves action_horizon and the rate to their defaults.
    let mut zmq = Zmq::connect(&zmq_addr);
    for (i, set) in settings.iter().enumerate() {
        let rows = if i == 2 { set.action_horizon } else { H };
        let mut fields = rtc_fields(&prev, set, rows, A);
        if i == 2 {
            assert_eq!(set.ramp_rate, 6.0);
            let o = fields.as_object_mut().unwrap();
            o.remove("action_horizon");
            o.remove("rtc_ramp_rate");
        }
        let resp = s.predict_json(&body(fields));
        let ours = chunk_of(&resp, "actions_normalized");
        let golden = valid(&taps.f32s(&format!("action_pred.{}", set.name)));
        let r = pearson(&ours, &golden);
        let d = max_abs_diff(&ours, &golden);
        let moved = max_abs_diff(&ours, &chunk_of(&plain, "actions_normalized"));
        println!(
            "{}: r {r:.7}, max|Δ| {d:.3e} (gate {:.3e}); moved {moved:.3} from plain",
            set.name,
            REL * max_abs(&golden)
        );
        assert!(r >= MIN_R, "{}: r {r}", set.name);
        assert!(d <= REL * max_abs(&golden), "{}: Δ {d}", set.name);
        assert!(moved > 0.1, "{}: RTC changed nothing", set.name);
        // The frozen rows are the previous chunk's rows ah−overlap.., exactly.
        let first = set.action_horizon - set.overlap_steps;
        for t in 0..set.frozen_steps {
            assert_eq!(
                ours[t * W..(t + 1) * W],
                prev[(first + t) * A..(first + t) * A + W],
                "{}: frozen row {t}",
                set.name
            );
        }

        // The same request through ZMQ (options, npy arrays) and both websocket forms.
        let http = http_groups(&resp);
        let entries = rtc_entries(&prev, set, rows, A, gr00t_array);
        let mut options = entries.clone();
        options.push((Value::from("seed"), Value::from(0)));
        assert_eq!(
            zmq_groups(&zmq.get_action(Value::Map(options))),
            http,
            "{}: ZMQ",
            set.name
        );
        let ws_entries = rtc_entries(&prev, set, rows, A, openpi_array);
        let mut m = ws_droid_keys();
        m.extend(ws_entries.clone());
        let reply = ws_send(&ws_addr, m).unwrap();
        assert_eq!(
            ws_groups(&reply),
            http,
            "{}: websocket DROID keys",
            set.name
        );
        let mut m = ws_nested();
        m.extend(ws_entries);
        let reply = ws_send(&ws_addr, m).unwrap();
        assert_eq!(ws_groups(&reply), http, "{}: websocket nested", set.name);
    }

    // The chunk as actions_normalized returns it (17 values a row, zero-padded by the server):
    // the frozen rows are exact; the padding columns differ from the golden's previous chunk,
    // so the rest is reported, not gated.
    let set = &settings[0];
    let resp = s.predict_json(&body(rtc_fields(&prev, set, H, W)));
    let ours = chunk_of(&resp, "actions_normalized");
    let golden = valid(&taps.f32s(&format!("action_pred.{}", set.name)));
    println!(
        "{} with 17-wide rows: r {:.7}, max|Δ| {:.3e} to the golden (made with 132-wide rows)",
        set.name,
        pearson(&ours, &golden),
        max_abs_diff(&ours, &golden)
    );
    let first = set.action_horizon - set.overlap_steps;
    for t in 0..set.frozen_steps {
        assert_eq!(
            ours[t * W..(t + 1) * W],
            prev[(first + t) * A..(first + t) * A + W]
        );
    }
    let mut options = rtc_entries(&prev, set, H, W, gr00t_array);
    options.push((Value::from("seed"), Value::from(0)));
    assert_eq!(
        zmq_groups(&zmq.get_action(Value::Map(options))),
        http_groups(&resp),
        "17-wide rows: ZMQ"
    );

    // Refusals, each naming the field: HTTP 400 `field`, ZMQ `options.<key>`, websocket key.
    let base = || rtc_fields(&prev, &settings[2], 24, W);
    let with = |k: &str, v: Json| {
        let mut b = base();
        b[k] = v;
        b
    };
    let mut no_chunk = base();
    no_chunk.as_object_mut().unwrap().remove("previous_chunk");
    let mut nan_rows = json!(cut(&prev, 24, W));
    nan_rows[3][5] = json!(1e39); // infinite as float32
    let cases: Vec<(Json, &str)> = vec![
        (with("rtc_overlap_steps", json!(25)), "rtc_overlap_steps"),
        (with("rtc_frozen_steps", json!(9)), "rtc_frozen_steps"),
        (with("rtc_ramp_rate", json!(-1.0)), "rtc_ramp_rate"),
        (
            with("previous_chunk", json!(cut(&prev, 24, 16))),
            "previous_chunk",
        ),
        (
            with("previous_chunk", json!(cut(&prev, 20, W))),
            "action_horizon",
        ),
        (with("action_horizon", json!(25)), "action_horizon"),
        (with("previous_chunk", json!(nan_rows)), "previous_chunk"),
        (no_chunk, "action_horizon"),
        (json!({"rtc_frozen_steps": 1}), "rtc_frozen_steps"),
        (with("rtc_overlap_steps", json!(-2)), "rtc_overlap_steps"),
    ];
    for (extra, field) in &cases {
        refused(&s, extra.clone(), field);
    }
    // 41 rows: more than the model's horizon.
    let mut rows41 = cut(&prev, H, W);
    rows41.push(rows41[0].clone());
    refused(&s, with("previous_chunk", json!(rows41)), "previous_chunk");

    // The binary doors: the same refusals, as msgpack.
    let msg = |edit: &dyn Fn(&mut Entries), enc: fn(&NdArray) -> Value| {
        let mut e = rtc_entries(&prev, &settings[2], 24, W, enc);
        edit(&mut e);
        e
    };
    let set_key = |e: &mut Entries, k: &str, v: Value| {
        e.retain(|(key, _)| key.as_str() != Some(k));
        e.push((Value::from(k), v));
    };
    let chunk = |rows: usize, width: usize, enc: fn(&NdArray) -> Value| {
        let mut flat = cut(&prev, rows, width).concat();
        if rows == 7 {
            flat[9] = f32::NAN;
        }
        enc(&NdArray::from_f32(vec![rows, width], &flat))
    };
    type Edit<'a> = Box<dyn Fn(&mut Entries, fn(&NdArray) -> Value) + 'a>;
    let edits: Vec<(Edit, &str)> = vec![
        (
            Box::new(move |e, _| set_key(e, "rtc_overlap_steps", Value::from(25))),
            "rtc_overlap_steps",
        ),
        (
            Box::new(move |e, _| set_key(e, "rtc_frozen_steps", Value::from(9))),
            "rtc_frozen_steps",
        ),
        (
            Box::new(move |e, _| set_key(e, "rtc_ramp_rate", Value::F64(-1.0))),
            "rtc_ramp_rate",
        ),
        (
            Box::new(move |e, enc| set_key(e, "previous_chunk", chunk(24, 16, enc))),
            "previous_chunk",
        ),
        (
            Box::new(move |e, enc| set_key(e, "previous_chunk", chunk(7, W, enc))),
            "previous_chunk",
        ),
        (
            Box::new(move |e, _| e.retain(|(k, _)| k.as_str() != Some("previous_chunk"))),
            "action_horizon",
        ),
    ];
    for (edit, field) in &edits {
        // ZMQ: `options.<key>`.
        let mut options = msg(&|e| edit(e, gr00t_array), gr00t_array);
        options.push((Value::from("seed"), Value::from(0)));
        let e = zmq_error(&zmq.get_action(Value::Map(options)));
        assert!(
            e.starts_with(&format!("options.{field}:")),
            "ZMQ {field}: {e}"
        );
        // Websocket, both forms: the key itself. Without previous_chunk the options refer to
        // the connection's session, whose first chunk is computed without RTC.
        for form in [ws_droid_keys(), ws_nested()] {
            let mut m = form;
            m.extend(msg(&|e| edit(e, openpi_array), openpi_array));
            if *field == "action_horizon" {
                assert_eq!(
                    ws_groups(&ws_send(&ws_addr, m).unwrap()),
                    http_groups(&plain)
                );
                continue;
            }
            let e = ws_send(&ws_addr, m).unwrap_err();
            assert!(
                e.starts_with(&format!("{field}:")),
                "websocket {field}: {e}"
            );
        }
    }
    // The server still answers after every refusal.
    assert_eq!(
        s.predict_json(&body(json!({})))["actions"],
        plain["actions"]
    );
}

/// The RTC keys of a setting without a chunk (the session's last one serves).
fn steps_entries(s: &Setting) -> Entries {
    vec![
        (
            Value::from("action_horizon"),
            Value::from(s.action_horizon as u64),
        ),
        (
            Value::from("rtc_overlap_steps"),
            Value::from(s.overlap_steps as u64),
        ),
        (
            Value::from("rtc_frozen_steps"),
            Value::from(s.frozen_steps as u64),
        ),
        (Value::from("rtc_ramp_rate"), Value::F64(s.ramp_rate)),
    ]
}

/// A msgpack map's `key`, as a u64.
fn uint_at(m: &Value, key: &str) -> u64 {
    let got = m.as_map().and_then(|m| get(m, key));
    got.and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{key} in {m}"))
}

#[test]
fn a_session_keeps_the_whole_chunk_on_every_door() {
    let (taps, settings) = rtc_goldens();
    let s = Server::start(&["--zmq-port", "0", "--ws-port", "0"]);
    let (zmq_addr, ws_addr) = (s.zmq.clone().unwrap(), s.ws.clone().unwrap());
    let plain = s.predict_json(&body(json!({})));
    let mut zmq = Zmq::connect(&zmq_addr);
    for (i, set) in settings.iter().enumerate() {
        // The previous chunk of the goldens is case0 with seed 42: let the session answer it.
        let id = format!("robot-{i}");
        let first = s.predict_json(&body(json!({"seed": 42, "session_id": id})));
        assert_eq!(first["session"]["step"], json!(1));
        assert!(first.get("rtc_source").is_none());
        let mut fields = rtc_fields(&[], set, 0, 0);
        let o = fields.as_object_mut().unwrap();
        o.remove("previous_chunk");
        o.insert("session_id".into(), json!(id));
        let resp = s.predict_json(&body(fields.clone()));
        assert_eq!(resp["rtc_source"], json!("session"));
        assert_eq!(resp["session"]["step"], json!(2));
        assert!(resp["session"]["since_last_ms"].as_f64().unwrap() > 0.0);
        // The whole 132-wide chunk was kept: as close to upstream as sending it.
        let ours = chunk_of(&resp, "actions_normalized");
        let golden = valid(&taps.f32s(&format!("action_pred.{}", set.name)));
        let r = pearson(&ours, &golden);
        let d = max_abs_diff(&ours, &golden);
        println!("{} from the session: r {r:.7}, max|Δ| {d:.3e}", set.name);
        assert!(
            r >= MIN_R && d <= 1e-5 * max_abs(&golden),
            "{}: r {r} Δ {d}",
            set.name
        );
        let http = http_groups(&resp);

        // ZMQ: `options.session_id`; the reply's info counts the session's steps.
        let with = |seed: u64, extra: Entries| {
            let mut o = vec![
                (Value::from("session_id"), Value::from(format!("z-{i}"))),
                (Value::from("seed"), Value::from(seed)),
            ];
            o.extend(extra);
            Value::Map(o)
        };
        let info = |reply: &Value| reply.as_array().unwrap()[1].clone();
        let z1 = zmq.get_action(with(42, vec![]));
        assert_eq!(uint_at(&info(&z1), "session_step"), 1);
        let z2 = zmq.get_action(with(0, steps_entries(set)));
        assert_eq!(zmq_groups(&z2), http, "{}: ZMQ", set.name);
        assert_eq!(uint_at(&info(&z2), "session_step"), 2);

        // Websocket: the connection is the session.
        let mut ws = ws_connect(&ws_addr);
        let mut send = |m: Entries| -> Value {
            ws.send(Message::Binary(pack(&Value::Map(m)).into()))
                .unwrap();
            match ws.read().unwrap() {
                Message::Binary(b) => unpack(&b).unwrap(),
                other => panic!("unexpected {other:?}"),
            }
        };
        let mut m = ws_droid_keys();
        m.retain(|(k, _)| k.as_str() != Some("__noise_seed__"));
        m.push((Value::from("__noise_seed__"), Value::from(42)));
        send(m);
        let mut m = ws_droid_keys();
        m.extend(steps_entries(set));
        let reply = send(m.clone());
        assert_eq!(ws_groups(&reply), http, "{}: websocket", set.name);
        let timing = get(reply.as_map().unwrap(), "server_timing")
            .unwrap()
            .clone();
        assert_eq!(uint_at(&timing, "session_step"), 2);

        if i == 0 {
            // Reset on every door: the next chunk of each has nothing to join.
            let r = test_client::post_json(
                &s.http,
                "/reset",
                &serde_json::to_vec(&json!({"session_id": id})).unwrap(),
            )
            .unwrap();
            assert_eq!(r.json(), json!({"session_id": id, "reset": true}));
            let again = s.predict_json(&body(fields.clone()));
            assert_eq!(again["rtc_source"], json!("none"));
            assert_eq!(again["session"]["step"], json!(1));
            assert_eq!(again["actions"], plain["actions"]);

            let options = str_map([("session_id", Value::from("z-0"))]);
            let reset = str_map([("options", options)]);
            let reply = zmq.0.call("reset", Some(reset), None);
            let rm = reply.as_map().unwrap();
            assert_eq!(get(rm, "reset"), Some(&Value::Boolean(true)), "{reply}");
            let z3 = zmq.get_action(with(0, steps_entries(set)));
            assert_eq!(zmq_groups(&z3), http_groups(&plain), "ZMQ after reset");
            assert_eq!(uint_at(&info(&z3), "session_step"), 1);

            ws.send(Message::Binary(
                pack(&str_map([("endpoint", Value::from("reset"))])).into(),
            ))
            .unwrap();
            assert!(
                matches!(ws.read().unwrap(), Message::Text(t) if t.as_str() == "reset successful")
            );
            let reply = {
                ws.send(Message::Binary(pack(&Value::Map(m)).into()))
                    .unwrap();
                match ws.read().unwrap() {
                    Message::Binary(b) => unpack(&b).unwrap(),
                    other => panic!("unexpected {other:?}"),
                }
            };
            assert_eq!(
                ws_groups(&reply),
                http_groups(&plain),
                "websocket after reset"
            );
        }
    }
    // /info and /metrics count them: 3 HTTP + 3 ZMQ + the websocket connections' own, the
    // closed connections' sessions dropped.
    let info = test_client::get(&s.http, "/info").unwrap().json();
    let sessions = &info["sessions"];
    assert_eq!(sessions["resets"], json!(3), "{sessions}");
    assert_eq!(sessions["max"], json!(256));
    assert_eq!(sessions["ttl_s"], json!(300));
    assert!(sessions["active"].as_u64().unwrap() >= 6, "{sessions}");
    let metrics = test_client::get(&s.http, "/metrics").unwrap().text();
    assert!(
        metrics.contains("gr00t_sessions_reset_total 3"),
        "{metrics}"
    );
}
