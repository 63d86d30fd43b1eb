//! The truncated Qwen3-VL LLM (`Qwen3VLTextModel` with only the first `select_layer` decoder
//! layers): token embedding, image-row injection, decoder layers with QK-norm, GQA and
//! interleaved mRoPE, and the DeepStack additions. No final norm, no lm_head.

pub mod rope;

pub use rope::{rope_index, MropePositions};

use crate::config::TextConfig;
use crate::error::{Error, Result};
use crate::linear::{attention_products_for, Linear, Products};
use crate::nn::{apply_rope, attention, linear, residual_add, Mask, RmsNorm};
use crate::taps::Recorder;
use crate::weights::COMPACT;
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::VarBuilder;

/// Per-call state shared by every decoder layer: rotary tables and the causal mask.
#[derive(Debug, Clone)]
pub struct TextPositions {
    cos: Tensor,
    sin: Tensor,
    mask: Tensor,
}

/// The kept decoder layers and the token embedding.
#[derive(Debug, Clone)]
pub struct TextModel {
    /// `[vocab, hidden]`, kept bf16 when stored so (rows are widened after the gather).
    embed_tokens: Tensor,
    /// Compute dtype (the VarBuilder's).
    dtype: DType,
    layers: Vec<DecoderLayer>,
    /// `1 / θ^(2j / head_dim)` in fp32 (production bf16 rounds these to bf16; the fp32 goldens
    /// and accuracy favour fp32).
    inv_freq: Vec<f32>,
    mrope_section: Vec<usize>,
}

impl TextModel {
    /// Loads the embedding and decoder layers `0..num_layers`; `vb` is positioned at
    /// `backbone.model.model.language_model`. The final `norm` and `lm_head` are never read.
    pub fn load(vb: VarBuilder, cfg: &TextConfig, num_layers: usize) -> Result<TextModel> {
        if num_layers == 0 || num_layers > cfg.num_hidden_layers {
            return Err(Error::Input(format!(
                "select_layer {num_layers} is outside 1..={} LLM layers",
                cfg.num_hidden_layers
            )));
        }
        let (hq, hkv, hd) = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        if hkv == 0 || !hq.is_multiple_of(hkv) || !hd.is_multiple_of(2) {
            return Err(Error::Input(format!(
                "text config: {hq} query heads / {hkv} kv heads / head_dim {hd} are inconsistent"
            )));
        }
        let section = &cfg.rope_scaling.mrope_section;
        if section.len() != 3 || section.iter().sum::<usize>() != hd / 2 {
            return Err(Error::Input(format!(
                "text config: mrope_section {section:?} does not split head_dim/2 = {}",
                hd / 2
            )));
        }
        if cfg.hidden_act != "silu" {
            return Err(Error::Input(format!(
                "text config: unsupported hidden_act {:?}",
                cfg.hidden_act
            )));
        }
        let embed_tokens = vb.get_with_hints_dtype(
            (cfg.vocab_size, cfg.hidden_size),
            "embed_tokens.weight",
            Default::default(),
            COMPACT,
        )?;
        let layers = (0..num_layers)
            .map(|l| DecoderLayer::load(vb.pp(format!("layers.{l}")), cfg))
            .collect::<Result<Vec<_>>>()?;
        let theta = cfg.rope_theta as f32;
        let inv_freq = (0..hd / 2)
            .map(|j| 1.0 / theta.powf((2 * j) as f32 / hd as f32))
            .collect();
        Ok(TextModel {
            embed_tokens,
            dtype: vb.dtype(),
            layers,
            inv_freq,
            mrope_section: section.clone(),
        })
    }

    /// The kept decoder layers, in order.
    pub fn layers(&self) -> &[DecoderLayer] {
        &self.layers
    }

    fn device(&self) -> &Device {
        self.embed_tokens.device()
    }

    fn dtype(&self) -> DType {
        self.dtype
    }

    /// Token embeddings `[1, S, hidden]`.
    pub fn embed(&self, input_ids: &[u32]) -> Result<Tensor> {
        let vocab = self.embed_tokens.dim(0)?;
        if let Some(&bad) = input_ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::Input(format!(
                "token id {bad} is outside the vocabulary of {vocab}"
            )));
        }
        let ids = Tensor::from_slice(input_ids, input_ids.len(), self.device())?;
        Ok(self
            .embed_tokens
            .index_select(&ids, 0)?
            .to_dtype(self.dtype)?
            .unsqueeze(0)?)
    }

    /// `inputs_embeds.masked_scatter(image_mask, image_embeds)`: the k-th masked row of
    /// `embeds` `[1, S, hidden]` becomes row k of `image_embeds` `[M, hidden]`.
    pub fn scatter_image_embeds(
        &self,
        embeds: &Tensor,
        image_mask: &[bool],
        image_embeds: &Tensor,
    ) -> Result<Tensor> {
        let (b, s, h) = embeds.dims3()?;
        let (m, _) = image_embeds.dims2()?;
        if b != 1 {
            return Err(Error::Input(format!(
                "batch of {b} sequences; only 1 is supported"
            )));
        }
        let masked = image_mask.iter().filter(|&&b| b).count();
        if image_mask.len() != s || masked != m {
            return Err(Error::Input(format!(
                "{masked} image tokens in a sequence of {} but {m} image embeddings for {s} rows",
                image_mask.len()
            )));
        }
        if m == 0 {
            return Ok(embeds.clone());
        }
        // Gather from [token rows; image rows]: one device op, no host round trip.
        let mut next_image = s as u32;
        let rows: Vec<u32> = image_mask
            .iter()
            .enumerate()
            .map(|(i, &is_image)| {
                if is_image {
                    next_image += 1;
                    next_image - 1
                } else {
                    i as u32
                }
            })
            .collect();
        let rows = Tensor::from_vec(rows, s, self.device())?;
        let all = Tensor::cat(
            &[
                &embeds.squeeze(0)?,
                &image_embeds.to_dtype(embeds.dtype())?.reshape((m, h))?,
            ],
            0,
        )?;
        Ok(all.index_select(&rows, 0)?.unsqueeze(0)?)
    }

    /// Rotary tables and causal mask for a sequence with these position ids.
    pub fn positions(&self, positions: &MropePositions) -> Result<TextPositions> {
        let (cos, sin) = rope::mrope_tables(
            positions,
            &self.inv_freq,
            &self.mrope_section,
            self.dtype(),
            self.device(),
        )?;
        let s = positions[0].len();
        let i = Tensor::arange(0u32, s as u32, self.device())?;
        let allowed = i.unsqueeze(1)?.broadcast_ge(&i.unsqueeze(0)?)?;
        let zero = Tensor::zeros((s, s), self.dtype(), self.device())?;
        let blocked =
            Tensor::full(f32::NEG_INFINITY, (s, s), self.device())?.to_dtype(self.dtype())?;
        let mask = allowed.where_cond(&zero, &blocked)?;
        Ok(TextPositions { cos, sin, mask })
    }

    /// Runs the kept layers on `inputs_embeds` `[1, S, hidden]`; after layer l < `deepstack.len()`
    /// adds `deepstack[l]` to the rows where `visual_pos_mask` is set. Returns the output of the
    /// last layer (the GR00T features, no final norm).
    pub fn forward(
        &self,
        inputs_embeds: &Tensor,
        positions: &MropePositions,
        visual_pos_mask: &[bool],
        deepstack: &[Tensor],
        rec: &Recorder,
    ) -> Result<Tensor> {
        let (b, s, _) = inputs_embeds.dims3()?;
        if b != 1 {
            return Err(Error::Input(format!(
                "batch of {b} sequences; only 1 is supported"
            )));
        }
        if positions[0].len() != s || visual_pos_mask.len() != s {
            return Err(Error::Input(format!(
                "sequence of {s} embeddings but {} position ids and {} mask entries",
                positions[0].len(),
                visual_pos_mask.len()
            )));
        }
        let image_rows: Vec<u32> = (0..s as u32)
            .filter(|&i| visual_pos_mask[i as usize])
            .collect();
        let n_image = image_rows.len();
        if let Some(bad) = deepstack
            .iter()
            .find(|d| d.dims().first() != Some(&n_image))
        {
            return Err(Error::Input(format!(
                "deepstack features have {:?} rows but the sequence has {} image tokens",
                bad.dims(),
                n_image
            )));
        }
        let image_rows = Tensor::from_vec(image_rows, n_image, self.device())?;
        let ctx = self.positions(positions)?;
        let mut h = inputs_embeds.to_dtype(self.dtype())?;
        for (l, layer) in self.layers.iter().enumerate() {
            rec.record(format!("llm.layer_in.{l}"), &h);
            h = layer.forward(&h, &ctx)?;
            rec.record(format!("llm.layer_out.{l}"), &h);
            if let Some(ds) = deepstack.get(l) {
                h = h
                    .squeeze(0)?
                    .index_add(&image_rows, &ds.to_dtype(h.dtype())?, 0)?
                    .unsqueeze(0)?;
            }
        }
        Ok(h)
    }
}

/// One Qwen3 decoder layer: `h + attn(RMSNorm(h))`, then `h + mlp(RMSNorm(h))`.
#[derive(Debug, Clone)]
pub struct DecoderLayer {
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
    /// The precision of its attention's products.
    attention_products: Products,
}

impl DecoderLayer {
    fn load(vb: VarBuilder, cfg: &TextConfig) -> Result<DecoderLayer> {
        let (d, hd, eps) = (cfg.hidden_size, cfg.head_dim, cfg.rms_norm_eps);
        let (hq, hkv) = (cfg.num_attention_heads, cfg.num_key_value_heads);
        let at = vb.pp("self_attn");
        let mlp = vb.pp("mlp");
        Ok(DecoderLayer {
            input_layernorm: RmsNorm::load(vb.pp("input_layernorm"), d, eps)?,
            post_attention_layernorm: RmsNorm::load(vb.pp("post_attention_layernorm"), d, eps)?,
            q_proj: linear(at.pp("q_proj"), d, hq * hd, false)?,
            k_proj: linear(at.pp("k_proj"), d, hkv * hd, false)?,
            v_proj: linear(at.pp("v_proj"), d, hkv * hd, false)?,
            o_proj: linear(at.pp("o_proj"), hq * hd, d, false)?,
            q_norm: RmsNorm::load(at.pp("q_norm"), hd, eps)?,
            k_norm: RmsNorm::load(at.pp("k_norm"), hd, eps)?,
            gate_proj: linear(mlp.pp("gate_proj"), d, cfg.intermediate_size, false)?,
            up_proj: linear(mlp.pp("up_proj"), d, cfg.intermediate_size, false)?,
            down_proj: linear(mlp.pp("down_proj"), cfg.intermediate_size, d, false)?,
            num_heads: hq,
            num_kv_heads: hkv,
            head_dim: hd,
            attention_products: attention_products_for(&vb),
        })
    }

    /// Applies the layer to `h` `[1, S, hidden]`.
    pub fn forward(&self, h: &Tensor, ctx: &TextPositions) -> Result<Tensor> {
        let a = self.attention(&self.input_layernorm.forward(h)?, ctx)?;
        let (h, x) = self.post_attention_layernorm.forward_residual(h, &a)?;
        let gate = self.gate_proj.forward(&x)?;
        let up = self.up_proj.forward(&x)?;
        let m = self
            .down_proj
            .forward(&crate::cpu_math::silu_mul(&gate, &up)?)?;
        Ok(residual_add(&h, &m)?)
    }

    /// Causal GQA self-attention; q/k get a per-head RMSNorm, then mRoPE.
    fn attention(&self, x: &Tensor, ctx: &TextPositions) -> Result<Tensor> {
        let (b, s, _) = x.dims3()?;
        let hd = self.head_dim;
        let heads = |proj: &Linear, n: usize, norm: Option<&RmsNorm>| -> Result<Tensor> {
            let t = proj.forward(x)?.reshape((b, s, n, hd))?;
            let t = match norm {
                Some(norm) => norm.forward(&t)?,
                None => t,
            };
            Ok(t.transpose(1, 2)?)
        };
        let q = apply_rope(
            &heads(&self.q_proj, self.num_heads, Some(&self.q_norm))?,
            &ctx.cos,
            &ctx.sin,
        )?;
        let k = apply_rope(
            &heads(&self.k_proj, self.num_kv_heads, Some(&self.k_norm))?,
            &ctx.cos,
            &ctx.sin,
        )?;
        let v = heads(&self.v_proj, self.num_kv_heads, None)?;
        let out = attention(
            &q,
            &k,
            &v,
            1.0 / (hd as f64).sqrt(),
            Mask::Causal(&ctx.mask),
            self.attention_products,
        )?;
        let out = out.transpose(1, 2)?.reshape((b, s, self.num_heads * hd))?;
        Ok(self.o_proj.forward(&out)?)
    }
}
