//! `AlternateVLDiT`: timestep encoder, AdaLN transformer blocks that alternate text-only and
//! image-only cross-attention to `vl_embeds` with self-attention over the state+action tokens,
//! and the AdaLN output projection.

pub(crate) mod reference;

use super::attention::{Attention, FeedForward, KeyValues, LayerNorm};
use crate::config::Gr00tConfig;
use crate::linear::{linear_f32_weight, Linear};
use crate::nn::residual_add;
use crate::{Error, Result};
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::VarBuilder;

/// Width of diffusers' `Timesteps` projection used by `TimestepEncoder`.
const TIME_PROJ_DIM: usize = 256;
/// Epsilon of the block norms (AdaLN `norm1.norm` and `norm3`, no affine).
const BLOCK_EPS: f64 = 1e-5;
/// Epsilon of `norm_out` (no affine).
const OUT_EPS: f64 = 1e-6;

/// What a block attends to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attend {
    /// Self-attention over the state+action tokens (odd blocks).
    SelfTokens,
    /// Cross-attention to the non-image VL tokens (`~image_mask & attention_mask`).
    Text,
    /// Cross-attention to the image VL tokens (`image_mask & attention_mask`).
    Image,
}

/// One `BasicTransformerBlock` with `norm_type="ada_norm"`.
struct DitBlock {
    ada_linear: Linear,
    attn: Attention,
    ff: FeedForward,
    attend: Attend,
}

/// The timestep-only part of one Euler step: `temb` and every AdaLN modulation row.
pub(crate) struct StepModulation {
    /// `[1, D]` timestep embedding.
    pub(crate) temb: Tensor,
    /// Per block: `(1 + scale, shift)`, each `[1, 1, D]` (scale is the first chunk).
    blocks: Vec<(Tensor, Tensor)>,
    /// Output: `(shift, 1 + scale)`, each `[1, 1, D]` (shift is the first chunk).
    out: (Tensor, Tensor),
}

/// Per-request cross-attention memory: each cross block's keys/values of the `vl_embeds` tokens
/// it attends to (text or image). The same at every Euler step.
pub(crate) struct VlMemory {
    kv: Vec<Option<KeyValues>>,
}

/// The tokens of `vl` `[1, S, D]` where `keep` holds, in order; an input error naming `what`
/// when there is none (the reference's softmax over no key is undefined).
fn kept_tokens(vl: &Tensor, keep: &[bool], what: &str) -> Result<Tensor> {
    let idx: Vec<u32> = (0..keep.len() as u32)
        .filter(|&i| keep[i as usize])
        .collect();
    if idx.is_empty() {
        return Err(Error::Input(format!(
            "the {what} cross-attention has no key to attend to"
        )));
    }
    if idx.len() == keep.len() {
        return Ok(vl.clone());
    }
    let n = idx.len();
    Ok(vl.index_select(&Tensor::from_vec(idx, n, vl.device())?, 1)?)
}

/// The DiT (`action_head.model`).
pub(crate) struct Dit {
    linear_1: Linear,
    linear_2: Linear,
    blocks: Vec<DitBlock>,
    norm: LayerNorm,
    norm_out: LayerNorm,
    proj_out_1: Linear,
    proj_out_2: Linear,
    dim: usize,
}

impl Dit {
    /// Loads the DiT under `vb` (positioned at `action_head.model`).
    pub(crate) fn load(vb: VarBuilder, cfg: &Gr00tConfig) -> Result<Dit> {
        let dc = &cfg.diffusion_model_cfg;
        if !cfg.use_alternate_vl_dit || !dc.interleave_self_attention {
            return Err(Error::Input(
                "unsupported config: only the AlternateVLDiT with interleaved self-attention \
                 (use_alternate_vl_dit, interleave_self_attention) is implemented"
                    .into(),
            ));
        }
        if cfg.attend_text_every_n_blocks == 0 {
            return Err(Error::Input(
                "unsupported config: attend_text_every_n_blocks is 0".into(),
            ));
        }
        let dim = dc.inner_dim();
        if dim != cfg.input_embedding_dim {
            return Err(Error::Input(format!(
                "unsupported config: DiT width {dim} (heads × head_dim) differs from \
                 input_embedding_dim {}",
                cfg.input_embedding_dim
            )));
        }
        let te = vb.pp("timestep_encoder.timestep_embedder");
        let mut blocks = Vec::with_capacity(dc.num_layers);
        for b in 0..dc.num_layers {
            let attend = if b % 2 == 1 {
                Attend::SelfTokens
            } else if b % (2 * cfg.attend_text_every_n_blocks) == 0 {
                Attend::Text
            } else {
                Attend::Image
            };
            let kv_dim = match attend {
                Attend::SelfTokens => dim,
                Attend::Text | Attend::Image => cfg.backbone_embedding_dim,
            };
            let vb = vb.pp(format!("transformer_blocks.{b}"));
            blocks.push(DitBlock {
                ada_linear: linear_f32_weight(vb.pp("norm1.linear"), dim, 2 * dim)?,
                attn: Attention::load(
                    vb.pp("attn1"),
                    dim,
                    kv_dim,
                    dc.num_attention_heads,
                    dc.attention_head_dim,
                )?,
                ff: FeedForward::load(vb.pp("ff"), dim, 4 * dim)?,
                attend,
            });
        }
        Ok(Dit {
            linear_1: linear_f32_weight(te.pp("linear_1"), TIME_PROJ_DIM, dim)?,
            linear_2: linear_f32_weight(te.pp("linear_2"), dim, dim)?,
            blocks,
            norm: LayerNorm::plain(BLOCK_EPS),
            norm_out: LayerNorm::plain(OUT_EPS),
            proj_out_1: linear_f32_weight(vb.pp("proj_out_1"), dim, 2 * dim)?,
            proj_out_2: linear_f32_weight(vb.pp("proj_out_2"), dim, dc.output_dim)?,
            dim,
        })
    }

    /// Number of transformer blocks.
    pub(crate) fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// `temb` and all modulation rows of timestep bucket `tau`, in `dtype`.
    pub(crate) fn step_modulation(
        &self,
        tau: i64,
        device: &Device,
        dtype: DType,
    ) -> Result<StepModulation> {
        let proj = Tensor::from_vec(time_projection(tau as f32), (1, TIME_PROJ_DIM), device)?
            .to_dtype(dtype)?;
        let temb = self
            .linear_2
            .forward(&self.linear_1.forward(&proj)?.silu()?)?;
        let cond = temb.silu()?;
        let d = self.dim;
        // Splits a [1, 2D] row into two contiguous [1, 1, D] halves.
        let halves = |m: Tensor| -> Result<(Tensor, Tensor)> {
            let first = m.narrow(1, 0, d)?.reshape((1, 1, d))?;
            let second = m.narrow(1, d, d)?.reshape((1, 1, d))?;
            Ok((first, second))
        };
        let mut blocks = Vec::with_capacity(self.blocks.len());
        for blk in &self.blocks {
            let (scale, shift) = halves(blk.ada_linear.forward(&cond)?)?;
            blocks.push(((scale + 1.0)?, shift));
        }
        let (shift, scale) = halves(self.proj_out_1.forward(&cond)?)?;
        Ok(StepModulation {
            temb,
            blocks,
            out: (shift, (scale + 1.0)?),
        })
    }

    /// Keys/values of `vl` `[1, S, D_vl]` for every cross block, of the tokens it attends to
    /// alone: a masked key's weight is exactly zero, so projecting and scoring only the kept
    /// ones (21 text tokens of 469 in a DROID request) changes no weight and skips the rest.
    pub(crate) fn memory(
        &self,
        vl: &Tensor,
        image_mask: &[bool],
        attention_mask: &[bool],
    ) -> Result<VlMemory> {
        let text: Vec<bool> = image_mask
            .iter()
            .zip(attention_mask)
            .map(|(&img, &att)| !img && att)
            .collect();
        let image: Vec<bool> = image_mask
            .iter()
            .zip(attention_mask)
            .map(|(&img, &att)| img && att)
            .collect();
        let text = kept_tokens(vl, &text, "text")?;
        let image = kept_tokens(vl, &image, "image")?;
        let kv = self
            .blocks
            .iter()
            .map(|blk| match blk.attend {
                Attend::SelfTokens => Ok(None),
                Attend::Text => blk.attn.key_values(&text).map(Some),
                Attend::Image => blk.attn.key_values(&image).map(Some),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(VlMemory { kv })
    }

    /// Block `b` applied to the tokens `h` `[1, T, D]`.
    pub(crate) fn block(
        &self,
        b: usize,
        h: &Tensor,
        m: &StepModulation,
        mem: &VlMemory,
    ) -> Result<Tensor> {
        let (blk, (one_plus_scale, shift)) = self
            .blocks
            .get(b)
            .zip(m.blocks.get(b))
            .ok_or_else(|| Error::Input(format!("DiT block {b} does not exist")))?;
        let n = self.norm.modulated(h, one_plus_scale, shift)?;
        let attn = match blk.attend {
            Attend::SelfTokens => blk.attn.self_attend(&n)?,
            Attend::Text | Attend::Image => {
                let kv = mem.kv.get(b).and_then(Option::as_ref).ok_or_else(|| {
                    Error::Input(format!("no cross-attention memory for DiT block {b}"))
                })?;
                blk.attn.attend(&n, kv, None)?
            }
        };
        let h = residual_add(&attn, h)?;
        Ok(residual_add(&blk.ff.forward(&self.norm.forward(&h)?)?, &h)?)
    }

    /// `proj_out_2(norm_out(h)·(1 + scale) + shift)` → `[1, T, output_dim]`.
    pub(crate) fn output(&self, h: &Tensor, m: &StepModulation) -> Result<Tensor> {
        let (shift, one_plus_scale) = &m.out;
        let n = self.norm_out.modulated(h, one_plus_scale, shift)?;
        Ok(self.proj_out_2.forward(&n)?)
    }
}

/// diffusers `Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=1)`:
/// f_i = exp(−ln(10000)·i/127), output `[cos(t·f) | sin(t·f)]`, every step rounded to f32 as
/// torch does; sin/cos evaluated in f64 on the f32 argument and rounded.
fn time_projection(t: f32) -> Vec<f32> {
    let half = TIME_PROJ_DIM / 2;
    let neg_ln = -(10000f64.ln()) as f32;
    let args: Vec<f32> = (0..half)
        .map(|i| t * (neg_ln * i as f32 / (half - 1) as f32).exp())
        .collect();
    let cos = args.iter().map(|&a| (a as f64).cos() as f32);
    let sin = args.iter().map(|&a| (a as f64).sin() as f32);
    cos.chain(sin).collect()
}

#[cfg(test)]
mod tests {
    use super::kept_tokens;
    use candle_core::{Device, Tensor};

    #[test]
    fn kept_tokens_are_the_masked_in_rows_in_order_and_none_is_an_error() {
        let vl = Tensor::arange(0f32, 12.0, &Device::Cpu)
            .unwrap()
            .reshape((1, 4, 3))
            .unwrap();
        let kept = kept_tokens(&vl, &[false, true, false, true], "text").unwrap();
        assert_eq!(
            kept.to_vec3::<f32>().unwrap(),
            [[[3.0, 4.0, 5.0], [9.0, 10.0, 11.0]]]
        );
        let all = kept_tokens(&vl, &[true; 4], "image").unwrap();
        assert_eq!(all.to_vec3::<f32>().unwrap(), vl.to_vec3::<f32>().unwrap());
        let err = kept_tokens(&vl, &[false; 4], "text")
            .unwrap_err()
            .to_string();
        assert!(err.contains("text cross-attention has no key"), "{err}");
    }
}
