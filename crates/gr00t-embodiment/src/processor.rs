//! The DROID processor: a validated [`PredictRequest`] → [`ModelInputs`] (decode the frames,
//! run the image pipeline, build the prompt, normalise the state, draw or take the noise), and
//! the model's normalised chunk → physical actions. Every refusal names the request field.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use crate::actions::ActionDecoder;
use crate::embodiment::{images_and_prompt, initial_noise, model_inputs};
use crate::image::{check_frame_geometry, decode_base64, EncodedFrame, Frame, ImagePipeline};
use crate::prompt::PromptEncoder;
use crate::request::{PredictRequest, RequestError, CAMERAS, FRAMES_PER_CAMERA};
use crate::response::ActionGroups;
use crate::state::StateNormalizer;
use crate::EMBODIMENT_TAG;
use gr00t_model::{Checkpoint, ModelInputs};
use std::time::Instant;

/// A request turned into model inputs, with the time each half took.
#[derive(Debug, Clone)]
pub struct EncodedRequest {
    /// What the network consumes.
    pub inputs: ModelInputs,
    /// Base64 + PNG/JPEG decode time, ms.
    pub decode_ms: f64,
    /// Resize, patchify, tokenise, state normalisation and noise, ms.
    pub encode_ms: f64,
}

/// Physical and normalised action chunks of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkActions {
    /// Absolute targets.
    pub actions: ActionGroups,
    /// Model-space chunk, valid dims only, before un-normalisation.
    pub normalized: ActionGroups,
}

/// Pre- and post-processing of the DROID embodiment for one checkpoint.
#[derive(Debug)]
pub struct DroidProcessor {
    images: ImagePipeline,
    /// The patch grid every frame must land on: a 320x180 frame's under this checkpoint's eval
    /// transform ([`DROID_GRID_THW`](crate::image::DROID_GRID_THW) for the released one).
    grid: [usize; 3],
    prompt: PromptEncoder,
    state: StateNormalizer,
    actions: ActionDecoder,
    embodiment_id: usize,
    horizon: usize,
    action_dim: usize,
}

impl DroidProcessor {
    /// Builds the processor from a checkpoint's processor config and statistics.
    pub fn new(ckpt: &Checkpoint, prompt: PromptEncoder) -> Result<DroidProcessor, String> {
        let images = ImagePipeline::from_checkpoint(ckpt).map_err(|e| e.to_string())?;
        let grid = images.grid_for(320, 180).map_err(|e| e.to_string())?;
        let state = StateNormalizer::new(&ckpt.statistics, &ckpt.processor, EMBODIMENT_TAG)
            .map_err(|e| e.to_string())?;
        let actions = ActionDecoder::new(&ckpt.statistics, &ckpt.processor, EMBODIMENT_TAG)
            .map_err(|e| e.to_string())?;
        let embodiment_id = ckpt
            .embodiment_id(EMBODIMENT_TAG)
            .map_err(|e| e.to_string())?;
        let prompt = prompt.with_formalize(ckpt.processor.formalize_language);
        Ok(DroidProcessor {
            images,
            grid,
            prompt,
            state,
            actions,
            embodiment_id,
            horizon: ckpt.config.action_horizon,
            action_dim: ckpt.config.max_action_dim,
        })
    }

    /// Parses and validates a JSON body.
    pub fn parse(&self, body: &[u8]) -> Result<PredictRequest, RequestError> {
        PredictRequest::from_json(body, self.horizon, self.action_dim)
    }

    /// Action chunk length.
    pub fn horizon(&self) -> usize {
        self.horizon
    }

    /// Turns a validated request into model inputs.
    pub fn encode(&self, req: &PredictRequest) -> Result<EncodedRequest, RequestError> {
        let t0 = Instant::now();
        let frames = self.decode_frames(req)?;
        self.encode_decoded(frames, req, t0)
    }

    /// [`encode`](Self::encode) for frames that arrive already decoded (the binary protocols):
    /// `frames[camera][t]` in [`CAMERAS`] order, each `[t−15, t]`; `req.images` is not read.
    pub fn encode_frames(
        &self,
        frames: [[Frame; FRAMES_PER_CAMERA]; 2],
        req: &PredictRequest,
    ) -> Result<EncodedRequest, RequestError> {
        let t0 = Instant::now();
        let [ext, wrist] = frames;
        let mut time_major = Vec::with_capacity(CAMERAS.len() * FRAMES_PER_CAMERA);
        for (t, (e, w)) in ext.into_iter().zip(wrist).enumerate() {
            for (cam, frame) in CAMERAS.iter().zip([e, w]) {
                self.check_frame(&frame, &format!("images.{cam}[{t}]"))?;
                time_major.push(frame);
            }
        }
        self.encode_decoded(time_major, req, t0)
    }

    /// The rest of `encode` once the frames are decoded (time-major order).
    fn encode_decoded(
        &self,
        frames: Vec<Frame>,
        req: &PredictRequest,
        t0: Instant,
    ) -> Result<EncodedRequest, RequestError> {
        let t1 = Instant::now();
        let (processed, prompt) =
            images_and_prompt(&self.images, &self.prompt, &frames, &req.instruction)?;
        let state = self
            .state
            .normalize(&req.state.groups())
            .map_err(|e| RequestError::new("state", e.to_string()))?;
        let noise = initial_noise(&req.noise, self.horizon, self.action_dim)?;
        let t2 = Instant::now();
        Ok(EncodedRequest {
            inputs: model_inputs(processed, prompt, state, self.embodiment_id, noise),
            decode_ms: (t1 - t0).as_secs_f64() * 1e3,
            encode_ms: (t2 - t1).as_secs_f64() * 1e3,
        })
    }

    /// Decodes the four frames in time-major order `[ext t−15, wrist t−15, ext t, wrist t]`,
    /// checking each frame's geometry on its header's size before decoding its pixels.
    fn decode_frames(&self, req: &PredictRequest) -> Result<Vec<Frame>, RequestError> {
        let mut frames = Vec::with_capacity(CAMERAS.len() * FRAMES_PER_CAMERA);
        for t in 0..FRAMES_PER_CAMERA {
            for (c, cam) in CAMERAS.iter().enumerate() {
                let field = format!("images.{cam}[{t}]");
                let image_err =
                    |e: crate::image::ImageError| RequestError::new(&field, e.to_string());
                let bytes = decode_base64(&req.images[c][t]).map_err(image_err)?;
                let encoded = EncodedFrame::read_header(&bytes).map_err(image_err)?;
                // A wrong size is refused before its pixels are decoded (image bombs).
                self.check_size(encoded.width(), encoded.height(), &field)?;
                frames.push(encoded.decode().map_err(image_err)?);
            }
        }
        Ok(frames)
    }

    /// The serving contract's geometry check of one frame: 16:9-like, on the DROID grid.
    fn check_frame(&self, frame: &Frame, field: &str) -> Result<(), RequestError> {
        self.check_size(frame.width, frame.height, field)
    }

    /// [`check_frame`](Self::check_frame) on a size alone.
    fn check_size(&self, width: usize, height: usize, field: &str) -> Result<(), RequestError> {
        check_frame_geometry(width, height).map_err(|e| RequestError::new(field, e.to_string()))?;
        let grid = self
            .images
            .grid_for(width, height)
            .map_err(|e| RequestError::new(field, e.to_string()))?;
        if grid != self.grid {
            return Err(RequestError::new(
                field,
                format!(
                    "a {width}x{height} frame lands on patch grid {grid:?}, not {:?}",
                    self.grid
                ),
            ));
        }
        Ok(())
    }

    /// Turns the model's `action_pred` (`[horizon, action_dim]`) into physical actions using the
    /// request's raw state as the reference for the relative groups.
    pub fn decode(
        &self,
        action_pred: &[f32],
        req: &PredictRequest,
    ) -> Result<ChunkActions, String> {
        let decoded = self
            .actions
            .decode(action_pred, &req.state.groups())
            .map_err(|e| e.to_string())?;
        Ok(ChunkActions {
            actions: ActionGroups::from_decoded(&decoded, false),
            normalized: ActionGroups::from_decoded(&decoded, true),
        })
    }
}
