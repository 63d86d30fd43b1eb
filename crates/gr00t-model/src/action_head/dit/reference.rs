//! The "reference" denoise backend: the flow-matching loop laid out as upstream's
//! `get_action_with_features` and `AlternateVLDiT.forward` are, with nothing hoisted out of the
//! loop. Every Euler step recomputes the action encoder's sinusoid and the DiT timestep embedding;
//! every block recomputes its AdaLN modulation row and, in cross-attention blocks, the keys and
//! values of `vl_embeds` and the key mask. It shares the weights of the fused backend and exists
//! to check it (and to measure what the hoisting buys).

use super::{time_projection, Attend, Dit, TIME_PROJ_DIM};
use crate::action_head::attention::{key_bias, LayerNorm};
use crate::action_head::{sampler, ActionHead};
use crate::linear::Linear;
use crate::rtc::Rtc;
use crate::taps::Recorder;
use crate::Result;
use candle_core::{Module, Tensor};

/// Runs every Euler step from `noise` `[1, H, A]` (shape already checked; RTC, when given,
/// already validated) and returns `action_pred` `[1, H, A]`, recording the same taps as the
/// fused backend.
#[allow(clippy::too_many_arguments)]
pub(crate) fn denoise(
    head: &ActionHead,
    vl_embeds: &Tensor,
    image_mask: &[bool],
    attention_mask: &[bool],
    state: &Tensor,
    embodiment_id: usize,
    noise: &Tensor,
    rtc: Option<&Rtc>,
    rec: &Recorder,
) -> Result<Tensor> {
    head.check_masks(vl_embeds, image_mask, attention_mask)?;
    let state_encoder = head.state_encoder.select(embodiment_id)?;
    let action_encoder = head.action_encoder.select(embodiment_id)?;
    let decoder = head.decoder.select(embodiment_id)?;
    rec.record("head.state_input", state);
    head.check_state(state)?;
    let state_features = state_encoder.forward(state)?;
    rec.record("head.state_features", &state_features);
    let device = noise.device();
    let (mut x, vel_strength) = sampler::rtc_start(noise, rtc)?;
    for k in 0..head.num_steps() {
        let p = format!("head.step{k}");
        let tau = head.timestep(k)?;
        rec.record(format!("{p}.actions_in"), &x);
        if rec.is_enabled() {
            rec.record(format!("{p}.timestep"), &Tensor::new(&[tau], device)?);
        }
        let tau_emb = head.action_encoder.tau_embedding(tau, device, x.dtype())?;
        let action_features = action_encoder.forward(&x, &tau_emb)?;
        rec.record(format!("{p}.action_features"), &action_features);
        let sa_embs = head.dit_input(&state_features, &action_features)?;
        rec.record(format!("{p}.sa_embs"), &sa_embs);
        let dit_out = forward(
            &head.dit,
            &sa_embs,
            vl_embeds,
            tau,
            image_mask,
            attention_mask,
            rec,
            &p,
        )?;
        rec.record(format!("{p}.dit_out"), &dit_out);
        let decoder_out = decoder.forward(&dit_out)?;
        rec.record(format!("{p}.decoder_out"), &decoder_out);
        let velocity = head.velocity(&decoder_out)?;
        rec.record(format!("{p}.velocity"), &velocity);
        x = sampler::rtc_euler_step(head, &x, &velocity, vel_strength.as_ref())?;
    }
    rec.record("head.action_pred", &x);
    Ok(x)
}

/// `AlternateVLDiT.forward(hidden_states, encoder_hidden_states, timestep, image_mask,
/// backbone_attention_mask)` → `[1, T, output_dim]`.
#[allow(clippy::too_many_arguments)]
fn forward(
    dit: &Dit,
    hidden_states: &Tensor,
    vl: &Tensor,
    tau: i64,
    image_mask: &[bool],
    attention_mask: &[bool],
    rec: &Recorder,
    prefix: &str,
) -> Result<Tensor> {
    let device = hidden_states.device();
    let proj = Tensor::from_vec(time_projection(tau as f32), (1, TIME_PROJ_DIM), device)?
        .to_dtype(hidden_states.dtype())?;
    let temb = dit
        .linear_2
        .forward(&dit.linear_1.forward(&proj)?.silu()?)?;
    rec.record(format!("{prefix}.temb"), &temb);
    let image_keep: Vec<bool> = image_mask
        .iter()
        .zip(attention_mask)
        .map(|(&img, &att)| img && att)
        .collect();
    let text_keep: Vec<bool> = image_mask
        .iter()
        .zip(attention_mask)
        .map(|(&img, &att)| !img && att)
        .collect();
    let d = dit.dim;
    let mut h = hidden_states.clone();
    for (b, blk) in dit.blocks.iter().enumerate() {
        // AdaLayerNorm: scale is the first chunk.
        let (scale, shift) = ada_chunks(&blk.ada_linear, &temb, d)?;
        let n = modulate(&dit.norm, &h, scale, &shift)?;
        let attn = match blk.attend {
            Attend::SelfTokens => blk.attn.self_attend(&n)?,
            Attend::Text | Attend::Image => {
                let (keep, what) = if blk.attend == Attend::Text {
                    (&text_keep, "text")
                } else {
                    (&image_keep, "image")
                };
                let bias = key_bias(keep, device, vl.dtype(), what)?;
                let kv = blk.attn.key_values(vl)?;
                blk.attn.attend(&n, &kv, Some(&bias))?
            }
        };
        h = (attn + h)?;
        h = (blk.ff.forward(&dit.norm.forward(&h)?)? + h)?;
        rec.record(format!("{prefix}.dit_block_out.{b}"), &h);
    }
    // Output AdaLN: shift is the first chunk here.
    let (shift, scale) = ada_chunks(&dit.proj_out_1, &temb, d)?;
    let n = modulate(&dit.norm_out, &h, scale, &shift)?;
    Ok(dit.proj_out_2.forward(&n)?)
}

/// The two `[1, 1, d]` chunks of an AdaLN row `linear(silu(temb))`, in stored order.
fn ada_chunks(linear: &Linear, temb: &Tensor, d: usize) -> Result<(Tensor, Tensor)> {
    let emb = linear.forward(&temb.silu()?)?;
    let first = emb.narrow(1, 0, d)?.unsqueeze(1)?;
    let second = emb.narrow(1, d, d)?.unsqueeze(1)?;
    Ok((first, second))
}

/// AdaLN: `norm(h)·(1 + scale) + shift`.
fn modulate(norm: &LayerNorm, h: &Tensor, scale: Tensor, shift: &Tensor) -> Result<Tensor> {
    Ok(norm
        .forward(h)?
        .broadcast_mul(&(scale + 1.0)?)?
        .broadcast_add(shift)?)
}
