//! LeRobot's robot client's objects onto a served embodiment through a map file
//! (`examples/lerobot_so101.json`, SO-101 → `new_embodiment` of the tiny multi-embodiment
//! checkpoint): NVIDIA's goldens reached through the map, the bytes lerobot 0.4.4 wrote run
//! through it, and configs and observations that do not fit refused saying what is served.

use gr00t::doors::lerobot::mapping::LeRobotMap;
use gr00t::doors::lerobot::numpy::{Dtype, NdArray};
use gr00t::doors::lerobot::objects::{ObsValue, TimedObservation};
use gr00t::doors::lerobot::pickle::Limits;
use gr00t::doors::lerobot::{read_config, read_observation};
use gr00t_core::device::DeviceOptions;
use gr00t_core::engine::{Engine, EngineOptions};
use gr00t_core::request::Request;
use gr00t_embodiment::layout::Layout;
use gr00t_embodiment::observation::NoiseSource;
use gr00t_fixtures::MultiCase;
use std::path::PathBuf;
use std::sync::Arc;

const TAG: &str = "new_embodiment";
const MOTORS: [&str; 6] = [
    "shoulder_pan.pos",
    "shoulder_lift.pos",
    "elbow_flex.pos",
    "wrist_flex.pos",
    "wrist_roll.pos",
    "gripper.pos",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn map() -> LeRobotMap {
    LeRobotMap::load(&repo().join("examples/lerobot_so101.json")).unwrap()
}

fn lerobot(name: &str) -> Vec<u8> {
    std::fs::read(repo().join("tests/fixtures/lerobot").join(name)).unwrap()
}

fn engine() -> (Engine, Arc<Layout>) {
    let engine = Engine::load(&EngineOptions {
        checkpoint: gr00t_fixtures::multi_checkpoint(),
        tokenizer: None,
        device: DeviceOptions::default(),
        embodiments: vec![TAG.into()],
    })
    .unwrap();
    let layout = engine.layouts().resolve(TAG).unwrap().clone();
    (engine, layout)
}

/// The golden case as the SO-101 robot client would send it: motors by name, RGB frames.
fn timed_observation(case: &MultiCase) -> TimedObservation {
    let key = |k: &str| &case.state.iter().find(|(n, _)| n == k).unwrap().1;
    let values: Vec<f32> = [key("single_arm").as_slice(), key("gripper")].concat();
    assert_eq!(values.len(), 6);
    let mut observation: Vec<(String, ObsValue)> = MOTORS
        .iter()
        .zip(&values)
        .map(|(m, v)| (m.to_string(), ObsValue::Number(f64::from(*v))))
        .collect();
    for (view, files) in &case.video {
        let img = image::open(case.dir.join(&files[0])).unwrap().to_rgb8();
        let (w, h) = (img.width() as usize, img.height() as usize);
        let frame = NdArray::new(Dtype::U8, vec![h, w, 3], img.into_raw(), view).unwrap();
        observation.push((view.clone(), ObsValue::Array(frame)));
    }
    observation.push(("task".into(), ObsValue::Text(case.instruction.clone())));
    TimedObservation {
        timestamp: 1796000000.25,
        timestep: 7,
        observation,
        must_go: true,
    }
}

#[test]
fn nvidias_goldens_come_through_the_lerobot_map() {
    let (engine, layout) = engine();
    let map = map();
    map.check_layout(&layout).unwrap();
    for name in ["case_new_embodiment_1", "case_new_embodiment_2"] {
        let case = MultiCase::load(name);
        let timed = timed_observation(&case);
        let obs = map
            .observation(&timed, NoiseSource::Client(case.noise.clone()))
            .unwrap();
        let resp = engine.run(Request::new(layout.clone(), obs)).unwrap();
        for key in ["single_arm", "gripper"] {
            let ours: Vec<f32> = resp.actions.rows(key).iter().flatten().copied().collect();
            case.assert_action(key, &ours);
        }
        // LeRobot's reply: the first actions_per_chunk steps, arm then gripper, timed as
        // LeRobot's policy server times them.
        let actions = map.timed_actions(&resp.actions, &timed, 10, 1.0 / 30.0);
        assert_eq!(actions.len(), 10);
        for (i, a) in actions.iter().enumerate() {
            let mut want = resp.actions.rows("single_arm")[i].clone();
            want.extend(&resp.actions.rows("gripper")[i]);
            assert_eq!(a.action, want, "{name} step {i}");
            assert_eq!(a.timestep, 7 + i as i64);
            assert_eq!(a.timestamp, 1796000000.25 + i as f64 / 30.0);
        }
        // Never more steps than the embodiment decodes.
        assert_eq!(map.timed_actions(&resp.actions, &timed, 100, 0.1).len(), 16);
    }
}

#[test]
fn the_bytes_lerobot_wrote_run_through_the_map_in_both_forms() {
    let (engine, layout) = engine();
    let map = map();
    let (_, config) = read_config(&lerobot("policy_config.pkl"), &Limits::default()).unwrap();
    map.check_config(&config, &layout).unwrap();
    let (_, safe_config) = read_config(&lerobot("policy_config.safe"), &Limits::default()).unwrap();
    map.check_config(&safe_config, &layout).unwrap();
    let mut answers = Vec::new();
    for name in ["observation.pkl", "observation_p5.pkl", "observation.safe"] {
        let (_, timed) = read_observation(&lerobot(name), &Limits::default()).unwrap();
        let obs = map.observation(&timed, NoiseSource::Seed(3)).unwrap();
        assert_eq!(
            obs.instruction,
            "pick up the red cube and put it in the bowl"
        );
        assert_eq!(obs.state[0].0, "gripper");
        assert_eq!(obs.state[0].1, vec![-40.0 + 12.5 * 5.0 + 0.25 * 12.0]);
        let resp = engine.run(Request::new(layout.clone(), obs)).unwrap();
        let actions = map.timed_actions(
            &resp.actions,
            &timed,
            config.actions_per_chunk as usize,
            1.0 / 30.0,
        );
        assert_eq!(actions.len(), 16);
        assert!(actions
            .iter()
            .all(|a| a.action.len() == 6 && a.action.iter().all(|x| x.is_finite())));
        answers.push(actions);
    }
    // The same observation in three encodings: the same actions.
    assert_eq!(answers[0], answers[1]);
    assert_eq!(answers[0], answers[2]);
}

#[test]
fn configs_and_observations_that_do_not_fit_are_refused_saying_what_is_served() {
    let (_engine, layout) = engine();
    let map = map();
    let (_, good) = read_config(&lerobot("policy_config.pkl"), &Limits::default()).unwrap();
    let served =
        "served: embodiment \"new_embodiment\", motors [\"gripper.pos\", \"shoulder_pan.pos\"";
    let refuse = |c: &gr00t::doors::lerobot::objects::RemotePolicyConfig, needle: &str| {
        let e = map.check_config(c, &layout).unwrap_err();
        assert!(e.contains(needle), "{e}");
        e
    };
    let mut c = good.clone();
    c.policy_type = "act".into();
    assert!(refuse(&c, "policy_type \"act\" is not served").contains(served));
    for n in [0, 17] {
        let mut c = good.clone();
        c.actions_per_chunk = n;
        refuse(&c, &format!("actions_per_chunk {n} is outside 1..=16"));
    }
    let mut c = good.clone();
    c.lerobot_features
        .retain(|(k, _)| k != "observation.images.wrist");
    assert!(
        refuse(&c, "the robot has no camera \"wrist\"").contains("cameras [\"front\", \"wrist\"]")
    );
    let mut c = good.clone();
    c.lerobot_features[0]
        .1
        .names
        .retain(|n| n != "elbow_flex.pos");
    refuse(
        &c,
        "the robot's observation.state has no \"elbow_flex.pos\"",
    );
    let mut c = good.clone();
    c.lerobot_features[1].1.shape = vec![480, 640, 4];
    refuse(&c, "not (height, width, 3)");

    // A map that does not fit the served layout.
    let mut m = map.clone();
    m.state.get_mut("single_arm").unwrap().pop();
    assert!(m
        .check_layout(&layout)
        .unwrap_err()
        .contains("5 wide; the map gives it 4 motors"));
    let mut m = map.clone();
    m.action.push("base".into());
    assert!(m
        .check_layout(&layout)
        .unwrap_err()
        .contains("action key \"base\""));

    // Observations: a motor missing, a frame of the wrong kind, no task.
    let (_, timed) = read_observation(&lerobot("observation.pkl"), &Limits::default()).unwrap();
    let mut t = timed.clone();
    t.observation.retain(|(k, _)| k != "wrist_roll.pos");
    let (field, what) = map.observation(&t, NoiseSource::Seed(0)).unwrap_err();
    assert_eq!(field, "TimedObservation.observation['wrist_roll.pos']");
    assert!(what.contains("single_arm"), "{what}");
    let mut t = timed.clone();
    for (k, v) in &mut t.observation {
        if k == "front" {
            *v = ObsValue::Number(1.0);
        }
    }
    assert_eq!(
        map.observation(&t, NoiseSource::Seed(0)).unwrap_err().0,
        "TimedObservation.observation['front']"
    );
    let mut t = timed;
    t.observation.retain(|(k, _)| k != "task");
    assert_eq!(
        map.observation(&t, NoiseSource::Seed(0)).unwrap_err().0,
        "TimedObservation.observation['task']"
    );
}
