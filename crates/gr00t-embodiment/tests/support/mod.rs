//! A fixture's DROID request JSON as the observation the HTTP door hands over: its base64
//! frames decoded by the layout's own [`ViewDecoder`](gr00t_embodiment::encoded_views) (size
//! checked from the header first), its state in model order, its instruction and noise. The
//! fixtures are valid bodies; the JSON parser's own refusals are tested with the HTTP door.
//! Also what the multi-embodiment tests share: a case's observation from its PNGs, its
//! processor, the exact check of the processor's inputs, and a DROID raw state.

// Each test binary uses a part of this module.
#![allow(dead_code)]

use gr00t_embodiment::droid::{CAMERAS, STATE_KEYS};
use gr00t_embodiment::embodiment::{EmbodimentProcessor, EncodedRequest, Observation};
use gr00t_embodiment::error::EmbodimentError;
use gr00t_embodiment::image::Frame;
use gr00t_embodiment::observation::{NoiseSource, RequestError, DEFAULT_SEED};
use gr00t_embodiment::prompt::PromptEncoder;
use gr00t_fixtures::{MultiCase, Taps};
use gr00t_model::{Checkpoint, ModelInputs};
use serde_json::Value;

/// The body's observation for `processor`'s layout; frame errors name the frame.
pub fn observation(p: &EmbodimentProcessor, body: &[u8]) -> Result<Observation, RequestError> {
    let v: Value = serde_json::from_slice(body).expect("a fixture body is JSON");
    let views: Vec<(String, Vec<String>)> = CAMERAS
        .iter()
        .map(|cam| {
            let frames = v["images"][*cam].as_array().expect("frames per camera");
            let frames = frames
                .iter()
                .map(|f| f.as_str().expect("base64").to_string());
            (cam.to_string(), frames.collect())
        })
        .collect();
    let floats = |v: &Value| -> Vec<f32> {
        let list = v.as_array().expect("an array of numbers");
        list.iter()
            .map(|x| x.as_f64().expect("a number") as f32)
            .collect()
    };
    let noise = match (v.get("noise"), v.get("seed")) {
        (Some(rows), _) => NoiseSource::Client(
            rows.as_array()
                .expect("noise rows")
                .iter()
                .flat_map(&floats)
                .collect(),
        ),
        (None, Some(seed)) => NoiseSource::Seed(seed.as_u64().expect("a seed")),
        (None, None) => NoiseSource::Seed(DEFAULT_SEED),
    };
    Ok(Observation {
        images: p.layout().frames.decode(&views)?,
        state: STATE_KEYS
            .iter()
            .map(|(k, _)| (k.to_string(), floats(&v["state"][*k])))
            .collect(),
        instruction: v["instruction"].as_str().expect("an instruction").into(),
        noise,
    })
}

/// The body through the processor, as the engine runs it; every failure here is the client's.
pub fn encode(p: &EmbodimentProcessor, body: &[u8]) -> Result<EncodedRequest, RequestError> {
    p.encode(&observation(p, body)?).map_err(|e| match e {
        EmbodimentError::Invalid(e) => e,
        other => panic!("not the client's fault: {other}"),
    })
}

/// A PNG file as an RGB frame.
pub fn png(path: &std::path::Path) -> Frame {
    let img = image::open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .to_rgb8();
    Frame::new(img.width() as usize, img.height() as usize, img.into_raw()).unwrap()
}

/// The case's observation with its frames read from the PNGs named in `observation.json`.
pub fn case_observation(case: &MultiCase) -> Observation {
    let dir = &case.dir;
    let obs: Value =
        serde_json::from_slice(&std::fs::read(dir.join("observation.json")).unwrap()).unwrap();
    let images = obs["video"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(view, files)| {
            let frames = files
                .as_array()
                .unwrap()
                .iter()
                .map(|f| png(&dir.join(f.as_str().unwrap())))
                .collect();
            (view.clone(), frames)
        })
        .collect();
    Observation {
        images,
        state: case.state.clone(),
        instruction: case.instruction.clone(),
        noise: NoiseSource::Client(case.noise.clone()),
    }
}

/// The processor of `case`'s embodiment tag on `ckpt`, with the fixture tokenizer.
pub fn case_processor(ckpt: &Checkpoint, case: &MultiCase) -> EmbodimentProcessor {
    let prompt = PromptEncoder::load(gr00t_fixtures::tokenizer_path()).unwrap();
    EmbodimentProcessor::new(ckpt, prompt, &case.tag).unwrap()
}

/// Token ids, image grids, state and embodiment id exactly as upstream's processor made them
/// (`proc.*` of `out`).
pub fn assert_inputs_match(name: &str, inputs: &ModelInputs, out: &Taps) {
    let ids: Vec<i64> = inputs.input_ids.iter().map(|&i| i as i64).collect();
    assert_eq!(ids, out.i64s("proc.input_ids"), "{name} input_ids");
    let grids: Vec<i64> = inputs
        .image_grid_thw
        .iter()
        .flatten()
        .map(|&g| g as i64)
        .collect();
    assert_eq!(grids, out.i64s("proc.image_grid_thw"), "{name} grids");
    assert_eq!(inputs.state, out.f32s("proc.state"), "{name} state");
    assert_eq!(
        inputs.embodiment_id as i64,
        out.i64s("proc.embodiment_id")[0],
        "{name} embodiment_id"
    );
}

/// A DROID raw state in the layout's key order.
pub fn droid_state<'a>(
    eef: &'a [f32],
    gripper: &'a [f32],
    joint: &'a [f32],
) -> [(&'static str, &'a [f32]); 3] {
    [
        ("eef_9d", eef),
        ("gripper_position", gripper),
        ("joint_position", joint),
    ]
}
