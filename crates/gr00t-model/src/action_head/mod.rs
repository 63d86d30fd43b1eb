//! The GR00T N1.7 action head (`Gr00tN1d7ActionHead`) in f32 on any candle device: VL adapter,
//! state and action encoders, AlternateVLDiT, action decoder and the flow-matching sampler.
//!
//! The reference serves in bf16 (weights, activations, noise and the Euler accumulation); this
//! port computes everything in f32, matching the fp32 golden fixtures. Besides the one-call
//! [`ActionHead::get_action`], every stage is exposed on its own so parity tests can feed each
//! stage the reference's own input.

mod attention;
mod backend;
mod dit;
mod embodiment_mlp;
mod sampler;
mod vl_adapter;

use crate::config::Gr00tConfig;
use crate::int8::Stage;
use crate::linear::loading_stage;
use crate::rtc::Rtc;
use crate::taps::Recorder;
use crate::{Error, Result};
use candle_core::Tensor;
use candle_nn::VarBuilder;
use dit::{Dit, StepModulation, VlMemory};
use embodiment_mlp::{ActionEncoder, CategorySpecificMlp, SelectedActionEncoder, SelectedMlp};
use vl_adapter::VlAdapter;

pub use backend::DenoiseBackend;

/// Everything of one Euler step that depends only on its timestep bucket.
struct StepConstants {
    tau: i64,
    /// `[1, 1, D]` action-encoder sinusoid of `tau`.
    tau_emb: Tensor,
    modulation: StepModulation,
}

/// The loaded action head.
pub struct ActionHead {
    vl: VlAdapter,
    state_encoder: CategorySpecificMlp,
    action_encoder: ActionEncoder,
    decoder: CategorySpecificMlp,
    /// Rows `0..action_horizon` of `position_embedding`, `[1, H, D]`; `None` without
    /// `add_pos_embed`.
    position_embedding: Option<Tensor>,
    dit: Dit,
    steps: Vec<StepConstants>,
    vl_dim: usize,
    state_dim: usize,
    action_dim: usize,
    action_horizon: usize,
    dt: f64,
    backend: DenoiseBackend,
}

/// Per-request state shared by all Euler steps: the embodiment's weight slices and the DiT's
/// cross-attention memory of `vl_embeds`.
pub struct RequestContext {
    state_encoder: SelectedMlp,
    action_encoder: SelectedActionEncoder,
    decoder: SelectedMlp,
    memory: VlMemory,
}

impl ActionHead {
    /// Loads the head from `vb` positioned at `action_head` and precomputes every
    /// timestep-only quantity (timestep embeddings, AdaLN rows, action-encoder sinusoids).
    pub fn load(vb: VarBuilder, cfg: &Gr00tConfig) -> Result<ActionHead> {
        let e = cfg.max_num_embodiments;
        let d = cfg.input_embedding_dim;
        let state_dim = cfg.max_state_dim * cfg.state_history_length;
        let n = cfg.num_inference_timesteps;
        if n == 0 {
            return Err(Error::Input(
                "unsupported config: num_inference_timesteps is 0".into(),
            ));
        }
        if cfg.action_horizon == 0 || cfg.action_horizon > cfg.max_seq_len {
            return Err(Error::Input(format!(
                "unsupported config: action_horizon {} must be in 1..={} (max_seq_len)",
                cfg.action_horizon, cfg.max_seq_len
            )));
        }
        let vl = loading_stage(Stage::Adapter, || VlAdapter::load(&vb, cfg))?;
        let state_encoder =
            CategorySpecificMlp::load(vb.pp("state_encoder"), e, state_dim, cfg.hidden_size, d)?;
        let action_encoder =
            ActionEncoder::load(vb.pp("action_encoder"), e, cfg.max_action_dim, d)?;
        let decoder = CategorySpecificMlp::load(
            vb.pp("action_decoder"),
            e,
            cfg.diffusion_model_cfg.output_dim,
            cfg.hidden_size,
            cfg.max_action_dim,
        )?;
        let position_embedding = if cfg.add_pos_embed {
            let table = vb.get((cfg.max_seq_len, d), "position_embedding.weight")?;
            Some(
                table
                    .narrow(0, 0, cfg.action_horizon)?
                    .unsqueeze(0)?
                    .contiguous()?,
            )
        } else {
            None
        };
        let dit = loading_stage(Stage::Dit, || Dit::load(vb.pp("model"), cfg))?;
        let (device, dtype) = (vb.device().clone(), vb.dtype());
        let steps = (0..n)
            .map(|k| {
                let tau = sampler::timestep_bucket(k, n, cfg.num_timestep_buckets);
                Ok(StepConstants {
                    tau,
                    tau_emb: action_encoder.tau_embedding(tau, &device, dtype)?,
                    modulation: dit.step_modulation(tau, &device, dtype)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ActionHead {
            vl,
            state_encoder,
            action_encoder,
            decoder,
            position_embedding,
            dit,
            steps,
            vl_dim: cfg.backbone_embedding_dim,
            state_dim,
            action_dim: cfg.max_action_dim,
            action_horizon: cfg.action_horizon,
            dt: 1.0 / n as f64,
            backend: DenoiseBackend::default(),
        })
    }

    /// Selects the implementation of the Euler loop used by [`ActionHead::denoise`].
    pub fn set_backend(&mut self, backend: DenoiseBackend) {
        self.backend = backend;
    }

    /// The implementation of the Euler loop in use.
    pub fn backend(&self) -> DenoiseBackend {
        self.backend
    }

    /// The VL adapter: `vlln` then the VL self-attention blocks → `vl_embeds` `[1, S, D_vl]`.
    /// Records `head.vlln_out`, `head.vl_self_attn.block_out.{i}` and `head.vl_embeds`.
    pub fn encode_vl(&self, features: &Tensor, rec: &Recorder) -> Result<Tensor> {
        self.check_features(features)?;
        let mut h = self.vlln(features)?;
        rec.record("head.vlln_out", &h);
        for i in 0..self.num_vl_blocks() {
            h = self.vl_block(i, &h)?;
            rec.record(format!("head.vl_self_attn.block_out.{i}"), &h);
        }
        rec.record("head.vl_embeds", &h);
        Ok(h)
    }

    /// The whole head: backbone `features` `[1, S, D_vl]`, per-token masks of length S, the
    /// normalised `state` `[1, 1, state_dim]`, the embodiment's projector index and the initial
    /// `noise` `[1, H, A]` → normalised actions `action_pred` `[1, H, A]`.
    #[allow(clippy::too_many_arguments)]
    pub fn get_action(
        &self,
        features: &Tensor,
        image_mask: &[bool],
        attention_mask: &[bool],
        state: &Tensor,
        embodiment_id: usize,
        noise: &Tensor,
        rec: &Recorder,
    ) -> Result<Tensor> {
        self.get_action_with_rtc(
            features,
            image_mask,
            attention_mask,
            state,
            embodiment_id,
            noise,
            None,
            rec,
        )
    }

    /// [`ActionHead::get_action`] with optional real-time chunking (see [`crate::rtc`]); `None`
    /// is exactly the plain call. Invalid options are [`Error::Rtc`], before any work.
    #[allow(clippy::too_many_arguments)]
    pub fn get_action_with_rtc(
        &self,
        features: &Tensor,
        image_mask: &[bool],
        attention_mask: &[bool],
        state: &Tensor,
        embodiment_id: usize,
        noise: &Tensor,
        rtc: Option<&Rtc>,
        rec: &Recorder,
    ) -> Result<Tensor> {
        self.check_noise(noise)?;
        self.check_rtc(rtc)?;
        let vl_embeds = self.encode_vl(features, rec)?;
        self.denoise(
            &vl_embeds,
            image_mask,
            attention_mask,
            state,
            embodiment_id,
            noise,
            rtc,
            rec,
        )
    }

    /// Checks RTC options against this head's horizon and action width.
    pub fn check_rtc(&self, rtc: Option<&Rtc>) -> Result<()> {
        match rtc {
            Some(r) => Ok(r.validate(self.action_horizon, self.action_dim)?),
            None => Ok(()),
        }
    }

    /// Checks that `noise` is `[1, H, A]` before any work is spent on the request.
    fn check_noise(&self, noise: &Tensor) -> Result<()> {
        let noise_dims = noise.dims();
        if noise_dims != [1, self.action_horizon, self.action_dim] {
            return Err(Error::Input(format!(
                "noise has shape {noise_dims:?}, expected [1, {}, {}]",
                self.action_horizon, self.action_dim
            )));
        }
        Ok(())
    }

    /// The flow-matching part of [`ActionHead::get_action`], from the VL adapter's output
    /// `vl_embeds` (see [`ActionHead::encode_vl`]) to `action_pred` `[1, H, A]`, by the
    /// selected [`DenoiseBackend`], with optional real-time chunking (both backends share the
    /// RTC start and update of the sampler; `None` is exactly the plain loop).
    #[allow(clippy::too_many_arguments)]
    pub fn denoise(
        &self,
        vl_embeds: &Tensor,
        image_mask: &[bool],
        attention_mask: &[bool],
        state: &Tensor,
        embodiment_id: usize,
        noise: &Tensor,
        rtc: Option<&Rtc>,
        rec: &Recorder,
    ) -> Result<Tensor> {
        let steps = self.num_steps();
        self.denoise_steps(
            vl_embeds,
            (image_mask, attention_mask),
            state,
            embodiment_id,
            (noise, steps),
            rtc,
            rec,
        )
    }

    /// [`ActionHead::denoise`] through the first `steps` Euler steps only (the start-up
    /// warm-up's one step: every weight and kernel of a step, a quarter of the work); the
    /// reference backend runs them all.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn denoise_steps(
        &self,
        vl_embeds: &Tensor,
        (image_mask, attention_mask): (&[bool], &[bool]),
        state: &Tensor,
        embodiment_id: usize,
        (noise, steps): (&Tensor, usize),
        rtc: Option<&Rtc>,
        rec: &Recorder,
    ) -> Result<Tensor> {
        self.check_noise(noise)?;
        self.check_rtc(rtc)?;
        if self.backend == DenoiseBackend::Reference {
            return dit::reference::denoise(
                self,
                vl_embeds,
                image_mask,
                attention_mask,
                state,
                embodiment_id,
                noise,
                rtc,
                rec,
            );
        }
        let ctx = self.prepare(vl_embeds, image_mask, attention_mask, embodiment_id)?;
        rec.record("head.state_input", state);
        let state_features = self.encode_state(&ctx, state)?;
        rec.record("head.state_features", &state_features);
        let actions = sampler::sample(self, &ctx, &state_features, (noise, steps), rtc, rec)?;
        rec.record("head.action_pred", &actions);
        Ok(actions)
    }

    /// Per-request preparation: selects the embodiment's weight slices and computes the
    /// cross-attention keys/values of `vl_embeds` and the text/image key masks once.
    pub fn prepare(
        &self,
        vl_embeds: &Tensor,
        image_mask: &[bool],
        attention_mask: &[bool],
        embodiment_id: usize,
    ) -> Result<RequestContext> {
        self.check_masks(vl_embeds, image_mask, attention_mask)?;
        Ok(RequestContext {
            state_encoder: self.state_encoder.select(embodiment_id)?,
            action_encoder: self.action_encoder.select(embodiment_id)?,
            decoder: self.decoder.select(embodiment_id)?,
            memory: self.dit.memory(vl_embeds, image_mask, attention_mask)?,
        })
    }

    /// `vlln(features)` (identity when `use_vlln` is false).
    pub fn vlln(&self, features: &Tensor) -> Result<Tensor> {
        self.vl.vlln(features)
    }

    /// Number of VL self-attention blocks (0 when the adapter is identity).
    pub fn num_vl_blocks(&self) -> usize {
        self.vl.num_blocks()
    }

    /// VL self-attention block `i` applied to `h` `[1, S, D_vl]`.
    pub fn vl_block(&self, i: usize, h: &Tensor) -> Result<Tensor> {
        self.vl.block(i, h)
    }

    /// State encoder: `[1, 1, state_dim]` → `[1, 1, D]`.
    pub fn encode_state(&self, ctx: &RequestContext, state: &Tensor) -> Result<Tensor> {
        self.check_state(state)?;
        ctx.state_encoder.forward(state)
    }

    /// Number of Euler steps.
    pub fn num_steps(&self) -> usize {
        self.steps.len()
    }

    /// The integer timestep bucket of step `k` (0, 250, 500, 750 for 4 steps).
    pub fn timestep(&self, k: usize) -> Result<i64> {
        Ok(self.step(k)?.tau)
    }

    /// The DiT timestep embedding `temb` `[1, D]` of step `k`.
    pub fn temb(&self, k: usize) -> Result<Tensor> {
        Ok(self.step(k)?.modulation.temb.clone())
    }

    /// Action encoder at step `k`: actions `[1, H, A]` → `action_features` `[1, H, D]`
    /// (before the position embedding).
    pub fn encode_actions(
        &self,
        ctx: &RequestContext,
        actions: &Tensor,
        k: usize,
    ) -> Result<Tensor> {
        ctx.action_encoder.forward(actions, &self.step(k)?.tau_emb)
    }

    /// DiT input `sa_embs` `[1, 1 + H, D]`: the state token, then the action tokens plus
    /// position-embedding rows `0..H` (the state token gets none).
    pub fn dit_input(&self, state_features: &Tensor, action_features: &Tensor) -> Result<Tensor> {
        let actions = match &self.position_embedding {
            Some(pe) => action_features.broadcast_add(pe)?,
            None => action_features.clone(),
        };
        Ok(Tensor::cat(&[state_features, &actions], 1)?)
    }

    /// Number of DiT blocks.
    pub fn num_dit_blocks(&self) -> usize {
        self.dit.num_blocks()
    }

    /// DiT block `b` at step `k` applied to the tokens `h` `[1, 1 + H, D]`.
    pub fn dit_block(
        &self,
        ctx: &RequestContext,
        b: usize,
        h: &Tensor,
        k: usize,
    ) -> Result<Tensor> {
        self.dit.block(b, h, &self.step(k)?.modulation, &ctx.memory)
    }

    /// DiT output at step `k`: AdaLN `norm_out` + `proj_out_2` → `[1, 1 + H, output_dim]`.
    pub fn dit_output(&self, h: &Tensor, k: usize) -> Result<Tensor> {
        self.dit.output(h, &self.step(k)?.modulation)
    }

    /// Action decoder: `[1, 1 + H, output_dim]` → `decoder_out` `[1, 1 + H, A]`.
    pub fn decode(&self, ctx: &RequestContext, dit_out: &Tensor) -> Result<Tensor> {
        ctx.decoder.forward(dit_out)
    }

    /// The predicted velocity: the last `H` rows of `decoder_out` (drops the state token).
    pub fn velocity(&self, decoder_out: &Tensor) -> Result<Tensor> {
        let t = decoder_out.dim(1)?;
        if t < self.action_horizon {
            return Err(Error::Input(format!(
                "decoder output has {t} tokens, fewer than the action horizon {}",
                self.action_horizon
            )));
        }
        Ok(decoder_out.narrow(1, t - self.action_horizon, self.action_horizon)?)
    }

    /// One Euler update `x + dt·v` with dt = 1/num_inference_timesteps.
    pub fn euler_step(&self, x: &Tensor, velocity: &Tensor) -> Result<Tensor> {
        Ok((x + (velocity * self.dt)?)?)
    }

    /// Keeps the embodiment-specific weights (state encoder, action encoder, decoder) of the
    /// ids in `keep` only, widened once; requests for any other id become errors.
    pub fn retain_embodiments(&mut self, keep: &[usize]) -> Result<()> {
        self.state_encoder.retain(keep)?;
        self.action_encoder.retain(keep)?;
        self.decoder.retain(keep)
    }

    /// Bytes of the category-specific weights still loaded (all slots until
    /// [`ActionHead::retain_embodiments`]).
    pub fn embodiment_weight_bytes(&self) -> usize {
        self.state_encoder.kept_bytes()
            + self.action_encoder.kept_bytes()
            + self.decoder.kept_bytes()
    }

    fn step(&self, k: usize) -> Result<&StepConstants> {
        self.steps.get(k).ok_or_else(|| {
            Error::Input(format!(
                "Euler step {k} does not exist ({} steps)",
                self.steps.len()
            ))
        })
    }

    /// Checks `vl_embeds` `[1, S, D_vl]` and that both masks have length S.
    fn check_masks(
        &self,
        vl_embeds: &Tensor,
        image_mask: &[bool],
        attention_mask: &[bool],
    ) -> Result<()> {
        let s = self.check_features(vl_embeds)?;
        if image_mask.len() != s || attention_mask.len() != s {
            return Err(Error::Input(format!(
                "mask lengths (image {}, attention {}) differ from the sequence length {s}",
                image_mask.len(),
                attention_mask.len()
            )));
        }
        Ok(())
    }

    /// Checks that `state` is `[1, 1, state_dim]`.
    fn check_state(&self, state: &Tensor) -> Result<()> {
        let dims = state.dims();
        if dims != [1, 1, self.state_dim] {
            return Err(Error::Input(format!(
                "state has shape {dims:?}, expected [1, 1, {}]",
                self.state_dim
            )));
        }
        Ok(())
    }

    /// Checks `[1, S, D_vl]` and returns S.
    fn check_features(&self, features: &Tensor) -> Result<usize> {
        match *features.dims() {
            [1, s, d] if d == self.vl_dim && s > 0 => Ok(s),
            ref dims => Err(Error::Input(format!(
                "VL features have shape {dims:?}, expected [1, S, {}]",
                self.vl_dim
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::sampler::timestep_bucket;

    #[test]
    fn buckets_follow_python_int_truncation() {
        let b: Vec<i64> = (0..4).map(|k| timestep_bucket(k, 4, 1000)).collect();
        assert_eq!(b, [0, 250, 500, 750]);
        // int(1/3 · 1000) = 333, int(2/3 · 1000) = 666 in Python.
        let b: Vec<i64> = (0..3).map(|k| timestep_bucket(k, 3, 1000)).collect();
        assert_eq!(b, [0, 333, 666]);
    }
}
