//! The inference engine: loads one model and the processors of the embodiments it serves
//! (each over its served [`Layout`](gr00t_embodiment::layout::Layout), built once), and runs a
//! typed [`Request`] into a response. Synchronous; the queue's thread runs it off the async
//! runtime. The layouts the doors read are in [`crate::layouts`], `/info` in [`crate::info`].

use crate::device::DeviceOptions;
use crate::dtype_check;
use crate::error::{InferError, LoadError};
use crate::info::{EmbodimentInfo, EngineInfo};
use crate::layouts::Layouts;
use crate::precision::{self, Precision};
use crate::request::Request;
use crate::response::{ActionGroups, PredictResponse, TimingMs};
use crate::rtc::RtcPlan;
use candle_core::DType;
use gr00t_embodiment::actions::ActionError;
use gr00t_embodiment::embodiment::{EmbodimentProcessor, EncodedRequest};
use gr00t_embodiment::frame_history::FrameHistory;
use gr00t_embodiment::image::ImagePipeline;
use gr00t_embodiment::layout::Layout;
use gr00t_embodiment::observation::{NoiseSource, Observation, RequestError};
use gr00t_embodiment::prompt::PromptEncoder;
use gr00t_model::cpu_kernel;
use gr00t_model::hub;
use gr00t_model::int8::{Int8Load, Int8Stages};
use gr00t_model::model::StageTimings;
use gr00t_model::smoothing::ActivationMax;
use gr00t_model::taps::Recorder;
use gr00t_model::vision_cache::VisionCacheStats;
use gr00t_model::weight_cache::{self, CacheKey, CacheLoad, CacheOutcome, Finished, PendingWrite};
use gr00t_model::{Checkpoint, Gr00tModel, Rtc};
use std::path::PathBuf;
use std::sync::Arc;
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
    /// Embodiments to serve (tags or upstream enum names); empty = every servable one.
    pub embodiments: Vec<String>,
    /// Folder of the packed-weight cache ([`gr00t_model::weight_cache`]); `None`: pack at
    /// every load.
    pub weight_cache: Option<PathBuf>,
}

/// The bundled Qwen3 tokenizer (`assets/tokenizer/qwen3/tokenizer.json`).
pub const BUNDLED_TOKENIZER: &[u8] =
    include_bytes!("../../../assets/tokenizer/qwen3/tokenizer.json");

/// One loaded model and the processors of the embodiments it serves.
pub struct Engine {
    model: Gr00tModel,
    /// Every served embodiment, the default first.
    embodiments: Vec<EmbodimentProcessor>,
    info: EngineInfo,
    /// The served layouts as the doors read requests against them, built once at load.
    layouts: Layouts,
    /// The packed-weight cache file this load is to write ([`Engine::write_weight_cache`]).
    pending_cache: std::sync::Mutex<Option<PendingWrite>>,
}

impl Engine {
    /// Loads the checkpoint and the tokenizer.
    pub fn load(opts: &EngineOptions) -> Result<Engine, LoadError> {
        let ckpt = Checkpoint::open(&opts.checkpoint)?;
        let prompt = match &opts.tokenizer {
            Some(path) => PromptEncoder::load(path)?,
            None => PromptEncoder::from_bytes(BUNDLED_TOKENIZER)?,
        };
        let layouts = Layouts::of_checkpoint(&ckpt, &opts.embodiments)?;
        let embodiments: Vec<EmbodimentProcessor> = layouts
            .all()
            .iter()
            .map(|l| EmbodimentProcessor::with_layout(&ckpt, prompt.clone(), l.clone()))
            .collect();
        let device = opts.device.device.open()?;
        // Before the weights load: packing at load depends on the kernel.
        let kernel = cpu_kernel::select(opts.device.cpu_kernel.0.float);
        gr00t_model::int8::select(opts.device.cpu_kernel.0.int8);
        let digest = ckpt.digest()?;
        let verdicts = dtype_check::verdict_dir();
        let smooth = opts.device.int8_smooth;
        let verdict = |stages: Int8Stages| {
            let variant =
                dtype_check::int8_variant(&stages.to_string(), &opts.device.int8_keep, smooth);
            dtype_check::load_verdict(&verdicts, &digest, "int8", &variant)
        };
        let choice = precision::choose(&opts.device, &device, kernel, &|s| {
            verdict(s).is_some_and(|v| v.passed)
        })?;
        let dtype = match choice.precision {
            Precision::Bf16 => DType::BF16,
            Precision::F32 | Precision::Int8(_) => DType::F32,
        };
        // Only the served embodiments' category-specific weights are kept (~20 MB a slot in
        // bf16 on the full model).
        let mut ids: Vec<usize> = embodiments.iter().map(|p| p.spec().embodiment_id).collect();
        ids.sort_unstable();
        ids.dedup();
        let cache = weight_cache_load(opts, &ckpt, &digest, &device, &choice.precision, kernel);
        let load = || -> Result<Gr00tModel, LoadError> {
            Ok(match choice.precision {
                Precision::Int8(stages) => {
                    let smoothing = if smooth {
                        Some(Arc::new(load_calibration(
                            &verdicts,
                            &digest,
                            &opts.checkpoint,
                        )?))
                    } else {
                        None
                    };
                    let int8 = Int8Load {
                        stages,
                        levels: opts.device.int8_levels,
                        smoothing,
                        keep_f32: opts.device.int8_keep.clone(),
                    };
                    Gr00tModel::load_int8(&ckpt, &device, &int8, Some(&ids))?
                }
                _ => Gr00tModel::load_with(&ckpt, &device, dtype, Some(&ids))?,
            })
        };
        let (off, cache) = match cache {
            Ok(cache) => (None, Some(cache)),
            Err(why) => (Some(why), None),
        };
        let (model, cache) = weight_cache::loading_with(cache, load);
        let mut model = model?;
        let (weight_cache, pending_cache) = match cache.map(CacheLoad::finish) {
            Some(Finished::Done(outcome)) => {
                tracing::info!("{outcome}");
                (outcome.to_string(), None)
            }
            Some(Finished::ToWrite(w)) => (
                format!(
                    "{} packed weights to be written to {} after the start",
                    w.weights(),
                    w.path().display()
                ),
                Some(w),
            ),
            None => (off.unwrap_or("off").to_string(), None),
        };
        let int8_check = match choice.precision {
            Precision::Int8(stages) => match verdict(stages) {
                Some(v) if v.passed => "passed",
                Some(_) => "failed",
                None => "not run",
            },
            _ => "none",
        };
        model.set_denoise_backend(opts.device.dit_backend);
        model.set_vision_cache_capacity(opts.device.vision_cache);
        let (model_id, revision) = hub::served_model(&opts.checkpoint);
        let info = EngineInfo {
            model_id,
            revision,
            checkpoint: opts.checkpoint.display().to_string(),
            checkpoint_digest: digest.clone(),
            synthetic_weights: ckpt.is_synthetic(),
            embodiment: layouts
                .tags()
                .first()
                .map_or(String::new(), |t| t.to_string()),
            embodiments: layouts.all().iter().cloned().map(EmbodimentInfo).collect(),
            embodiment_weights_mib: model.embodiment_weight_bytes() as f64 / (1 << 20) as f64,
            action_horizon: ckpt.config.action_horizon,
            denoise_backend: model.denoise_backend().as_str().into(),
            vision_cache_images: opts.device.vision_cache,
            // The kernel of the products this dtype runs (f32 ones never run amx or avx512bf16).
            cpu_kernel: if device.is_cpu() && dtype == candle_core::DType::BF16 {
                kernel.as_str().into()
            } else if device.is_cpu() {
                kernel.for_f32().as_str().into()
            } else {
                "none".into()
            },
            cpu_blocks: if device.is_cpu() {
                kernel.blocks_description()
            } else {
                "none".into()
            },
            dtype: choice.precision.name().into(),
            dtype_reason: choice.reason.clone(),
            int8_stages: match choice.precision {
                Precision::Int8(stages) => stages.names(),
                _ => Vec::new(),
            },
            int8_kernel: match choice.precision {
                Precision::Int8(_) => gr00t_model::int8::kernel().as_str(),
                _ => "none",
            },
            int8_check,
            int8_smooth: smooth && matches!(choice.precision, Precision::Int8(_)),
            int8_keep: match choice.precision {
                Precision::Int8(_) => opts.device.int8_keep.clone(),
                _ => Vec::new(),
            },
            device: opts.device.device.to_string(),
            threads: candle_core::utils::get_num_threads(),
            version: env!("CARGO_PKG_VERSION").into(),
            weight_cache,
        };
        if device.is_cpu()
            && dtype == candle_core::DType::BF16
            && kernel < cpu_kernel::CpuKernel::Avx512Bf16
        {
            // Measured on Zen 3 (AVX2): 1.11× the f32 request's time, for less accuracy.
            tracing::warn!(
                "--dtype bf16 on a CPU without bf16 units (kernel {kernel}): the f32 kernels \
                 multiply the rounded activations, no faster than --dtype f32 and less exact"
            );
        }
        match choice.precision {
            Precision::Int8(stages) => tracing::info!(
                "precision int8 in {stages}{}{} (int8 kernel {}, f32 kernel {}): {}",
                if opts.device.int8_keep.is_empty() {
                    String::new()
                } else {
                    format!(" but {} (f32)", opts.device.int8_keep.join(","))
                },
                if smooth { ", smoothed" } else { "" },
                gr00t_model::int8::kernel(),
                kernel.for_f32(),
                choice.reason
            ),
            p => {
                tracing::info!("precision {}: {}", p.name(), choice.reason);
                if smooth || !opts.device.int8_keep.is_empty() {
                    tracing::warn!(
                        "--int8-smooth and --int8-keep shape int8 layers only: ignored under {}",
                        p.name()
                    );
                }
            }
        }
        for p in &embodiments {
            let s = p.spec();
            tracing::info!(
                "serving embodiment {} (projector {}): views {:?} × offsets {:?}, {} state keys, \
                 {} action keys, horizon {}",
                s.tag,
                s.embodiment_id,
                s.views,
                s.frame_deltas,
                s.state.keys().count(),
                s.actions.keys().count(),
                s.actions.horizon()
            );
        }
        Ok(Engine {
            model,
            embodiments,
            info,
            layouts,
            pending_cache: std::sync::Mutex::new(pending_cache),
        })
    }

    /// Writes the packed-weight cache file this load prepared, if any, on a thread of its own
    /// (the disk, not the CPU, sets its time: a first start is not held up by it); the file
    /// appears, renamed complete, when the returned thread ends, which logs the outcome.
    pub fn write_weight_cache(&self) -> Option<std::thread::JoinHandle<()>> {
        let pending = self
            .pending_cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()?;
        tracing::info!(
            "writing {} packed weights to {} in the background",
            pending.weights(),
            pending.path().display()
        );
        let write = move || match pending.write() {
            outcome @ CacheOutcome::Failed { .. } => tracing::warn!("{outcome}"),
            outcome => tracing::info!("{outcome}"),
        };
        std::thread::Builder::new()
            .name("weight-cache-writer".into())
            .spawn(write)
            .map_err(|e| tracing::warn!("packed-weight cache not written: no thread ({e})"))
            .ok()
    }

    /// Runs one request of any door. Errors say whether the client is at fault.
    pub fn run(&self, request: Request) -> Result<PredictResponse, InferError> {
        self.run_with(request, None)
    }

    /// [`Self::run`] in a session whose `history` supplies the older frames of views sent
    /// with their current frame only, and records this observation's once it is answered.
    pub fn run_with(
        &self,
        request: Request,
        history: Option<&mut FrameHistory>,
    ) -> Result<PredictResponse, InferError> {
        let t0 = Instant::now();
        // The door's request span, which the queue's worker has entered (none in a bench).
        let request_span = tracing::Span::current();
        // The session's frame history filled: the engine's share of `timing_ms.decode`.
        let decode_span = tracing::info_span!("decode").entered();
        let pre_ms = request.decode_ms;
        let plan = request.rtc;
        let processor = self.processor_of(&request.layout)?;
        let return_normalized = request.return_normalized;
        request_span.record("embodiment", processor.spec().tag.as_str());
        let (rtc, rtc_source) = self.rtc_of(plan, &processor.spec().tag)?;
        let observation = request.observation;
        drop(decode_span);
        let (enc, currents) = tracing::info_span!("encode")
            .in_scope(|| processor.encode_in(&observation, history.as_deref()))?;
        let mut response = self.forward_generic(
            t0,
            pre_ms,
            processor,
            &observation,
            return_normalized,
            rtc,
            enc,
        )?;
        response.rtc_source = rtc_source;
        if let (Some(h), Some(c)) = (history, currents) {
            h.record(c, &processor.spec().frame_deltas);
        }
        Ok(response)
    }

    /// The model's RTC options of a request for embodiment `tag`, and which previous chunk
    /// they use.
    fn rtc_of(
        &self,
        plan: Option<RtcPlan>,
        tag: &str,
    ) -> Result<(Option<Rtc>, Option<&'static str>), InferError> {
        match plan {
            None => Ok((None, None)),
            Some(RtcPlan::Chunk(rtc)) => Ok((Some(rtc), Some("request"))),
            Some(RtcPlan::SessionChunk { last: None, .. }) => Ok((None, Some("none"))),
            Some(RtcPlan::SessionChunk {
                steps,
                last: Some(last),
            }) => {
                if last.tag != tag {
                    return Err(InferError::Invalid(RequestError::new(
                        "session_id",
                        format!(
                            "the session's last chunk is of embodiment {:?}, this observation of \
                             {tag:?}: reset the session or send previous_chunk",
                            last.tag
                        ),
                    )));
                }
                let rtc = steps
                    .against(
                        last.values,
                        last.rows,
                        self.layouts.horizon,
                        self.layouts.action_dim,
                    )
                    .map_err(InferError::Invalid)?;
                Ok((Some(rtc), Some("session")))
            }
        }
    }

    /// The served layouts and the noise shape, for the doors' request decoding (built once at
    /// load, not per request).
    pub fn layouts(&self) -> &Layouts {
        &self.layouts
    }

    /// The checkpoint's image pipeline (the status page shows frames as the model saw them).
    pub fn image_pipeline(&self) -> &ImagePipeline {
        self.embodiments[0].layout().frames.images()
    }

    /// The start-up warm-up: one pass of the network at its smallest size (one merged image
    /// token, a three-token prompt) for the default embodiment, which reads every weight once
    /// and runs every kernel, at a fraction of a request's cost. Leaves the vision cache as
    /// it was. Returns the pass's stage timings.
    pub fn warm_up_pass(&self) -> Result<StageTimings, InferError> {
        let id = self.embodiments[0].spec().embodiment_id;
        self.model.warm_up_pass(id).map_err(InferError::caused_by)
    }

    /// The processor of a layout a door resolved against [`Self::layouts`]; a layout this
    /// engine does not serve is the server's fault (the door resolved the tag), not the
    /// client's.
    fn processor_of(&self, layout: &Layout) -> Result<&EmbodimentProcessor, InferError> {
        self.embodiments
            .iter()
            .find(|p| p.spec().tag == layout.tag())
            .ok_or_else(|| {
                InferError::internal(format!(
                    "a request of embodiment {:?} reached an engine that serves {:?}: its door \
                     resolved it against other layouts",
                    layout.tag(),
                    self.layouts.tags()
                ))
            })
    }

    /// [`Self::forward`] of an encoded observation of `processor`'s embodiment.
    #[allow(clippy::too_many_arguments)]
    fn forward_generic(
        &self,
        t0: Instant,
        pre_ms: f64,
        processor: &EmbodimentProcessor,
        obs: &Observation,
        return_normalized: bool,
        rtc: Option<Rtc>,
        enc: EncodedRequest,
    ) -> Result<PredictResponse, InferError> {
        let decode = |pred: &[f32]| {
            let d = processor.decode(pred, obs)?;
            let groups = |normalized| ActionGroups::from_decoded(&d, normalized);
            Ok((groups(false), groups(true), d.horizon))
        };
        let meta = (processor.spec().tag.as_str(), &obs.noise, return_normalized);
        self.forward(t0, pre_ms, enc, rtc, decode, meta)
    }

    /// The network on encoded inputs (with the request's RTC options), then `decode` (physical
    /// and normalised actions and the horizon) into the response; `meta` is (tag, noise, return_normalized). Everything from
    /// `t0` to the end of encoding that is not encoding counts as decoding the request, plus
    /// the `pre_ms` the door spent decoding it.
    fn forward(
        &self,
        t0: Instant,
        pre_ms: f64,
        mut enc: EncodedRequest,
        rtc: Option<Rtc>,
        decode: impl FnOnce(&[f32]) -> Result<(ActionGroups, ActionGroups, usize), ActionError>,
        (tag, noise, return_normalized): (&str, &NoiseSource, bool),
    ) -> Result<PredictResponse, InferError> {
        enc.inputs.rtc = rtc;
        let t1 = Instant::now();
        let out = self
            .model
            .forward(&enc.inputs, &Recorder::disabled())
            .map_err(|e| match e {
                // The doors validate first; a refusal here is still the client's.
                gr00t_model::Error::Rtc(e) => {
                    InferError::Invalid(RequestError::new(e.field.name(), e.message))
                }
                e => InferError::caused_by(e),
            })?;
        let t2 = Instant::now();
        let (actions, normalized, horizon) = tracing::info_span!("decode_actions")
            .in_scope(|| decode(&out.action_pred))
            .map_err(InferError::caused_by)?;
        let t3 = Instant::now();
        let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
        let (noise_source, seed) = match noise {
            NoiseSource::Seed(s) => ("seed", Some(*s)),
            NoiseSource::Client(_) => ("client", None),
        };
        Ok(PredictResponse {
            actions,
            action_horizon: horizon,
            embodiment: tag.into(),
            seq_len: out.seq_len,
            noise_source,
            seed,
            actions_normalized: return_normalized.then_some(normalized),
            timing_ms: TimingMs {
                decode: ms(t0, t1) - enc.encode_ms + pre_ms,
                encode: enc.encode_ms,
                device: ms(t1, t2),
                decode_actions: ms(t2, t3),
                total: ms(t0, t3) + pre_ms,
                vision: Some(out.timings.vision_ms),
                llm: Some(out.timings.llm_ms),
                adapter: Some(out.timings.adapter_ms),
                denoise: Some(out.timings.denoise_ms),
            },
            queue_ms: 0.0,
            observation_age_ms: 0.0,
            rtc_source: None,
            session: None,
            session_token: None,
            chunk: out.action_pred,
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

/// The calibration `check-dtype --int8-smooth` recorded for this checkpoint (SmoothQuant's
/// maxima), or why `--int8-smooth` cannot run without it.
fn load_calibration(
    dir: &std::path::Path,
    digest: &str,
    checkpoint: &std::path::Path,
) -> Result<ActivationMax, LoadError> {
    let file = dtype_check::calibration_file(dir, digest);
    if !file.exists() {
        return Err(LoadError::Calibration(format!(
            "--int8-smooth needs this checkpoint's calibration ({}), which is missing: run \
             `gr00t check-dtype --checkpoint {} --dtype int8 --int8-smooth` first",
            file.display(),
            checkpoint.display()
        )));
    }
    let max = ActivationMax::load(&file).map_err(|e| {
        LoadError::Calibration(format!("reading the calibration {}: {e}", file.display()))
    })?;
    tracing::info!(layers = max.len(), file = %file.display(), "int8 calibration loaded");
    Ok(max)
}

/// The packed-weight cache of this load, or why there is none (`/info` says it): turned off,
/// another device than the CPU (nothing is packed there), or a load whose weights depend on
/// more than the key holds (SmoothQuant calibration, a deliberately coarse int8 grid).
fn weight_cache_load(
    opts: &EngineOptions,
    ckpt: &Checkpoint,
    digest: &str,
    device: &candle_core::Device,
    precision: &Precision,
    kernel: cpu_kernel::CpuKernel,
) -> Result<CacheLoad, &'static str> {
    let dir = opts.weight_cache.as_ref().ok_or("off")?;
    let int8 = matches!(precision, Precision::Int8(_));
    let plain_int8 =
        opts.device.int8_levels == gr00t_model::int8::LEVELS && !opts.device.int8_smooth;
    if !device.is_cpu() {
        return Err("off (nothing is packed on this device)");
    }
    if int8 && !plain_int8 {
        return Err("off (smoothed or test-grid int8 is not cached)");
    }
    let settings = [
        (
            "precision",
            match precision {
                Precision::Int8(stages) => format!("int8 in {stages}"),
                p => p.name().to_string(),
            },
        ),
        ("cpu_kernel", kernel.as_str().to_string()),
        (
            "int8_keep",
            if int8 {
                opts.device.int8_keep.join(",")
            } else {
                String::new()
            },
        ),
    ];
    let key = CacheKey::new(digest, &ckpt.weight_files, &settings);
    Ok(CacheLoad::begin(dir, key))
}
