//! Building blocks shared by the VL adapter and the DiT: diffusers `Attention` (q/k/v/out with
//! biases, scale 1/√head_dim), the GELU-tanh `FeedForward`, a two-pass LayerNorm and boolean key
//! masks as additive biases.

use crate::cpu_math::Then;
use crate::cpu_norms;
use crate::linear::{linear, products_for, Linear, Products};
use crate::nn::cpu_attention;
use crate::{Error, Result};
use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::VarBuilder;

/// diffusers `Attention` with `AttnProcessor2_0` semantics (no QK norm, no upcast).
pub(crate) struct Attention {
    to_q: Linear,
    to_k: Linear,
    to_v: Linear,
    to_out: Linear,
    heads: usize,
    head_dim: usize,
    scale: f64,
    /// The precision of its attention's products.
    attention_products: Products,
}

/// Keys and values already projected and split into heads: `[B, heads, S, head_dim]` each.
pub(crate) struct KeyValues {
    k: Tensor,
    v: Tensor,
}

impl Attention {
    /// Loads `to_q`, `to_k`, `to_v` and `to_out.0` (all with bias) under `vb`.
    pub(crate) fn load(
        vb: VarBuilder,
        query_dim: usize,
        kv_dim: usize,
        heads: usize,
        head_dim: usize,
    ) -> Result<Attention> {
        let inner = heads * head_dim;
        Ok(Attention {
            to_q: linear(vb.pp("to_q"), query_dim, inner, true)?,
            to_k: linear(vb.pp("to_k"), kv_dim, inner, true)?,
            to_v: linear(vb.pp("to_v"), kv_dim, inner, true)?,
            to_out: linear(vb.pp("to_out.0"), inner, query_dim, true)?,
            heads,
            head_dim,
            scale: 1.0 / (head_dim as f64).sqrt(),
            attention_products: products_for(&vb),
        })
    }

    /// The same layer with its attention's products set to `products` (the VL adapter's
    /// prompt-long self-attention takes those of
    /// [`attention_products_for`](crate::linear::attention_products_for), as the backbone's).
    pub(crate) fn with_attention_products(mut self, products: Products) -> Attention {
        self.attention_products = products;
        self
    }

    /// `[B, T, heads·head_dim]` → `[B, heads, T, head_dim]`: a strided view on the CPU in f32
    /// (the CPU attention reads it in place), contiguous elsewhere.
    fn split_heads(&self, x: &Tensor) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let heads = x
            .reshape((b, t, self.heads, self.head_dim))?
            .transpose(1, 2)?;
        if x.device().is_cpu() && x.dtype() == DType::F32 {
            return Ok(heads);
        }
        Ok(heads.contiguous()?)
    }

    /// Projects a context `[B, S, kv_dim]` to per-head keys and values.
    pub(crate) fn key_values(&self, context: &Tensor) -> Result<KeyValues> {
        Ok(KeyValues {
            k: self.split_heads(&self.to_k.forward(context)?)?,
            v: self.split_heads(&self.to_v.forward(context)?)?,
        })
    }

    /// Attention of `x` `[B, T, query_dim]` over precomputed keys/values; `key_bias` is an
    /// additive `[1, 1, 1, S]` mask (0 = attend, −inf = masked).
    pub(crate) fn attend(
        &self,
        x: &Tensor,
        kv: &KeyValues,
        key_bias: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let q = self.split_heads(&self.to_q.forward(x)?)?;
        if key_bias.is_none() {
            if let Some(out) = crate::flash::attention(&q, &kv.k, &kv.v, self.scale, false)? {
                let out = out
                    .transpose(1, 2)?
                    .reshape((b, t, self.heads * self.head_dim))?;
                return Ok(self.to_out.forward(&out)?);
            }
        }
        if cpu_attention::applies(&q, &kv.k, &kv.v, key_bias) {
            let out = cpu_attention::attention(
                &q,
                &kv.k,
                &kv.v,
                self.scale,
                key_bias,
                false,
                self.attention_products,
            )?;
            let out = out
                .transpose(1, 2)?
                .reshape((b, t, self.heads * self.head_dim))?;
            return Ok(self.to_out.forward(&out)?);
        }
        let scores = (q.matmul(&kv.k.t()?)? * self.scale)?;
        let scores = match key_bias {
            Some(bias) => scores.broadcast_add(bias)?,
            None => scores,
        };
        // Softmax in f32 whatever the activation dtype (a no-op cast in f32).
        let probs = candle_nn::ops::softmax_last_dim(&scores.to_dtype(DType::F32)?)?
            .to_dtype(kv.v.dtype())?;
        let out =
            probs
                .matmul(&kv.v)?
                .transpose(1, 2)?
                .reshape((b, t, self.heads * self.head_dim))?;
        Ok(self.to_out.forward(&out)?)
    }

    /// Unmasked self-attention of `x` over itself.
    pub(crate) fn self_attend(&self, x: &Tensor) -> Result<Tensor> {
        let kv = self.key_values(x)?;
        self.attend(x, &kv, None)
    }
}

/// diffusers `FeedForward(activation_fn="gelu-approximate")`: Linear → GELU(tanh) → Linear.
pub(crate) struct FeedForward {
    proj_in: Linear,
    proj_out: Linear,
}

impl FeedForward {
    /// Loads `net.0.proj` (dim → mult·dim) and `net.2` (mult·dim → dim).
    pub(crate) fn load(vb: VarBuilder, dim: usize, inner: usize) -> Result<FeedForward> {
        Ok(FeedForward {
            proj_in: linear(vb.pp("net.0.proj"), dim, inner, true)?,
            proj_out: linear(vb.pp("net.2"), inner, dim, true)?,
        })
    }

    /// Applies the feed-forward to `[.., dim]`.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // The tanh approximation, as diffusers' `approximate="tanh"` (vectorised on the CPU).
        let h = self.proj_in.forward_then(x, Then::GeluTanh)?;
        Ok(self.proj_out.forward(&h)?)
    }
}

/// LayerNorm over the last dimension, optionally affine.
///
/// Two-pass (mean, then variance of the centred values) rather than candle's fused
/// `E[x²] − E[x]²` kernel, which loses precision in f32 when the mean is large.
pub(crate) struct LayerNorm {
    affine: Option<(Tensor, Tensor)>,
    eps: f64,
}

impl LayerNorm {
    /// An affine LayerNorm with `weight` and `bias` of width `dim` under `vb`.
    pub(crate) fn load(vb: VarBuilder, dim: usize, eps: f64) -> Result<LayerNorm> {
        let w = vb.get(dim, "weight")?;
        let b = vb.get(dim, "bias")?;
        Ok(LayerNorm {
            affine: Some((w, b)),
            eps,
        })
    }

    /// A LayerNorm without parameters (`elementwise_affine=False`).
    pub(crate) fn plain(eps: f64) -> LayerNorm {
        LayerNorm { affine: None, eps }
    }

    /// `forward(x)·scale + shift` (AdaLN; `scale`, `shift` of width D, broadcast over the
    /// rows) for a LayerNorm without parameters: on the CPU in f32 one pass (the same two
    /// roundings as the separate ops), elsewhere the separate ops.
    pub(crate) fn modulated(&self, x: &Tensor, scale: &Tensor, shift: &Tensor) -> Result<Tensor> {
        if self.affine.is_none() && x.device().is_cpu() && x.dtype() == DType::F32 {
            return Ok(cpu_norms::layer_norm(x, Some((scale, shift)), self.eps)?);
        }
        Ok(self
            .forward(x)?
            .broadcast_mul(scale)?
            .broadcast_add(shift)?)
    }

    /// Normalises the last dimension of `x`.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if x.device().is_cpu() && x.dtype() == DType::F32 {
            let affine = self.affine.as_ref().map(|(w, b)| (w, b));
            return Ok(cpu_norms::layer_norm(x, affine, self.eps)?);
        }
        // Statistics in f32 whatever the activation dtype (no-op casts in f32).
        let dtype = x.dtype();
        let x = x.to_dtype(DType::F32)?;
        let mean = x.mean_keepdim(D::Minus1)?;
        let xc = x.broadcast_sub(&mean)?;
        let var = xc.sqr()?.mean_keepdim(D::Minus1)?;
        let y = xc
            .broadcast_div(&(var + self.eps)?.sqrt()?)?
            .to_dtype(dtype)?;
        Ok(match &self.affine {
            Some((w, b)) => y.broadcast_mul(w)?.broadcast_add(b)?,
            None => y,
        })
    }
}

/// An additive key mask `[1, 1, 1, S]` in `dtype`: 0 where `keep[i]`, −inf elsewhere (SDPA's
/// boolean-mask semantics). Errors when no key is kept, where the reference softmax would
/// yield NaN.
pub(crate) fn key_bias(keep: &[bool], device: &Device, dtype: DType, what: &str) -> Result<Tensor> {
    if !keep.iter().any(|&k| k) {
        return Err(Error::Input(format!(
            "the {what} cross-attention has no key to attend to"
        )));
    }
    let bias: Vec<f32> = keep
        .iter()
        .map(|&k| if k { 0.0 } else { f32::NEG_INFINITY })
        .collect();
    Ok(Tensor::from_vec(bias, (1, 1, 1, keep.len()), device)?.to_dtype(dtype)?)
}
