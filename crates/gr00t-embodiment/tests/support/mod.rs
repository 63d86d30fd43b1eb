//! A fixture's DROID request JSON as the observation the HTTP door hands over: its base64
//! frames decoded by the layout's own [`ViewDecoder`](gr00t_embodiment::encoded_views) (size
//! checked from the header first), its state in model order, its instruction and noise. The
//! fixtures are valid bodies; the JSON parser's own refusals are tested with the HTTP door.

use gr00t_embodiment::droid::{CAMERAS, STATE_KEYS};
use gr00t_embodiment::embodiment::{EmbodimentProcessor, EncodedRequest, Observation};
use gr00t_embodiment::error::EmbodimentError;
use gr00t_embodiment::observation::{NoiseSource, RequestError, DEFAULT_SEED};
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
                .flat_map(|r| floats(r))
                .collect(),
        ),
        (None, Some(seed)) => NoiseSource::Seed(seed.as_u64().expect("a seed")),
        (None, None) => NoiseSource::Seed(DEFAULT_SEED),
    };
    Ok(Observation {
        images: p.view_decoder().decode(&views)?,
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
