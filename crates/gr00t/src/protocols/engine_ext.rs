//! Observations that arrive as raw frames (ZMQ, websocket) go through the same inference queue
//! as HTTP bodies. The queue carries bytes, so a decoded observation is packed behind a random
//! per-process tag (no client can send it) and unpacked on the inference thread, where it skips
//! base64 and PNG decoding and enters the processor as frames.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::msgpack_numpy::{get, pack, str_map, unpack};
use crate::engine::{Engine, PredictError};
use crate::server::{SubmitError, WorkerHandle};
use axum::body::Bytes;
use gr00t_droid::image::Frame;
use gr00t_droid::request::{NoiseSource, PredictRequest, RawState, FRAMES_PER_CAMERA};
use gr00t_droid::response::PredictResponse;
use rmpv::Value;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;
use std::time::Instant;

/// One DROID observation with its frames already decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct RawRequest {
    /// Frames per camera in `CAMERAS` order (exterior, wrist), each `[t−15, t]`.
    pub frames: [[Frame; FRAMES_PER_CAMERA]; 2],
    /// Raw state.
    pub state: RawState,
    /// Instruction as sent.
    pub instruction: String,
    /// Initial noise.
    pub noise: NoiseSource,
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
        let frames = self
            .frames
            .iter()
            .flatten()
            .map(|f| {
                Value::Array(vec![
                    Value::from(f.width as u64),
                    Value::from(f.height as u64),
                    Value::Binary(f.data.clone()),
                ])
            })
            .collect();
        let s = &self.state;
        let state: Vec<f32> = [
            &s.eef_9d[..],
            &s.gripper_position[..],
            &s.joint_position[..],
        ]
        .concat();
        let noise = match &self.noise {
            NoiseSource::Seed(seed) => ("seed", Value::from(*seed)),
            NoiseSource::Client(n) => ("noise", Value::Binary(f32_bytes(n))),
        };
        let v = str_map([
            ("frames", Value::Array(frames)),
            ("state", Value::Binary(f32_bytes(&state))),
            ("instruction", Value::from(self.instruction.as_str())),
            noise,
        ]);
        let mut body = tag().to_vec();
        body.extend(pack(&v));
        Bytes::from(body)
    }

    /// Unpacks a tagged body; `None` when `body` is not one (an HTTP body).
    pub fn from_body(body: &[u8]) -> Option<Result<RawRequest, String>> {
        let rest = body.strip_prefix(&tag()[..])?;
        Some(Self::unpack(rest).ok_or_else(|| "malformed internal request".to_string()))
    }

    fn unpack(bytes: &[u8]) -> Option<RawRequest> {
        let v = unpack(bytes).ok()?;
        let m = v.as_map()?;
        let mut frames = Vec::new();
        for f in get(m, "frames")?.as_array()? {
            let f = f.as_array()?;
            let (w, h) = (f.first()?.as_u64()?, f.get(1)?.as_u64()?);
            let data = match f.get(2)? {
                Value::Binary(b) => b.clone(),
                _ => return None,
            };
            frames.push(Frame::new(w as usize, h as usize, data).ok()?);
        }
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
        let noise = match (get(m, "seed"), get(m, "noise")) {
            (Some(s), None) => NoiseSource::Seed(s.as_u64()?),
            (None, Some(Value::Binary(b))) => NoiseSource::Client(f32s(b)),
            _ => return None,
        };
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
    match RawRequest::from_body(body) {
        None => engine.predict(body),
        Some(Err(e)) => Err(PredictError::Internal(e)),
        Some(Ok(raw)) => raw.predict(engine, t0),
    }
}

/// Queues one observation behind whatever HTTP and other protocol requests wait, and waits.
pub async fn infer(worker: &WorkerHandle, req: &RawRequest) -> Result<PredictResponse, InferError> {
    let reply = worker.submit(req.to_body()).map_err(|e| match e {
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
