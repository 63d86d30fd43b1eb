//! Observations that arrive as raw frames (ZMQ, websocket) go through the same inference queue
//! as HTTP bodies. The queue carries bytes, so a decoded observation is packed behind a random
//! per-process tag (no client can send it) and unpacked on the inference thread, where it skips
//! base64 and PNG decoding and enters the processor as frames.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub use super::items::{AnyRequest, Item, RawRequest};
use super::msgpack_numpy::{get, pack, str_map, unpack};
use crate::engine::{Engine, PredictError};
use crate::server::{SubmitError, WorkerHandle};
use axum::body::Bytes;
use gr00t_embodiment::embodiment::Observation;
use gr00t_embodiment::image::Frame;
use gr00t_embodiment::request::{NoiseSource, PredictRequest, RawState};
use gr00t_embodiment::response::PredictResponse;
use rmpv::Value;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;
use std::time::Instant;

/// `[width, height, bytes]`.
fn frame_value(f: &Frame) -> Value {
    Value::Array(vec![
        Value::from(f.width as u64),
        Value::from(f.height as u64),
        Value::Binary(f.data.clone()),
    ])
}

fn frame_from_value(v: &Value) -> Option<Frame> {
    let f = v.as_array()?;
    let (w, h) = (f.first()?.as_u64()?, f.get(1)?.as_u64()?);
    let Value::Binary(data) = f.get(2)? else {
        return None;
    };
    Frame::new(w as usize, h as usize, data.clone()).ok()
}

/// `("seed", n)` or `("noise", f32 bytes)`.
fn noise_entry(noise: &NoiseSource) -> (&'static str, Value) {
    match noise {
        NoiseSource::Seed(seed) => ("seed", Value::from(*seed)),
        NoiseSource::Client(n) => ("noise", Value::Binary(f32_bytes(n))),
    }
}

fn noise_from_map(m: &[(Value, Value)]) -> Option<NoiseSource> {
    match (get(m, "seed"), get(m, "noise")) {
        (Some(s), None) => Some(NoiseSource::Seed(s.as_u64()?)),
        (None, Some(Value::Binary(b))) => Some(NoiseSource::Client(f32s(b))),
        _ => None,
    }
}

/// The process's tag, then the packed map.
fn tagged_body(v: Value) -> Bytes {
    let mut body = tag().to_vec();
    body.extend(pack(&v));
    Bytes::from(body)
}

impl AnyRequest {
    /// The tagged queue body (an `embodiment` key tells it from a DROID one).
    pub fn to_body(&self) -> Bytes {
        let o = &self.observation;
        let images = o
            .images
            .iter()
            .map(|(view, frames)| {
                let frames = frames.iter().map(frame_value).collect();
                Value::Array(vec![Value::from(view.as_str()), Value::Array(frames)])
            })
            .collect();
        let state = o
            .state
            .iter()
            .map(|(k, v)| Value::Array(vec![Value::from(k.as_str()), Value::Binary(f32_bytes(v))]))
            .collect();
        tagged_body(str_map([
            ("embodiment", Value::from(self.tag.as_str())),
            ("images", Value::Array(images)),
            ("state", Value::Array(state)),
            ("instruction", Value::from(o.instruction.as_str())),
            noise_entry(&o.noise),
        ]))
    }

    fn unpack(m: &[(Value, Value)]) -> Option<AnyRequest> {
        let mut images = Vec::new();
        for entry in get(m, "images")?.as_array()? {
            let [view, frames] = entry.as_array()?.as_slice() else {
                return None;
            };
            let out = frames
                .as_array()?
                .iter()
                .map(frame_from_value)
                .collect::<Option<Vec<_>>>()?;
            images.push((view.as_str()?.to_string(), out));
        }
        let mut state = Vec::new();
        for entry in get(m, "state")?.as_array()? {
            let [key, Value::Binary(b)] = entry.as_array()?.as_slice() else {
                return None;
            };
            state.push((key.as_str()?.to_string(), f32s(b)));
        }
        let noise = noise_from_map(m)?;
        Some(AnyRequest {
            tag: get(m, "embodiment")?.as_str()?.to_string(),
            observation: Observation {
                images,
                state,
                instruction: get(m, "instruction")?.as_str()?.to_string(),
                noise,
            },
        })
    }
}

impl Item {
    /// The DROID request (tests of the DROID layout).
    #[cfg(test)]
    pub fn droid(&self) -> &RawRequest {
        match self {
            Item::Droid(r) => r,
            Item::Any(a) => panic!("not a DROID item: {}", a.tag),
        }
    }

    /// Replaces the initial noise.
    pub fn set_noise(&mut self, noise: NoiseSource) {
        match self {
            Item::Droid(r) => r.noise = noise,
            Item::Any(a) => a.observation.noise = noise,
        }
    }

    /// The tagged queue body.
    pub fn to_body(&self) -> Bytes {
        match self {
            Item::Droid(r) => r.to_body(),
            Item::Any(a) => a.to_body(),
        }
    }

    /// Unpacks a tagged body; `None` when `body` is not one (an HTTP body).
    pub fn from_body(body: &[u8]) -> Option<Result<Item, String>> {
        let rest = body.strip_prefix(&tag()[..])?;
        let bad = || "malformed internal request".to_string();
        let v = match unpack(rest) {
            Ok(v) => v,
            Err(_) => return Some(Err(bad())),
        };
        let Some(m) = v.as_map() else {
            return Some(Err(bad()));
        };
        Some(if get(m, "embodiment").is_some() {
            AnyRequest::unpack(m).map(Item::Any).ok_or_else(bad)
        } else {
            RawRequest::unpack_map(m).map(Item::Droid).ok_or_else(bad)
        })
    }
}

/// Why a protocol request got no actions: the text goes back to the client.
#[derive(Debug, Clone, PartialEq)]
pub enum InferError {
    /// The queue is full; `retry_after_s` is the expected wait.
    Busy {
        /// Queue capacity.
        queue: usize,
        /// Seconds until a retry is likely to be queued.
        retry_after_s: u64,
    },
    /// The observation was refused (bad frame, too long an instruction, …).
    BadRequest(String),
    /// The server failed.
    Internal(String),
}

impl std::fmt::Display for InferError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InferError::Busy {
                queue,
                retry_after_s,
            } => write!(
                f,
                "server busy: {queue} requests already wait for the model; retry in {retry_after_s} s"
            ),
            InferError::BadRequest(m) => write!(f, "{m}"),
            InferError::Internal(m) => write!(f, "internal error: {m}"),
        }
    }
}

/// 8 fixed bytes (a NUL first, so no JSON body starts this way) and 16 random ones.
fn tag() -> &'static [u8; 24] {
    static TAG: OnceLock<[u8; 24]> = OnceLock::new();
    TAG.get_or_init(|| {
        let mut t = [0u8; 24];
        t[..8].copy_from_slice(b"\0gr00tRQ");
        // std's RandomState is seeded from the OS per process.
        for (i, chunk) in t[8..].chunks_mut(8).enumerate() {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_usize(i);
            chunk.copy_from_slice(&h.finish().to_le_bytes());
        }
        t
    })
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

impl RawRequest {
    /// The tagged queue body.
    pub fn to_body(&self) -> Bytes {
        let frames = self.frames.iter().flatten().map(frame_value).collect();
        let s = &self.state;
        let state: Vec<f32> = [
            &s.eef_9d[..],
            &s.gripper_position[..],
            &s.joint_position[..],
        ]
        .concat();
        tagged_body(str_map([
            ("frames", Value::Array(frames)),
            ("state", Value::Binary(f32_bytes(&state))),
            ("instruction", Value::from(self.instruction.as_str())),
            noise_entry(&self.noise),
        ]))
    }

    fn unpack_map(m: &[(Value, Value)]) -> Option<RawRequest> {
        let frames = get(m, "frames")?
            .as_array()?
            .iter()
            .map(frame_from_value)
            .collect::<Option<Vec<_>>>()?;
        let mut frames = frames.into_iter();
        let mut next = || frames.next();
        let frames = [[next()?, next()?], [next()?, next()?]];
        let state = match get(m, "state")? {
            Value::Binary(b) if b.len() == 17 * 4 => f32s(b),
            _ => return None,
        };
        let mut raw = RawState {
            eef_9d: [0.0; 9],
            gripper_position: [0.0; 1],
            joint_position: [0.0; 7],
        };
        raw.eef_9d.copy_from_slice(&state[..9]);
        raw.gripper_position.copy_from_slice(&state[9..10]);
        raw.joint_position.copy_from_slice(&state[10..]);
        let noise = noise_from_map(m)?;
        Some(RawRequest {
            frames,
            state: raw,
            instruction: get(m, "instruction")?.as_str()?.to_string(),
            noise,
        })
    }

    /// Runs the model on the decoded frames (on the inference thread).
    fn predict(self, engine: &Engine, t0: Instant) -> Result<PredictResponse, PredictError> {
        let req = PredictRequest {
            // Not read: the frames below replace the base64 images.
            images: Default::default(),
            state: self.state,
            instruction: self.instruction,
            noise: self.noise,
            return_normalized: false,
        };
        let frames = self.frames;
        engine.predict_encoded(t0, &req, |p| p.encode_frames(frames, &req))
    }
}

/// The inference thread's model call: a tagged body takes the raw-frame path, anything else is
/// an HTTP `/predict` body.
pub fn predict(engine: &Engine, body: &[u8]) -> Result<PredictResponse, PredictError> {
    let t0 = Instant::now();
    match Item::from_body(body) {
        None => engine.predict(body),
        Some(Err(e)) => Err(PredictError::Internal(e)),
        Some(Ok(Item::Droid(raw))) => raw.predict(engine, t0),
        Some(Ok(Item::Any(a))) => engine.predict_observation(t0, &a.tag, a.observation),
    }
}

/// Queues one DROID observation behind whatever HTTP and other protocol requests wait, and
/// waits.
pub async fn infer(worker: &WorkerHandle, req: &RawRequest) -> Result<PredictResponse, InferError> {
    infer_body(worker, req.to_body()).await
}

/// [`infer`] for any embodiment's observation.
pub async fn infer_item(worker: &WorkerHandle, item: &Item) -> Result<PredictResponse, InferError> {
    infer_body(worker, item.to_body()).await
}

async fn infer_body(worker: &WorkerHandle, body: Bytes) -> Result<PredictResponse, InferError> {
    let reply = worker.submit(body).map_err(|e| match e {
        SubmitError::Full => InferError::Busy {
            queue: worker.state().capacity,
            retry_after_s: worker.retry_after_s(),
        },
        SubmitError::Stopped => InferError::Internal("the inference worker has stopped".into()),
    })?;
    match reply.await {
        Ok(Ok(resp)) => Ok(resp),
        Ok(Err(PredictError::BadRequest(e))) => Err(InferError::BadRequest(e.to_string())),
        Ok(Err(PredictError::Internal(m))) => Err(InferError::Internal(m)),
        Err(_) => Err(InferError::Internal(
            "the inference worker dropped the request".into(),
        )),
    }
}
