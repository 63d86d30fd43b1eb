//! The f32 input rows and bias of a CPU product op, read from candle's locked storage: what
//! the f32/bf16 linear op and the int8 one share.

use candle_core::{CpuStorage, Layout, Storage};

/// The `[m, k]` f32 input of a CPU product op (`op` names it in the error): its values, m, k.
pub(crate) fn input_rows<'a>(
    storage: &'a CpuStorage,
    layout: &Layout,
    op: &str,
) -> candle_core::Result<(&'a [f32], usize, usize)> {
    let (m, k) = layout.shape().dims2()?;
    match (storage, layout.contiguous_offsets()) {
        (CpuStorage::F32(v), Some((a, b))) => Ok((&v[a..b], m, k)),
        _ => candle_core::bail!("{op}: input must be contiguous f32"),
    }
}

/// A product op's `[n]` f32 bias from its locked storage and layout (`None` without a bias).
pub(crate) fn bias_of<'a>(
    bias: Option<(&'a Storage, &Layout)>,
    n: usize,
    op: &str,
) -> candle_core::Result<Option<&'a [f32]>> {
    match bias {
        None => Ok(None),
        Some((g, bl)) => match (g, bl.contiguous_offsets()) {
            (Storage::Cpu(CpuStorage::F32(v)), Some((a, e))) if e - a == n => Ok(Some(&v[a..e])),
            _ => candle_core::bail!("{op}: bias must be a CPU f32 [{n}]"),
        },
    }
}
