//! The inference engine: one loaded model plus the DROID processor, turning a `/predict` body
//! into a response. Synchronous; the server runs it off the async runtime.

use crate::device::DeviceOptions;
use candle_core::DType;
use gr00t_droid::processor::{DroidProcessor, EncodedRequest};
use gr00t_droid::prompt::PromptEncoder;
use gr00t_droid::request::{NoiseSource, PredictRequest, RequestError};
use gr00t_droid::response::{PredictResponse, TimingMs};
use gr00t_droid::EMBODIMENT_TAG;
use gr00t_model::action_head::DenoiseBackend;
use gr00t_model::cpu_kernel;
use gr00t_model::hub::{MODEL_REPO, MODEL_REVISION};
use gr00t_model::taps::Recorder;
use gr00t_model::vision_cache::{VisionCacheStats, DEFAULT_VISION_CACHE_IMAGES};
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
    /// Where the network runs and in which precision.
    pub device: DeviceOptions,
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
    /// CPU GEMM kernel of the products (`avx512bf16` for `--dtype bf16` on AVX512-BF16 CPUs,
    /// `avx512`, `avx2`, `library`; `none` on a GPU).
    pub cpu_kernel: String,
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
        // Configuration errors surface before the slow weight load.
        let backend = DenoiseBackend::from_env()?;
        let cache_images = vision_cache_images_from_env()?;
        let kernel_cap = cpu_kernel::CpuKernel::cap_from_env()?;
        let ckpt = Checkpoint::open(&opts.checkpoint)?;
        let prompt = match &opts.tokenizer {
            Some(path) => PromptEncoder::load(path)?,
            None => PromptEncoder::from_bytes(BUNDLED_TOKENIZER)?,
        };
        let processor = DroidProcessor::new(&ckpt, prompt)?;
        let device = opts.device.device.open()?;
        let dtype = opts.device.dtype.resolve(&device);
        // Before the weights load: packing at load depends on the kernel.
        let kernel = cpu_kernel::select(kernel_cap);
        // Only DROID's embodiment-specific weights are kept (the others would cost ~0.6 GB).
        let embodiment = ckpt.embodiment_id(EMBODIMENT_TAG)?;
        let mut model = Gr00tModel::load_with(&ckpt, &device, dtype, Some(&[embodiment]))?;
        model.set_denoise_backend(backend);
        model.set_vision_cache_capacity(cache_images);
        let info = EngineInfo {
            model_id: MODEL_REPO.into(),
            revision: MODEL_REVISION.into(),
            checkpoint: opts.checkpoint.display().to_string(),
            checkpoint_digest: ckpt.digest()?,
            synthetic_weights: ckpt.is_synthetic(),
            embodiment: EMBODIMENT_TAG.into(),
            action_horizon: ckpt.config.action_horizon,
            denoise_backend: model.denoise_backend().as_str().into(),
            // The kernel of the products this dtype runs (f32 ones never run avx512bf16).
            cpu_kernel: if device.is_cpu() && dtype == candle_core::DType::BF16 {
                kernel.as_str().into()
            } else if device.is_cpu() {
                kernel.for_f32().as_str().into()
            } else {
                "none".into()
            },
            dtype: dtype_name(model.dtype()).into(),
            device: opts.device.device.to_string(),
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
        self.predict_encoded(t0, &req, |p| p.encode(&req))
    }

    /// [`predict`](Self::predict) once the request is parsed (from `t0`): `encode` builds the
    /// model inputs, so the binary protocols can hand over decoded frames (`protocols`).
    pub fn predict_encoded(
        &self,
        t0: Instant,
        req: &PredictRequest,
        encode: impl FnOnce(&DroidProcessor) -> Result<EncodedRequest, RequestError>,
    ) -> Result<PredictResponse, PredictError> {
        let enc = encode(&self.processor).map_err(|e| {
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
            .decode(&out.action_pred, req)
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

    /// Vision cache counters and occupancy.
    pub fn vision_cache_stats(&self) -> VisionCacheStats {
        self.model.vision_cache_stats()
    }

    /// Empties the vision cache, so the next request encodes every image (cold-request timing).
    pub fn clear_vision_cache(&self) {
        self.model.clear_vision_cache();
    }
}

/// Environment variable bounding the vision cache, in images (0 disables it).
pub const VISION_CACHE_ENV: &str = "GR00T_VISION_CACHE";

/// The vision cache bound from [`VISION_CACHE_ENV`], or the default when it is unset.
fn vision_cache_images_from_env() -> Result<usize, String> {
    match std::env::var(VISION_CACHE_ENV) {
        Err(std::env::VarError::NotPresent) => parse_vision_cache_images(None),
        Ok(v) => parse_vision_cache_images(Some(&v)),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(format!("{VISION_CACHE_ENV} is not valid UTF-8"))
        }
    }
}

/// A [`VISION_CACHE_ENV`] value as a number of images; unset or empty = the default.
fn parse_vision_cache_images(value: Option<&str>) -> Result<usize, String> {
    match value.map(str::trim) {
        None | Some("") => Ok(DEFAULT_VISION_CACHE_IMAGES),
        Some(v) => v.parse().map_err(|_| {
            format!("{VISION_CACHE_ENV}={v:?} is not a number of images (0 disables the cache)")
        }),
    }
}

/// `f32` / `bf16`, as `--dtype` spells them.
fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        DType::F32 => "f32",
        _ => "other",
    }
}

#[cfg(test)]
mod vision_cache_env_tests {
    use super::*;

    #[test]
    fn vision_cache_bound_parses_or_names_the_variable() {
        assert_eq!(parse_vision_cache_images(None), Ok(16));
        assert_eq!(parse_vision_cache_images(Some(" ")), Ok(16));
        assert_eq!(parse_vision_cache_images(Some("0")), Ok(0));
        assert_eq!(parse_vision_cache_images(Some("64")), Ok(64));
        let e = parse_vision_cache_images(Some("lots")).unwrap_err();
        assert!(e.contains(VISION_CACHE_ENV) && e.contains("lots"), "{e}");
    }
}
