//! Layers shared by the vision tower, the LLM and the action head (norms, rotary
//! application, softmax attention), written with plain candle ops so that every candle device
//! runs them; `cpu_attention` is the CPU's blocked attention behind [`attention`].

pub(crate) mod cpu_attention;

pub(crate) use crate::cpu_math::residual_add;
use candle_core::{DType, Module, Tensor, D};
use candle_nn::VarBuilder;

/// `nn.Linear` (weight `[out, in]`, kept bf16 when stored so, optional bias) loaded from `vb`.
pub(crate) use crate::linear::linear;
use crate::linear::Products;

/// `nn.LayerNorm` with weight and bias.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

impl LayerNorm {
    /// Loads `weight` and `bias` of width `dim`.
    pub fn load(vb: VarBuilder, dim: usize, eps: f64) -> candle_core::Result<LayerNorm> {
        Ok(LayerNorm {
            weight: vb.get(dim, "weight")?,
            bias: vb.get(dim, "bias")?,
            eps,
        })
    }

    /// The residual sum `x + h` and its norm; on the CPU in f32 in one pass over the rows (the
    /// bits of the add, then [`Module::forward`]).
    pub fn forward_residual(
        &self,
        x: &Tensor,
        h: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        if crate::cpu_math::cpu_f32_pair(x, h) {
            return crate::cpu_norms::add_layer_norm(
                x,
                h,
                Some((&self.weight, &self.bias)),
                self.eps,
            );
        }
        let sum = (x + h)?;
        let normed = self.forward(&sum)?;
        Ok((sum, normed))
    }
}

impl Module for LayerNorm {
    /// Two-pass mean/variance in f32 (candle's fused kernel uses E[x²]−mean², which loses
    /// digits when the mean is large), then the affine part in the activation dtype.
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if x.device().is_cpu() && x.dtype() == DType::F32 {
            // One vectorised pass instead of ~10 candle passes, same two-pass math.
            return crate::cpu_norms::layer_norm(x, Some((&self.weight, &self.bias)), self.eps);
        }
        let dtype = x.dtype();
        let x = x.to_dtype(DType::F32)?;
        let centred = x.broadcast_sub(&x.mean_keepdim(D::Minus1)?)?;
        let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
        let rstd = (var + self.eps)?.sqrt()?.recip()?;
        centred
            .broadcast_mul(&rstd)?
            .to_dtype(dtype)?
            .broadcast_mul(&self.weight)?
            .broadcast_add(&self.bias)
    }
}

/// Qwen3 RMSNorm: `w · x / sqrt(mean(x²) + eps)`, statistics in f32.
#[derive(Debug, Clone)]
pub struct RmsNorm {
    weight: Tensor,
    eps: f32,
}

impl RmsNorm {
    /// Loads `weight` of width `dim`.
    pub fn load(vb: VarBuilder, dim: usize, eps: f64) -> candle_core::Result<RmsNorm> {
        Ok(RmsNorm {
            weight: vb.get(dim, "weight")?,
            eps: eps as f32,
        })
    }

    /// The residual sum `x + h` and its norm; on the CPU in f32 in one pass over the rows (the
    /// bits of the add, then [`Module::forward`]).
    pub fn forward_residual(
        &self,
        x: &Tensor,
        h: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        if crate::cpu_math::cpu_f32_pair(x, h) && self.weight.dtype() == DType::F32 {
            return crate::cpu_norms::add_rms_norm(x, h, &self.weight, self.eps);
        }
        let sum = (x + h)?;
        let normed = self.forward(&sum)?;
        Ok((sum, normed))
    }
}

impl Module for RmsNorm {
    /// On the CPU in f32 a vectorised pass (candle's sums each row's squares one after
    /// another); elsewhere candle's op.
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if x.device().is_cpu() && x.dtype() == DType::F32 && self.weight.dtype() == DType::F32 {
            return crate::cpu_norms::rms_norm(x, &self.weight, self.eps);
        }
        candle_nn::ops::rms_norm(&x.contiguous()?, &self.weight, self.eps)
    }
}

/// Half-split rotary embedding (`q·cos + rotate_half(q)·sin`) of `x` `[B, H, L, Dh]`, with
/// `cos`/`sin` `[L, Dh/2]` (or `[B, L, Dh/2]`, each batch its own) holding the angle of each
/// rotated pair (j, j + Dh/2). Returns a contiguous tensor; on the CPU in f32, `x` is read in
/// place (a strided head split costs no copy).
pub(crate) fn apply_rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
    let cpu_f32 = |t: &Tensor| t.device().is_cpu() && t.dtype() == DType::F32;
    if cpu_f32(x) && cpu_f32(cos) && cpu_f32(sin) {
        return crate::cpu_math::rope(x, cos, sin);
    }
    candle_nn::rotary_emb::rope(&x.contiguous()?, cos, sin)
}

/// The mask of an [`attention`] call.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Mask<'a> {
    /// Every query sees every key.
    None,
    /// Causal; the tensor is the additive `[Lq, Lk]` form for the unfused path.
    Causal(&'a Tensor),
}

/// `softmax(q·kᵀ·scale + mask)·v`, softmax in f32. `q` is `[B, Hq, Lq, Dh]`, `k`/`v` are
/// `[B, Hkv, Lk, Dh]` with `Hq` a multiple of `Hkv` (GQA: query head j reads kv head
/// j / (Hq/Hkv), as `repeat_kv` does, without materialising the repeats); a causal mask is
/// additive and broadcasts to `[B, Hq, Lq, Lk]`. Returns `[B, Hq, Lq, Dh]`. On a CUDA device
/// with the `flash-attn` feature the fused kernel runs instead. `products` is what the calling
/// module was loaded for: [`Products::Bf16`] gives the CPU path bf16 operands (on other
/// devices the activations' own dtype decides).
pub(crate) fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    mask: Mask,
    products: Products,
) -> candle_core::Result<Tensor> {
    if let Some(out) = crate::flash::attention(q, k, v, scale, matches!(mask, Mask::Causal(_)))? {
        return Ok(out);
    }
    let causal = matches!(mask, Mask::Causal(_));
    let mask = match mask {
        Mask::None => None,
        Mask::Causal(m) => Some(m),
    };
    let (b, hq, lq, dh) = q.dims4()?;
    let (_, hkv, lk, _) = k.dims4()?;
    if hkv == 0 || !hq.is_multiple_of(hkv) {
        candle_core::bail!("attention: {hq} query heads do not share {hkv} kv heads evenly");
    }
    if cpu_attention::applies(q, k, v, mask) {
        return cpu_attention::attention(q, k, v, scale, mask, causal, products);
    }
    let rep = hq / hkv;
    // Query heads of one kv head are adjacent, so they stack into one taller matrix.
    let q = q.contiguous()?.reshape((b, hkv, rep * lq, dh))?;
    let scores = (q.matmul(&k.contiguous()?.t()?)? * scale)?.reshape((b, hq, lq, lk))?;
    let scores = match mask {
        Some(m) => scores.broadcast_add(m)?,
        None => scores,
    };
    let probs =
        candle_nn::ops::softmax_last_dim(&scores.to_dtype(DType::F32)?)?.to_dtype(v.dtype())?;
    probs
        .reshape((b, hkv, rep * lq, lk))?
        .matmul(&v.contiguous()?)?
        .reshape((b, hq, lq, dh))
}
