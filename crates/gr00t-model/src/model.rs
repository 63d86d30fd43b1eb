//! The whole GR00T N1.7 network for one request: backbone (vision tower + truncated LLM),
//! VL adapter and flow-matching action head, from [`ModelInputs`] to normalised actions.

use crate::action_head::ActionHead;
use crate::backbone::Backbone;
use crate::checkpoint::Checkpoint;
use crate::config::Gr00tConfig;
use crate::error::{Error, Result};
use crate::inputs::ModelInputs;
use crate::taps::Recorder;
use candle_core::{DType, Device, Tensor};
use std::time::Instant;

/// Compute dtype of the CPU path: the accuracy target is the fp32 reference (upstream serves
/// bf16; we keep fp32 on purpose).
pub const COMPUTE_DTYPE: DType = DType::F32;

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
}

impl Gr00tModel {
    /// Loads every inference weight of `ckpt` onto `device`, converting to [`COMPUTE_DTYPE`]
    /// once. Tensors the network never asks for (lm_head, the final text norm, training-only
    /// keys) are never read from the memory map.
    pub fn load(ckpt: &Checkpoint, device: &Device) -> Result<Gr00tModel> {
        let vb = ckpt.var_builder(COMPUTE_DTYPE, device)?;
        let backbone = Backbone::load(vb.clone(), &ckpt.backbone, ckpt.config.select_layer)?;
        let head = ActionHead::load(vb.pp("action_head"), &ckpt.config)?;
        Ok(Gr00tModel {
            backbone,
            head,
            config: ckpt.config.clone(),
            device: device.clone(),
            dtype: COMPUTE_DTYPE,
        })
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

    /// Runs the network on one request's inputs; taps go to `rec` when it is enabled.
    pub fn forward(&self, inputs: &ModelInputs, rec: &Recorder) -> Result<ModelOutput> {
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
        if inputs.patch_dim == 0 || !inputs.pixel_values.len().is_multiple_of(inputs.patch_dim) {
            return Err(Error::Input(
                "pixel_values is not a whole number of patch rows".into(),
            ));
        }
        let dev = &self.device;
        let rows = inputs.pixel_values.len() / inputs.patch_dim;
        let pixel_values = Tensor::from_slice(&inputs.pixel_values, (rows, inputs.patch_dim), dev)?
            .to_dtype(self.dtype)?;
        let state = Tensor::from_slice(
            &inputs.state,
            (1, cfg.state_history_length, cfg.max_state_dim),
            dev,
        )?
        .reshape((1, 1, state_len))?
        .to_dtype(self.dtype)?;
        let noise = Tensor::from_slice(&inputs.noise, (1, h, a), dev)?.to_dtype(self.dtype)?;

        let t0 = Instant::now();
        let vision = self
            .backbone
            .vision()
            .forward(&pixel_values, &inputs.image_grid_thw, rec)?;
        sync(dev)?;
        let t1 = Instant::now();
        let bb = self.backbone.forward_with_image_embeds(
            &inputs.input_ids,
            &inputs.image_grid_thw,
            &vision.image_embeds,
            &vision.deepstack,
            rec,
        )?;
        sync(dev)?;
        let t2 = Instant::now();
        let vl_embeds = self.head.encode_vl(&bb.features, rec)?;
        sync(dev)?;
        let t3 = Instant::now();
        let actions = self.head.denoise(
            &vl_embeds,
            &bb.image_mask,
            &bb.attention_mask,
            &state,
            inputs.embodiment_id,
            &noise,
            rec,
        )?;
        let action_pred = actions
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
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

/// Waits for queued device work so stage timings are honest on asynchronous devices.
fn sync(dev: &Device) -> Result<()> {
    dev.synchronize()?;
    Ok(())
}
