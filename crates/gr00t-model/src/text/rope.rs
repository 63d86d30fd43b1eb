//! Multimodal rotary positions of the Qwen3-VL LLM: the (T, H, W) position ids of
//! `get_rope_index` and the interleaved-mRoPE angle tables built from them.

use crate::error::{Error, Result};
use candle_core::{DType, Device, Tensor};

/// Position ids per axis: `[T, H, W]`, each one entry per token.
pub type MropePositions = [Vec<i64>; 3];

/// `get_rope_index` for one unpadded sequence: text tokens count up on all three axes; the
/// tokens of image k (grid `grid_thw[k]`, merged by `spatial_merge`) all share T = the next
/// text position p and get H = p + merged row, W = p + merged column; text after an image
/// continues from that image's largest id + 1. Images are the `<|vision_start|>` +
/// image-token pairs, in order. Returns the ids and `rope_delta = max id + 1 − len`.
pub fn rope_index(
    input_ids: &[u32],
    grid_thw: &[[usize; 3]],
    spatial_merge: usize,
    image_token_id: u32,
    vision_start_token_id: u32,
) -> Result<(MropePositions, i64)> {
    let n = input_ids.len();
    if n == 0 {
        return Err(Error::Input("empty token sequence".into()));
    }
    let images = input_ids
        .windows(2)
        .filter(|p| p[0] == vision_start_token_id && p[1] == image_token_id)
        .count();
    if images > grid_thw.len() {
        return Err(Error::Input(format!(
            "the prompt has {images} images but only {} image grids were given",
            grid_thw.len()
        )));
    }
    let mut pos: MropePositions = Default::default();
    let push_text = |pos: &mut MropePositions, from: i64, len: usize| {
        for axis in pos.iter_mut() {
            axis.extend((0..len as i64).map(|i| from + i));
        }
    };
    let (mut st, mut next) = (0usize, 0i64);
    for (k, &[t, h, w]) in grid_thw.iter().take(images).enumerate() {
        let ed = input_ids[st..]
            .iter()
            .position(|&id| id == image_token_id)
            .map(|p| st + p)
            .ok_or_else(|| Error::Input(format!("image {k} has no image tokens")))?;
        let (gt, gh, gw) = (t, h / spatial_merge.max(1), w / spatial_merge.max(1));
        let count = gt * gh * gw;
        if count == 0
            || input_ids
                .get(ed..ed + count)
                .is_none_or(|r| r.iter().any(|&id| id != image_token_id))
        {
            return Err(Error::Input(format!(
                "image {k}: expected a run of {count} image tokens at position {ed} for grid [{t}, {h}, {w}]"
            )));
        }
        push_text(&mut pos, next, ed - st);
        let base = next + (ed - st) as i64;
        for ti in 0..gt {
            for hi in 0..gh {
                for wi in 0..gw {
                    pos[0].push(base + ti as i64);
                    pos[1].push(base + hi as i64);
                    pos[2].push(base + wi as i64);
                }
            }
        }
        next = base + gt.max(gh).max(gw) as i64;
        st = ed + count;
    }
    push_text(&mut pos, next, n - st);
    let max = pos.iter().flatten().copied().max().unwrap_or(0);
    Ok((pos, max + 1 - n as i64))
}

/// Which axis (0 = T, 1 = H, 2 = W) drives rotary frequency `j` under the interleaved layout
/// (`apply_interleaved_mrope`): H takes j ≡ 1 (mod 3) below 3·section[1], W takes j ≡ 2
/// (mod 3) below 3·section[2], T the rest.
fn mrope_axis(j: usize, section: &[usize]) -> usize {
    if j % 3 == 1 && j < 3 * section[1] {
        1
    } else if j % 3 == 2 && j < 3 * section[2] {
        2
    } else {
        0
    }
}

/// Text rotary tables `cos`, `sin` `[S, head_dim/2]` (angle of pair (j, j + head_dim/2) is
/// `pos[axis(j)] · inv_freq[j]`), computed in f32 and cast to `dtype`.
pub(crate) fn mrope_tables(
    positions: &MropePositions,
    inv_freq: &[f32],
    section: &[usize],
    dtype: DType,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let s = positions[0].len();
    if positions.iter().any(|p| p.len() != s) {
        return Err(Error::Input(
            "position ids of the three axes differ in length".into(),
        ));
    }
    let half = inv_freq.len();
    let axes: Vec<usize> = (0..half).map(|j| mrope_axis(j, section)).collect();
    let pos: Vec<f32> = (0..s)
        .flat_map(|token| axes.iter().map(move |&axis| positions[axis][token] as f32))
        .collect();
    let inv = Tensor::from_slice(inv_freq, (1, half), device)?;
    let angles = Tensor::from_vec(pos, (s, half), device)?.broadcast_mul(&inv)?;
    Ok((
        angles.cos()?.to_dtype(dtype)?,
        angles.sin()?.to_dtype(dtype)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_axes_match_sections() {
        // Real model: 24 T, 20 H, 20 W over 64 frequencies.
        let axes: Vec<usize> = (0..64).map(|j| mrope_axis(j, &[24, 20, 20])).collect();
        assert_eq!(axes.iter().filter(|&&a| a == 0).count(), 24);
        assert_eq!(axes.iter().filter(|&&a| a == 1).count(), 20);
        assert_eq!(&axes[..6], &[0, 1, 2, 0, 1, 2]);
        assert_eq!(&axes[58..], &[1, 2, 0, 0, 0, 0]);
    }

    #[test]
    fn text_only_is_plain_positions() {
        let (p, delta) = rope_index(&[5, 6, 7], &[], 2, 9, 8).unwrap();
        assert_eq!(p[0], vec![0, 1, 2]);
        assert_eq!(p[2], vec![0, 1, 2]);
        assert_eq!(delta, 0);
    }

    #[test]
    fn one_image_between_text() {
        // 1 text, start, 2x3 merged image (grid 1x4x6), end, 1 text.
        let mut ids = vec![1, 8];
        ids.extend([9; 6]);
        ids.extend([10, 11]);
        let (p, delta) = rope_index(&ids, &[[1, 4, 6]], 2, 9, 8).unwrap();
        assert_eq!(p[0], vec![0, 1, 2, 2, 2, 2, 2, 2, 5, 6]);
        assert_eq!(p[1], vec![0, 1, 2, 2, 2, 3, 3, 3, 5, 6]);
        assert_eq!(p[2], vec![0, 1, 2, 3, 4, 2, 3, 4, 5, 6]);
        assert_eq!(delta, 7 - 10);
    }

    #[test]
    fn short_image_run_is_rejected() {
        let ids = [8, 9, 9, 10];
        assert!(rope_index(&ids, &[[1, 4, 6]], 2, 9, 8).is_err());
        assert!(rope_index(&[8, 9], &[], 2, 9, 8).is_err());
    }
}
