//! Configuration of GR00T N1.7: the action-head config (`config.json`, `Gr00tN1d7Config`) and
//! the Qwen3-VL backbone architecture (built in for Cosmos-Reason2-2B, overridable by a file).
//!
//! Every field defaults to the upstream class default; values present in `config.json` win, as
//! `Gr00tN1d7Config.__init__` sets every key it is given.

use serde::{Deserialize, Serialize};

/// `config.json` of a GR00T N1.7 checkpoint (the fields inference needs, plus identity).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Gr00tConfig {
    /// `"Gr00tN1d7"`.
    pub model_type: String,
    /// Backbone repository name (identifier only).
    pub model_name: String,
    /// Storage dtype of the released weights.
    pub model_dtype: String,
    /// Number of LLM decoder layers kept (the rest are popped).
    pub select_layer: usize,
    /// Width of the backbone features (= LLM hidden size).
    pub backbone_embedding_dim: usize,
    /// DiT output / decoder width.
    pub hidden_size: usize,
    /// DiT token width.
    pub input_embedding_dim: usize,
    /// Padded state width.
    pub max_state_dim: usize,
    /// Padded action width.
    pub max_action_dim: usize,
    /// Action chunk length.
    pub action_horizon: usize,
    /// State history rows fed to the state encoder.
    pub state_history_length: usize,
    /// Euler steps of the flow-matching sampler.
    pub num_inference_timesteps: usize,
    /// Discretisation of t into integer buckets.
    pub num_timestep_buckets: usize,
    /// Number of embodiment slots of the category-specific layers.
    pub max_num_embodiments: usize,
    /// Rows of the action position-embedding table.
    pub max_seq_len: usize,
    /// Whether action tokens get the learned position embedding.
    pub add_pos_embed: bool,
    /// Whether the backbone features go through `vlln`.
    pub use_vlln: bool,
    /// Whether the DiT alternates text/image cross-attention.
    pub use_alternate_vl_dit: bool,
    /// Cross-attention to text every n cross blocks (2: text on blocks ≡ 0 mod 4).
    pub attend_text_every_n_blocks: usize,
    /// DiT architecture.
    pub diffusion_model_cfg: DiffusionModelConfig,
    /// VL self-attention adapter; `None` (or 0 layers) means identity.
    pub vl_self_attention_cfg: Option<VlSelfAttentionConfig>,
    /// Processor defaults mirrored in the model config.
    pub shortest_image_edge: Option<usize>,
    /// Processor defaults mirrored in the model config.
    pub crop_fraction: Option<f64>,
    /// Set by `gr00t synth-checkpoint`: the weights are pseudo-random, for speed runs only.
    pub synthetic_weights: bool,
}

impl Default for Gr00tConfig {
    fn default() -> Self {
        Gr00tConfig {
            model_type: "Gr00tN1d7".into(),
            model_name: "nvidia/Cosmos-Reason2-2B".into(),
            model_dtype: "bfloat16".into(),
            select_layer: 12,
            backbone_embedding_dim: 2048,
            hidden_size: 1024,
            input_embedding_dim: 1536,
            max_state_dim: 132,
            max_action_dim: 132,
            action_horizon: 40,
            state_history_length: 1,
            num_inference_timesteps: 4,
            num_timestep_buckets: 1000,
            max_num_embodiments: 32,
            max_seq_len: 1024,
            add_pos_embed: true,
            use_vlln: true,
            use_alternate_vl_dit: true,
            attend_text_every_n_blocks: 2,
            diffusion_model_cfg: DiffusionModelConfig::default(),
            vl_self_attention_cfg: None,
            shortest_image_edge: None,
            crop_fraction: None,
            synthetic_weights: false,
        }
    }
}

impl Gr00tConfig {
    /// The released N1.7-3B values (select_layer 16, 32 DiT layers, 4-layer VL self-attention).
    pub fn released_n17_3b() -> Gr00tConfig {
        Gr00tConfig {
            select_layer: 16,
            diffusion_model_cfg: DiffusionModelConfig {
                num_layers: 32,
                ..DiffusionModelConfig::default()
            },
            vl_self_attention_cfg: Some(VlSelfAttentionConfig {
                num_layers: 4,
                num_attention_heads: 32,
                attention_head_dim: 64,
            }),
            shortest_image_edge: Some(256),
            crop_fraction: Some(0.95),
            ..Gr00tConfig::default()
        }
    }

    /// The VL self-attention config when the adapter exists (≥ 1 layer).
    pub fn vl_self_attention(&self) -> Option<&VlSelfAttentionConfig> {
        self.vl_self_attention_cfg
            .as_ref()
            .filter(|c| c.num_layers > 0)
    }
}

/// `diffusion_model_cfg`: the AlternateVLDiT.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct DiffusionModelConfig {
    /// Number of DiT blocks.
    pub num_layers: usize,
    /// Attention heads per block.
    pub num_attention_heads: usize,
    /// Width of one head.
    pub attention_head_dim: usize,
    /// Output width (`proj_out_2`), = `hidden_size`.
    pub output_dim: usize,
    /// `"ada_norm"` for N1.7.
    pub norm_type: String,
    /// Odd blocks are self-attention.
    pub interleave_self_attention: bool,
}

impl Default for DiffusionModelConfig {
    fn default() -> Self {
        DiffusionModelConfig {
            num_layers: 16,
            num_attention_heads: 32,
            attention_head_dim: 48,
            output_dim: 1024,
            norm_type: "ada_norm".into(),
            interleave_self_attention: true,
        }
    }
}

impl DiffusionModelConfig {
    /// DiT width = heads × head_dim.
    pub fn inner_dim(&self) -> usize {
        self.num_attention_heads * self.attention_head_dim
    }
}

/// `vl_self_attention_cfg`: the SelfAttentionTransformer over the VL tokens.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct VlSelfAttentionConfig {
    /// Number of blocks.
    pub num_layers: usize,
    /// Attention heads.
    pub num_attention_heads: usize,
    /// Width of one head.
    pub attention_head_dim: usize,
}

impl Default for VlSelfAttentionConfig {
    fn default() -> Self {
        VlSelfAttentionConfig {
            num_layers: 4,
            num_attention_heads: 32,
            attention_head_dim: 64,
        }
    }
}

/// Qwen3-VL backbone architecture (`Qwen3VLConfig`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct BackboneConfig {
    /// LLM config.
    pub text_config: TextConfig,
    /// Vision tower config.
    pub vision_config: VisionConfig,
    /// `<|image_pad|>` id.
    pub image_token_id: u32,
    /// `<|video_pad|>` id.
    pub video_token_id: u32,
    /// `<|vision_start|>` id.
    pub vision_start_token_id: u32,
    /// `<|vision_end|>` id.
    pub vision_end_token_id: u32,
}

impl Default for BackboneConfig {
    /// Qwen3-VL-2B / Cosmos-Reason2-2B.
    fn default() -> Self {
        BackboneConfig {
            text_config: TextConfig::default(),
            vision_config: VisionConfig::default(),
            image_token_id: 151655,
            video_token_id: 151656,
            vision_start_token_id: 151652,
            vision_end_token_id: 151653,
        }
    }
}

/// Qwen3-VL text (LLM) config.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct TextConfig {
    /// Hidden width.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Layers in the full model (GR00T keeps `select_layer` of them).
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (GQA).
    pub num_key_value_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// RoPE base.
    pub rope_theta: f64,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// mRoPE sections and flags.
    pub rope_scaling: RopeScaling,
    /// Activation of the gated MLP (`silu`).
    pub hidden_act: String,
}

impl Default for TextConfig {
    fn default() -> Self {
        TextConfig {
            hidden_size: 2048,
            intermediate_size: 6144,
            num_hidden_layers: 28,
            num_attention_heads: 16,
            num_key_value_heads: 8,
            head_dim: 128,
            rms_norm_eps: 1e-6,
            rope_theta: 5_000_000.0,
            vocab_size: 151936,
            rope_scaling: RopeScaling::default(),
            hidden_act: "silu".into(),
        }
    }
}

/// `rope_scaling` of the text config.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct RopeScaling {
    /// (T, H, W) frequency counts.
    pub mrope_section: Vec<usize>,
    /// Interleaved layout (always used by transformers 4.57).
    pub mrope_interleaved: bool,
    /// `"default"`.
    pub rope_type: String,
}

impl Default for RopeScaling {
    fn default() -> Self {
        RopeScaling {
            mrope_section: vec![24, 20, 20],
            mrope_interleaved: true,
            rope_type: "default".into(),
        }
    }
}

/// Qwen3-VL vision tower config.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct VisionConfig {
    /// Number of ViT blocks.
    pub depth: usize,
    /// ViT width.
    pub hidden_size: usize,
    /// Attention heads.
    pub num_heads: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Output width of the mergers (= LLM hidden).
    pub out_hidden_size: usize,
    /// Input channels.
    pub in_channels: usize,
    /// Spatial patch size.
    pub patch_size: usize,
    /// Temporal patch size.
    pub temporal_patch_size: usize,
    /// 2×2 patches merge into one token.
    pub spatial_merge_size: usize,
    /// Learned position-embedding table rows (a square grid).
    pub num_position_embeddings: usize,
    /// Blocks whose outputs feed the deepstack mergers.
    pub deepstack_visual_indexes: Vec<usize>,
    /// Activation of the block MLPs.
    pub hidden_act: String,
}

impl Default for VisionConfig {
    fn default() -> Self {
        VisionConfig {
            depth: 24,
            hidden_size: 1024,
            num_heads: 16,
            intermediate_size: 4096,
            out_hidden_size: 2048,
            in_channels: 3,
            patch_size: 16,
            temporal_patch_size: 2,
            spatial_merge_size: 2,
            num_position_embeddings: 2304,
            deepstack_visual_indexes: vec![5, 11, 17],
            hidden_act: "gelu_pytorch_tanh".into(),
        }
    }
}

impl VisionConfig {
    /// Width of one flattened patch row of `pixel_values` (3·2·16·16 = 1536).
    pub fn patch_dim(&self) -> usize {
        self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size
    }
}

/// Qwen image-processor settings (`backbone/preprocessor_config.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct ImageProcessorConfig {
    /// Spatial patch size.
    pub patch_size: usize,
    /// Temporal patch size (frames are duplicated to this count).
    pub temporal_patch_size: usize,
    /// Merge size (smart_resize factor = patch·merge).
    pub merge_size: usize,
    /// Per-channel mean (on the 0..1 scale).
    pub image_mean: Vec<f64>,
    /// Per-channel std (on the 0..1 scale).
    pub image_std: Vec<f64>,
    /// `shortest_edge` = min pixels, `longest_edge` = max pixels.
    pub size: PixelBounds,
}

/// Pixel-count bounds of smart_resize.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PixelBounds {
    /// Minimum pixel count.
    pub shortest_edge: usize,
    /// Maximum pixel count.
    pub longest_edge: usize,
}

impl Default for ImageProcessorConfig {
    /// Qwen3-VL-2B-Instruct values.
    fn default() -> Self {
        ImageProcessorConfig {
            patch_size: 16,
            temporal_patch_size: 2,
            merge_size: 2,
            image_mean: vec![0.5; 3],
            image_std: vec![0.5; 3],
            size: PixelBounds {
                shortest_edge: 65536,
                longest_edge: 16777216,
            },
        }
    }
}
