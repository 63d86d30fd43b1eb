//! LeRobot's objects read from the bytes lerobot 0.4.4 itself wrote (`tests/fixtures/lerobot`,
//! made by `tools/lerobot/make_fixtures.py`), our replies against the bytes Python's pickle +
//! torch read back, and forged or lying payloads refused.

use super::error::PayloadError;
use super::numpy;
use super::objects::{ObsValue, TimedAction, TimedObservation};
use super::pickle::{self, Global, Limits, PickleError, PyValue};
use super::{read_config, read_observation, write_actions, Form};
use crate::doors::wire::ndarray::{DType, NdArray};
use serde_json::Value;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/lerobot")
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn expected() -> Value {
    serde_json::from_slice(&fixture("expected.json")).unwrap()
}

/// The fixtures' pixel at camera `cam`, timestep `t` (`expected.json`'s `frame_byte`).
fn frame_byte(cam: usize, t: usize, y: usize, x: usize, c: usize) -> u8 {
    ((x / 4 + 2 * (y / 4) + 85 * c + 40 * cam + 7 * t) % 256) as u8
}

fn frame(cam: usize, t: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(480 * 640 * 3);
    for y in 0..480 {
        for x in 0..640 {
            for c in 0..3 {
                out.push(frame_byte(cam, t, y, x, c));
            }
        }
    }
    out
}

fn number(v: &Value) -> f64 {
    v.as_f64().unwrap()
}

/// Checks an observation read from a fixture against `expected.json`'s entry for it.
fn check_observation(name: &str, form: Form, obs: &TimedObservation) {
    let e = expected();
    let want = &e["observations"][name.split('.').next().unwrap()];
    assert_eq!(obs.timestamp, number(&want["timestamp"]), "{name}");
    assert_eq!(obs.timestep, want["timestep"].as_i64().unwrap(), "{name}");
    assert_eq!(obs.must_go, want["must_go"].as_bool().unwrap(), "{name}");
    let get = |key: &str| {
        &obs.observation
            .iter()
            .find(|(k, _)| k == key)
            .unwrap_or_else(|| panic!("{name}: no {key}"))
            .1
    };
    for (motor, value) in e["motors"]
        .as_array()
        .unwrap()
        .iter()
        .zip(want["state"].as_array().unwrap())
    {
        assert_eq!(
            get(motor.as_str().unwrap()),
            &ObsValue::Number(number(value)),
            "{name} {motor}"
        );
    }
    assert_eq!(
        get("task"),
        &ObsValue::Text(e["task"].as_str().unwrap().into()),
        "{name}"
    );
    let t = want["frame_t"].as_u64().unwrap() as usize;
    for (cam, i) in e["cameras"].as_object().unwrap() {
        let ObsValue::Array(a) = get(cam) else {
            panic!("{name}: {cam} is not an array");
        };
        assert_eq!(
            (a.dtype, a.shape.as_slice()),
            (DType::U8, &[480, 640, 3][..]),
            "{name} {cam}"
        );
        assert!(
            a.data == frame(i.as_u64().unwrap() as usize, t),
            "{name} {cam}: pixels differ"
        );
    }
    // Six motors, two cameras and the task: nothing else, nothing twice.
    assert_eq!(obs.observation.len(), 9, "{name}");
    assert_eq!(Form::of(&fixture(name)), form, "{name}");
}

#[test]
fn every_observation_lerobot_wrote_reads_to_its_values() {
    for (name, form) in [
        ("observation_must_go.pkl", Form::Pickle),
        ("observation.pkl", Form::Pickle),
        ("observation_p5.pkl", Form::Pickle),
        ("observation_np_scalars.pkl", Form::Pickle),
        ("observation_must_go.safe", Form::Safe),
        ("observation.safe", Form::Safe),
    ] {
        let (got_form, obs) = read_observation(&fixture(name), &Limits::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got_form, form);
        check_observation(name, form, &obs);
    }
}

#[test]
fn the_policy_config_reads_to_its_values_in_both_forms() {
    let e = expected();
    let want = &e["config"];
    for name in ["policy_config.pkl", "policy_config.safe"] {
        let (_, c) = read_config(&fixture(name), &Limits::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(c.policy_type, "groot");
        assert_eq!(
            c.pretrained_name_or_path,
            want["pretrained_name_or_path"].as_str().unwrap()
        );
        assert_eq!(c.actions_per_chunk, 16);
        assert_eq!(c.device, "cpu");
        assert!(c.rename_map.is_empty());
        let features = want["lerobot_features"].as_object().unwrap();
        assert_eq!(c.lerobot_features.len(), features.len(), "{name}");
        for (key, f) in &c.lerobot_features {
            let w = &features[key];
            assert_eq!(f.dtype, w["dtype"].as_str().unwrap(), "{name} {key}");
            let shape: Vec<usize> = w["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as usize)
                .collect();
            assert_eq!(f.shape, shape, "{name} {key}");
            let names: Vec<&str> = w["names"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap())
                .collect();
            assert_eq!(f.names, names, "{name} {key}");
        }
    }
    // The pickle keeps the client's order: the state first, then the cameras as configured.
    let (_, c) = read_config(&fixture("policy_config.pkl"), &Limits::default()).unwrap();
    let keys: Vec<&str> = c.lerobot_features.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "observation.state",
            "observation.images.front",
            "observation.images.wrist"
        ]
    );
}

/// `expected.json`'s reply as our writer's input.
fn reply() -> Vec<TimedAction> {
    let e = expected();
    let r = &e["reply"];
    let (t0, step0, fps) = (
        number(&r["timestamp"]),
        r["timestep"].as_i64().unwrap(),
        number(&r["fps"]),
    );
    r["actions"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, a)| TimedAction {
            timestamp: t0 + i as f64 / fps,
            timestep: step0 + i as i64,
            action: a
                .as_array()
                .unwrap()
                .iter()
                .map(|x| number(x) as f32)
                .collect(),
        })
        .collect()
}

/// Our reply equals the committed bytes, which `make_fixtures.py --check` loaded with Python's
/// pickle + torch and safetensors to float32 tensors of these values. `GR00T_WRITE_LEROBOT_REPLY=1`
/// writes them anew (then run that check before committing them).
#[test]
fn our_reply_is_the_committed_bytes() {
    let actions = reply();
    for (name, form) in [
        ("reply_gr00t.pkl", Form::Pickle),
        ("reply_gr00t.safe", Form::Safe),
    ] {
        let ours = write_actions(form, &actions).unwrap();
        if std::env::var_os("GR00T_WRITE_LEROBOT_REPLY").is_some() {
            std::fs::write(dir().join(name), &ours).unwrap();
        }
        assert!(
            ours == fixture(name),
            "{name}: our reply is not the bytes Python checked"
        );
    }
}

#[test]
fn our_pickled_reply_reads_back_to_the_actions() {
    let actions = reply();
    let bytes = write_actions(Form::Pickle, &actions).unwrap();
    let allowed = [
        ("lerobot.async_inference.helpers", "TimedAction"),
        ("torch", "tensor"),
    ];
    let PyValue::List(items) = pickle::read(&bytes, &allowed, &Limits::default()).unwrap() else {
        panic!("not a list");
    };
    assert_eq!(items.len(), actions.len());
    for (item, a) in items.iter().zip(&actions) {
        let PyValue::Call {
            callable,
            args,
            state: Some(state),
            ..
        } = item
        else {
            panic!("{item:?}");
        };
        assert_eq!(callable.name, "TimedAction");
        assert!(args.is_empty());
        let PyValue::Dict(fields) = &**state else {
            panic!()
        };
        let field = |k: &str| {
            &fields
                .iter()
                .find(|(n, _)| n == &PyValue::Str(k.into()))
                .unwrap()
                .1
        };
        assert_eq!(field("timestamp"), &PyValue::Float(a.timestamp));
        assert_eq!(field("timestep"), &PyValue::Int(a.timestep));
        let PyValue::Call { callable, args, .. } = field("action") else {
            panic!()
        };
        assert_eq!(
            (callable.module.as_str(), callable.name.as_str()),
            ("torch", "tensor")
        );
        let want: Vec<PyValue> = a.action.iter().map(|&x| PyValue::Float(x.into())).collect();
        assert_eq!(args, &vec![PyValue::List(want)]);
    }
    // An empty chunk is an empty list.
    assert_eq!(
        pickle::read(
            &write_actions(Form::Pickle, &[]).unwrap(),
            &[],
            &Limits::default()
        )
        .unwrap(),
        PyValue::List(vec![])
    );
}

#[test]
fn the_stock_servers_torch_storage_pickle_is_refused_by_name() {
    // LeRobot's own reply pickles each tensor as _rebuild_tensor_v2 of a nested torch.save
    // archive: nothing a robot client sends, and never read here.
    let err = pickle::read(
        &fixture("reply_stock.pkl"),
        super::objects::GLOBALS,
        &Limits::default(),
    )
    .unwrap_err();
    assert!(
        matches!(&err, PickleError::Global(Global { module, .. }) if module == "lerobot.async_inference.helpers" || module.starts_with("torch")),
        "{err}"
    );
}

#[test]
fn forged_and_lying_payloads_are_refused_naming_what() {
    let limits = Limits::default();
    let refusal = |b: &[u8]| read_observation(b, &limits).unwrap_err().to_string();
    // Code, by every route: refused by name before anything could run.
    assert_eq!(
        refusal(b"cos\nsystem\n(S'echo pwned'\ntR."),
        PayloadError::Pickle(PickleError::Global(Global {
            module: "os".into(),
            name: "system".into()
        }))
        .to_string()
    );
    assert!(refusal(b"\x80\x04\x8c\x0asubprocess\x8c\x05Popen\x93)R.")
        .contains("subprocess.Popen is refused"));
    assert!(
        refusal(b"\x80\x04\x8c\x08builtins\x8c\x04eval\x93\x8c\x031+1\x85R.")
            .contains("builtins.eval is refused")
    );
    assert!(refusal(b"\x80\x04\x8c\x01x\x94Q.").contains("BINPERSID"));
    // A whitelisted class in the wrong place, and a dict where the dataclass belongs.
    let mut wrong = fixture("observation.pkl");
    let at = find(&wrong, b"\x8c\x10TimedObservation");
    wrong.splice(at..at + 18, b"\x8c\x12RemotePolicyConfig".iter().copied());
    assert!(refusal(&wrong).contains("expected a lerobot.async_inference.helpers.TimedObservation, got lerobot.async_inference.helpers.RemotePolicyConfig"), "{}", refusal(&wrong));
    assert!(refusal(b"\x80\x04}\x94.")
        .contains("expected a lerobot.async_inference.helpers.TimedObservation, got a dict"));
    // Shape-lying: a frame declared 481 rows high holds 480 rows of bytes.
    for name in ["observation.pkl", "observation_p5.pkl"] {
        let mut lie = fixture(name);
        let at = find(&lie, b"M\xe0\x01M\x80\x02K\x03\x87");
        lie[at + 1] = 0xe1;
        let e = refusal(&lie);
        assert!(
            e.contains("['front']")
                && e.contains("declared [481, 640, 3] uint8 (923520 bytes) holds 921600 bytes"),
            "{name}: {e}"
        );
    }
    // A shape whose size overflows is refused, not multiplied out.
    let e = numpy::array(DType::U8, vec![usize::MAX, 2], vec![], false, "f").unwrap_err();
    assert!(e.to_string().contains("overflows"), "{e}");
    // Big-endian and object arrays.
    let mut be = fixture("observation_np_scalars.pkl");
    let at = find(&be, b"\x8c\x01<");
    be[at + 2] = b'>';
    assert!(
        refusal(&be).contains("only little-endian"),
        "{}",
        refusal(&be)
    );
    // Truncated anywhere: refused, never a value (every 4099th cut of a real observation).
    let whole = fixture("observation.pkl");
    for n in (0..whole.len()).step_by(4099) {
        assert!(read_observation(&whole[..n], &limits).is_err(), "{n}");
    }
    // Over the message cap.
    let small = Limits {
        max_bytes: 1 << 20,
        ..limits
    };
    assert!(read_observation(&whole, &small)
        .unwrap_err()
        .to_string()
        .contains("exceeds"));
    let safe = fixture("observation.safe");
    assert!(read_observation(&safe, &small)
        .unwrap_err()
        .to_string()
        .contains("exceed"));
    // The safe form: truncated tensors, a JSON length past the end, another type.
    for n in [3, 10, safe.len() - 1] {
        assert!(read_observation(&safe[..n], &limits).is_err(), "{n}");
    }
    assert!(read_observation(b"\x00\x00\x10\x00{}", &limits)
        .unwrap_err()
        .to_string()
        .contains("exceeds"));
    let cfg = fixture("policy_config.safe");
    assert!(read_observation(&cfg, &limits)
        .unwrap_err()
        .to_string()
        .contains("expected type \"TimedObservation\""));
}

#[test]
fn numpy_1x_names_read_as_numpy_2x_ones() {
    // A TimedObservation pickled by Python 3.11 + numpy 1.26 (`numpy.core.*`; protocol 4):
    // fuzz/seed_corpus.py's small_obs_p4.pkl, a float, a numpy.float32 scalar, an 8x8x3 frame.
    let hex: String = [
        "80049548020000000000008c1f6c65726f626f742e6173796e635f696e666572656e63652e68656c70657273948c1054",
        "696d65644f62736572766174696f6e9493942981947d94288c0974696d657374616d7094473ff40000000000008c0874",
        "696d6573746570944b038c0b6f62736572766174696f6e947d94288c1073686f756c6465725f70616e2e706f7394473f",
        "f80000000000008c0b677269707065722e706f73948c156e756d70792e636f72652e6d756c74696172726179948c0673",
        "63616c61729493948c056e756d7079948c0564747970659493948c02663494898887945294284b038c013c944e4e4e4a",
        "ffffffff4affffffff4b0074946243040000004094869452948c0566726f6e7494680b8c0c5f7265636f6e7374727563",
        "74949394680e8c076e6461727261799493944b0085944301629487945294284b014b084b084b03879468108c02753194",
        "898887945294284b038c017c944e4e4e4affffffff4affffffff4b007494628943c0000102030405060708090a0b0c0d",
        "0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d",
        "3e3f404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d",
        "6e6f707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d",
        "9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf947494628c047461736b948c0470",
        "69636b94758c076d7573745f676f948875622e",
    ]
    .concat();
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let (_, obs) = read_observation(&bytes, &Limits::default()).unwrap();
    assert_eq!((obs.timestamp, obs.timestep, obs.must_go), (1.25, 3, true));
    let frame = NdArray {
        dtype: DType::U8,
        shape: vec![8, 8, 3],
        data: (0..192).collect(),
    };
    assert_eq!(
        obs.observation,
        vec![
            ("shoulder_pan.pos".into(), ObsValue::Number(1.5)),
            ("gripper.pos".into(), ObsValue::Number(2.0)),
            ("front".into(), ObsValue::Array(frame)),
            ("task".into(), ObsValue::Text("pick".into())),
        ]
    );
}

fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).position(|w| w == needle).unwrap()
}
