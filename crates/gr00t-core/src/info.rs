//! What `/info` reports about a loaded engine ([`EngineInfo`]); each served embodiment is a
//! view of its [`Layout`] ([`EmbodimentInfo`]), not a copy.

use gr00t_embodiment::actions::Representation;
use gr00t_embodiment::layout::Layout;
use serde::Serialize;
use std::sync::Arc;

/// What `/info` reports about the loaded engine.
#[derive(Debug, Clone, Serialize)]
pub struct EngineInfo {
    /// What is served: the Hub repository of a cached snapshot (`nvidia/GR00T-N1.7-3B`), else
    /// the checkpoint folder's last two path components.
    pub model_id: String,
    /// The snapshot's commit (12 digits), or `local` for any other folder.
    pub revision: String,
    /// Checkpoint folder.
    pub checkpoint: String,
    /// sha256 over the weight files' safetensors headers and sizes (cheap, identifies the weights).
    pub checkpoint_digest: String,
    /// True for `gr00t synth-checkpoint` weights.
    pub synthetic_weights: bool,
    /// The default embodiment tag (the first served).
    pub embodiment: String,
    /// Every served embodiment's layout.
    pub embodiments: Vec<EmbodimentInfo>,
    /// MiB held by the served embodiments' category-specific weights (the other slots are
    /// not kept).
    pub embodiment_weights_mib: f64,
    /// 40.
    pub action_horizon: usize,
    /// Denoise implementation (`--dit-backend`).
    pub denoise_backend: String,
    /// Images the vision cache keeps (`--vision-cache`; 0: off).
    pub vision_cache_images: usize,
    /// CPU GEMM kernel of the products (`amx` or `avx512bf16` for `--dtype bf16` on AMX or
    /// AVX512-BF16 CPUs, `avx512`, `avx2`, `library`; `none` on a GPU).
    pub cpu_kernel: String,
    /// The CPU's L1d/L2 sizes and the blocks the f32 kernel takes from them (`none` on a GPU).
    pub cpu_blocks: String,
    /// Compute precision: `f32`, `bf16` or `int8`.
    pub dtype: String,
    /// Why this precision: what was asked, or what `--dtype auto` found.
    pub dtype_reason: String,
    /// The stages whose linear layers run int8 (empty unless `int8`).
    pub int8_stages: Vec<&'static str>,
    /// The int8 GEMM kernel (`avx512vnni`, `avxvnni`, `avx2`, `scalar`; `none` unless int8).
    pub int8_kernel: &'static str,
    /// Whether `gr00t check-dtype --dtype int8` passed for this checkpoint and these stages:
    /// `passed`, `failed`, `not run` (`none` unless int8).
    pub int8_check: &'static str,
    /// Whether the int8 layers are smoothed with this checkpoint's calibration (SmoothQuant,
    /// `--int8-smooth`).
    pub int8_smooth: bool,
    /// Layers of the int8 stages kept f32 (`--int8-keep`).
    pub int8_keep: Vec<String>,
    /// Device.
    pub device: String,
    /// Compute threads.
    pub threads: usize,
    /// Build version.
    pub version: String,
    /// What the packed-weight cache did on this load: `off`, or which file was mapped or
    /// written (and why a file was refused).
    pub weight_cache: String,
}

impl EngineInfo {
    /// Under int8 without a passed `check-dtype` for what is served: the warning a robot's
    /// operator must see at start (`serve`, `predict`; `check-dtype` itself does not say it).
    pub fn int8_check_warning(&self) -> Option<String> {
        if self.int8_check == "passed" || self.int8_check == "none" {
            return None;
        }
        Some(format!(
            "--dtype int8: the accuracy check has {} for this checkpoint (digest {}): run `gr00t \
             check-dtype --checkpoint {} --dtype int8{}` on your own observations before a \
             robot acts on int8 actions",
            if self.int8_check == "failed" {
                "FAILED"
            } else {
                "not been run"
            },
            &self.checkpoint_digest[..self.checkpoint_digest.len().min(12)],
            self.checkpoint,
            if self.int8_smooth {
                " --int8-smooth"
            } else {
                ""
            }
        ))
    }

    /// The kernels that multiply: the f32/bf16 one, and under int8 the int8 one and its stages
    /// (`avx512 + int8 avx512vnni in adapter,dit`), for the start-up log and `gr00t bench`.
    pub fn kernels(&self) -> String {
        if self.dtype == "int8" {
            format!(
                "{} + int8 {} in {}",
                self.cpu_kernel,
                self.int8_kernel,
                self.int8_stages.join(",")
            )
        } else {
            self.cpu_kernel.clone()
        }
    }
}

/// One served embodiment's layout as `/info` lists it: a view of the served [`Layout`],
/// written out when serialised.
#[derive(Debug, Clone)]
pub struct EmbodimentInfo(pub Arc<Layout>);

/// A key and its width.
#[derive(Serialize)]
struct KeyWidth<'a> {
    key: &'a str,
    dim: usize,
    /// How an action key is decoded (`absolute`, `relative <format> to <state key>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    rep: Option<String>,
}

/// `/info`'s fields of one embodiment.
#[derive(Serialize)]
struct EmbodimentFields<'a> {
    /// The tag.
    tag: &'a str,
    /// Projector index of its category-specific weights.
    embodiment_id: usize,
    /// Video keys in prompt order.
    views: &'a [String],
    /// Frame offsets of every view, oldest first.
    frame_deltas: &'a [i64],
    /// State keys with their widths.
    state: Vec<KeyWidth<'a>>,
    /// Action keys with their widths and representations.
    actions: Vec<KeyWidth<'a>>,
    /// Steps returned per chunk.
    action_horizon: usize,
    /// The language key the instruction stands for.
    language_key: &'a str,
}

impl Serialize for EmbodimentInfo {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let spec = &self.0.spec;
        EmbodimentFields {
            tag: &spec.tag,
            embodiment_id: spec.embodiment_id,
            views: &spec.views,
            frame_deltas: &spec.frame_deltas,
            state: spec
                .state
                .keys()
                .map(|(key, dim)| KeyWidth {
                    key,
                    dim,
                    rep: None,
                })
                .collect(),
            actions: spec
                .actions
                .keys()
                .map(|(key, dim, rep)| KeyWidth {
                    key,
                    dim,
                    rep: Some(match rep {
                        Representation::Absolute => "absolute".into(),
                        Representation::Relative { state_key, format } => {
                            format!("relative {format:?} to state {state_key}")
                        }
                    }),
                })
                .collect(),
            action_horizon: spec.actions.horizon(),
            language_key: &spec.language_key,
        }
        .serialize(serializer)
    }
}
