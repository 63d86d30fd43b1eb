//! `gr00t serve --zmq-port`: Isaac-GR00T's ZMQ policy protocol, spoken to by a ZMQ REQ client
//! written like upstream's `PolicyClient` (msgpack envelope, `.npy` arrays), against the tiny
//! fixture model: case0 gives the fixture's actions and exactly HTTP's, every endpoint answers,
//! bad requests get `{"error": ...}` and the server keeps serving.

use gr00t::doors::wire::{msgpack_numpy, ndarray};
use gr00t_fixtures::http_client as test_client;
mod support;
use support::{test_server, zmq_req};

use gr00t_fixtures::{max_abs_diff, MultiCase};
use msgpack_numpy::{decode_array, from_gr00t_array, get, gr00t_array, nd_array, pack};
use msgpack_numpy::{str_map, unpack, ArrayForm};
use ndarray::{DType, NdArray};
use rmpv::Value;
use std::time::Duration;
use test_server::{
    answers, both_frames, door_answers, fixture_actions, frame, http_actions, multi_video, noise,
    refused_at, request_lines, stage_count, stage_counts, state, Server, ANSWERED, CAMERAS, GROUPS,
};
use zmq_req::ZmqClient as Client;

/// A msgpack map's entries.
type Map = Vec<(Value, Value)>;

const LANG_KEY: &str = "annotation.language.language_instruction";

fn error_text(v: &Value) -> String {
    match v {
        Value::Map(m) => match get(m, "error") {
            Some(Value::String(s)) => s.as_str().unwrap().to_string(),
            _ => panic!("no error in {v}"),
        },
        _ => panic!("not an error dict: {v}"),
    }
}

/// case0 as the upstream DROID client sends it, with `b` copies (video `[B,2,H,W,3]` uint8,
/// state `[B,1,D]` float32); flat = `--use_sim_policy_wrapper` keys.
fn case0_observation(b: usize, flat: bool) -> Value {
    let video = |cam: &str| {
        let (w, h, data) = both_frames("case0", cam);
        let data = data.repeat(b);
        gr00t_array(&NdArray::new(DType::U8, vec![b, 2, h, w, 3], data).unwrap())
    };
    let st = |g: &str| {
        let v = state("case0", g);
        gr00t_array(&NdArray::from_f32(vec![b, 1, v.len()], &v.repeat(b)))
    };
    let instruction = Value::from("Put the blue block in the green bowl");
    if flat {
        let mut m = vec![];
        for cam in CAMERAS {
            m.push((Value::from(format!("video.{cam}")), video(cam)));
        }
        for g in GROUPS {
            m.push((Value::from(format!("state.{g}")), st(g)));
        }
        m.push((Value::from(LANG_KEY), Value::Array(vec![instruction; b])));
        Value::Map(m)
    } else {
        let videos = Value::Map(
            CAMERAS
                .iter()
                .map(|c| (Value::from(*c), video(c)))
                .collect(),
        );
        let states = Value::Map(GROUPS.iter().map(|g| (Value::from(*g), st(g))).collect());
        let lang = Value::Array(vec![Value::Array(vec![instruction]); b]);
        str_map([
            ("video", videos),
            ("state", states),
            ("language", str_map([(LANG_KEY, lang)])),
        ])
    }
}

fn case0_noise() -> Value {
    gr00t_array(&NdArray::from_f32(vec![1, 40, 132], &noise("case0")))
}

fn get_action(obs: Value, options: Value) -> Value {
    str_map([("observation", obs), ("options", options)])
}

/// `[action_dict, info]` → per action key its float32 array.
fn actions(reply: &Value) -> Vec<(String, NdArray)> {
    let Value::Array(pair) = reply else {
        panic!("reply is not [actions, info]: {reply}")
    };
    assert_eq!(pair.len(), 2, "{reply}");
    // info: the wait and the observation's age, ms.
    let info = pair[1].as_map().expect("info is a dict");
    let keys: Vec<&str> = info.iter().filter_map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["queue_ms", "observation_age_ms"], "{reply}");
    assert!(info
        .iter()
        .all(|(_, v)| v.as_f64().is_some_and(|x| x >= 0.0)));
    let Value::Map(m) = &pair[0] else {
        panic!("actions is not a dict")
    };
    m.iter()
        .map(|(k, v)| {
            let a = from_gr00t_array(v).expect("ndarray").expect("npy");
            assert_eq!(a.dtype, DType::F32);
            (k.as_str().unwrap().to_string(), a)
        })
        .collect()
}

/// Rows of batch item `i` of each group, in GROUPS order.
fn item(acts: &[(String, NdArray)], prefix: &str, i: usize) -> Vec<Vec<f32>> {
    GROUPS
        .iter()
        .map(|g| {
            let (_, a) = acts
                .iter()
                .find(|(k, _)| *k == format!("{prefix}{g}"))
                .unwrap_or_else(|| panic!("no {prefix}{g}"));
            assert_eq!(a.shape[1..2], [40]);
            let per = a.shape[1] * a.shape[2];
            a.to_f32s()[i * per..(i + 1) * per].to_vec()
        })
        .collect()
}

fn assert_fixture(groups: &[Vec<f32>]) {
    for (g, ours) in GROUPS.iter().zip(groups) {
        let d = max_abs_diff(ours, &fixture_actions("case0", g));
        assert!(d <= 1e-5, "{g}: max|Δ| {d:.3e} > 1e-5");
    }
}

fn http_predict(s: &Server, body: &serde_json::Value) -> Vec<Vec<f32>> {
    let r = test_client::post_json(&s.http, "/predict", &serde_json::to_vec(body).unwrap())
        .expect("POST /predict");
    assert_eq!(r.status, 200, "{}", r.text());
    let json = r.json();
    GROUPS.iter().map(|g| http_actions(&json, g)).collect()
}

#[test]
fn zmq_get_action_matches_fixture_and_http_and_survives_bad_requests() {
    let s = Server::start(&["--zmq-port", "0"]);
    let mut c = Client::connect(s.zmq.as_deref().expect("zmq address"));

    // ping / reset / get_modality_config, as upstream's PolicyServer answers them.
    let ping = c.call("ping", None, None);
    assert_eq!(
        pack(&ping),
        pack(&str_map([
            ("status", Value::from("ok")),
            ("message", Value::from("Server is running"))
        ]))
    );
    let reset = c.call("reset", Some(str_map([("options", Value::Nil)])), None);
    assert_eq!(reset, Value::Map(vec![]));
    let mc = c.call("get_modality_config", None, None);
    let Value::Map(mc) = &mc else { panic!("{mc}") };
    let video = get(mc, "video").and_then(|v| v.as_map()).expect("video");
    assert_eq!(
        get(video, "__ModalityConfig_class__"),
        Some(&Value::Boolean(true))
    );
    let json = get(video, "as_json")
        .and_then(|v| v.as_map())
        .expect("as_json");
    assert_eq!(
        get(json, "delta_indices"),
        Some(&Value::Array(vec![Value::from(-15), Value::from(0)]))
    );
    let action = get(mc, "action").and_then(|v| v.as_map()).unwrap();
    let action = get(action, "as_json").and_then(|v| v.as_map()).unwrap();
    assert_eq!(
        get(action, "delta_indices")
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        40
    );

    // case0 with its noise: the fixture's actions, and bit for bit what HTTP answers.
    let options = str_map([("noise", case0_noise())]);
    let reply = case0_action(&mut c, 1, options);
    let acts = actions(&reply);
    let keys: Vec<&str> = acts.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, GROUPS);
    assert_eq!(acts[0].1.shape, vec![1, 40, 9]);
    let ours = item(&acts, "", 0);
    assert_fixture(&ours);
    let http_body = test_server::request("case0");
    assert_eq!(ours, http_predict(&s, &http_body), "ZMQ and HTTP differ");

    // The noise as nested lists (`noise.tolist()`, as plain msgpack clients send it): the
    // same actions, bit for bit.
    let rows: Vec<Value> = noise("case0")
        .chunks(132)
        .map(|r| Value::Array(r.iter().map(|&x| Value::F64(f64::from(x))).collect()))
        .collect();
    let listed = case0_action(&mut c, 1, str_map([("noise", Value::Array(rows))]));
    assert_eq!(item(&actions(&listed), "", 0), ours, "noise as lists");
    let ragged = Value::Array(vec![
        Value::Array(vec![Value::F64(0.0)]),
        Value::Array(vec![]),
    ]);
    let e = error_text(&case0_action(&mut c, 1, str_map([("noise", ragged)])));
    assert!(e.contains("nested lists of numbers"), "{e}");

    // Sessions: the reply's info carries the token; echoed, it continues the session; a
    // ZMQ session is apart from HTTP's of the same name.
    let in_session = |token: Option<&str>| {
        let mut o = vec![("session_id", Value::from("arm")), ("seed", Value::from(1))];
        if let Some(t) = token {
            o.push(("session_token", Value::from(t)));
        }
        get_action(case0_observation(1, false), str_map(o))
    };
    let info = |reply: &Value| reply.as_array().unwrap()[1].as_map().unwrap().clone();
    let first = info(&c.call("get_action", Some(in_session(None)), None));
    let token = get(&first, "session_token")
        .and_then(|t| t.as_str())
        .unwrap()
        .to_string();
    assert_eq!(get(&first, "session_step"), Some(&Value::from(1)));
    let second = info(&c.call("get_action", Some(in_session(Some(&token))), None));
    assert_eq!(get(&second, "session_step"), Some(&Value::from(2)));
    let reset = serde_json::json!({"session_id": "arm"}).to_string();
    let r = test_client::post_json(&s.http, "/reset", reset.as_bytes()).unwrap();
    assert_eq!(
        r.json()["reset"],
        serde_json::json!(false),
        "HTTP reached ZMQ's session"
    );
    // The echoed token locked the session: without it no step and no reset touch it.
    let e = error_text(&c.call("get_action", Some(in_session(None)), None));
    assert!(e.starts_with("session locked:"), "{e}");
    let reset_with = |token: Option<&str>| {
        let mut o = vec![("session_id", Value::from("arm"))];
        if let Some(t) = token {
            o.push(("session_token", Value::from(t)));
        }
        Some(str_map([("options", str_map(o))]))
    };
    let e = error_text(&c.call("reset", reset_with(None), None));
    assert!(e.starts_with("session locked:"), "{e}");
    let r = c.call("reset", reset_with(Some(&token)), None);
    assert_eq!(
        get(r.as_map().unwrap(), "reset"),
        Some(&Value::Boolean(true))
    );
    let e = error_text(&c.call("get_action", Some(in_session(Some(&token))), None));
    assert!(e.starts_with("session restarted:"), "{e}");

    // Seed 0 (case0's noise seed) through options; no options = HTTP's default seed 42.
    let seeded = case0_action(&mut c, 1, str_map([("seed", Value::from(0))]));
    assert_fixture(&item(&actions(&seeded), "", 0));
    let default = case0_action(&mut c, 1, Value::Nil);
    let mut seed42 = http_body.clone();
    seed42.as_object_mut().unwrap().remove("noise");
    assert_eq!(item(&actions(&default), "", 0), http_predict(&s, &seed42));

    // A batch of two: each item is the single answer.
    let reply = case0_action(&mut c, 2, str_map([("noise", case0_noise())]));
    let acts = actions(&reply);
    assert_eq!(acts[2].1.shape, vec![2, 40, 7]);
    assert_eq!(item(&acts, "", 1), ours);

    // Malformed requests: each gets {"error": ...}, naming what is wrong.
    let edit = |f: &dyn Fn(&mut Map)| {
        let mut obs = case0_observation(1, false);
        if let Value::Map(m) = &mut obs {
            f(m);
        }
        get_action(obs, Value::Nil)
    };
    let f64_state = edit(&|m| {
        let st = GROUPS
            .iter()
            .map(|g| {
                let v: Vec<u8> = state("case0", g)
                    .iter()
                    .flat_map(|x| (*x as f64).to_le_bytes())
                    .collect();
                let n = v.len() / 8;
                let a = NdArray::new(DType::parse("<f8").unwrap(), vec![1, 1, n], v).unwrap();
                (Value::from(*g), gr00t_array(&a))
            })
            .collect();
        let slot = m
            .iter_mut()
            .find(|(k, _)| k.as_str() == Some("state"))
            .unwrap();
        slot.1 = Value::Map(st);
    });
    let one_frame = {
        let (w, h, data) = frame("case0", "wrist_image_left", "t0");
        let a = gr00t_array(&NdArray::new(DType::U8, vec![1, 1, h, w, 3], data).unwrap());
        edit(&move |m: &mut Map| {
            let slot = m
                .iter_mut()
                .find(|(k, _)| k.as_str() == Some("video"))
                .unwrap();
            if let Value::Map(v) = &mut slot.1 {
                v[1].1 = a.clone();
            }
        })
    };
    let no_wrist = edit(&|m| {
        let slot = m
            .iter_mut()
            .find(|(k, _)| k.as_str() == Some("video"))
            .unwrap();
        if let Value::Map(v) = &mut slot.1 {
            v.truncate(1);
        }
    });
    let bad_noise = get_action(
        case0_observation(1, false),
        str_map([(
            "noise",
            gr00t_array(&NdArray::from_f32(vec![40, 8], &[0.0; 320])),
        )]),
    );
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "float64 state",
            f64_state,
            "must be a numpy array of type np.float32. Got float64",
        ),
        (
            "one frame",
            one_frame,
            "Video key 'wrist_image_left's horizon must be 2. Got 1",
        ),
        (
            "missing camera",
            no_wrist,
            "Video key 'wrist_image_left' must be in observation",
        ),
        (
            "noise shape",
            bad_noise,
            "options.noise must have shape (40, 132)",
        ),
        ("data not a dict", Value::from(3), "data must be a dict"),
    ];
    for (what, data, want) in cases {
        let e = error_text(&c.call("get_action", Some(data), None));
        assert!(e.contains(want), "{what}: {e}");
    }
    let e = error_text(&unpack(&c.exchange(b"\xc1garbage".to_vec())).unwrap());
    assert!(e.contains("msgpack"), "garbage: {e}");
    // Too big for a Value: a message just under the 16 MiB limit of nils in one array,
    // 100 000 nested arrays, a header claiming 2^32 - 1 items with nothing after it. Refused
    // before decoding.
    let n = (16u32 << 20) - 5;
    let mut nils = vec![0xdd];
    nils.extend_from_slice(&n.to_be_bytes());
    nils.resize(5 + n as usize, 0xc0);
    let mut deep = vec![0x91; 100_000];
    deep.push(0xc0);
    for (what, bomb, want) in [
        ("16 MiB of nils", nils, "declares more than 65536 elements"),
        ("deep nesting", deep, "nested deeper than 32 levels"),
        (
            "2^32 - 1 items claimed",
            vec![0xdd, 0xff, 0xff, 0xff, 0xff],
            "declares more than 65536 elements",
        ),
    ] {
        let e = error_text(&unpack(&c.exchange(bomb)).unwrap());
        assert!(e.contains(want), "{what}: {e}");
    }
    let e = error_text(&c.call("teleport", None, None));
    assert_eq!(e, "Unknown endpoint: teleport");
    let e = error_text(&c.call("kill", None, None));
    assert!(e.contains("--allow-kill"), "{e}");

    // Still serving, with the same answer.
    let reply = case0_action(&mut c, 1, str_map([("noise", case0_noise())]));
    assert_eq!(item(&actions(&reply), "", 0), ours);
}

#[test]
fn zmq_token_flat_form_and_kill() {
    let s = Server::start(&[
        "--zmq-port",
        "0",
        "--api-token",
        "s3cret",
        "--allow-kill",
        "--use-sim-policy-wrapper",
    ]);
    let mut c = Client::connect(s.zmq.as_deref().expect("zmq address"));
    for token in [None, Some("wrong")] {
        let e = error_text(&c.call("ping", None, token));
        assert_eq!(e, "Unauthorized: Invalid API token");
    }
    assert!(c.call("ping", None, Some("s3cret")).as_map().is_some());

    // The flat form: video.<cam> / state.<key> / language list in, action.<key> out.
    let reply = c.call(
        "get_action",
        Some(get_action(
            case0_observation(1, true),
            str_map([("noise", case0_noise())]),
        )),
        Some("s3cret"),
    );
    assert_fixture(&item(&actions(&reply), "action.", 0));
    let e = error_text(&c.call(
        "get_action",
        Some(get_action(case0_observation(1, false), Value::Nil)),
        Some("s3cret"),
    ));
    assert_eq!(
        e,
        "Video key 'video.exterior_image_1_left' must be in observation"
    );

    // kill: a nil reply, then the whole server shuts down cleanly.
    let raw = c.exchange(pack(&str_map([
        ("endpoint", Value::from("kill")),
        ("api_token", Value::from("s3cret")),
    ])));
    assert_eq!(raw, vec![0xc0], "kill answers None");
    let (status, log) = s.wait_exit(Duration::from_secs(60));
    assert!(status.success(), "{status}:\n{log}");
    assert!(log.contains("server stopped"), "{log}");
}

/// The same value with every `.npy` array re-encoded as N1.7's msgpack-numpy map.
fn to_nd(v: &Value) -> Value {
    match decode_array(v) {
        Some((_, a)) => nd_array(&a.expect("array")),
        None => match v {
            Value::Map(m) => Value::Map(m.iter().map(|(k, v)| (k.clone(), to_nd(v))).collect()),
            Value::Array(items) => Value::Array(items.iter().map(to_nd).collect()),
            other => other.clone(),
        },
    }
}

#[test]
fn zmq_n17_msgpack_numpy_requests_get_the_same_actions_in_their_form() {
    let s = Server::start(&["--zmq-port", "0"]);
    let mut c = Client::connect(s.zmq.as_deref().expect("zmq address"));
    let request = || {
        get_action(
            case0_observation(1, false),
            str_map([("noise", case0_noise())]),
        )
    };
    let legacy = c.call("get_action", Some(request()), None);
    let nd = c.call("get_action", Some(to_nd(&request())), None);
    // The N1.7 request is answered with msgpack-numpy arrays, the legacy one with .npy ones.
    let form_of = |reply: &Value| -> Vec<ArrayForm> {
        let pair = reply.as_array().expect("[actions, info]");
        let m = pair[0].as_map().expect("actions dict");
        m.iter()
            .map(|(_, v)| decode_array(v).expect("array").0)
            .collect()
    };
    assert_eq!(form_of(&legacy), vec![ArrayForm::Npy; 3]);
    assert_eq!(form_of(&nd), vec![ArrayForm::Nd; 3]);
    let values = |reply: &Value| -> Vec<Vec<f32>> {
        let m = reply.as_array().unwrap()[0].as_map().unwrap().clone();
        m.iter()
            .map(|(_, v)| decode_array(v).unwrap().1.unwrap().to_f32s())
            .collect()
    };
    assert_eq!(
        values(&nd),
        values(&legacy),
        "msgpack-numpy and .npy requests differ"
    );
    assert_fixture(&values(&nd));

    // get_modality_config: both markers.
    let mc = c.call("get_modality_config", None, None);
    let video = get(mc.as_map().unwrap(), "video")
        .unwrap()
        .as_map()
        .unwrap();
    for marker in ["__ModalityConfig_class__", "__ModalityConfig__"] {
        assert_eq!(get(video, marker), Some(&Value::Boolean(true)), "{marker}");
    }

    // An object array (pickle) anywhere is refused, naming where it is; serving goes on.
    let key = |k: &[u8]| Value::Binary(k.to_vec());
    let object = Value::Map(vec![
        (key(b"nd"), Value::Boolean(true)),
        (
            key(b"type"),
            Value::Array(vec![Value::Array(vec![Value::from(""), Value::from("|O")])]),
        ),
        (key(b"kind"), Value::Binary(b"O".to_vec())),
        (key(b"shape"), Value::Array(vec![Value::from(1)])),
        (key(b"data"), Value::Binary(b"\x80\x02N.".to_vec())),
    ]);
    let mut obs = to_nd(&case0_observation(1, false));
    if let Value::Map(m) = &mut obs {
        m.push((Value::from("extra"), object));
    }
    let e = error_text(&c.call("get_action", Some(get_action(obs, Value::Nil)), None));
    assert!(
        e.starts_with("data.observation.extra: object arrays"),
        "{e}"
    );
    let again = c.call("get_action", Some(to_nd(&request())), None);
    assert_eq!(values(&again), values(&nd));
}

/// `get_action` of case0 (`b` copies, nested) with these options: the reply.
fn case0_action(c: &mut Client, b: usize, options: Value) -> Value {
    c.call(
        "get_action",
        Some(get_action(case0_observation(b, false), options)),
        None,
    )
}

/// A multi-embodiment case as upstream's nested observation: `video {view: u8 [1,T,H,W,3]}`,
/// `state {key: f32 [1,1,D]}`, `language {key: [[instruction]]}`.
fn multi_observation(case: &MultiCase) -> Value {
    let video = multi_video(case)
        .into_iter()
        .map(|(view, shape, data)| {
            let a = NdArray::new(DType::U8, [&[1][..], &shape].concat(), data).unwrap();
            (Value::from(view), nd_array(&a))
        })
        .collect();
    let state = case
        .state
        .iter()
        .map(|(k, v)| {
            let a = NdArray::from_f32(vec![1, 1, v.len()], v);
            (Value::from(k.as_str()), nd_array(&a))
        })
        .collect();
    str_map([
        ("video", Value::Map(video)),
        ("state", Value::Map(state)),
        (
            "language",
            str_map([(
                case.language_key.as_str(),
                Value::Array(vec![Value::Array(vec![Value::from(
                    case.instruction.as_str(),
                )])]),
            )]),
        ),
    ])
}

/// `get_action` of a case with its noise and `embodiment` in the options: the action map.
fn multi_actions(c: &mut Client, case: &MultiCase, embodiment: &str) -> Map {
    let noise = nd_array(&NdArray::from_f32(vec![1, 40, 132], &case.noise));
    let options = str_map([("embodiment", Value::from(embodiment)), ("noise", noise)]);
    let reply = c.call(
        "get_action",
        Some(get_action(multi_observation(case), options)),
        None,
    );
    let Value::Array(pair) = &reply else {
        panic!("{}: {reply}", case.name)
    };
    let Value::Map(acts) = &pair[0] else {
        panic!("{}: {reply}", case.name)
    };
    acts.clone()
}

#[test]
fn zmq_serves_every_embodiment_by_options() {
    let server = Server::start_in(&gr00t_fixtures::multi_checkpoint(), 0, &["--zmq-port", "0"]);
    let mut c = Client::connect(server.zmq.as_deref().expect("zmq address"));
    for name in gr00t_fixtures::MULTI_CASES {
        let case = MultiCase::load(name);
        let acts = multi_actions(&mut c, &case, &case.tag.to_uppercase());
        assert!(!acts.is_empty(), "{name}");
        for (k, v) in &acts {
            let key = k.as_str().unwrap();
            let (form, a) = decode_array(v).expect("array");
            assert_eq!(form, ArrayForm::Nd, "replies mirror the request's form");
            let a = a.unwrap();
            assert_eq!(
                a.shape,
                case.outputs.dims(&format!("action.{key}")),
                "{name} {key}"
            );
            let ours = a.to_f32s();
            if key == "head_pose" {
                let want = case.outputs.f32s(&format!("action.{key}"));
                // Near-π rotation vectors: compare the translation only here (the HTTP and
                // processor tests compare the rotations).
                let xyz = |v: &[f32]| -> Vec<f32> {
                    v.chunks_exact(6).flat_map(|r| r[..3].to_vec()).collect()
                };
                assert!(
                    max_abs_diff(&xyz(&ours), &xyz(&want)) <= 1e-5,
                    "{name} head_pose"
                );
                continue;
            }
            case.assert_action(key, &ours);
        }
    }
    // get_modality_config answers for the default (DROID) or the named embodiment.
    let m = c.call("get_modality_config", None, None);
    assert!(format!("{m}").contains("exterior_image_1_left"), "{m}");
    let m = c.call(
        "get_modality_config",
        Some(str_map([("embodiment", Value::from("new_embodiment"))])),
        None,
    );
    assert!(format!("{m}").contains("single_arm"), "{m}");
    // An embodiment the server does not serve.
    let reply = case0_action(&mut c, 1, str_map([("embodiment", Value::from("REAL_G1"))]));
    assert!(error_text(&reply).contains("not served"), "{reply}");
}

/// The LIBERO-like and 4×4-EEF cases of `gr00t_n17_tiny_extra` over ZMQ. Upstream's
/// (non-strict) policy returns the DEFAULT-format EEF key as `[1, 16, 4, 4]`; ours is
/// `[1, 16, 16]`, the same values row-major.
#[test]
fn zmq_serves_the_extra_embodiments() {
    let ckpt = gr00t_fixtures::extra_checkpoint("checkpoint");
    let server = Server::start_in(&ckpt, 0, &["--zmq-port", "0"]);
    let mut c = Client::connect(server.zmq.as_deref().expect("zmq address"));
    for name in gr00t_fixtures::EXTRA_CASES {
        let case = MultiCase::load_extra(name);
        let acts = multi_actions(&mut c, &case, &case.tag);
        assert_eq!(
            acts.len(),
            if case.tag == "libero_sim" { 7 } else { 2 },
            "{name}"
        );
        for (k, v) in &acts {
            let key = k.as_str().unwrap();
            let (_, a) = decode_array(v).expect("array");
            let a = a.unwrap();
            let dims = case.outputs.dims(&format!("action.{key}"));
            assert_eq!(a.shape[..2], dims[..2], "{name} {key}");
            assert_eq!(
                a.shape.iter().product::<usize>(),
                dims.iter().product::<usize>(),
                "{name} {key}"
            );
            case.assert_action(key, &a.to_f32s());
        }
    }
}

#[test]
fn zmq_flat_form_serves_other_embodiments() {
    let server = Server::start_in(
        &gr00t_fixtures::multi_checkpoint(),
        0,
        &["--zmq-port", "0", "--use-sim-policy-wrapper"],
    );
    let mut c = Client::connect(server.zmq.as_deref().expect("zmq address"));
    let case = MultiCase::load("case_new_embodiment_2");
    // Nested → flat: `video.<key>`, `state.<key>`, the language key at top level, `[str] * B`.
    let Value::Map(nested) = multi_observation(&case) else {
        unreachable!()
    };
    let mut flat = Vec::new();
    for (modality, entries) in nested {
        let Value::Map(entries) = entries else {
            unreachable!()
        };
        for (k, v) in entries {
            match modality.as_str().unwrap() {
                "language" => {
                    let Value::Array(items) = v else {
                        unreachable!()
                    };
                    let items = items
                        .into_iter()
                        .map(|i| match i {
                            Value::Array(mut inner) => inner.remove(0),
                            other => other,
                        })
                        .collect();
                    flat.push((k, Value::Array(items)));
                }
                m => flat.push((Value::from(format!("{m}.{}", k.as_str().unwrap())), v)),
            }
        }
    }
    let noise = nd_array(&NdArray::from_f32(vec![1, 40, 132], &case.noise));
    let options = str_map([
        ("embodiment", Value::from("new_embodiment")),
        ("noise", noise),
    ]);
    let reply = c.call(
        "get_action",
        Some(get_action(Value::Map(flat), options)),
        None,
    );
    let Value::Array(pair) = &reply else {
        panic!("{reply}")
    };
    let Value::Map(acts) = &pair[0] else {
        panic!("{reply}")
    };
    let keys: Vec<&str> = acts.iter().map(|(k, _)| k.as_str().unwrap()).collect();
    assert_eq!(keys, ["action.single_arm", "action.gripper"]);
    let (_, a) = decode_array(&acts[0].1).unwrap();
    let a = a.unwrap();
    assert_eq!(a.shape, [1, 16, 5]);
    let want = case.outputs.f32s("action.single_arm");
    assert!(max_abs_diff(&a.to_f32s(), &want) <= 1e-5 * 100.0);
}

#[test]
fn zmq_answers_are_counted_in_metrics_by_door() {
    let s = Server::start(&["--zmq-port", "0"]);
    let mut c = Client::connect(s.zmq.as_deref().expect("zmq address"));
    let metrics = || test_client::get(&s.http, "/metrics").unwrap().text();
    let before = metrics();
    assert_eq!(answers(&before, ANSWERED, "zmq"), 0.0, "{before}");
    assert!(before.contains(&format!(
        "gr00t_predict_requests_total{{{ANSWERED},door=\"zmq\"}} 0\n"
    )));
    let seed0 = str_map([("seed", Value::from(0))]);
    let reply = case0_action(&mut c, 1, seed0);
    assert_fixture(&item(&actions(&reply), "", 0));
    // A refused get_action, and endpoints that are not predictions.
    let mut bad = case0_observation(1, false);
    if let Value::Map(m) = &mut bad {
        m.retain(|(k, _)| k.as_str() != Some("state"));
    }
    let e = c.call("get_action", Some(get_action(bad, Value::Nil)), None);
    assert!(error_text(&e).contains("state"), "{e}");
    c.call("ping", None, None);
    c.call("get_modality_config", None, None);
    let text = metrics();
    assert_eq!(door_answers(&text, "zmq"), (1.0, 1.0), "{text}");
    assert_eq!(answers(&text, &refused_at("state"), "zmq"), 1.0, "{text}");
    // The stage histograms: one computed answer, two get_action messages.
    assert_eq!(stage_count(&before, "compute"), 0.0, "{before}");
    let stages = stage_counts(&text, &["compute", "vision", "request"]);
    assert_eq!(stages, [1.0, 1.0, 2.0], "{text}");
    // The HTTP series did not move; an HTTP answer moves only its own.
    assert_eq!(door_answers(&text, "http"), (0.0, 0.0));
    http_predict(&s, &test_server::request("case0"));
    let text = metrics();
    assert_eq!(
        (
            answers(&text, ANSWERED, "http"),
            answers(&text, ANSWERED, "zmq")
        ),
        (1.0, 1.0),
        "{text}"
    );
    // One log line per get_action, as HTTP requests have: stage times, or the refusal.
    let lines = request_lines(s, "zmq");
    assert_eq!(lines.len(), 2, "{lines:#?}");
    for field in [
        "ZMQ get_action 200",
        "request_id=",
        "compute_ms=",
        "seq_len=",
        "seed=0",
    ] {
        assert!(lines[0].contains(field), "{field}: {}", lines[0]);
    }
    for field in ["ZMQ get_action 400", "bad_request", "state"] {
        assert!(lines[1].contains(field), "{field}: {}", lines[1]);
    }
}

#[test]
fn zmq_batches_are_capped_per_message() {
    let s = Server::start(&["--zmq-port", "0", "--zmq-max-batch", "2"]);
    let mut c = Client::connect(s.zmq.as_deref().expect("zmq address"));
    let three = case0_action(&mut c, 3, Value::Nil);
    let text = error_text(&three);
    assert!(
        text.contains("a batch of 3 items: at most 2 per message (--zmq-max-batch)"),
        "{text}"
    );
    // At the cap it is served (its first item as a batch of one answers); the connection
    // goes on.
    let seed = || str_map([("seed", Value::from(0))]);
    let two = actions(&case0_action(&mut c, 2, seed()));
    assert_eq!(two[0].1.shape, vec![2, 40, 9]);
    let one = actions(&case0_action(&mut c, 1, seed()));
    assert_eq!(item(&two, "", 0), item(&one, "", 0));
    // The default cap is 8.
    let s = Server::start(&["--zmq-port", "0"]);
    let mut c = Client::connect(s.zmq.as_deref().expect("zmq address"));
    let nine = case0_action(&mut c, 9, Value::Nil);
    assert!(
        error_text(&nine).contains("at most 8 per message"),
        "{nine}"
    );
}
