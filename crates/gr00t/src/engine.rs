//! The inference engine: one loaded model plus the DROID processor, turning a `/predict` body
//! into a response. Synchronous; the server runs it off the async runtime.

use candle_core::Device;
use gr00t_droid::processor::DroidProcessor;
use gr00t_droid::prompt::PromptEncoder;
use gr00t_droid::request::{NoiseSource, RequestError};
use gr00t_droid::response::{PredictResponse, TimingMs};
use gr00t_droid::EMBODIMENT_TAG;
use gr00t_model::hub::{MODEL_REPO, MODEL_REVISION};
use gr00t_model::taps::Recorder;
use gr00t_model::{Checkpoint, Gr00tModel};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

/// How to build an [`Engine`].
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Checkpoint folder.
    pub checkpoint: PathBuf,
    /// Tokenizer file; `None` = the bundled Qwen3 tokenizer.
    pub tokenizer: Option<PathBuf>,
}

/// Why a prediction was not produced.
#[derive(Debug, Clone)]
pub enum PredictError {
    /// The client's request is invalid (HTTP 400), naming the field.
    BadRequest(RequestError),
    /// Something failed inside the engine (HTTP 500).
    Internal(String),
}

impl std::fmt::Display for PredictError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PredictError::BadRequest(e) => write!(f, "{e}"),
            PredictError::Internal(m) => write!(f, "internal error: {m}"),
        }
    }
}

/// What `/info` reports about the loaded engine.
#[derive(Debug, Clone, Serialize)]
pub struct EngineInfo {
    /// `nvidia/GR00T-N1.7-3B`.
    pub model_id: String,
    /// Pinned revision.
    pub revision: String,
    /// Checkpoint folder.
    pub checkpoint: String,
    /// sha256 over the weight files' safetensors headers and sizes (cheap, identifies the weights).
    pub checkpoint_digest: String,
    /// True for `gr00t synth-checkpoint` weights.
    pub synthetic_weights: bool,
    /// Embodiment tag.
    pub embodiment: String,
    /// 40.
    pub action_horizon: usize,
    /// Denoise implementation.
    pub denoise_backend: String,
    /// Compute dtype.
    pub dtype: String,
    /// Device.
    pub device: String,
    /// Compute threads.
    pub threads: usize,
    /// Build version.
    pub version: String,
}

/// The bundled Qwen3 tokenizer (`assets/tokenizer/qwen3/tokenizer.json`).
pub const BUNDLED_TOKENIZER: &[u8] =
    include_bytes!("../../../assets/tokenizer/qwen3/tokenizer.json");

/// One loaded model and its processor.
pub struct Engine {
    model: Gr00tModel,
    processor: DroidProcessor,
    info: EngineInfo,
}

impl Engine {
    /// Loads the checkpoint and the tokenizer.
    pub fn load(opts: &EngineOptions) -> Result<Engine, Box<dyn std::error::Error + Send + Sync>> {
        let ckpt = Checkpoint::open(&opts.checkpoint)?;
        let prompt = match &opts.tokenizer {
            Some(path) => PromptEncoder::load(path)?,
            None => PromptEncoder::from_bytes(BUNDLED_TOKENIZER)?,
        };
        let processor = DroidProcessor::new(&ckpt, prompt)?;
        let device = Device::Cpu;
        let model = Gr00tModel::load(&ckpt, &device)?;
        let info = EngineInfo {
            model_id: MODEL_REPO.into(),
            revision: MODEL_REVISION.into(),
            checkpoint: opts.checkpoint.display().to_string(),
            checkpoint_digest: ckpt.digest()?,
            synthetic_weights: ckpt.is_synthetic(),
            embodiment: EMBODIMENT_TAG.into(),
            action_horizon: ckpt.config.action_horizon,
            denoise_backend: "reference".into(),
            dtype: format!("{:?}", model.dtype()).to_lowercase(),
            device: device_name(&device),
            threads: candle_core::utils::get_num_threads(),
            version: env!("CARGO_PKG_VERSION").into(),
        };
        Ok(Engine {
            model,
            processor,
            info,
        })
    }

    /// Runs one `/predict` body.
    pub fn predict(&self, body: &[u8]) -> Result<PredictResponse, PredictError> {
        let t0 = Instant::now();
        let req = self
            .processor
            .parse(body)
            .map_err(PredictError::BadRequest)?;
        let enc = self.processor.encode(&req).map_err(|e| {
            if e.field.is_empty() {
                PredictError::Internal(e.message)
            } else {
                PredictError::BadRequest(e)
            }
        })?;
        let t1 = Instant::now();
        let out = self
            .model
            .forward(&enc.inputs, &Recorder::disabled())
            .map_err(|e| PredictError::Internal(e.to_string()))?;
        let t2 = Instant::now();
        let chunk = self
            .processor
            .decode(&out.action_pred, &req)
            .map_err(PredictError::Internal)?;
        let t3 = Instant::now();
        let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
        let (noise_source, seed) = match req.noise {
            NoiseSource::Seed(s) => ("seed", Some(s)),
            NoiseSource::Client(_) => ("client", None),
        };
        let parse_ms = ms(t0, t1) - enc.decode_ms - enc.encode_ms;
        Ok(PredictResponse {
            actions: chunk.actions,
            action_horizon: self.processor.horizon(),
            embodiment: EMBODIMENT_TAG.into(),
            seq_len: out.seq_len,
            noise_source,
            seed,
            actions_normalized: req.return_normalized.then_some(chunk.normalized),
            timing_ms: TimingMs {
                // JSON parsing counts as decoding the request.
                decode: enc.decode_ms + parse_ms,
                encode: enc.encode_ms,
                device: ms(t1, t2),
                decode_actions: ms(t2, t3),
                total: ms(t0, t3),
                vision: Some(out.timings.vision_ms),
                llm: Some(out.timings.llm_ms),
                adapter: Some(out.timings.adapter_ms),
                denoise: Some(out.timings.denoise_ms),
            },
        })
    }

    /// What `/info` reports.
    pub fn info(&self) -> &EngineInfo {
        &self.info
    }
}

fn device_name(device: &Device) -> String {
    match device {
        Device::Cpu => "cpu".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}
