//! Synthetic checkpoints: the exact layout, tensor names, shapes and configs of a GR00T N1.7
//! checkpoint, filled with deterministic pseudo-random bf16 values. They exist to measure speed
//! without the gated weights; their `config.json` says `"synthetic_weights": true`, and a
//! server loading one says so in its log and `/info`. Never act on their actions.

use crate::config::{BackboneConfig, Gr00tConfig};
use crate::error::{Error, Result};
use serde_json::Value;
use std::io::{BufWriter, Write};
use std::path::Path;

/// Which synthetic model to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynthSize {
    /// The released N1.7-3B architecture (3.14 B parameters, ~6.3 GB of bf16).
    Full,
    /// The tiny architecture of the test fixtures.
    Tiny,
}

/// How a tensor is initialised (the fixtures' scheme: activations at real-model scale).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// Norm weights: 1 + 0.05·u.
    Norm,
    /// Biases: 0.02·u.
    Bias,
    /// Weights: σ = 0.02·sqrt(1024 / fan_in).
    Weight {
        /// Input width of the layer.
        fan_in: usize,
    },
}

/// One parameter of the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamSpec {
    /// Full tensor name.
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// Initialisation.
    pub init: Init,
}

impl ParamSpec {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

struct Specs(Vec<ParamSpec>);

impl Specs {
    fn push(&mut self, name: String, shape: Vec<usize>, init: Init) {
        self.0.push(ParamSpec { name, shape, init });
    }
    fn linear(&mut self, name: &str, out: usize, inp: usize, bias: bool) {
        let init = Init::Weight { fan_in: inp };
        self.push(format!("{name}.weight"), vec![out, inp], init);
        if bias {
            self.push(format!("{name}.bias"), vec![out], Init::Bias);
        }
    }
    fn norm(&mut self, name: &str, dim: usize, bias: bool) {
        self.push(format!("{name}.weight"), vec![dim], Init::Norm);
        if bias {
            self.push(format!("{name}.bias"), vec![dim], Init::Bias);
        }
    }
    fn table(&mut self, name: &str, rows: usize, width: usize) {
        let init = Init::Weight { fan_in: width };
        self.push(name.into(), vec![rows, width], init);
    }
    /// A diffusers `BasicTransformerBlock` under `b`: `attn1` (queries from `dim`, keys and
    /// values from `kv_in`, `inner` wide) and `ff` (`4·dim` hidden).
    fn transformer_block(&mut self, b: &str, dim: usize, kv_in: usize, inner: usize) {
        self.linear(&format!("{b}.attn1.to_q"), inner, dim, true);
        self.linear(&format!("{b}.attn1.to_k"), inner, kv_in, true);
        self.linear(&format!("{b}.attn1.to_v"), inner, kv_in, true);
        self.linear(&format!("{b}.attn1.to_out.0"), dim, inner, true);
        self.linear(&format!("{b}.ff.net.0.proj"), 4 * dim, dim, true);
        self.linear(&format!("{b}.ff.net.2"), dim, 4 * dim, true);
    }
    fn category_linear(&mut self, name: &str, emb: usize, inp: usize, out: usize) {
        let init = Init::Weight { fan_in: inp };
        self.push(format!("{name}.W"), vec![emb, inp, out], init);
        self.push(format!("{name}.b"), vec![emb, out], Init::Bias);
    }
}

/// Every parameter a checkpoint of this architecture stores (no `lm_head`: it is tied),
/// sorted by name.
pub fn parameter_specs(cfg: &Gr00tConfig, bb: &BackboneConfig) -> Vec<ParamSpec> {
    let mut s = Specs(Vec::new());
    let v = &bb.vision_config;
    let vp = "backbone.model.model.visual";
    let h = v.hidden_size;
    let (t, p) = (v.temporal_patch_size, v.patch_size);
    s.push(
        format!("{vp}.patch_embed.proj.weight"),
        vec![h, v.in_channels, t, p, p],
        Init::Weight {
            fan_in: v.patch_dim(),
        },
    );
    s.push(format!("{vp}.patch_embed.proj.bias"), vec![h], Init::Bias);
    s.table(
        &format!("{vp}.pos_embed.weight"),
        v.num_position_embeddings,
        h,
    );
    for i in 0..v.depth {
        let b = format!("{vp}.blocks.{i}");
        s.norm(&format!("{b}.norm1"), h, true);
        s.norm(&format!("{b}.norm2"), h, true);
        s.linear(&format!("{b}.attn.qkv"), 3 * h, h, true);
        s.linear(&format!("{b}.attn.proj"), h, h, true);
        s.linear(&format!("{b}.mlp.linear_fc1"), v.intermediate_size, h, true);
        s.linear(&format!("{b}.mlp.linear_fc2"), h, v.intermediate_size, true);
    }
    let merged = h * v.spatial_merge_size * v.spatial_merge_size;
    s.norm(&format!("{vp}.merger.norm"), h, true);
    s.linear(&format!("{vp}.merger.linear_fc1"), merged, merged, true);
    s.linear(
        &format!("{vp}.merger.linear_fc2"),
        v.out_hidden_size,
        merged,
        true,
    );
    for k in 0..v.deepstack_visual_indexes.len() {
        let m = format!("{vp}.deepstack_merger_list.{k}");
        s.norm(&format!("{m}.norm"), merged, true);
        s.linear(&format!("{m}.linear_fc1"), merged, merged, true);
        s.linear(&format!("{m}.linear_fc2"), v.out_hidden_size, merged, true);
    }

    let t = &bb.text_config;
    let tp = "backbone.model.model.language_model";
    let d = t.hidden_size;
    s.table(&format!("{tp}.embed_tokens.weight"), t.vocab_size, d);
    for l in 0..cfg.select_layer {
        let b = format!("{tp}.layers.{l}");
        s.norm(&format!("{b}.input_layernorm"), d, false);
        s.norm(&format!("{b}.post_attention_layernorm"), d, false);
        let (q, kv) = (
            t.num_attention_heads * t.head_dim,
            t.num_key_value_heads * t.head_dim,
        );
        for (proj, out, inp) in [("q", q, d), ("k", kv, d), ("v", kv, d), ("o", d, q)] {
            s.linear(&format!("{b}.self_attn.{proj}_proj"), out, inp, false);
        }
        s.norm(&format!("{b}.self_attn.q_norm"), t.head_dim, false);
        s.norm(&format!("{b}.self_attn.k_norm"), t.head_dim, false);
        s.linear(&format!("{b}.mlp.gate_proj"), t.intermediate_size, d, false);
        s.linear(&format!("{b}.mlp.up_proj"), t.intermediate_size, d, false);
        s.linear(&format!("{b}.mlp.down_proj"), d, t.intermediate_size, false);
    }
    s.norm(&format!("{tp}.norm"), d, false);

    let ap = "action_head";
    let dvl = cfg.backbone_embedding_dim;
    let w = cfg.input_embedding_dim;
    let e = cfg.max_num_embodiments;
    s.norm(&format!("{ap}.vlln"), dvl, true);
    if let Some(sa) = cfg.vl_self_attention() {
        let inner = sa.num_attention_heads * sa.attention_head_dim;
        for i in 0..sa.num_layers {
            let b = format!("{ap}.vl_self_attention.transformer_blocks.{i}");
            s.norm(&format!("{b}.norm1"), dvl, true);
            s.norm(&format!("{b}.norm3"), dvl, true);
            s.transformer_block(&b, dvl, dvl, inner);
        }
    }
    let dit = &cfg.diffusion_model_cfg;
    let inner = dit.inner_dim();
    let te = format!("{ap}.model.timestep_encoder.timestep_embedder");
    s.linear(&format!("{te}.linear_1"), inner, 256, true);
    s.linear(&format!("{te}.linear_2"), inner, inner, true);
    for i in 0..dit.num_layers {
        let b = format!("{ap}.model.transformer_blocks.{i}");
        let kv_in = if i % 2 == 0 { dvl } else { inner };
        s.linear(&format!("{b}.norm1.linear"), 2 * inner, inner, true);
        s.transformer_block(&b, inner, kv_in, inner);
    }
    s.linear(&format!("{ap}.model.proj_out_1"), 2 * inner, inner, true);
    s.linear(
        &format!("{ap}.model.proj_out_2"),
        dit.output_dim,
        inner,
        true,
    );
    let state_in = cfg.max_state_dim * cfg.state_history_length;
    s.category_linear(
        &format!("{ap}.state_encoder.layer1"),
        e,
        state_in,
        cfg.hidden_size,
    );
    s.category_linear(&format!("{ap}.state_encoder.layer2"), e, cfg.hidden_size, w);
    s.category_linear(&format!("{ap}.action_encoder.W1"), e, cfg.max_action_dim, w);
    s.category_linear(&format!("{ap}.action_encoder.W2"), e, 2 * w, w);
    s.category_linear(&format!("{ap}.action_encoder.W3"), e, w, w);
    s.category_linear(
        &format!("{ap}.action_decoder.layer1"),
        e,
        cfg.hidden_size,
        cfg.hidden_size,
    );
    s.category_linear(
        &format!("{ap}.action_decoder.layer2"),
        e,
        cfg.hidden_size,
        cfg.max_action_dim,
    );
    s.table(
        &format!("{ap}.position_embedding.weight"),
        cfg.max_seq_len,
        w,
    );
    s.0.sort_by(|a, b| a.name.cmp(&b.name));
    s.0
}

/// The configs of a synthetic checkpoint of `size`.
pub fn synth_configs(size: SynthSize) -> Result<(Gr00tConfig, BackboneConfig)> {
    Ok(match size {
        SynthSize::Full => (Gr00tConfig::released_n17_3b(), BackboneConfig::default()),
        SynthSize::Tiny => {
            let cfg: Gr00tConfig =
                serde_json::from_str(TINY_CONFIG).map_err(built_in("tiny config"))?;
            let bb: BackboneConfig = serde_json::from_str(TINY_BACKBONE_CONFIG)
                .map_err(built_in("tiny backbone config"))?;
            (cfg, bb)
        }
    })
}

const TINY_CONFIG: &str = include_str!("../../../assets/synth/tiny_config.json");
const TINY_BACKBONE_CONFIG: &str = include_str!("../../../assets/synth/backbone_tiny_config.json");
const PREPROCESSOR_CONFIG: &str = include_str!("../../../assets/synth/preprocessor_config.json");
const PROCESSOR_CONFIG: &str = include_str!("../../../assets/synth/processor_config.json");
const STATISTICS: &str = include_str!("../../../assets/synth/statistics.json");
const EMBODIMENT_IDS: &str = include_str!("../../../assets/synth/embodiment_id.json");

/// Largest shard written before starting the next one (the real repo ships sharded weights).
const SHARD_BYTES: u64 = 4 << 30;

/// Writes a synthetic checkpoint into `out`; `progress(done, total)` is called in bytes.
pub fn write_synthetic_checkpoint(
    out: &Path,
    size: SynthSize,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<()> {
    let (mut cfg, bb) = synth_configs(size)?;
    cfg.synthetic_weights = true;
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, "create", e))?;
    let model_name = match size {
        SynthSize::Full => "nvidia/Cosmos-Reason2-2B",
        SynthSize::Tiny => "nvidia/Cosmos-Reason2-2B-tiny-random",
    };
    cfg.model_name = model_name.into();
    write_json(&out.join("config.json"), &config_json(&cfg)?)?;
    let mut proc: Value =
        serde_json::from_str(PROCESSOR_CONFIG).map_err(built_in("processor config"))?;
    proc["processor_kwargs"]["model_name"] = Value::from(model_name);
    write_json(&out.join("processor_config.json"), &proc)?;
    write_text(&out.join("statistics.json"), STATISTICS)?;
    write_text(&out.join("embodiment_id.json"), EMBODIMENT_IDS)?;
    if size == SynthSize::Tiny {
        std::fs::create_dir_all(out.join("backbone"))
            .map_err(|e| Error::io(out.join("backbone"), "create", e))?;
        write_text(&out.join("backbone/config.json"), TINY_BACKBONE_CONFIG)?;
        write_text(
            &out.join("backbone/preprocessor_config.json"),
            PREPROCESSOR_CONFIG,
        )?;
    }
    let specs = parameter_specs(&cfg, &bb);
    let shards = split_shards(&specs);
    let total: u64 = specs.iter().map(|p| 2 * p.numel() as u64).sum();
    let mut done = 0u64;
    if shards.len() == 1 {
        write_shard(
            &out.join(crate::checkpoint::WEIGHTS_FILE),
            &shards[0],
            &mut done,
            total,
            progress,
        )?;
    } else {
        let n = shards.len();
        let mut weight_map = serde_json::Map::new();
        for (i, shard) in shards.iter().enumerate() {
            let file = format!("model-{:05}-of-{n:05}.safetensors", i + 1);
            write_shard(&out.join(&file), shard, &mut done, total, progress)?;
            for p in shard {
                weight_map.insert(p.name.clone(), Value::from(file.clone()));
            }
        }
        let index =
            serde_json::json!({"metadata": {"total_size": total}, "weight_map": weight_map});
        write_json(&out.join(crate::checkpoint::WEIGHTS_INDEX_FILE), &index)?;
    }
    Ok(())
}

/// `config.json` text: our typed fields plus the released key set's remaining fields.
fn config_json(cfg: &Gr00tConfig) -> Result<Value> {
    let mut v: Value = serde_json::from_str(TINY_CONFIG).map_err(built_in("tiny config"))?;
    let typed = serde_json::to_value(cfg).map_err(built_in("config fields"))?;
    merge(&mut v, typed);
    Ok(v)
}

/// The error of a config built into the binary, `what` named.
fn built_in(what: &'static str) -> impl Fn(serde_json::Error) -> Error {
    move |source| Error::BuiltIn { what, source }
}

/// The error of JSON written to `path` that does not serialise.
fn json_error(path: &Path) -> impl Fn(serde_json::Error) -> Error + '_ {
    move |source| Error::Json {
        path: path.to_path_buf(),
        at: None,
        source,
    }
}

/// Deep-merges `src` into `dst` (objects key by key, anything else replaced).
fn merge(dst: &mut Value, src: Value) {
    match (dst, src) {
        (Value::Object(d), Value::Object(s)) => {
            for (k, v) in s {
                match d.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        d.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

fn split_shards(specs: &[ParamSpec]) -> Vec<Vec<&ParamSpec>> {
    let mut shards: Vec<Vec<&ParamSpec>> = vec![Vec::new()];
    let mut bytes = 0u64;
    for p in specs {
        let b = 2 * p.numel() as u64;
        if bytes + b > SHARD_BYTES && !shards.last().is_some_and(|s| s.is_empty()) {
            shards.push(Vec::new());
            bytes = 0;
        }
        bytes += b;
        if let Some(last) = shards.last_mut() {
            last.push(p);
        }
    }
    shards
}

fn write_json(path: &Path, v: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(v).map_err(json_error(path))?;
    write_text(path, &text)
}

fn write_text(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::io(path, "write", e))
}

fn write_shard(
    path: &Path,
    params: &[&ParamSpec],
    done: &mut u64,
    total: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<()> {
    let io = |e: std::io::Error| Error::io(path, "write", e);
    let mut header = serde_json::Map::new();
    header.insert(
        "__metadata__".into(),
        serde_json::json!({"format": "pt", "gr00t_rs": "synthetic weights: pseudo-random, for speed runs only"}),
    );
    let mut offset = 0u64;
    for p in params {
        let end = offset + 2 * p.numel() as u64;
        header.insert(
            p.name.clone(),
            serde_json::json!({"dtype": "BF16", "shape": p.shape, "data_offsets": [offset, end]}),
        );
        offset = end;
    }
    let mut text = serde_json::to_string(&header).map_err(json_error(path))?;
    while text.len() % 8 != 0 {
        text.push(' ');
    }
    let file = std::fs::File::create(path).map_err(io)?;
    let mut wr = BufWriter::with_capacity(1 << 22, file);
    wr.write_all(&(text.len() as u64).to_le_bytes())
        .map_err(io)?;
    wr.write_all(text.as_bytes()).map_err(io)?;
    let mut buf = Vec::with_capacity(1 << 20);
    for p in params {
        let mut rng = SplitMix64::new(fnv1a(&p.name));
        let (center, half_width) = match p.init {
            Init::Norm => (1.0f32, 0.05 * 3f32.sqrt()),
            Init::Bias => (0.0, 0.02 * 3f32.sqrt()),
            // Uniform with the variance of N(0, σ²).
            Init::Weight { fan_in } => (0.0, 0.02 * (1024.0 / fan_in as f32).sqrt() * 3f32.sqrt()),
        };
        let mut left = p.numel();
        while left > 0 {
            let n = left.min(1 << 19);
            buf.clear();
            for _ in 0..n {
                let u = rng.unit();
                let x = center + half_width * (2.0 * u - 1.0);
                buf.extend_from_slice(&f32_to_bf16_bits(x).to_le_bytes());
            }
            wr.write_all(&buf).map_err(io)?;
            left -= n;
            *done += 2 * n as u64;
            progress(*done, total);
        }
    }
    wr.flush().map_err(io)?;
    Ok(())
}

/// Round-to-nearest-even f32 → bf16 bit pattern.
fn f32_to_bf16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    let round = ((bits >> 16) & 1) + 0x7FFF;
    ((bits + round) >> 16) as u16
}

fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// Small, fast, deterministic generator (SplitMix64).
struct SplitMix64(u64);

impl SplitMix64 {
    fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }
    /// Uniform in [0, 1) with 24 bits.
    fn unit(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^= z >> 31;
        (z >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }
}
