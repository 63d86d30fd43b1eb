//! Unit tests of the openpi door's DROID observation: the Euler conversion, the keys and
//! what is wrong with them, and the connection's frame history.

use super::droid_obs::{self, eef_9d_from_cartesian, CameraInput};
use crate::doors::wire::msgpack_numpy as mp;
use crate::doors::wire::ndarray::{DType, NdArray};
use gr00t_embodiment::droid::RawState;
use gr00t_embodiment::frame_history::{FrameHistory, KeptFrame};
use gr00t_embodiment::image::Frame;
use gr00t_embodiment::observation::NoiseSource;
use rmpv::Value;
use std::sync::Arc;

#[test]
fn cartesian_to_eef_9d_uses_intrinsic_xyz_and_rows() {
    // Zero rotation: the rows of the DROID correction matrix.
    let e = eef_9d_from_cartesian(&[1.0, 2.0, 3.0, 0.0, 0.0, 0.0]);
    assert_eq!(e, [1.0, 2.0, 3.0, 0.0, 0.0, -1.0, -1.0, 0.0, 0.0]);
    // (π/2, π/2, 0) intrinsic = Rx(90°)·Ry(90°) = [[0,0,1],[1,0,0],[0,1,0]]; @C → rows
    // [0,1,0], [0,0,-1] (extrinsic would give [-1,0,0], [0,-1,0]).
    let h = std::f64::consts::FRAC_PI_2;
    let e = eef_9d_from_cartesian(&[0.0, 0.0, 0.0, h, h, 0.0]);
    let want = [0.0, 1.0, 0.0, 0.0, 0.0, -1.0];
    for (g, w) in e[3..].iter().zip(want) {
        assert!((g - w).abs() < 1e-7, "{e:?}");
    }
    // scipy 1.17: (Rotation.from_euler("XYZ", e).as_matrix() @ C)[:2].ravel(), float32; the
    // issue quotes the first two to six digits. Lowercase "xyz" gives other numbers.
    let cases: [([f64; 6], [f32; 9]); 2] = [
        (
            [0.52, -0.08, 0.31, 3.05, -0.21, 0.12],
            [
                0.52,
                -0.08,
                0.31,
                0.11708224,
                -0.2084599,
                -0.9709975,
                0.9863646,
                -0.08945525,
                0.13814001,
            ],
        ),
        (
            [0.40, 0.10, 0.25, -2.9, 0.35, -1.2],
            [
                0.4,
                0.1,
                0.25,
                -0.8755321,
                0.3428978,
                -0.34038898,
                0.4282969,
                0.22474429,
                -0.87524384,
            ],
        ),
    ];
    for (c, want) in cases {
        let e = eef_9d_from_cartesian(&c);
        for (g, w) in e.iter().zip(want) {
            assert!((g - w).abs() <= 6e-8, "{e:?} vs {want:?}");
        }
    }
}

fn frame(v: u8) -> Frame {
    Frame::new(4, 2, vec![v; 4 * 2 * 3]).unwrap()
}

fn observation(v: u8) -> droid_obs::DroidObservation {
    droid_obs::DroidObservation {
        cameras: [
            CameraInput::Current(frame(v)),
            CameraInput::Current(frame(v + 100)),
        ],
        state: state(),
        instruction: "go".into(),
        noise: NoiseSource::Seed(42),
    }
}

fn state() -> RawState {
    RawState {
        eef_9d: [0.5; 9],
        gripper_position: [0.25],
        joint_position: [0.125; 7],
    }
}

/// The tiny checkpoint's DROID layout, as the door's requests carry it.
fn droid_layout() -> Arc<gr00t_embodiment::layout::Layout> {
    let ckpt = gr00t_model::Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
    let layouts =
        gr00t_core::layouts::Layouts::of_checkpoint(&ckpt, &[gr00t_embodiment::EMBODIMENT_TAG])
            .unwrap();
    layouts.all()[0].clone()
}

/// A DROID observation through a session's frame history as the engine applies it (DROID's
/// offsets `[-15, 0]`): each camera's `[t−15, t]`.
fn through(h: &mut FrameHistory, obs: droid_obs::DroidObservation) -> Vec<Vec<Frame>> {
    let deltas = [-15, 0];
    let a = obs.into_request(droid_layout());
    assert_eq!(a.tag(), gr00t_embodiment::EMBODIMENT_TAG);
    let images = a.observation.images;
    let names: Vec<&str> = images.iter().map(|(v, _)| v.as_str()).collect();
    assert_eq!(names, gr00t_embodiment::droid::CAMERAS);
    let engaged = h.engaged(images.iter().map(|(v, f)| (v.as_str(), f.len())), &deltas);
    let kept = |k: &KeptFrame| match k {
        KeptFrame::Sent(f) => (**f).clone(),
        KeptFrame::Prepared(p) => p.resized.clone(),
    };
    let mut used = Vec::new();
    let mut currents = Vec::new();
    for (view, frames) in &images {
        let current = frames.last().unwrap().clone();
        currents.push((view.clone(), KeptFrame::Sent(Arc::new(current))));
        used.push(h.complete(view, frames, &deltas, kept));
    }
    if engaged {
        h.record(currents, &deltas);
    }
    used
}

#[test]
fn droid_frames_off_the_layouts_grid_are_refused_at_the_door() {
    let layout = droid_layout();
    let frame = |w: usize, h: usize| Frame::new(w, h, vec![0; w * h * 3]).unwrap();
    let with = |exterior: Frame, wrist: CameraInput| {
        let mut o = observation(0);
        o.cameras = [CameraInput::Pair([exterior.clone(), exterior]), wrist];
        o
    };
    with(frame(320, 180), CameraInput::Current(frame(320, 180)))
        .check_frames(&layout.frames)
        .unwrap();
    // A frame the layout refuses (here its aspect; a 16:9 frame off a 320x180 frame's patch
    // grid, which no tiny checkpoint has, takes the same path): the door refuses it, naming
    // the camera, where the engine used to.
    let e = with(frame(320, 180), CameraInput::Current(frame(256, 256)))
        .check_frames(&layout.frames)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("observation/wrist_image_left: bad image geometry: frame 256x256"),
        "{e}"
    );
}

#[test]
fn history_pairs_each_frame_with_the_one_15_observations_back() {
    // What the websocket door's own history did, now through the core session's.
    let mut h = FrameHistory::default();
    // Until 15 earlier frames exist, t−15 is the oldest one kept (the first: itself at first).
    let r = through(&mut h, observation(0));
    assert_eq!(r[0], [frame(0), frame(0)]);
    assert_eq!(r[1], [frame(100), frame(100)]);
    for v in 1..15 {
        let r = through(&mut h, observation(v));
        assert_eq!(r[0], [frame(0), frame(v)]);
    }
    for v in 15..20 {
        let r = through(&mut h, observation(v));
        assert_eq!(r[0], [frame(v - 15), frame(v)], "observation {v}");
        assert_eq!(r[1], [frame(v - 15 + 100), frame(v + 100)]);
    }
    // An explicit pair bypasses the history.
    let mut o = observation(50);
    o.cameras[0] = CameraInput::Pair([frame(1), frame(2)]);
    assert_eq!(through(&mut h, o)[0], [frame(1), frame(2)]);
    // The state and the rest of the observation pass unchanged.
    let a = observation(3).into_request(droid_layout());
    assert_eq!(a.observation.state, state().to_pairs());
    assert_eq!(a.observation.instruction, "go");
    assert_eq!(a.observation.noise, NoiseSource::Seed(42));
}

fn openpi_image(shape: Vec<usize>, dtype: DType) -> Value {
    let n: usize = shape.iter().product::<usize>() * dtype.size;
    mp::openpi_array(&NdArray::new(dtype, shape, vec![9; n]).unwrap())
}

fn droid_map() -> Vec<(Value, Value)> {
    let f64s = |v: &[f64]| {
        let data = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        mp::openpi_array(&NdArray::new(DType::parse("<f8").unwrap(), vec![v.len()], data).unwrap())
    };
    vec![
        (
            Value::from("observation/exterior_image_1_left"),
            openpi_image(vec![180, 320, 3], DType::U8),
        ),
        (
            Value::from("observation/wrist_image_left"),
            openpi_image(vec![2, 180, 320, 3], DType::U8),
        ),
        (Value::from("observation/joint_position"), f64s(&[0.1; 7])),
        (
            Value::from("observation/gripper_position"),
            Value::Array(vec![Value::F64(0.5)]),
        ),
        (
            Value::from("observation/cartesian_position"),
            f64s(&[0.0; 6]),
        ),
        (Value::from("prompt"), Value::from("pick")),
        (Value::from("__noise_seed__"), Value::from(7)),
    ]
}

#[test]
fn droid_observation_parses_and_names_what_is_wrong() {
    let o = droid_obs::parse(&droid_map()).unwrap();
    assert!(matches!(o.cameras[0], CameraInput::Current(_)));
    assert!(matches!(o.cameras[1], CameraInput::Pair(_)));
    assert_eq!(o.state.joint_position, [0.1f32; 7]);
    assert_eq!(o.state.gripper_position, [0.5]);
    assert_eq!(
        o.state.eef_9d,
        [0.0, 0.0, 0.0, 0.0, 0.0, -1.0, -1.0, 0.0, 0.0]
    );
    assert_eq!(o.noise, NoiseSource::Seed(7));
    assert_eq!(o.instruction, "pick");

    let with = |key: &str, v: Option<Value>| {
        let mut m: Vec<_> = droid_map()
            .into_iter()
            .filter(|(k, _)| k.as_str() != Some(key))
            .collect();
        if let Some(v) = v {
            m.push((Value::from(key), v));
        }
        droid_obs::parse(&m).unwrap_err().to_string()
    };
    let cases = [
        (
            "observation/wrist_image_left",
            Some(openpi_image(vec![224, 224, 3], DType::U8)),
            "resize_with_pad",
        ),
        (
            "observation/wrist_image_left",
            Some(openpi_image(vec![180, 320, 3], DType::F32)),
            "uint8",
        ),
        (
            "observation/joint_position",
            None,
            "joint_position is missing",
        ),
        (
            "observation/joint_position",
            Some(Value::Array(vec![Value::F64(1.0); 6])),
            "7 values",
        ),
        ("observation/cartesian_position", None, "cartesian_position"),
        ("prompt", Some(Value::from("  ")), "empty"),
        ("__noise_seed__", Some(Value::from(-1)), "__noise_seed__"),
    ];
    for (key, v, want) in cases {
        let e = with(key, v);
        assert!(e.contains(want), "{key}: {e}");
    }
    // eef_9d, when given, wins over cartesian_position.
    let mut m = droid_map();
    m.push((
        Value::from("observation/eef_9d"),
        Value::Array(vec![Value::F64(2.0); 9]),
    ));
    assert_eq!(droid_obs::parse(&m).unwrap().state.eef_9d, [2.0; 9]);
}
