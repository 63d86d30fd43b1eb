//! Fused attention on the GPU: FlashAttention-2 kernels (candle-flash-attn) when the crate is
//! built with the `flash-attn` feature and the tensors are bf16/f16 on a CUDA device. Every
//! other case (CPU, f32, builds without the feature) answers `None` and the caller runs its
//! plain matmul + softmax attention.

use candle_core::Tensor;

/// `softmax(q·kᵀ·scale [+ causal mask])·v` through the fused kernel, or `None` where it does not
/// apply. `q` is `[B, Hq, Lq, Dh]`, `k`/`v` `[B, Hkv, Lk, Dh]` (GQA when Hkv divides Hq);
/// returns `[B, Hq, Lq, Dh]`.
#[cfg(feature = "flash-attn")]
pub(crate) fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    causal: bool,
) -> candle_core::Result<Option<Tensor>> {
    use candle_core::DType;
    let fits = q.device().is_cuda()
        && matches!(q.dtype(), DType::BF16 | DType::F16)
        && q.dim(3)?.is_multiple_of(8)
        && q.dim(3)? <= 256;
    if !fits {
        return Ok(None);
    }
    // The kernels take [B, L, H, Dh] with a contiguous last dimension.
    let bl = |t: &Tensor| t.transpose(1, 2)?.contiguous();
    let out = candle_flash_attn::flash_attn(&bl(q)?, &bl(k)?, &bl(v)?, scale as f32, causal)?;
    Ok(Some(out.transpose(1, 2)?))
}

/// Without the `flash-attn` feature there is no fused kernel: always `None`.
#[cfg(not(feature = "flash-attn"))]
pub(crate) fn attention(
    _q: &Tensor,
    _k: &Tensor,
    _v: &Tensor,
    _scale: f64,
    _causal: bool,
) -> candle_core::Result<Option<Tensor>> {
    Ok(None)
}

/// Whether this build can run attention through a fused GPU kernel.
pub fn available() -> bool {
    cfg!(feature = "flash-attn")
}
