//! LeRobot's robot client's objects onto a served embodiment through a map file
//! (`examples/lerobot_so101.json`, SO-101 → `new_embodiment` of the tiny multi-embodiment
//! checkpoint): NVIDIA's goldens reached through the map, the bytes lerobot 0.4.4 wrote run
//! through it, and configs and observations that do not fit refused saying what is served.

use gr00t::doors::lerobot::mapping::LeRobotMap;
use gr00t::doors::lerobot::objects::{ObsValue, TimedObservation};
use gr00t::doors::lerobot::pickle::Limits;
use gr00t::doors::lerobot::{read_config, read_observation};
use gr00t::doors::wire::ndarray::{DType, NdArray};
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
        weight_cache: None,
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
        let frame = NdArray::new(DType::U8, vec![h, w, 3], img.into_raw()).unwrap();
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
            .observation(timed.clone(), NoiseSource::Client(case.noise.clone()))
            .unwrap();
        let resp = engine.run(Request::new(layout.clone(), obs)).unwrap();
        for key in ["single_arm", "gripper"] {
            let ours: Vec<f32> = resp.actions.rows(key).iter().flatten().copied().collect();
            case.assert_action(key, &ours);
        }
        // LeRobot's reply: the first actions_per_chunk steps, arm then gripper, timed as
        // LeRobot's policy server times them.
        let actions = map.timed_actions(
            &resp.actions,
            (timed.timestamp, timed.timestep),
            10,
            1.0 / 30.0,
        );
        assert_eq!(actions.len(), 10);
        for (i, a) in actions.iter().enumerate() {
            let mut want = resp.actions.rows("single_arm")[i].clone();
            want.extend(&resp.actions.rows("gripper")[i]);
            assert_eq!(a.action, want, "{name} step {i}");
            assert_eq!(a.timestep, 7 + i as i64);
            assert_eq!(a.timestamp, 1796000000.25 + i as f64 / 30.0);
        }
        // Never more steps than the embodiment decodes.
        assert_eq!(
            map.timed_actions(&resp.actions, (timed.timestamp, timed.timestep), 100, 0.1)
                .len(),
            16
        );
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
        let obs = map
            .observation(timed.clone(), NoiseSource::Seed(3))
            .unwrap();
        assert_eq!(
            obs.instruction,
            "pick up the red cube and put it in the bowl"
        );
        assert_eq!(obs.state[0].0, "gripper");
        assert_eq!(obs.state[0].1, vec![-40.0 + 12.5 * 5.0 + 0.25 * 12.0]);
        let resp = engine.run(Request::new(layout.clone(), obs)).unwrap();
        let actions = map.timed_actions(
            &resp.actions,
            (timed.timestamp, timed.timestep),
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
    let (field, what) = map
        .observation(t.clone(), NoiseSource::Seed(0))
        .unwrap_err();
    assert_eq!(field, "TimedObservation.observation['wrist_roll.pos']");
    assert!(what.contains("single_arm"), "{what}");
    let mut t = timed.clone();
    for (k, v) in &mut t.observation {
        if k == "front" {
            *v = ObsValue::Number(1.0);
        }
    }
    assert_eq!(
        map.observation(t.clone(), NoiseSource::Seed(0))
            .unwrap_err()
            .0,
        "TimedObservation.observation['front']"
    );
    let mut t = timed;
    t.observation.retain(|(k, _)| k != "task");
    assert_eq!(
        map.observation(t.clone(), NoiseSource::Seed(0))
            .unwrap_err()
            .0,
        "TimedObservation.observation['task']"
    );
}

mod door {
    //! The door's robots (`doors::lerobot::robots`) as LeRobot's policy server serves one,
    //! each kept apart, on the tiny checkpoint through the shared queue.
    use super::*;
    use gr00t::doors::lerobot::pickle::{self, PyValue};
    use gr00t::doors::lerobot::robots::{transfer, Reassembly, Refusal, Robots, Served};
    use gr00t::doors::lerobot::{write_actions, Form};
    use gr00t_core::queue::start_engine;
    use gr00t_embodiment::observation::DEFAULT_SEED;
    use std::time::Duration;

    /// The timesteps of a pickled reply.
    fn timesteps(reply: &[u8]) -> Vec<i64> {
        let allowed = [
            ("lerobot.async_inference.helpers", "TimedAction"),
            ("torch", "tensor"),
        ];
        let PyValue::List(items) = pickle::read(reply, &allowed, &Limits::default()).unwrap()
        else {
            panic!("not a list")
        };
        items
            .iter()
            .map(|i| {
                let PyValue::Call { state: Some(s), .. } = i else {
                    panic!()
                };
                let PyValue::Dict(f) = &**s else { panic!() };
                match f
                    .iter()
                    .find(|(k, _)| k == &PyValue::Str("timestep".into()))
                {
                    Some((_, PyValue::Int(t))) => *t,
                    _ => panic!(),
                }
            })
            .collect()
    }

    /// `observation.pkl` (timestep 12) with another timestep and the same joints.
    fn at_timestep(t: u8) -> Vec<u8> {
        let mut b = lerobot("observation.pkl");
        let at = b
            .windows(10)
            .position(|w| w == b"\x8c\x08timestep")
            .unwrap();
        assert_eq!(&b[at + 10..at + 13], b"\x94K\x0c");
        b[at + 12] = t;
        b
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_robot_is_served_as_lerobots_server_serves_one_and_robots_are_kept_apart() {
        let (engine, layout) = engine();
        let engine = Arc::new(engine);
        let (_worker, queue) = start_engine(engine.clone(), 4, Arc::default()).unwrap();
        let served = Served {
            names: vec!["nvidia/GR00T-N1.7-3B".into()],
            device: "cpu".into(),
        };
        let robots = Robots::new(
            queue,
            served,
            layout.clone(),
            map(),
            Limits::default(),
            30.0,
            Duration::from_millis(300),
        )
        .unwrap();

        // Two robots' connections.
        let (one, two) = (Arc::new(1u8), Arc::new(2u8));
        // Observations before the policy, and a policy that is not served, are refused.
        assert_eq!(
            robots.observe(&one, &lerobot("observation_must_go.pkl")),
            Err(Refusal::NoPolicy)
        );
        let mut act = lerobot("policy_config.pkl");
        let at = act.windows(7).position(|w| w == b"\x8c\x05groot").unwrap();
        act[at + 2..at + 7].copy_from_slice(b"act__");
        assert!(
            matches!(robots.set_policy(&one, &act), Err(Refusal::Invalid(m)) if m.contains("policy_type \"act__\""))
        );
        robots
            .set_policy(&one, &lerobot("policy_config.pkl"))
            .unwrap();

        // Nothing waiting: the empty answer after the wait, and no prediction asked of the engine.
        assert_eq!(robots.actions(&one).await.unwrap(), (vec![], None));
        assert!(robots.actions(&one).await.unwrap().0.is_empty());

        // The first observation runs, and its reply is the engine's own answer to it, cut to
        // actions_per_chunk (16) and timed from its timestep.
        assert_eq!(
            robots.observe(&one, &lerobot("observation_must_go.pkl")),
            Ok(true)
        );
        let reply = robots.actions(&one).await.unwrap().0;
        let (_, timed) =
            read_observation(&lerobot("observation_must_go.pkl"), &Limits::default()).unwrap();
        let direct = engine
            .run(Request::new(
                layout.clone(),
                map()
                    .observation(timed.clone(), NoiseSource::Seed(DEFAULT_SEED))
                    .unwrap(),
            ))
            .unwrap();
        let want = map().timed_actions(
            &direct.actions,
            (timed.timestamp, timed.timestep),
            16,
            1.0 / 30.0,
        );
        assert_eq!(reply, write_actions(Form::Pickle, &want).unwrap());
        assert_eq!(timesteps(&reply), (0..16).collect::<Vec<_>>());

        // The filter: timestep 12 (joints 7.3 away) runs; the same again (a timestep already
        // run) and timestep 13 with the same joints (distance 0 < 1) do not; must_go always does.
        assert_eq!(robots.observe(&one, &lerobot("observation.pkl")), Ok(true));
        assert_eq!(timesteps(&robots.actions(&one).await.unwrap().0)[0], 12);
        assert_eq!(robots.observe(&one, &lerobot("observation.pkl")), Ok(false));
        assert_eq!(robots.observe(&one, &at_timestep(13)), Ok(false));
        assert!(robots.actions(&one).await.unwrap().0.is_empty());
        // Latest wins: of two waiting observations the newer runs.
        assert_eq!(robots.observe(&one, &at_timestep(13)), Ok(false));
        assert_eq!(
            robots.observe(&one, &lerobot("observation_np_scalars.pkl")),
            Ok(true)
        );
        assert_eq!(
            robots.observe(&one, &lerobot("observation_must_go.pkl")),
            Ok(true)
        );
        assert_eq!(timesteps(&robots.actions(&one).await.unwrap().0)[0], 0);

        // Robot 2 is another robot: no policy of its own yet, its own form (the safe one), and
        // its Ready does not touch robot 1's.
        assert_eq!(
            robots.observe(&two, &lerobot("observation.safe")),
            Err(Refusal::NoPolicy)
        );
        robots
            .set_policy(&two, &lerobot("policy_config.safe"))
            .unwrap();
        assert_eq!(robots.observe(&two, &lerobot("observation.safe")), Ok(true));
        let safe = robots.actions(&two).await.unwrap().0;
        assert_eq!(safe[0], 0, "a safe-form robot is answered in the safe form");
        robots.ready(&two).unwrap();
        assert_eq!(
            robots.observe(&two, &lerobot("observation.safe")),
            Err(Refusal::NoPolicy)
        );
        // Robot 1 kept its filter: timestep 12 has run; 20, as far from the last run, runs.
        assert_eq!(robots.observe(&one, &lerobot("observation.pkl")), Ok(false));
        assert_eq!(robots.observe(&one, &at_timestep(20)), Ok(true));
        assert_eq!(timesteps(&robots.actions(&one).await.unwrap().0)[0], 20);
        // A forged payload is refused and the robot is served after it.
        assert!(
            matches!(robots.observe(&one, b"cos\nsystem\n(S'echo pwned'\ntR."), Err(Refusal::Invalid(m)) if m.contains("os.system is refused"))
        );
        assert_eq!(
            robots.observe(&one, &lerobot("observation_must_go.pkl")),
            Ok(true)
        );
        assert_eq!(robots.actions(&one).await.unwrap().0, reply);
        // A robot whose connection ended is dropped when the next one calls.
        assert_eq!(robots.len(), 2);
        drop(two);
        let three = Arc::new(3u8);
        robots.ready(&three).unwrap();
        assert_eq!(robots.len(), 2);
    }

    #[test]
    fn a_policy_naming_another_checkpoint_or_device_is_refused_saying_what_is_served() {
        let served = Served {
            names: vec!["nvidia/GR00T-N1.7-3B".into(), "/ckpt/so101".into()],
            device: "cuda:0".into(),
        };
        let (_, mut c) = read_config(&lerobot("policy_config.pkl"), &Limits::default()).unwrap();
        c.device = "cuda".into();
        assert_eq!(served.check(&c), Ok(()));
        c.pretrained_name_or_path = "/ckpt/so101/".into();
        assert_eq!(served.check(&c), Ok(()));
        c.pretrained_name_or_path = "lerobot/pi0".into();
        let e = served.check(&c).unwrap_err();
        assert!(
            e.contains("\"lerobot/pi0\" is not what this server serves")
                && e.contains("/ckpt/so101"),
            "{e}"
        );
        c.pretrained_name_or_path = "nvidia/GR00T-N1.7-3B".into();
        c.device = "cpu".into();
        let e = served.check(&c).unwrap_err();
        assert!(
            e.contains("\"cuda:0\"") && e.contains("--policy_device=cuda"),
            "{e}"
        );
    }

    #[test]
    fn pieces_are_put_back_together_within_the_limit() {
        let whole = lerobot("observation.pkl");
        let max = 4 << 20;
        let mut r = Reassembly::default();
        // Two pieces, as LeRobot's sender cuts at 1 MB here: BEGIN, END.
        let (a, b) = whole.split_at(1 << 20);
        assert_eq!(r.push(transfer::BEGIN, a.to_vec(), max), Ok(None));
        assert_eq!(
            r.push(transfer::END, b.to_vec(), max),
            Ok(Some(whole.clone()))
        );
        // A lone END is a whole message; BEGIN starts over whatever came before.
        assert_eq!(
            r.push(transfer::END, whole.clone(), max),
            Ok(Some(whole.clone()))
        );
        assert_eq!(r.push(transfer::MIDDLE, b"junk".to_vec(), max), Ok(None));
        assert_eq!(r.push(transfer::BEGIN, a.to_vec(), max), Ok(None));
        assert_eq!(r.push(transfer::MIDDLE, b[..10].to_vec(), max), Ok(None));
        assert_eq!(
            r.push(transfer::END, b[10..].to_vec(), max),
            Ok(Some(whole.clone()))
        );
        // Over the limit, and an unknown state: refused.
        assert_eq!(r.push(transfer::BEGIN, whole.clone(), max), Ok(None));
        assert_eq!(r.push(transfer::MIDDLE, whole.clone(), max), Ok(None));
        assert!(
            matches!(r.push(transfer::MIDDLE, whole.clone(), max), Err(Refusal::Invalid(m)) if m.contains("over 4194304 bytes"))
        );
        assert!(
            matches!(r.push(0, vec![], max), Err(Refusal::Invalid(m)) if m.contains("transfer_state 0"))
        );
    }
}

mod history {
    //! A robot of an embodiment with frame history (R1: each view at t−20 and t) sends one frame
    //! per camera, as LeRobot's client does: the door completes t−20 from the robot's own frames.
    use super::*;
    use gr00t::doors::lerobot::robots::{Robots, Served};
    use gr00t_core::queue::start_engine;
    use gr00t_embodiment::image::Frame;
    use gr00t_embodiment::observation::{Observation, DEFAULT_SEED};
    use safetensors::tensor::{Dtype as StDtype, TensorView};
    use serde_json::{json, Value};
    use std::time::Duration;

    const R1: &str = "real_r1_pro_sharpa_relative_eef";

    /// LeRobot PR #3048's form: `[u32 BE JSON length][JSON][safetensors]`.
    fn safe(meta: Value, frames: &[(String, Frame)]) -> Vec<u8> {
        let json = meta.to_string().into_bytes();
        let mut out = (json.len() as u32).to_be_bytes().to_vec();
        out.extend(&json);
        if !frames.is_empty() {
            let views: Vec<(String, TensorView<'_>)> = frames
                .iter()
                .map(|(k, f)| {
                    let v = TensorView::new(StDtype::U8, vec![f.height, f.width, 3], &f.data);
                    (k.clone(), v.unwrap())
                })
                .collect();
            out.extend(safetensors::serialize(views, None).unwrap());
        }
        out
    }

    fn png(case: &MultiCase, file: &str) -> Frame {
        let img = image::open(case.dir.join(file)).unwrap().to_rgb8();
        let (w, h) = (img.width() as usize, img.height() as usize);
        Frame::new(w, h, img.into_raw()).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_door_keeps_each_robots_frames_for_t_minus_20() {
        let engine = Arc::new(
            Engine::load(&EngineOptions {
                checkpoint: gr00t_fixtures::multi_checkpoint(),
                tokenizer: None,
                device: DeviceOptions::default(),
                embodiments: vec![R1.into()],
                weight_cache: None,
            })
            .unwrap(),
        );
        let layout = engine.layouts().resolve(R1).unwrap().clone();
        assert_eq!(layout.spec.frame_deltas, vec![-20, 0]);
        let case = MultiCase::load("case_real_r1_pro_sharpa_relative_eef_1");
        // Each state value a motor of its own; each view a camera of its name.
        let motors = |key: &str, n: usize| (0..n).map(|i| format!("{key}.{i}")).collect::<Vec<_>>();
        let map = LeRobotMap {
            embodiment: R1.into(),
            state: case
                .state
                .iter()
                .map(|(k, v)| (k.clone(), motors(k, v.len())))
                .collect(),
            video: case
                .video
                .iter()
                .map(|(v, _)| (v.clone(), v.clone()))
                .collect(),
            action: layout
                .spec
                .actions
                .keys()
                .map(|(k, _, _)| k.to_string())
                .collect(),
        };
        let horizon = layout.spec.actions.horizon();
        let (_worker, queue) = start_engine(engine.clone(), 4, Arc::default()).unwrap();
        let served = Served {
            names: vec!["r1".into()],
            device: "cpu".into(),
        };
        let robots = Robots::new(
            queue,
            served,
            layout.clone(),
            map.clone(),
            Limits::default(),
            30.0,
            Duration::from_millis(300),
        )
        .unwrap();
        let names: Vec<String> = map.state.values().flatten().cloned().collect();
        let mut features = json!({"observation.state": {"dtype": "float32", "shape": [names.len()], "names": names}});
        for (view, _) in &case.video {
            features[format!("observation.images.{view}")] =
                json!({"dtype": "image", "shape": [240, 320, 3]});
        }
        let config = json!({"type": "RemotePolicyConfig", "policy_type": "groot", "pretrained_name_or_path": "r1",
            "lerobot_features": features, "actions_per_chunk": horizon, "device": "cpu", "rename_map": {}});
        let mut scalars = serde_json::Map::new();
        for (key, values) in &case.state {
            for (name, v) in motors(key, values.len()).into_iter().zip(values) {
                scalars.insert(name, json!(v));
            }
        }
        scalars.insert("task".into(), json!(case.instruction));
        let observation = |t: usize, step: i64| {
            let frames: Vec<(String, Frame)> = case
                .video
                .iter()
                .map(|(v, files)| (v.clone(), png(&case, &files[t])))
                .collect();
            let meta = json!({"type": "TimedObservation", "timestamp": 10.0 + step as f64, "timestep": step,
                "must_go": true, "scalar_data": scalars, "numpy_keys": case.video.iter().map(|(v, _)| v).collect::<Vec<_>>()});
            safe(meta, &frames)
        };
        // What the engine answers when both frames are sent.
        let direct = |older: usize, newer: usize| {
            let obs = Observation {
                images: case
                    .video
                    .iter()
                    .map(|(v, files)| {
                        (
                            v.clone(),
                            vec![png(&case, &files[older]), png(&case, &files[newer])],
                        )
                    })
                    .collect(),
                state: case.state.clone(),
                instruction: case.instruction.clone(),
                noise: NoiseSource::Seed(DEFAULT_SEED),
            };
            engine
                .run(Request::new(layout.clone(), obs))
                .unwrap()
                .actions
        };

        let (a, b) = (Arc::new('a'), Arc::new('b'));
        for r in [&a, &b] {
            robots.set_policy(r, &safe(config.clone(), &[])).unwrap();
        }
        // Robot a: the t−20 frames, then the t frames. Its first answer pairs its frames with
        // themselves; its second takes t−20 from its own history: the case's two frames.
        robots.observe(&a, &observation(0, 0)).unwrap();
        let (_, first) = robots.actions(&a).await.unwrap();
        assert_eq!(first.unwrap().actions, direct(0, 0));
        robots.observe(&a, &observation(1, 1)).unwrap();
        let (_, second) = robots.actions(&a).await.unwrap();
        assert_eq!(second.unwrap().actions, direct(0, 1));
        // Robot b's history is its own: its first frame is paired with itself, not with a's.
        robots.observe(&b, &observation(1, 0)).unwrap();
        let (_, other) = robots.actions(&b).await.unwrap();
        assert_eq!(other.unwrap().actions, direct(1, 1));
        assert_ne!(direct(0, 1), direct(1, 1));
    }
}
