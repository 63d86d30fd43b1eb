//! The arithmetic of one request, per network stage, from the configs: the work a GEMM-bound
//! implementation cannot avoid, used to turn stage times into achieved GFLOP/s and into a floor
//! (FLOPs ÷ the machine's best GEMM rate).
//!
//! Counted: every matrix product, 2 FLOPs per multiply-add: the linear layers over the rows
//! they see, and attention's QKᵀ and PV over the query–key pairs that matter (per image in the
//! vision tower, causal pairs in the LLM, all pairs in the VL self-attention, the kept keys of
//! the DiT's text/image cross-attention). Not counted: norms, activations, softmax, rotary
//! embeddings, additions (together well under 1 % here). The denoise count follows the chosen
//! backend: the fused one projects the cross-attention keys/values once per request, of the
//! tokens each block attends to, and has the timestep embeddings and AdaLN rows from load; the
//! reference one projects every token's and redoes both every step.

use crate::action_head::DenoiseBackend;
use crate::config::{BackboneConfig, Gr00tConfig};

/// What one request looks like to the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestShape {
    /// `[t, h, w]` patches of each image.
    pub image_grids: Vec<[usize; 3]>,
    /// Prompt length S, image tokens included.
    pub seq_len: usize,
}

impl RequestShape {
    /// The DROID request: four 256×448 frames (`[1, 16, 28]` patches each) and `seq_len`
    /// tokens (469 for an 8-token instruction).
    pub fn droid(seq_len: usize) -> RequestShape {
        RequestShape {
            image_grids: vec![[1, 16, 28]; 4],
            seq_len,
        }
    }
}

/// FLOPs of each network stage of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StageFlops {
    /// Vision tower: patch embedding, blocks, merger and DeepStack mergers.
    pub vision: f64,
    /// Truncated LLM.
    pub llm: f64,
    /// VL self-attention blocks.
    pub adapter: f64,
    /// State encoder, cross-attention memory and every Euler step.
    pub denoise: f64,
}

impl StageFlops {
    /// Sum over the stages.
    pub fn total(&self) -> f64 {
        self.vision + self.llm + self.adapter + self.denoise
    }
}

/// `2·rows·inp·out`: a linear layer (or any `[rows, inp] × [inp, out]` product).
fn mm(rows: usize, inp: usize, out: usize) -> f64 {
    2.0 * rows as f64 * inp as f64 * out as f64
}

/// QKᵀ and PV over `pairs` query–key pairs of total head width `width`.
fn attn(pairs: usize, width: usize) -> f64 {
    4.0 * pairs as f64 * width as f64
}

/// FLOPs of each stage of a request of `shape` on the model of `cfg` and `bb`.
pub fn request_flops(
    cfg: &Gr00tConfig,
    bb: &BackboneConfig,
    shape: &RequestShape,
    backend: DenoiseBackend,
) -> StageFlops {
    StageFlops {
        vision: vision_flops(bb, &shape.image_grids),
        llm: llm_flops(cfg, bb, shape.seq_len),
        adapter: adapter_flops(cfg, shape.seq_len),
        denoise: denoise_flops(cfg, bb, shape, backend),
    }
}

fn vision_flops(bb: &BackboneConfig, grids: &[[usize; 3]]) -> f64 {
    let v = &bb.vision_config;
    let (d, i) = (v.hidden_size, v.intermediate_size);
    let m2 = v.spatial_merge_size * v.spatial_merge_size;
    let group = d * m2;
    let patches: usize = grids.iter().map(|g| g[0] * g[1] * g[2]).sum();
    // Attention runs within each frame of each image.
    let pairs: usize = grids.iter().map(|g| g[0] * (g[1] * g[2]).pow(2)).sum();
    let block = mm(patches, d, 3 * d) + mm(patches, d, d) + 2.0 * mm(patches, d, i);
    let merger = mm(patches / m2, group, group) + mm(patches / m2, group, v.out_hidden_size);
    mm(patches, v.patch_dim(), d)
        + v.depth as f64 * (block + attn(pairs, d))
        + (1 + v.deepstack_visual_indexes.len()) as f64 * merger
}

fn llm_flops(cfg: &Gr00tConfig, bb: &BackboneConfig, s: usize) -> f64 {
    let t = &bb.text_config;
    let h = t.hidden_size;
    let q = t.num_attention_heads * t.head_dim;
    let kv = t.num_key_value_heads * t.head_dim;
    let layer = mm(s, h, q)
        + 2.0 * mm(s, h, kv)
        + mm(s, q, h)
        + 3.0 * mm(s, h, t.intermediate_size)
        + attn(s * (s + 1) / 2, q);
    cfg.select_layer as f64 * layer
}

fn adapter_flops(cfg: &Gr00tConfig, s: usize) -> f64 {
    let Some(a) = cfg.vl_self_attention() else {
        return 0.0;
    };
    let d = a.num_attention_heads * a.attention_head_dim;
    let block = 4.0 * mm(s, d, d) + 2.0 * mm(s, d, 4 * d) + attn(s * s, d);
    a.num_layers as f64 * block
}

fn denoise_flops(
    cfg: &Gr00tConfig,
    bb: &BackboneConfig,
    shape: &RequestShape,
    backend: DenoiseBackend,
) -> f64 {
    let dc = &cfg.diffusion_model_cfg;
    let d = dc.inner_dim();
    let h = cfg.action_horizon;
    let tokens = h + 1;
    let s = shape.seq_len;
    let m2 = bb.vision_config.spatial_merge_size.pow(2);
    let image_keys: usize = shape
        .image_grids
        .iter()
        .map(|g| g[0] * g[1] * g[2] / m2)
        .sum();
    let text_keys = s.saturating_sub(image_keys);
    let state_dim = cfg.max_state_dim * cfg.state_history_length;
    let state = mm(1, state_dim, cfg.hidden_size) + mm(1, cfg.hidden_size, d);
    // Cross-attention keys and values of `rows` vl_embeds tokens, per cross block.
    let kv_memory = |rows: usize| 2.0 * mm(rows, cfg.backbone_embedding_dim, d);
    // Timestep embedding (256 → D → D) and the AdaLN rows (blocks and proj_out_1) of one step.
    let modulation = mm(1, 256, d) + mm(1, d, d) + (dc.num_layers + 1) as f64 * mm(1, d, 2 * d);
    let mut per_step = mm(h, cfg.max_action_dim, d) + mm(h, 2 * d, d) + mm(h, d, d);
    // The fused backend projects only the tokens a block attends to, the reference one all.
    let (mut memory, mut memory_all) = (0.0, 0.0);
    for b in 0..dc.num_layers {
        per_step += 2.0 * mm(tokens, d, d) + 2.0 * mm(tokens, d, 4 * d);
        if b % 2 == 1 {
            per_step += 2.0 * mm(tokens, d, d) + attn(tokens * tokens, d);
        } else {
            let every = 2 * cfg.attend_text_every_n_blocks.max(1);
            let keys = if b % every == 0 {
                text_keys
            } else {
                image_keys
            };
            per_step += attn(tokens * keys, d);
            memory += kv_memory(keys);
            memory_all += kv_memory(s);
        }
    }
    per_step += mm(tokens, d, dc.output_dim)
        + mm(tokens, dc.output_dim, cfg.hidden_size)
        + mm(tokens, cfg.hidden_size, cfg.max_action_dim);
    let steps = cfg.num_inference_timesteps as f64;
    match backend {
        DenoiseBackend::Fused => state + memory + steps * per_step,
        DenoiseBackend::Reference => state + steps * (per_step + memory_all + modulation),
    }
}

/// Weight elements of the DiT blocks that one Euler step multiplies by: per block the query and
/// output projections and the feed-forward, and the self-attention blocks' keys and values;
/// the reference backend also reads the AdaLN rows and the cross-attention keys/values every
/// step (the fused one has them from before the loop). With only the action tokens as rows
/// (41) nothing keeps them in cache between steps: they stream from memory every step (the
/// full model's 1.66 GB of bf16), a floor of their own beside the FLOPs.
pub fn denoise_step_weights(cfg: &Gr00tConfig, backend: DenoiseBackend) -> f64 {
    let dc = &cfg.diffusion_model_cfg;
    let d = dc.inner_dim() as f64;
    let reference = backend == DenoiseBackend::Reference;
    (0..dc.num_layers)
        .map(|b| {
            let keys_values = if b % 2 == 1 {
                2.0 * d * d
            } else if reference {
                2.0 * cfg.backbone_embedding_dim as f64 * d
            } else {
                0.0
            };
            let ada = if reference { 2.0 * d * d } else { 0.0 };
            2.0 * d * d + 8.0 * d * d + keys_values + ada
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{synth_configs, SynthSize};

    // Expected values come from an independent count over checkpoint weight shapes (a script
    // summing 2·rows·|W| over every 2-D weight in the safetensors headers, plus attention
    // pairs), run on the bundled tiny fixture checkpoint and on `gr00t synth-checkpoint --size
    // full`, for the DROID request of fixture case0 (4 × [1, 16, 28] images, S = 469).

    /// [vision, llm, adapter, denoise, total] of the fused DROID request (S = 469) on `size`.
    fn droid_counts(size: SynthSize) -> [f64; 5] {
        let (cfg, bb) = synth_configs(size).unwrap();
        let f = request_flops(&cfg, &bb, &RequestShape::droid(469), DenoiseBackend::Fused);
        [f.vision, f.llm, f.adapter, f.denoise, f.total()]
    }

    #[test]
    fn tiny_config_matches_the_weight_shape_count() {
        assert_eq!(
            droid_counts(SynthSize::Tiny),
            [
                3_200_253_952.0,
                170_490_880.0,
                79_362_304.0,
                365_997_568.0,
                3_816_104_704.0,
            ]
        );
    }

    #[test]
    fn full_config_matches_the_weight_shape_count() {
        assert_eq!(
            droid_counts(SynthSize::Full),
            [
                1_257_083_240_448.0,
                769_823_473_664.0,
                196_052_025_344.0,
                327_284_924_416.0,
                // ≈ 2.55 TFLOP for the whole request.
                2_550_243_663_872.0,
            ]
        );
    }

    #[test]
    fn reference_backend_redoes_memory_and_modulation_every_step() {
        let (cfg, bb) = synth_configs(SynthSize::Full).unwrap();
        let shape = RequestShape::droid(469);
        let fused = request_flops(&cfg, &bb, &shape, DenoiseBackend::Fused);
        let reference = request_flops(&cfg, &bb, &shape, DenoiseBackend::Reference);
        assert_eq!(fused.vision, reference.vision);
        // K and V of `rows` tokens, 2048 → 1536: the reference projects all 469 in each of the
        // 16 cross blocks every step, the fused backend once per request and only the tokens a
        // block attends to (8 text blocks × 21, 8 image blocks × 448); per step the reference
        // also redoes the timestep MLP (256·1536 + 1536²) and 33 AdaLN rows (1536 → 3072).
        let kv = |rows: f64| 2.0 * 2.0 * rows * 2048.0 * 1536.0;
        let memory_all = 16.0 * kv(469.0);
        let memory_kept = 8.0 * kv(21.0) + 8.0 * kv(448.0);
        let modulation = 2.0 * (256.0 * 1536.0 + 1536.0 * 1536.0 + 33.0 * 1536.0 * 3072.0);
        assert_eq!(
            reference.denoise - fused.denoise,
            4.0 * memory_all - memory_kept + 4.0 * modulation
        );
    }

    // Expected: the 2-D weights under `action_head.model.transformer_blocks.` in the
    // safetensors headers of the bundled tiny checkpoint and of `synth-checkpoint --size full`
    // (a script), all of them for the reference backend, without `norm1.linear` and the
    // cross blocks' `to_k`/`to_v` (input width ≠ `to_q`'s) for the fused one.
    #[test]
    fn denoise_step_weights_match_the_checkpoint_headers() {
        for (size, fused, reference) in [
            (SynthSize::Tiny, 811_008.0, 983_040.0),
            (SynthSize::Full, 830_472_192.0, 1_082_130_432.0),
        ] {
            let (cfg, _) = synth_configs(size).unwrap();
            assert_eq!(denoise_step_weights(&cfg, DenoiseBackend::Fused), fused);
            assert_eq!(
                denoise_step_weights(&cfg, DenoiseBackend::Reference),
                reference
            );
        }
    }
}
