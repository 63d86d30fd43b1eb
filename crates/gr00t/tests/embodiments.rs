//! `gr00t serve` on the multi-embodiment fixture checkpoint (DROID plus four embodiments from
//! NVIDIA's code): every case's `request.json` over real HTTP against what `Gr00tPolicy`
//! returned, `/info`'s layouts, `--embodiment`, and the refusals naming their field.

use gr00t_fixtures::http_client as test_client;
mod support;
use support::test_server;

use gr00t_fixtures::{
    json_rows, max_abs_diff, multi_checkpoint, multi_dir, MultiCase, MULTI_CASES,
};
use serde_json::{json, Value};
use test_client::{get, post_json};
use test_server::Server;

fn post(server: &Server, body: &Value) -> (u16, Value) {
    let r = post_json(&server.http, "/predict", body.to_string().as_bytes()).expect("POST");
    (r.status, r.json())
}

fn request(case: &str) -> Value {
    request_in(&multi_dir(), case)
}

fn request_in(root: &std::path::Path, case: &str) -> Value {
    let text = std::fs::read_to_string(root.join(case).join("request.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The tags of `/info`'s `embodiments`, in its order.
fn served_tags(info: &Value) -> Vec<&str> {
    info["embodiments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["tag"].as_str().unwrap())
        .collect()
}

/// xyz + rotvec rows compared as poses (a rotvec near π may flip axis).
fn rotvec_rows_close(a: &[f32], b: &[f32]) -> bool {
    let m = |r: &[f32]| {
        gr00t_embodiment::pose::rotvec_to_matrix([r[3] as f64, r[4] as f64, r[5] as f64])
    };
    a.chunks_exact(6).zip(b.chunks_exact(6)).all(|(x, y)| {
        let (mx, my) = (m(x), m(y));
        max_abs_diff(&x[..3], &y[..3]) <= 1e-5
            && mx
                .iter()
                .flatten()
                .zip(my.iter().flatten())
                .all(|(p, q)| (p - q).abs() <= 1e-4)
    })
}

#[test]
fn every_embodiment_is_served_over_http() {
    let server = Server::start_in(&multi_checkpoint(), 0, &[]);
    let info = get(&server.http, "/info").unwrap().json();
    let tags = served_tags(&info);
    assert_eq!(tags[0], "oxe_droid_relative_eef_relative_joint", "{info}");
    assert_eq!(tags.len(), 5, "{tags:?}");
    // The demo's checkpoint, DROID served: the warm-up is the demo request, checked.
    let log = server.log_text();
    assert!(log.contains("demo reference reproduced"), "{log}");
    assert!(!log.contains("warm-up pass"), "{log}");
    let r1 = &info["embodiments"][tags
        .iter()
        .position(|t| *t == "real_r1_pro_sharpa_relative_eef")
        .unwrap()];
    assert_eq!(r1["frame_deltas"], json!([-20, 0]));
    assert_eq!(r1["views"].as_array().unwrap().len(), 3);
    assert_eq!(r1["action_horizon"], 40);
    assert_eq!(r1["embodiment_id"], 26);

    for name in MULTI_CASES {
        let case = MultiCase::load(name);
        let (status, resp) = post(&server, &request(name));
        assert_eq!(status, 200, "{name}: {resp}");
        assert_eq!(resp["embodiment"], case.tag.as_str());
        let h = case.outputs.dims("head.action_pred")[1].min(40);
        let keys: Vec<&String> = resp["actions"].as_object().unwrap().keys().collect();
        for key in keys {
            let want = case.outputs.f32s(&format!("action.{key}"));
            let dims = case.outputs.dims(&format!("action.{key}"));
            assert_eq!(resp["action_horizon"], dims[1], "{name}");
            assert!(dims[1] <= h);
            let ours = json_rows(&resp["actions"][key]);
            assert_eq!(ours.len(), want.len(), "{name} {key}");
            if key == "head_pose" {
                assert!(rotvec_rows_close(&ours, &want), "{name} head_pose");
            } else {
                case.assert_action(key, &ours);
            }
        }
    }

    // DROID bodies are unchanged; naming DROID (tag or enum name) gives the same bits.
    let case0: Value = serde_json::from_str(&gr00t_fixtures::request_json("case0")).unwrap();
    let (status, plain) = post(&server, &case0);
    assert_eq!(status, 200, "{plain}");
    let mut named = case0.clone();
    named["embodiment"] = json!("OXE_DROID_RELATIVE_EEF_RELATIVE_JOINT");
    let (status, again) = post(&server, &named);
    assert_eq!(status, 200, "{again}");
    assert_eq!(plain["actions"], again["actions"]);
    let taps = gr00t_fixtures::Taps::load("case0");
    for g in ["eef_9d", "gripper_position", "joint_position"] {
        let d = max_abs_diff(
            &json_rows(&plain["actions"][g]),
            &taps.f32s(&format!("output.{g}")),
        );
        assert!(d <= 1e-5, "case0 {g}: {d}");
    }

    // Refusals name the field and say what is expected.
    let refuse = |body: Value, field: &str, needle: &str| {
        let (status, resp) = post(&server, &body);
        assert_eq!(status, 400, "{resp}");
        assert_eq!(resp["field"], field, "{resp}");
        let msg = resp["error"].as_str().unwrap();
        assert!(msg.contains(needle), "{msg}");
    };
    let base = request("case_new_embodiment_1");
    let mut b = base.clone();
    b["embodiment"] = json!("robot_9000");
    refuse(b, "embodiment", "new_embodiment");
    let mut b = base.clone();
    b["images"].as_object_mut().unwrap().remove("wrist");
    refuse(b, "images.wrist", "\"front\", \"wrist\"");
    let mut b = base.clone();
    b["state"]["single_arm"] = json!([0.0, 1.0]);
    refuse(b, "state.single_arm", "expected 5 numbers");
    let mut b = base.clone();
    b["state"]["elbow"] = json!([0.0]);
    refuse(b, "state.elbow", "single_arm [5]");
    let mut b = base.clone();
    b["images"]["front"] = json!([]);
    refuse(b, "images.front", "expected 1 frames");
    let mut b = base;
    b["images"]["front"] = json!(["bm90IGFuIGltYWdl"]);
    refuse(b, "images.front[0]", "");
    // Still serving.
    let (status, _) = post(&server, &request("case_simpler_env_widowx_1"));
    assert_eq!(status, 200);
}

/// The LIBERO-like and 4×4-EEF cases of `gr00t_n17_tiny_extra` over HTTP. Upstream returns the
/// DEFAULT-format EEF key as `[1, 16, 4, 4]`; we return 16 rows of the same 16 values row-major.
#[test]
fn extra_embodiments_are_served_over_http() {
    let server = Server::start_in(&gr00t_fixtures::extra_checkpoint("checkpoint"), 0, &[]);
    let info = get(&server.http, "/info").unwrap().json();
    let libero = info["embodiments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["tag"] == "libero_sim")
        .unwrap_or_else(|| panic!("{info}"));
    assert_eq!(libero["embodiment_id"], 2, "{libero}");
    assert_eq!(libero["action_horizon"], 16, "{libero}");
    assert_eq!(libero["views"].as_array().unwrap().len(), 2, "{libero}");
    for name in gr00t_fixtures::EXTRA_CASES {
        let case = MultiCase::load_extra(name);
        let (status, resp) = post(&server, &request_in(&gr00t_fixtures::extra_dir(), name));
        assert_eq!(status, 200, "{name}: {resp}");
        assert_eq!(resp["embodiment"], case.tag.as_str());
        assert_eq!(resp["action_horizon"], 16, "{name}");
        let acts = resp["actions"].as_object().unwrap();
        let want_keys: Vec<String> = case
            .outputs
            .names()
            .into_iter()
            .filter_map(|n| n.strip_prefix("action.").map(str::to_string))
            .collect();
        assert_eq!(acts.len(), want_keys.len(), "{name}: {resp}");
        for key in want_keys {
            case.assert_action(&key, &json_rows(&resp["actions"][&key]));
        }
    }
    // A reflected 4×4 rotation block: 400 naming the state key (scipy refuses it upstream).
    let mut body = request_in(&gr00t_fixtures::extra_dir(), "case_new_embodiment_eef4x4_1");
    for i in 0..3 {
        let v = body["state"]["eef_pose"][i].as_f64().unwrap();
        body["state"]["eef_pose"][i] = json!(-v);
    }
    let (status, resp) = post(&server, &body);
    assert_eq!(status, 400, "{resp}");
    assert_eq!(resp["field"], "state.eef_pose", "{resp}");
    assert!(
        resp["error"].as_str().unwrap().contains("rotation"),
        "{resp}"
    );
}

#[test]
fn embodiment_flag_picks_what_is_served() {
    let server = Server::start_in(
        &multi_checkpoint(),
        0,
        &[
            "--embodiment",
            "NEW_EMBODIMENT",
            "--embodiment",
            "simpler_env_google",
        ],
    );
    let info = get(&server.http, "/info").unwrap().json();
    assert_eq!(info["embodiment"], "new_embodiment");
    assert_eq!(served_tags(&info), ["new_embodiment", "simpler_env_google"]);
    // No DROID to run the demo on: the warm-up is the pass over the layers at minimal size.
    let log = server.log_text();
    assert!(log.contains("warm-up pass over the layers done"), "{log}");
    assert!(!log.contains("warm-up request"), "{log}");
    // Only the served slots are kept: 2 of them here, 5 when every embodiment is served.
    let all = Server::start_in(&multi_checkpoint(), 0, &[]);
    let all_info = get(&all.http, "/info").unwrap().json();
    let (two, five) = (
        info["embodiment_weights_mib"].as_f64().unwrap(),
        all_info["embodiment_weights_mib"].as_f64().unwrap(),
    );
    assert!(
        two > 0.0 && (five / two - 2.5).abs() < 1e-9,
        "{two} MiB vs {five} MiB"
    );
    drop(all);
    // A request that names no embodiment gets the first served one.
    let mut body = request("case_new_embodiment_2");
    body.as_object_mut().unwrap().remove("embodiment");
    let (status, resp) = post(&server, &body);
    assert_eq!(status, 200, "{resp}");
    assert_eq!(resp["embodiment"], "new_embodiment");
    assert_eq!(resp["action_horizon"], 16);
    // DROID is not served here.
    let case0: Value = serde_json::from_str(&gr00t_fixtures::request_json("case0")).unwrap();
    let (status, resp) = post(&server, &case0);
    assert_eq!(status, 400, "{resp}");
    assert_eq!(resp["field"], "images.exterior_image_1_left", "{resp}");
}

#[test]
fn unknown_embodiment_flag_is_refused_at_startup() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gr00t"))
        .args(["serve", "--port", "0", "--checkpoint"])
        .arg(multi_checkpoint())
        .args(["--embodiment", "REAL_G1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("REAL_G1") && err.contains("new_embodiment"),
        "{err}"
    );
}
