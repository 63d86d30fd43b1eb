//! The whole GR00T N1.7 network for one request: backbone (vision tower + truncated LLM),
//! VL adapter and flow-matching action head, from [`ModelInputs`] to normalised actions.

use crate::action_head::{ActionHead, DenoiseBackend};
use crate::backbone::Backbone;
use crate::checkpoint::Checkpoint;
use crate::config::Gr00tConfig;
use crate::error::{Error, Result};
use crate::inputs::ModelInputs;
use crate::int8::{loading_int8, Int8Load, Int8Stages};
use crate::linear::{loading_with, Products};
use crate::taps::Recorder;
use crate::vision_cache::{
    image_key, ImageFeatures, VisionCache, VisionCacheStats, DEFAULT_VISION_CACHE_IMAGES,
};
use candle_core::{DType, Device, Tensor};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// Compute dtype of the CPU path: the accuracy target is the fp32 reference (upstream serves
/// bf16; we keep fp32 on purpose).
pub const COMPUTE_DTYPE: DType = DType::F32;

/// The compute dtype used on `device` unless asked otherwise: f32 on the CPU (fp32-reference
/// parity), bf16 on GPUs (bf16 matmuls with f32 accumulation, as upstream serves).
pub fn default_dtype(device: &Device) -> DType {
    if device.is_cpu() {
        COMPUTE_DTYPE
    } else {
        DType::BF16
    }
}

/// Wall time of each network stage of one request, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StageTimings {
    /// Vision tower (patch embed, blocks, mergers).
    pub vision_ms: f64,
    /// Truncated LLM.
    pub llm_ms: f64,
    /// vlln + VL self-attention.
    pub adapter_ms: f64,
    /// State encoder + Euler steps.
    pub denoise_ms: f64,
}

/// The network's answer for one request.
#[derive(Debug, Clone)]
pub struct ModelOutput {
    /// Normalised actions `x₄`, `[action_horizon, max_action_dim]` row-major.
    pub action_pred: Vec<f32>,
    /// VLM sequence length.
    pub seq_len: usize,
    /// Per-stage wall times.
    pub timings: StageTimings,
}

/// The loaded GR00T N1.7 network.
pub struct Gr00tModel {
    backbone: Backbone,
    head: ActionHead,
    config: Gr00tConfig,
    device: Device,
    dtype: DType,
    /// The stages whose linear layers run int8 (`dtype` is then f32).
    int8: Int8Stages,
    /// Dtype of the activations between products: f32 on the CPU whatever `dtype` (bf16 there
    /// rounds only each product's inputs), `dtype` elsewhere.
    activations: DType,
    /// Per-image vision outputs of recent requests (a Mutex so the model stays `Sync`).
    vision_cache: Mutex<VisionCache>,
}

impl Gr00tModel {
    /// Like [`Gr00tModel::load`], but keeps the embodiment-specific weights (state encoder,
    /// action encoder, decoder) of `embodiment_ids` only; other ids are then refused.
    pub fn load_for(
        ckpt: &Checkpoint,
        device: &Device,
        embodiment_ids: &[usize],
    ) -> Result<Gr00tModel> {
        Self::load_with(ckpt, device, COMPUTE_DTYPE, Some(embodiment_ids))
    }

    /// Loads every inference weight of `ckpt` onto `device`: bf16 matrices and the token
    /// embedding stay bf16 (widened inside each product), the rest becomes [`COMPUTE_DTYPE`]
    /// once. Tensors the network never asks for (lm_head, the final text norm, training-only
    /// keys) are never read.
    pub fn load(ckpt: &Checkpoint, device: &Device) -> Result<Gr00tModel> {
        Self::load_with(ckpt, device, COMPUTE_DTYPE, None)
    }

    /// Loads onto `device` computing in `dtype` (f32 or bf16; see [`default_dtype`]), keeping
    /// the embodiment-specific weights of `embodiment_ids` only when given. On the CPU bf16
    /// matrices stay bf16 in memory whatever `dtype`; elsewhere every weight becomes `dtype`.
    /// On the CPU bf16 means bf16 products: each linear rounds its activations to bf16 and
    /// multiplies them by the bf16 weights with f32 accumulation, while the residual stream,
    /// norms, softmax, RoPE, activation functions and the Euler update stay f32.
    ///
    /// The head loads first so that the embodiment tables it drops are freed before the
    /// backbone is read (the peak is then the final size).
    pub fn load_with(
        ckpt: &Checkpoint,
        device: &Device,
        dtype: DType,
        embodiment_ids: Option<&[usize]>,
    ) -> Result<Gr00tModel> {
        if !matches!(dtype, DType::F32 | DType::BF16) {
            return Err(Error::Input(format!(
                "compute dtype {dtype:?} is not supported; use f32 or bf16"
            )));
        }
        Self::load_inner(
            ckpt,
            device,
            dtype,
            &Int8Load::stages(Int8Stages::NONE),
            embodiment_ids,
        )
    }

    /// Loads onto the CPU computing in f32, the linear layers of `int8.stages` in int8
    /// (weights quantised once here per output channel, smoothed where `int8` has calibration,
    /// activations per row at each call; see [`crate::int8`]).
    pub fn load_int8(
        ckpt: &Checkpoint,
        device: &Device,
        int8: &Int8Load,
        embodiment_ids: Option<&[usize]>,
    ) -> Result<Gr00tModel> {
        if !device.is_cpu() {
            return Err(Error::Input(
                "int8 products run on the CPU only; use bf16 on a GPU".into(),
            ));
        }
        Self::load_inner(ckpt, device, DType::F32, int8, embodiment_ids)
    }

    fn load_inner(
        ckpt: &Checkpoint,
        device: &Device,
        dtype: DType,
        int8: &Int8Load,
        embodiment_ids: Option<&[usize]>,
    ) -> Result<Gr00tModel> {
        let (activations, products) = if device.is_cpu() && dtype == DType::BF16 {
            (DType::F32, Products::Bf16)
        } else {
            (dtype, Products::F32)
        };
        let vb = ckpt.var_builder(activations, device)?;
        let load = || -> Result<_> {
            let mut head = ActionHead::load(vb.pp("action_head"), &ckpt.config)?;
            if let Some(ids) = embodiment_ids {
                head.retain_embodiments(ids)?;
            }
            let backbone = Backbone::load(vb.clone(), &ckpt.backbone, ckpt.config.select_layer)?;
            Ok((head, backbone))
        };
        let (head, backbone) = loading_with(products, || loading_int8(int8, load))?;
        Ok(Gr00tModel {
            backbone,
            head,
            config: ckpt.config.clone(),
            device: device.clone(),
            dtype,
            int8: int8.stages,
            activations,
            vision_cache: Mutex::new(VisionCache::new(DEFAULT_VISION_CACHE_IMAGES)),
        })
    }

    /// The stages whose linear layers run int8 (none unless loaded by [`Gr00tModel::load_int8`]).
    pub fn int8_stages(&self) -> Int8Stages {
        self.int8
    }

    /// The model config.
    pub fn config(&self) -> &Gr00tConfig {
        &self.config
    }

    /// The device the network runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The compute dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Bounds the vision cache to `images` entries (0 disables it), evicting beyond that.
    pub fn set_vision_cache_capacity(&self, images: usize) {
        self.cache().set_capacity(images);
    }

    /// Vision cache counters and occupancy.
    pub fn vision_cache_stats(&self) -> VisionCacheStats {
        self.cache().stats()
    }

    /// Empties the vision cache (the next request encodes every image).
    pub fn clear_vision_cache(&self) {
        self.cache().clear();
    }

    /// Bytes of the kept embodiments' category-specific weights.
    pub fn embodiment_weight_bytes(&self) -> usize {
        self.head.embodiment_weight_bytes()
    }

    /// Selects the implementation of the Euler loop.
    pub fn set_denoise_backend(&mut self, backend: DenoiseBackend) {
        self.head.set_backend(backend);
    }

    /// The implementation of the Euler loop in use.
    pub fn denoise_backend(&self) -> DenoiseBackend {
        self.head.backend()
    }

    /// The smallest inputs that still run every layer of embodiment `embodiment_id`: one image
    /// of a single merged token (grey), a three-token prompt around it, zero state and noise.
    /// What a warm-up needs (every weight read once, every kernel run) at a fraction of a
    /// request's cost.
    pub fn minimal_inputs(&self, embodiment_id: usize) -> ModelInputs {
        let cfg = &self.config;
        let bb = self.backbone.config();
        let merge = bb.vision_config.spatial_merge_size.max(1);
        let patch_dim = bb.vision_config.patch_dim();
        ModelInputs {
            pixel_values: vec![0.0; merge * merge * patch_dim],
            patch_dim,
            image_grid_thw: vec![[1, merge, merge]],
            input_ids: vec![
                bb.vision_start_token_id,
                bb.image_token_id,
                bb.vision_end_token_id,
            ],
            state: vec![0.0; cfg.max_state_dim * cfg.state_history_length],
            embodiment_id,
            noise: vec![0.0; cfg.action_horizon * cfg.max_action_dim],
            rtc: None,
        }
    }

    /// Runs [`Gr00tModel::minimal_inputs`] through the network without touching the vision
    /// cache (its entries and counters stay as they were): the start-up warm-up.
    pub fn warm_up_pass(&self, embodiment_id: usize) -> Result<StageTimings> {
        let inputs = self.minimal_inputs(embodiment_id);
        // One Euler step: every weight and kernel of the denoise, a quarter of its work.
        Ok(self
            .run(&inputs, &Recorder::disabled(), (false, 1))?
            .timings)
    }

    /// Runs the network on one request's inputs; taps go to `rec` when it is enabled.
    pub fn forward(&self, inputs: &ModelInputs, rec: &Recorder) -> Result<ModelOutput> {
        self.run(inputs, rec, (true, usize::MAX))
    }

    /// [`Gr00tModel::forward`], with the vision cache used or left alone, through the first
    /// `steps` Euler steps. On the CPU the request runs on a thread of the rayon pool that its
    /// layers split their work on: each parallel layer is then a fork within the pool rather
    /// than a job handed in from outside it, which wakes a worker and puts the caller to sleep
    /// (thousands of times per request, most of them the DiT's small products).
    fn run(
        &self,
        inputs: &ModelInputs,
        rec: &Recorder,
        options: (bool, usize),
    ) -> Result<ModelOutput> {
        // A recorder of taps stays on its own thread; the request's tracing span goes along
        // (the stages' spans are its children).
        if self.device.is_cpu() && !rec.is_enabled() {
            let span = tracing::Span::current();
            rayon::scope(|_| {
                let _span = span.enter();
                self.run_here(inputs, &Recorder::disabled(), options)
            })
        } else {
            self.run_here(inputs, rec, options)
        }
    }

    /// [`Gr00tModel::run`] on the calling thread.
    fn run_here(
        &self,
        inputs: &ModelInputs,
        rec: &Recorder,
        (cached, steps): (bool, usize),
    ) -> Result<ModelOutput> {
        let cfg = &self.config;
        let (h, a) = (cfg.action_horizon, cfg.max_action_dim);
        let state_len = cfg.max_state_dim * cfg.state_history_length;
        if inputs.noise.len() != h * a {
            return Err(Error::Input(format!(
                "noise has {} values, expected {h}×{a}",
                inputs.noise.len()
            )));
        }
        if inputs.state.len() != state_len {
            return Err(Error::Input(format!(
                "state has {} values, expected {state_len}",
                inputs.state.len()
            )));
        }
        if let Some(rtc) = &inputs.rtc {
            rtc.validate(h, a)?;
        }
        if inputs.patch_dim == 0 || !inputs.pixel_values.len().is_multiple_of(inputs.patch_dim) {
            return Err(Error::Input(
                "pixel_values is not a whole number of patch rows".into(),
            ));
        }
        let dev = &self.device;
        let state = Tensor::from_slice(
            &inputs.state,
            (1, cfg.state_history_length, cfg.max_state_dim),
            dev,
        )?
        .reshape((1, 1, state_len))?
        .to_dtype(self.activations)?;
        let noise =
            Tensor::from_slice(&inputs.noise, (1, h, a), dev)?.to_dtype(self.activations)?;

        // One span per stage, over the same interval as its `StageTimings` entry.
        let t0 = Instant::now();
        let stage = tracing::info_span!("vision").entered();
        let (image_embeds, deepstack) = self.encode_images(inputs, rec, cached)?;
        sync(dev)?;
        drop(stage);
        let t1 = Instant::now();
        let stage = tracing::info_span!("llm").entered();
        let bb = self.backbone.forward_with_image_embeds(
            &inputs.input_ids,
            &inputs.image_grid_thw,
            &image_embeds,
            &deepstack,
            rec,
        )?;
        sync(dev)?;
        drop(stage);
        let t2 = Instant::now();
        let stage = tracing::info_span!("adapter").entered();
        let vl_embeds = self.head.encode_vl(&bb.features, rec)?;
        sync(dev)?;
        drop(stage);
        let t3 = Instant::now();
        let stage = tracing::info_span!("denoise").entered();
        let actions = self.head.denoise_steps(
            &vl_embeds,
            (&bb.image_mask, &bb.attention_mask),
            &state,
            inputs.embodiment_id,
            (&noise, steps),
            inputs.rtc.as_ref(),
            rec,
        )?;
        let action_pred = actions
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        drop(stage);
        let t4 = Instant::now();
        let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
        Ok(ModelOutput {
            action_pred,
            seq_len: inputs.input_ids.len(),
            timings: StageTimings {
                vision_ms: ms(t0, t1),
                llm_ms: ms(t1, t2),
                adapter_ms: ms(t2, t3),
                denoise_ms: ms(t3, t4),
            },
        })
    }
}

impl Gr00tModel {
    /// The vision tower's merged rows and DeepStack rows for all images, in order.
    ///
    /// Each image is looked up in the vision cache first. The images it lacks go through the
    /// tower together in one call (one pass over the weights instead of one per image): the
    /// tower's attention never mixes images and every other op works row by row, so each
    /// image's rows are the same function of its pixels as when it runs alone, bit for bit, as
    /// long as the row count does not change the GEMM kernel (images of fewer patches than
    /// `BATCH_MIN_PATCHES` run one by one). A cached image is therefore bit-identical to a cold
    /// one. With taps recording, the tower runs once on all images so the taps cover every
    /// row, and the cache is not used; nor when `cached` is false.
    fn encode_images(
        &self,
        inputs: &ModelInputs,
        rec: &Recorder,
        cached: bool,
    ) -> Result<(Tensor, Vec<Tensor>)> {
        // Below this many rows per image the `gemm` crate may pick a kernel (small-matrix or
        // dot-product paths) whose summation order depends on the row count.
        const BATCH_MIN_PATCHES: usize = 257;
        let tower = self.backbone.vision();
        let grids = &inputs.image_grid_thw;
        let pd = inputs.patch_dim;
        let rows = tower.check_grid(grids)?;
        if rows * pd != inputs.pixel_values.len() {
            return Err(Error::Input(format!(
                "pixel_values has {} rows but the image grids need {rows}",
                inputs.pixel_values.len() / pd
            )));
        }
        let dev = &self.device;
        if rec.is_enabled() || !cached || grids.is_empty() {
            let pv = Tensor::from_slice(&inputs.pixel_values, (rows, pd), dev)?
                .to_dtype(self.activations)?;
            let out = tower.forward(&pv, grids, rec)?;
            return Ok((out.image_embeds, out.deepstack));
        }
        let off = Recorder::disabled();
        let encode = |pixels: &[f32], grids: &[[usize; 3]]| -> Result<ImageFeatures> {
            let pv = Tensor::from_slice(pixels, (pixels.len() / pd, pd), dev)?
                .to_dtype(self.activations)?;
            let out = tower.forward(&pv, grids, &off)?;
            Ok(ImageFeatures {
                embeds: out.image_embeds,
                deepstack: out.deepstack,
            })
        };
        // Each image's pixel rows, grid and cache key (None when the cache is off).
        let enabled = self.cache().is_enabled();
        let mut start = 0;
        let images: Vec<(&[f32], [usize; 3], Option<crate::vision_cache::ImageKey>)> = grids
            .iter()
            .map(|&grid| {
                let n = grid[0] * grid[1] * grid[2];
                let pixels = &inputs.pixel_values[start * pd..(start + n) * pd];
                start += n;
                (pixels, grid, enabled.then(|| image_key(grid, pixels)))
            })
            .collect();
        // Encoded together ahead of the lookups: images not cached, first of their key in this
        // request, and large enough. The lookups below then count hits and misses as before.
        let todo: Vec<usize> = {
            let cache = self.cache();
            (0..images.len())
                .filter(|&i| {
                    let (_, [t, h, w], key) = &images[i];
                    let fresh = key.as_ref().is_none_or(|k| {
                        !cache.contains(k) && !images[..i].iter().any(|e| e.2.as_ref() == Some(k))
                    });
                    fresh && t * h * w >= BATCH_MIN_PATCHES
                })
                .collect()
        };
        let mut batched: Vec<Option<ImageFeatures>> = vec![None; images.len()];
        if todo.len() > 1 {
            let pixels: Vec<f32> = todo.iter().flat_map(|&i| images[i].0).copied().collect();
            let sub: Vec<[usize; 3]> = todo.iter().map(|&i| images[i].1).collect();
            let all = encode(&pixels, &sub)?;
            // Merged rows per patch are the same for every image (1 / merge²).
            let (patches, merged) = (pixels.len() / pd, all.embeds.dim(0)?);
            let mut row = 0;
            for (&i, [t, h, w]) in todo.iter().zip(&sub) {
                let len = t * h * w * merged / patches;
                // Copied out, so that a cache entry holds its own rows, not the whole batch.
                let part = |x: &Tensor| x.narrow(0, row, len).and_then(|x| x.copy());
                batched[i] = Some(ImageFeatures {
                    embeds: part(&all.embeds)?,
                    deepstack: all
                        .deepstack
                        .iter()
                        .map(part)
                        .collect::<candle_core::Result<_>>()?,
                });
                row += len;
            }
        }
        let mut features = Vec::with_capacity(images.len());
        for ((pixels, grid, key), pre) in images.into_iter().zip(batched) {
            let cached = key.as_ref().and_then(|k| self.cache().get(k));
            let f = match cached {
                Some(f) => f,
                None => {
                    // Not batched: small, alone, or evicted by this request's own inserts.
                    let f = match pre {
                        Some(f) => f,
                        None => encode(pixels, &[grid])?,
                    };
                    if let Some(k) = key {
                        self.cache().insert(k, f.clone());
                    }
                    f
                }
            };
            features.push(f);
        }
        let embeds: Vec<&Tensor> = features.iter().map(|f| &f.embeds).collect();
        let layers = features.first().map_or(0, |f| f.deepstack.len());
        let deepstack = (0..layers)
            .map(|k| {
                let parts: Vec<&Tensor> = features.iter().map(|f| &f.deepstack[k]).collect();
                Tensor::cat(&parts, 0)
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok((Tensor::cat(&embeds, 0)?, deepstack))
    }

    /// The vision cache, usable even if a panic elsewhere poisoned its lock (every update
    /// leaves it consistent).
    fn cache(&self) -> MutexGuard<'_, VisionCache> {
        self.vision_cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Waits for queued device work so stage timings are honest on asynchronous devices.
fn sync(dev: &Device) -> Result<()> {
    dev.synchronize()?;
    Ok(())
}
