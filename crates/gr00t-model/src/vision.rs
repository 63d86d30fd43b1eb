//! Qwen3-VL vision tower (`Qwen3VLVisionModel`): patch embedding, interpolated learned
//! position embedding, 2-D rotary ViT blocks with per-image attention, the 2×2 patch merger
//! and the DeepStack mergers.

use crate::config::VisionConfig;
use crate::cpu_math::Then;
use crate::error::{Error, Result};
use crate::linear::{attention_products_for, Linear, Products};
use crate::nn::{apply_rope, attention, linear, residual_add, LayerNorm, Mask};
use crate::taps::Recorder;
use crate::weights::COMPACT;
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::VarBuilder;
use std::sync::{Arc, Mutex};

/// Epsilon of every LayerNorm in the tower.
const LN_EPS: f64 = 1e-6;
/// Base of the vision rotary embedding (fixed in `Qwen3VLVisionModel`).
const ROPE_THETA: f32 = 10_000.0;

/// What the tower hands to the LLM.
#[derive(Debug, Clone)]
pub struct VisionOutput {
    /// Merged image-token embeddings `[N/4, out_hidden]`, images concatenated in order.
    pub image_embeds: Tensor,
    /// DeepStack merger outputs `[N/4, out_hidden]`, one per `deepstack_visual_indexes` entry.
    pub deepstack: Vec<Tensor>,
}

/// Per-call geometry shared by every block: f32 rotary tables and attention chunk lengths.
#[derive(Debug, Clone)]
pub struct VisionPositions {
    cos: Tensor,
    sin: Tensor,
    chunks: Vec<usize>,
}

/// The vision tower with its weights.
#[derive(Debug, Clone)]
pub struct VisionTower {
    cfg: VisionConfig,
    patch_embed: Linear,
    pos_embed: Tensor,
    grid_side: usize,
    blocks: Vec<VisionBlock>,
    merger: PatchMerger,
    deepstack_mergers: Vec<PatchMerger>,
    /// Rotary inverse frequencies, fp32 (production bf16 casts them to bf16; the fp32 goldens
    /// and accuracy favour fp32).
    inv_freq: Vec<f32>,
    /// The grid-only inputs of the last call, reused while the grids repeat (every request of
    /// one embodiment): interpolating the position embedding is a serial gather of ~30 MB.
    grid_tables: Arc<Mutex<Option<GridTables>>>,
}

/// What depends only on the image grids: the interpolated position embedding and the rotary
/// tables with the attention chunks.
#[derive(Debug)]
struct GridTables {
    grid: Vec<[usize; 3]>,
    pos: Tensor,
    positions: VisionPositions,
}

impl VisionTower {
    /// Loads the tower; `vb` is positioned at `backbone.model.model.visual`.
    pub fn load(vb: VarBuilder, cfg: &VisionConfig) -> Result<VisionTower> {
        let d = cfg.hidden_size;
        if cfg.num_heads == 0
            || !d.is_multiple_of(cfg.num_heads)
            || !(d / cfg.num_heads).is_multiple_of(4)
        {
            return Err(Error::Input(format!(
                "vision config: hidden_size {d} does not split into {} heads of a width divisible by 4",
                cfg.num_heads
            )));
        }
        let grid_side = (cfg.num_position_embeddings as f64).sqrt().round() as usize;
        if grid_side * grid_side != cfg.num_position_embeddings || cfg.spatial_merge_size == 0 {
            return Err(Error::Input(format!(
                "vision config: num_position_embeddings {} is not a square grid",
                cfg.num_position_embeddings
            )));
        }
        if let Some(&i) = cfg
            .deepstack_visual_indexes
            .iter()
            .find(|&&i| i >= cfg.depth)
        {
            return Err(Error::Input(format!(
                "vision config: deepstack index {i} is beyond the {} blocks",
                cfg.depth
            )));
        }
        let (c, t, p) = (cfg.in_channels, cfg.temporal_patch_size, cfg.patch_size);
        let pvb = vb.pp("patch_embed.proj");
        // Conv3d with kernel = stride = patch is a matmul over the flattened (c, t, y, x) patch.
        let w = pvb
            .get_with_hints_dtype((d, c, t, p, p), "weight", Default::default(), COMPACT)?
            .reshape((d, cfg.patch_dim()))?;
        let patch_embed = crate::linear::wrap_loaded(&pvb, w, Some(pvb.get(d, "bias")?))?;
        let pos_embed = vb.get((cfg.num_position_embeddings, d), "pos_embed.weight")?;
        let blocks = (0..cfg.depth)
            .map(|i| VisionBlock::load(vb.pp(format!("blocks.{i}")), cfg))
            .collect::<Result<Vec<_>>>()?;
        let merger = PatchMerger::load(vb.pp("merger"), cfg, false)?;
        let deepstack_mergers = (0..cfg.deepstack_visual_indexes.len())
            .map(|k| PatchMerger::load(vb.pp(format!("deepstack_merger_list.{k}")), cfg, true))
            .collect::<Result<Vec<_>>>()?;
        // Qwen3VLVisionRotaryEmbedding(head_dim / 2): 1 / θ^(2i / dim), i < dim / 2.
        let dim = d / cfg.num_heads / 2;
        let inv_freq = (0..dim / 2)
            .map(|i| 1.0 / ROPE_THETA.powf((2 * i) as f32 / dim as f32))
            .collect();
        Ok(VisionTower {
            cfg: cfg.clone(),
            patch_embed,
            pos_embed,
            grid_side,
            blocks,
            merger,
            deepstack_mergers,
            inv_freq,
            grid_tables: Arc::default(),
        })
    }

    /// The ViT blocks, in order.
    pub fn blocks(&self) -> &[VisionBlock] {
        &self.blocks
    }

    /// The final patch merger (applied to the last block's output).
    pub fn merger(&self) -> &PatchMerger {
        &self.merger
    }

    /// The DeepStack mergers, in `deepstack_visual_indexes` order.
    pub fn deepstack_mergers(&self) -> &[PatchMerger] {
        &self.deepstack_mergers
    }

    /// Runs the tower on `pixel_values` `[N, patch_dim]` (rows in the Qwen merge-block order,
    /// images concatenated) for images of `grid_thw` `[t, h, w]` patches each.
    pub fn forward(
        &self,
        pixel_values: &Tensor,
        grid_thw: &[[usize; 3]],
        rec: &Recorder,
    ) -> Result<VisionOutput> {
        let n = self.check_grid(grid_thw)?;
        let (rows, cols) = pixel_values.dims2()?;
        if rows != n || cols != self.cfg.patch_dim() {
            return Err(Error::Input(format!(
                "pixel_values is [{rows}, {cols}] but the image grids need [{n}, {}]",
                self.cfg.patch_dim()
            )));
        }
        let dtype = self.pos_embed.dtype();
        let x = self.patch_embed(&pixel_values.to_dtype(dtype)?)?;
        rec.record("vision.patch_embed_out", &x);
        let (pos, positions) = self.grid_tables(grid_thw)?;
        rec.record("vision.pos_embed_interp", &pos);
        let mut x = residual_add(&x, &pos)?;
        let mut deepstack = Vec::with_capacity(self.deepstack_mergers.len());
        for (i, block) in self.blocks.iter().enumerate() {
            x = block.forward(&x, &positions)?;
            rec.record(format!("vision.block_out.{i}"), &x);
            if let Some(k) = self
                .cfg
                .deepstack_visual_indexes
                .iter()
                .position(|&j| j == i)
            {
                let ds = self.deepstack_mergers[k].forward(&x)?;
                rec.record(format!("vision.deepstack.{k}"), &ds);
                deepstack.push(ds);
            }
        }
        let image_embeds = self.merger.forward(&x)?;
        rec.record("vision.merger_out", &image_embeds);
        Ok(VisionOutput {
            image_embeds,
            deepstack,
        })
    }

    /// [`Self::pos_embed_interp`] and [`Self::positions`] of `grid_thw`, from the last call's
    /// when its grids were the same.
    fn grid_tables(&self, grid_thw: &[[usize; 3]]) -> Result<(Tensor, VisionPositions)> {
        let last = self.grid_tables.lock().ok().and_then(|g| {
            g.as_ref()
                .filter(|t| t.grid == grid_thw)
                .map(|t| (t.pos.clone(), t.positions.clone()))
        });
        if let Some(tables) = last {
            return Ok(tables);
        }
        let pos = self.pos_embed_interp(grid_thw)?;
        let positions = self.positions(grid_thw)?;
        if let Ok(mut g) = self.grid_tables.lock() {
            *g = Some(GridTables {
                grid: grid_thw.to_vec(),
                pos: pos.clone(),
                positions: positions.clone(),
            });
        }
        Ok((pos, positions))
    }

    /// Checks the grids (non-empty, spatial dims divisible by the merge size) and returns the
    /// total number of patches.
    pub fn check_grid(&self, grid_thw: &[[usize; 3]]) -> Result<usize> {
        let m = self.cfg.spatial_merge_size;
        let mut n = 0;
        for (i, &[t, h, w]) in grid_thw.iter().enumerate() {
            if t == 0 || h == 0 || w == 0 || !h.is_multiple_of(m) || !w.is_multiple_of(m) {
                return Err(Error::Input(format!(
                    "image {i}: grid [{t}, {h}, {w}] is empty or not divisible by the merge size {m}"
                )));
            }
            n += t * h * w;
        }
        Ok(n)
    }

    /// Conv3d patch embedding `[N, patch_dim]` → `[N, hidden]`.
    pub fn patch_embed(&self, pixel_values: &Tensor) -> Result<Tensor> {
        Ok(self.patch_embed.forward(pixel_values)?)
    }

    /// Bilinearly interpolated learned position embedding `[N, hidden]`, in the patch row order
    /// (`fast_pos_embed_interpolate`): the 48×48 table sampled at `linspace(0, 47, h)` ×
    /// `linspace(0, 47, w)`, weights and sum in the table dtype, repeated over t.
    pub fn pos_embed_interp(&self, grid_thw: &[[usize; 3]]) -> Result<Tensor> {
        let n = self.check_grid(grid_thw)?;
        let side = self.grid_side;
        let m = self.cfg.spatial_merge_size;
        let mut idx: [Vec<u32>; 4] = Default::default();
        let mut wgt: [Vec<f32>; 4] = Default::default();
        for &[t, h, w] in grid_thw {
            let hs = linspace(0.0, (side - 1) as f32, h);
            let ws = linspace(0.0, (side - 1) as f32, w);
            let corner = |v: f32| {
                let lo = v as usize; // truncation, as `.int()`
                (lo, (lo + 1).min(side - 1), v - lo as f32)
            };
            for _ in 0..t {
                for (ph, pw) in merge_order(h, w, m) {
                    let (h0, h1, dh) = corner(hs[ph]);
                    let (w0, w1, dw) = corner(ws[pw]);
                    let cells = [(h0, w0), (h0, w1), (h1, w0), (h1, w1)];
                    let weights = [
                        (1.0 - dh) * (1.0 - dw),
                        (1.0 - dh) * dw,
                        dh * (1.0 - dw),
                        dh * dw,
                    ];
                    for c in 0..4 {
                        idx[c].push((cells[c].0 * side + cells[c].1) as u32);
                        wgt[c].push(weights[c]);
                    }
                }
            }
        }
        let dev = self.pos_embed.device();
        let dtype = self.pos_embed.dtype();
        let idx = Tensor::from_vec(idx.concat(), 4 * n, dev)?;
        let wgt = Tensor::from_vec(wgt.concat(), (4, n, 1), dev)?.to_dtype(dtype)?;
        let terms = self
            .pos_embed
            .index_select(&idx, 0)?
            .reshape((4, n, self.cfg.hidden_size))?
            .broadcast_mul(&wgt)?;
        // Summed left to right like the reference: ((p0 + p1) + p2) + p3.
        let mut sum = terms.get(0)?;
        for c in 1..4 {
            sum = (sum + terms.get(c)?)?;
        }
        Ok(sum)
    }

    /// Rotary tables (angle of pair d: patch row · inv_freq[d] for the first quarter of the
    /// head, patch column · inv_freq[d − dim/2] for the second) and the attention chunks (one
    /// per frame of each image).
    pub fn positions(&self, grid_thw: &[[usize; 3]]) -> Result<VisionPositions> {
        let n = self.check_grid(grid_thw)?;
        let m = self.cfg.spatial_merge_size;
        let quarter = self.inv_freq.len();
        let mut pos = Vec::with_capacity(n * 2 * quarter);
        let mut chunks = Vec::new();
        for &[t, h, w] in grid_thw {
            for _ in 0..t {
                for (ph, pw) in merge_order(h, w, m) {
                    pos.extend(std::iter::repeat_n(ph as f32, quarter));
                    pos.extend(std::iter::repeat_n(pw as f32, quarter));
                }
                chunks.push(h * w);
            }
        }
        let dev: &Device = self.pos_embed.device();
        let inv: Vec<f32> = self
            .inv_freq
            .iter()
            .chain(&self.inv_freq)
            .copied()
            .collect();
        let inv = Tensor::from_vec(inv, (1, 2 * quarter), dev)?;
        let angles = Tensor::from_vec(pos, (n, 2 * quarter), dev)?.broadcast_mul(&inv)?;
        Ok(VisionPositions {
            cos: angles.cos()?,
            sin: angles.sin()?,
            chunks,
        })
    }
}

/// One ViT block: `x + attn(LN1(x))`, then `x + mlp(LN2(x))`.
#[derive(Debug, Clone)]
pub struct VisionBlock {
    norm1: LayerNorm,
    norm2: LayerNorm,
    qkv: Linear,
    proj: Linear,
    fc1: Linear,
    fc2: Linear,
    num_heads: usize,
    head_dim: usize,
    gelu_tanh: bool,
    /// The precision of its attention's products.
    attention_products: Products,
}

impl VisionBlock {
    fn load(vb: VarBuilder, cfg: &VisionConfig) -> Result<VisionBlock> {
        let d = cfg.hidden_size;
        let gelu_tanh = match cfg.hidden_act.as_str() {
            "gelu_pytorch_tanh" => true,
            "gelu" => false,
            other => {
                return Err(Error::Input(format!(
                    "vision config: unsupported hidden_act {other:?}"
                )))
            }
        };
        Ok(VisionBlock {
            norm1: LayerNorm::load(vb.pp("norm1"), d, LN_EPS)?,
            norm2: LayerNorm::load(vb.pp("norm2"), d, LN_EPS)?,
            qkv: linear(vb.pp("attn.qkv"), d, 3 * d, true)?,
            proj: linear(vb.pp("attn.proj"), d, d, true)?,
            fc1: linear(vb.pp("mlp.linear_fc1"), d, cfg.intermediate_size, true)?,
            fc2: linear(vb.pp("mlp.linear_fc2"), cfg.intermediate_size, d, true)?,
            num_heads: cfg.num_heads,
            head_dim: d / cfg.num_heads,
            gelu_tanh,
            attention_products: attention_products_for(&vb),
        })
    }

    /// Applies the block to `x` `[N, hidden]`.
    pub fn forward(&self, x: &Tensor, positions: &VisionPositions) -> Result<Tensor> {
        let h = self.attention(&self.norm1.forward(x)?, positions)?;
        let (x, h) = self.norm2.forward_residual(x, &h)?;
        let h = if self.gelu_tanh {
            self.fc1.forward_then(&h, Then::GeluTanh)?
        } else {
            self.fc1.forward_then(&h, Then::GeluErf)?
        };
        Ok(residual_add(&x, &self.fc2.forward(&h)?)?)
    }

    /// Non-causal multi-head attention, restricted to each chunk (frame of one image).
    fn attention(&self, x: &Tensor, positions: &VisionPositions) -> Result<Tensor> {
        let (n, d) = x.dims2()?;
        let (nh, hd) = (self.num_heads, self.head_dim);
        let chunks = &positions.chunks;
        // Equal frames (every DROID request): the frames become the batch, one call for all
        // of them (per frame the same math; on a GPU, a quarter of the launches).
        let (c, len) = if chunks.len() > 1 && chunks.iter().all(|&len| len == chunks[0]) {
            (chunks.len(), chunks[0])
        } else {
            (1, n)
        };
        // qkv columns are [q | k | v], each head-major: q, k and v are strided views
        // [c, heads, len, head_dim] of the projection, not copies.
        let qkv = self.qkv.forward(x)?.reshape((c, len, 3, nh, hd))?;
        let part = |i: usize| -> candle_core::Result<Tensor> {
            qkv.narrow(2, i, 1)?.squeeze(2)?.transpose(1, 2)
        };
        // Each frame its own rows of the tables when the frames are the batch.
        let (cos, sin) = if c > 1 {
            (
                positions.cos.reshape((c, len, ()))?,
                positions.sin.reshape((c, len, ()))?,
            )
        } else {
            (positions.cos.clone(), positions.sin.clone())
        };
        // Rotated in f32 and cast back, as `apply_rotary_pos_emb_vision` does.
        let rotate = |t: Tensor| -> candle_core::Result<Tensor> {
            apply_rope(&t.to_dtype(DType::F32)?, &cos, &sin)?.to_dtype(t.dtype())
        };
        let q = rotate(part(0)?)?;
        let k = rotate(part(1)?)?;
        let v = part(2)?;
        let scale = 1.0 / (hd as f64).sqrt();
        // Each chunk's output as [c, len, heads, head_dim] (a free view when the attention
        // hands back a transposed contiguous result), so the chunks stack along the rows.
        let out = if c > 1 || chunks.len() == 1 {
            attention(&q, &k, &v, scale, Mask::None, self.attention_products)?.transpose(1, 2)?
        } else {
            let mut outs = Vec::with_capacity(chunks.len());
            let mut start = 0;
            for &len in chunks {
                let (q, k, v) = (
                    q.narrow(2, start, len)?,
                    k.narrow(2, start, len)?,
                    v.narrow(2, start, len)?,
                );
                outs.push(
                    attention(&q, &k, &v, scale, Mask::None, self.attention_products)?
                        .transpose(1, 2)?,
                );
                start += len;
            }
            Tensor::cat(&outs, 1)?
        };
        let out = out.reshape((n, d))?;
        Ok(self.proj.forward(&out)?)
    }
}

/// Patch merger: groups the 4 rows of each 2×2 block into one, then LayerNorm, fc1, exact GELU,
/// fc2. The final merger normalises each patch before grouping; the DeepStack mergers
/// (`use_postshuffle_norm`) normalise the grouped row.
#[derive(Debug, Clone)]
pub struct PatchMerger {
    norm: LayerNorm,
    fc1: Linear,
    fc2: Linear,
    postshuffle: bool,
    group: usize,
}

impl PatchMerger {
    fn load(vb: VarBuilder, cfg: &VisionConfig, postshuffle: bool) -> Result<PatchMerger> {
        let group = cfg.hidden_size * cfg.spatial_merge_size * cfg.spatial_merge_size;
        let norm_dim = if postshuffle { group } else { cfg.hidden_size };
        Ok(PatchMerger {
            norm: LayerNorm::load(vb.pp("norm"), norm_dim, LN_EPS)?,
            fc1: linear(vb.pp("linear_fc1"), group, group, true)?,
            fc2: linear(vb.pp("linear_fc2"), group, cfg.out_hidden_size, true)?,
            postshuffle,
            group,
        })
    }

    /// Merges `x` `[N, hidden]` (a block output) into `[N/4, out_hidden]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (n, d) = x.dims2()?;
        if !(n * d).is_multiple_of(self.group) {
            return Err(Error::Input(format!(
                "patch merger: {n} rows do not form whole 2×2 groups"
            )));
        }
        let rows = n * d / self.group;
        let x = if self.postshuffle {
            self.norm.forward(&x.reshape((rows, self.group))?)?
        } else {
            self.norm.forward(x)?.reshape((rows, self.group))?
        };
        let h = self.fc1.forward_then(&x, Then::GeluErf)?;
        Ok(self.fc2.forward(&h)?)
    }
}

/// (patch row, patch column) of each row of an image in the Qwen merge-block order: merged
/// blocks in raster order, the m×m patches of a block in raster order inside it.
fn merge_order(h: usize, w: usize, m: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..h / m).flat_map(move |bh| {
        (0..w / m).flat_map(move |bw| {
            (0..m).flat_map(move |r| (0..m).map(move |s| (bh * m + r, bw * m + s)))
        })
    })
}

/// `torch.linspace` in f32: the first half counts up from `start`, the second half down from
/// `end`, with `step = (end − start) / (steps − 1)`.
fn linspace(start: f32, end: f32, steps: usize) -> Vec<f32> {
    if steps == 1 {
        return vec![start];
    }
    let step = (end - start) / (steps - 1) as f32;
    let half = steps / 2;
    (0..steps)
        .map(|i| {
            if i < half {
                start + step * i as f32
            } else {
                end - step * (steps - 1 - i) as f32
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_order_walks_blocks_then_cells() {
        let v: Vec<_> = merge_order(4, 4, 2).take(6).collect();
        assert_eq!(v, [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3)]);
    }

    #[test]
    fn linspace_hits_both_ends() {
        let v = linspace(0.0, 47.0, 16);
        assert_eq!(v[0], 0.0);
        assert_eq!(v[15], 47.0);
        assert_eq!(v.len(), 16);
        assert_eq!(linspace(0.0, 47.0, 1), vec![0.0]);
    }
}
