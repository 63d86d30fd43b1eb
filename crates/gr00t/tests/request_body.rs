//! Validation of the HTTP door's `/predict` body (DROID's key table on the tiny checkpoint):
//! the fixture requests parse, and every malformed field is refused with an error that names
//! it.

use gr00t_core::layouts::Layouts;
use gr00t_core::request::Request;
use gr00t_embodiment::observation::{NoiseSource, RequestError, DEFAULT_SEED};
use gr00t_model::Checkpoint;
use serde_json::{json, Value};
use std::sync::OnceLock;

const H: usize = 40;
const D: usize = 132;

/// The tiny checkpoint's DROID layout.
fn layouts() -> &'static Layouts {
    static LAYOUTS: OnceLock<Layouts> = OnceLock::new();
    LAYOUTS.get_or_init(|| {
        let ckpt = Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
        let layouts = Layouts::of_checkpoint(&ckpt, &[gr00t_embodiment::EMBODIMENT_TAG]).unwrap();
        assert_eq!((layouts.horizon, layouts.action_dim), (H, D));
        layouts
    })
}

fn fixture(case: &str) -> Value {
    serde_json::from_str(&gr00t_fixtures::request_json(case)).unwrap()
}

/// The body as the HTTP door reads it (no session).
fn parse(body: &[u8]) -> Result<Request, RequestError> {
    gr00t::request_from_body(body, layouts(), None)
}

fn parse_value(v: &Value) -> Result<Request, RequestError> {
    parse(v.to_string().as_bytes())
}

fn refuse(v: Value) -> (String, String) {
    let e = parse_value(&v).expect_err("request should be refused");
    (e.field, e.message)
}

/// Each `(path, value, field)`: `base` with `value` at `path` is refused naming `field`.
fn assert_fields<const N: usize>(base: &Value, cases: [(&[&str], Value, &str); N]) {
    for (path, value, field) in cases {
        let (f, m) = refuse(with(base.clone(), path, value));
        assert_eq!(f, field, "{path:?}: {m}");
    }
}

/// The state group `key` of a parsed request.
fn state<'a>(req: &'a Request, key: &str) -> &'a [f32] {
    let (_, v) = req
        .observation
        .state
        .iter()
        .find(|(k, _)| k == key)
        .unwrap();
    v
}

fn with(mut v: Value, path: &[&str], new: Value) -> Value {
    let mut cur = &mut v;
    for p in &path[..path.len() - 1] {
        cur = &mut cur[*p];
    }
    cur[path[path.len() - 1]] = new;
    v
}

fn without(mut v: Value, path: &[&str]) -> Value {
    let mut cur = &mut v;
    for p in &path[..path.len() - 1] {
        cur = &mut cur[*p];
    }
    cur.as_object_mut().unwrap().remove(path[path.len() - 1]);
    v
}

#[test]
fn fixture_requests_parse_with_their_noise() {
    for case in gr00t_fixtures::CASES {
        let v = fixture(case);
        let req = parse_value(&v).unwrap();
        let taps = gr00t_fixtures::Taps::load(case);
        match &req.observation.noise {
            NoiseSource::Client(n) => assert_eq!(n, &taps.f32s("input.noise"), "{case}"),
            other => panic!("{case}: expected client noise, got {other:?}"),
        }
        for key in ["joint_position", "eef_9d", "gripper_position"] {
            assert_eq!(state(&req, key), taps.f32s(&format!("input.state.{key}")));
        }
        assert_eq!(req.tag(), gr00t_embodiment::EMBODIMENT_TAG);
        assert_eq!(
            req.observation.instruction,
            gr00t_fixtures::case_info(case)["instruction"]
        );
        assert!(!req.return_normalized);
    }
}

#[test]
fn seed_defaults_and_explicit() {
    let v = without(fixture("case0"), &["noise"]);
    assert_eq!(
        parse_value(&v).unwrap().observation.noise,
        NoiseSource::Seed(DEFAULT_SEED)
    );
    let v = with(v, &["seed"], json!(7));
    assert_eq!(
        parse_value(&v).unwrap().observation.noise,
        NoiseSource::Seed(7)
    );
    let v = with(v, &["return_normalized"], json!(true));
    assert!(parse_value(&v).unwrap().return_normalized);
}

#[test]
fn bad_json_and_body() {
    let e = parse(b"{not json").unwrap_err();
    assert_eq!(e.field, "body");
    assert_eq!(refuse(json!([1, 2])).0, "body");
}

#[test]
fn unknown_top_level_field() {
    let (f, m) = refuse(with(fixture("case0"), &["temperature"], json!(1.0)));
    assert_eq!(f, "temperature");
    assert!(m.contains("unknown"), "{m}");
}

#[test]
fn camera_errors() {
    let base = fixture("case0");
    assert_fields(
        &base,
        [
            (
                &["images", "left_camera"],
                json!(["a", "b"]),
                "images.left_camera",
            ),
            (
                &["images", "exterior_image_1_left"],
                json!(["a", "b", "c"]),
                "images.exterior_image_1_left",
            ),
            (
                &["images", "exterior_image_1_left"],
                json!(["abc", 5]),
                "images.exterior_image_1_left[1]",
            ),
            (&["images"], json!("x"), "images"),
        ],
    );
    let (f, _) = refuse(without(base.clone(), &["images", "wrist_image_left"]));
    assert_eq!(f, "images.wrist_image_left");
    let one = json!([base["images"]["wrist_image_left"][0].clone()]);
    let (f, m) = refuse(with(base.clone(), &["images", "wrist_image_left"], one));
    assert_eq!(f, "images.wrist_image_left");
    assert!(m.contains("got 1"), "{m}");
    assert_eq!(refuse(without(base, &["images"])).0, "images");
}

#[test]
fn state_errors() {
    let base = fixture("case0");
    let (f, m) = refuse(with(
        base.clone(),
        &["state", "joint_position"],
        json!([0.0, 1.0, 2.0, 3.0, 4.0, 5.0]),
    ));
    assert_eq!(f, "state.joint_position");
    assert!(m.contains("expected 7") && m.contains("got 6"), "{m}");
    assert_fields(
        &base,
        [
            (
                &["state", "eef_9d"],
                json!([0, 0, 0, 1, 0, 0, 0, "x", 0]),
                "state.eef_9d[7]",
            ),
            (&["state", "velocity"], json!([1.0]), "state.velocity"),
            (&["state"], json!([1.0]), "state"),
        ],
    );
    // 1e39 is a finite JSON number but overflows float32.
    let (f, m) = refuse(with(
        base.clone(),
        &["state", "gripper_position"],
        json!([1e39]),
    ));
    assert_eq!(f, "state.gripper_position[0]");
    assert!(m.contains("finite"), "{m}");
    assert_eq!(
        refuse(without(base, &["state", "eef_9d"])).0,
        "state.eef_9d"
    );
    // JSON itself has no NaN/Infinity literals: such a body is invalid JSON.
    let text = gr00t_fixtures::request_json("case0").replacen(
        "\"gripper_position\": [",
        "\"gripper_position\": [NaN, ",
        1,
    );
    assert_eq!(parse(text.as_bytes()).unwrap_err().field, "body");
}

#[test]
fn instruction_errors() {
    let base = fixture("case0");
    assert_eq!(
        refuse(with(base.clone(), &["instruction"], json!(""))).0,
        "instruction"
    );
    assert_eq!(
        refuse(with(base.clone(), &["instruction"], json!("   "))).0,
        "instruction"
    );
    assert_eq!(
        refuse(with(base.clone(), &["instruction"], json!(3))).0,
        "instruction"
    );
    assert_eq!(refuse(without(base, &["instruction"])).0, "instruction");
}

#[test]
fn seed_and_noise_errors() {
    let base = fixture("case0");
    let (f, m) = refuse(with(base.clone(), &["seed"], json!(3)));
    assert_eq!(f, "noise");
    assert!(m.contains("not both"), "{m}");
    let no_noise = without(base.clone(), &["noise"]);
    assert_eq!(
        refuse(with(no_noise.clone(), &["seed"], json!(-1))).0,
        "seed"
    );
    assert_eq!(
        refuse(with(no_noise.clone(), &["seed"], json!(1.5))).0,
        "seed"
    );
    assert_eq!(refuse(with(no_noise, &["seed"], json!("42"))).0, "seed");
    let short: Vec<Vec<f32>> = vec![vec![0.0; D]; H - 1];
    let (f, m) = refuse(with(base.clone(), &["noise"], json!(short)));
    assert_eq!(f, "noise");
    assert!(m.contains("39 rows"), "{m}");
    let mut ragged: Vec<Vec<f32>> = vec![vec![0.0; D]; H];
    ragged[5].pop();
    assert_eq!(
        refuse(with(base.clone(), &["noise"], json!(ragged))).0,
        "noise[5]"
    );
    let mut huge = vec![vec![json!(0.0); D]; H];
    huge[2][3] = json!(1e300);
    assert_eq!(
        refuse(with(base.clone(), &["noise"], json!(huge))).0,
        "noise[2][3]"
    );
    assert_eq!(
        refuse(with(base, &["return_normalized"], json!("yes"))).0,
        "return_normalized"
    );
}

/// A serialised body refused.
fn refuse_body(body: &str) -> (String, String) {
    let e = parse(body.as_bytes()).expect_err("should be refused");
    (e.field, e.message)
}

#[test]
fn oversized_structures_are_refused_before_parsing_naming_the_field() {
    // Valid noise (40 × 132) passes the count; millions of values do not.
    let full = fixture("case0");
    assert!(parse_value(&full).is_ok());
    let mut v = without(full.clone(), &["noise"]);
    v["noise"] = json!(vec![0; 1_000_000]);
    let (f, m) = refuse_body(&v.to_string());
    assert_eq!(f, "noise");
    assert!(m.contains("JSON values"), "{m}");
    // Nested deeper: the top-level field is named.
    let v = with(
        full.clone(),
        &["state", "eef_9d"],
        json!(vec![json!([]); 20_000]),
    );
    assert_eq!(refuse_body(&v.to_string()).0, "state");
    let v = with(
        full.clone(),
        &["images", "wrist_image_left"],
        json!(vec!["x"; 20_000]),
    );
    assert_eq!(refuse_body(&v.to_string()).0, "images");
    // An unknown field with a huge object, and a body with very many top-level keys.
    let big: serde_json::Map<String, Value> =
        (0..20_000).map(|i| (format!("k{i}"), json!(0))).collect();
    let v = with(full.clone(), &["zzz"], Value::Object(big.clone()));
    let (f, m) = refuse_body(&v.to_string());
    assert_eq!(f, "zzz");
    assert!(m.contains("JSON values"), "{m}");
    let (f, m) = refuse_body(&Value::Object(big).to_string());
    assert_eq!(f, "body");
    assert!(m.contains("top-level"), "{m}");
    // A top-level array.
    assert_eq!(refuse_body(&json!(vec![0; 20_000]).to_string()).0, "body");
}

#[test]
fn the_value_count_skips_strings() {
    // Brackets, commas and escaped quotes inside strings are not structure.
    let instruction = "pick \"it\", [up] {now} \\".repeat(20_000);
    let v = with(fixture("case0"), &["instruction"], json!(instruction));
    let req = parse_value(&v).unwrap();
    assert_eq!(req.observation.instruction, instruction);
    // A key with an escaped quote is still one key.
    let v = with(fixture("case0"), &["a\"b"], json!(vec![0; 20_000]));
    assert_eq!(refuse_body(&v.to_string()).0, "a\\\"b");
}
