//! The VL adapter: `vlln` (affine LayerNorm) then `vl_self_attention` (a stack of diffusers
//! `BasicTransformerBlock`s with `norm_type="layer_norm"`, no mask, no positional embedding).
//! Its output `vl_embeds` is the DiT's cross-attention memory.

use super::attention::{Attention, FeedForward, LayerNorm};
use crate::config::Gr00tConfig;
use crate::linear::attention_products_for;
use crate::{Error, Result};
use candle_core::Tensor;
use candle_nn::VarBuilder;

/// LayerNorm epsilon of `vlln` and of the adapter's block norms.
const EPS: f64 = 1e-5;

/// One self-attention block: `h += attn(LN1(h))`, `h += FF(LN3(h))`.
struct VlBlock {
    norm1: LayerNorm,
    attn: Attention,
    norm3: LayerNorm,
    ff: FeedForward,
}

impl VlBlock {
    fn load(vb: VarBuilder, dim: usize, heads: usize, head_dim: usize) -> Result<VlBlock> {
        Ok(VlBlock {
            norm1: LayerNorm::load(vb.pp("norm1"), dim, EPS)?,
            // Prompt-long (hundreds of queries): the backbone's attention products.
            attn: Attention::load(vb.pp("attn1"), dim, dim, heads, head_dim)?
                .with_attention_products(attention_products_for(&vb)),
            norm3: LayerNorm::load(vb.pp("norm3"), dim, EPS)?,
            ff: FeedForward::load(vb.pp("ff"), dim, 4 * dim)?,
        })
    }

    fn forward(&self, h: &Tensor) -> Result<Tensor> {
        let h = (self.attn.self_attend(&self.norm1.forward(h)?)? + h)?;
        Ok((self.ff.forward(&self.norm3.forward(&h)?)? + h)?)
    }
}

/// `vlln` + `vl_self_attention`; either part may be absent (identity) per the config.
pub(crate) struct VlAdapter {
    vlln: Option<LayerNorm>,
    blocks: Vec<VlBlock>,
}

impl VlAdapter {
    /// Loads `vlln.*` and `vl_self_attention.transformer_blocks.*` under the head's `vb`.
    pub(crate) fn load(vb: &VarBuilder, cfg: &Gr00tConfig) -> Result<VlAdapter> {
        let dim = cfg.backbone_embedding_dim;
        let vlln = if cfg.use_vlln {
            Some(LayerNorm::load(vb.pp("vlln"), dim, EPS)?)
        } else {
            None
        };
        let mut blocks = Vec::new();
        if let Some(sa) = cfg.vl_self_attention() {
            let vb = vb.pp("vl_self_attention.transformer_blocks");
            for i in 0..sa.num_layers {
                blocks.push(VlBlock::load(
                    vb.pp(i.to_string()),
                    dim,
                    sa.num_attention_heads,
                    sa.attention_head_dim,
                )?);
            }
        }
        Ok(VlAdapter { vlln, blocks })
    }

    /// `vlln(features)`, or the features unchanged when `use_vlln` is false.
    pub(crate) fn vlln(&self, features: &Tensor) -> Result<Tensor> {
        match &self.vlln {
            Some(ln) => ln.forward(features),
            None => Ok(features.clone()),
        }
    }

    /// Number of self-attention blocks (0 = identity).
    pub(crate) fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Block `i` applied to `h`.
    pub(crate) fn block(&self, i: usize, h: &Tensor) -> Result<Tensor> {
        let block = self.blocks.get(i).ok_or_else(|| {
            Error::Input(format!(
                "VL self-attention block {i} does not exist ({} blocks)",
                self.blocks.len()
            ))
        })?;
        block.forward(h)
    }
}
