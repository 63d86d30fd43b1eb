//! A GR00T N1.7 checkpoint folder: configs, normalisation statistics, embodiment table and the
//! weights (read tensor by tensor on demand). Every missing or malformed file is reported with
//! its path.

use crate::config::{BackboneConfig, Gr00tConfig, ImageProcessorConfig};
use crate::error::{Error, Result};
use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Name of the single-file weights.
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// Name of the shard index.
pub const WEIGHTS_INDEX_FILE: &str = "model.safetensors.index.json";

/// A loaded checkpoint (configs parsed, weight files located and their headers checked).
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// The folder.
    pub dir: PathBuf,
    /// `config.json`.
    pub config: Gr00tConfig,
    /// Backbone architecture: `backbone/config.json` when present, else the built-in 2B values.
    pub backbone: BackboneConfig,
    /// Qwen image processor settings: `backbone/preprocessor_config.json` or built in.
    pub image_processor: ImageProcessorConfig,
    /// `processor_config.json` (`processor_kwargs`).
    pub processor: ProcessorConfig,
    /// `statistics.json`.
    pub statistics: Statistics,
    /// `embodiment_id.json`: tag → projector index.
    pub embodiment_ids: BTreeMap<String, usize>,
    /// The safetensors files holding the weights.
    pub weight_files: Vec<PathBuf>,
    /// Storage dtype of each tensor, by name.
    pub tensor_dtypes: BTreeMap<String, DType>,
}

impl Checkpoint {
    /// Opens a checkpoint folder and validates every file inference needs.
    pub fn open(dir: impl AsRef<Path>) -> Result<Checkpoint> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            return Err(Error::file(&dir, "checkpoint folder does not exist"));
        }
        // LeRobot saves its GR00T policy in a format of its own: say so rather than which
        // Isaac-GR00T file is missing.
        if dir.join("policy_preprocessor.json").is_file()
            && !dir.join("processor_config.json").is_file()
            && !dir.join("processor/processor_config.json").is_file()
        {
            return Err(Error::file(
                &dir,
                "a LeRobot-format policy (policy_preprocessor.json), which is not served: gr00t-rs \
                 serves Isaac-GR00T N1.7 checkpoints (config.json, processor_config.json, \
                 statistics.json, embodiment_id.json, model*.safetensors). Serve the Isaac-format \
                 checkpoint and reach it from LeRobot's robot_client with --lerobot-port and \
                 --lerobot-map (docs/protocols.md)",
            ));
        }
        let config: Gr00tConfig = read_json(&dir.join("config.json"))?;
        if config.model_type != "Gr00tN1d7" {
            return Err(Error::file(
                dir.join("config.json"),
                format!(
                    "model_type is {:?}, expected \"Gr00tN1d7\"",
                    config.model_type
                ),
            ));
        }
        let backbone_cfg = dir.join("backbone/config.json");
        let backbone = if backbone_cfg.is_file() {
            read_json(&backbone_cfg)?
        } else {
            BackboneConfig::default()
        };
        let pre_cfg = dir.join("backbone/preprocessor_config.json");
        let image_processor = if pre_cfg.is_file() {
            read_json(&pre_cfg)?
        } else {
            ImageProcessorConfig::default()
        };
        // Upstream falls back to a `processor/` subfolder.
        let mut proc_path = dir.join("processor_config.json");
        if !proc_path.is_file() && dir.join("processor/processor_config.json").is_file() {
            proc_path = dir.join("processor/processor_config.json");
        }
        let proc_dir = proc_path.parent().unwrap_or(&dir).to_path_buf();
        let processor: ProcessorFile = read_json(&proc_path)?;
        if let Some(class) = processor.processor_class.as_deref() {
            if class != "Gr00tN1d7Processor" {
                return Err(Error::file(
                    &proc_path,
                    format!(
                        "processor_class is {class:?}; only Gr00tN1d7Processor (N1.7) is served"
                    ),
                ));
            }
        }
        if processor.processor_kwargs.use_tactile {
            return Err(Error::file(
                &proc_path,
                "use_tactile is true: tactile inputs need a model module this server does not have",
            ));
        }
        let statistics = Statistics::from_file(&pick(&dir, &proc_dir, "statistics.json"))?;
        // The file wins; tags it lacks come from upstream's code table (as
        // `Gr00tN1d7Processor` merges them); the file is optional.
        let id_path = pick(&dir, &proc_dir, "embodiment_id.json");
        let mut embodiment_ids: BTreeMap<String, usize> = if id_path.is_file() {
            read_json(&id_path)?
        } else {
            BTreeMap::new()
        };
        for (tag, id) in CODE_PROJECTOR_INDEX {
            embodiment_ids.entry(tag.to_string()).or_insert(id);
        }
        if let Some((tag, id)) = embodiment_ids
            .iter()
            .find(|(_, &id)| id >= config.max_num_embodiments)
        {
            return Err(Error::file(
                &id_path,
                format!(
                    "embodiment {tag:?} has projector index {id}, but the model has {} slots \
                     (max_num_embodiments)",
                    config.max_num_embodiments
                ),
            ));
        }
        let weight_files = locate_weights(&dir)?;
        let tensor_dtypes = read_tensor_dtypes(&weight_files)?;
        let ckpt = Checkpoint {
            dir,
            config,
            backbone,
            image_processor,
            processor: processor.processor_kwargs,
            statistics,
            embodiment_ids,
            weight_files,
            tensor_dtypes,
        };
        ckpt.check_consistency()?;
        Ok(ckpt)
    }

    /// A VarBuilder over the weight files; each tensor is read (positioned reads, no memory
    /// map) and converted to `dtype` once, when the network asks for it, so unused tensors
    /// (lm_head, final norm) never load. Asking for [`crate::weights::COMPACT`] keeps bf16
    /// tensors bf16 on the CPU and gives `dtype` on other devices.
    pub fn var_builder(&self, dtype: DType, device: &Device) -> Result<VarBuilder<'static>> {
        // Only the CPU has a product that widens bf16 weights in place; elsewhere they are
        // converted to the compute dtype once.
        let reader = crate::weights::SafetensorsReader::open(&self.weight_files)?
            .for_compute(dtype, device.is_cpu());
        Ok(VarBuilder::from_backend(
            Box::new(reader),
            dtype,
            device.clone(),
        ))
    }

    /// The projector index of an embodiment tag.
    pub fn embodiment_id(&self, tag: &str) -> Result<usize> {
        self.embodiment_ids.get(tag).copied().ok_or_else(|| {
            Error::file(
                self.dir.join("embodiment_id.json"),
                format!("no entry for embodiment tag {tag:?}"),
            )
        })
    }

    /// A fingerprint of the weights: sha256 over each weight file's name, size, safetensors
    /// header and 64 evenly spaced 64 KiB samples of its data. Reads ~4 MiB per file instead
    /// of 6 GB, yet differs between checkpoints of the same layout (real vs synthetic).
    pub fn digest(&self) -> Result<String> {
        use sha2::{Digest, Sha256};
        use std::io::{Read, Seek, SeekFrom};
        const SAMPLES: u64 = 64;
        const BLOCK: usize = 64 << 10;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; BLOCK];
        for path in &self.weight_files {
            let io = |e: std::io::Error| Error::io(path, "read", e);
            let mut f = std::fs::File::open(path).map_err(io)?;
            let len = f.metadata().map_err(io)?.len();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            h.update(name.as_bytes());
            h.update(len.to_le_bytes());
            for i in 0..SAMPLES {
                let off = (len.saturating_sub(BLOCK as u64)) * i / (SAMPLES - 1);
                f.seek(SeekFrom::Start(off)).map_err(io)?;
                let n = (len - off).min(BLOCK as u64) as usize;
                f.read_exact(&mut buf[..n]).map_err(io)?;
                h.update(&buf[..n]);
            }
        }
        Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
    }

    /// Whether the weights are the synthetic ones of `gr00t synth-checkpoint`.
    pub fn is_synthetic(&self) -> bool {
        self.config.synthetic_weights
    }

    fn check_consistency(&self) -> Result<()> {
        let cfg = &self.config;
        let wfile = &self.weight_files[0];
        let need = [
            "action_head.state_encoder.layer1.W",
            "action_head.position_embedding.weight",
            "backbone.model.model.visual.patch_embed.proj.weight",
            "backbone.model.model.language_model.embed_tokens.weight",
        ];
        for name in need {
            if !self.tensor_dtypes.contains_key(name) {
                return Err(Error::file(wfile, format!("tensor {name} is missing")));
            }
        }
        for l in 0..cfg.select_layer {
            let name =
                format!("backbone.model.model.language_model.layers.{l}.mlp.down_proj.weight");
            if !self.tensor_dtypes.contains_key(&name) {
                return Err(Error::file(
                    wfile,
                    format!(
                        "select_layer is {} but LLM layer {l} is missing ({name})",
                        cfg.select_layer
                    ),
                ));
            }
        }
        if cfg.backbone_embedding_dim != self.backbone.text_config.hidden_size {
            return Err(Error::file(
                self.dir.join("config.json"),
                format!(
                    "backbone_embedding_dim {} differs from the backbone hidden size {}",
                    cfg.backbone_embedding_dim, self.backbone.text_config.hidden_size
                ),
            ));
        }
        Ok(())
    }
}

fn pick(dir: &Path, proc_dir: &Path, name: &str) -> PathBuf {
    let p = proc_dir.join(name);
    if p.is_file() {
        p
    } else {
        dir.join(name)
    }
}

/// Reads and parses a JSON file, naming the file in any error.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, "read", e))?;
    let de = &mut serde_json::Deserializer::from_slice(&bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let at = e.path().to_string();
        Error::Json {
            path: path.to_path_buf(),
            at: (!at.is_empty() && at != ".").then_some(at),
            source: e.into_inner(),
        }
    })
}

fn locate_weights(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join(WEIGHTS_INDEX_FILE);
    if index.is_file() {
        #[derive(Deserialize)]
        struct Index {
            weight_map: BTreeMap<String, String>,
        }
        let idx: Index = read_json(&index)?;
        let mut files: Vec<String> = idx.weight_map.into_values().collect();
        files.sort();
        files.dedup();
        if files.is_empty() {
            return Err(Error::file(&index, "weight_map is empty"));
        }
        let paths: Vec<PathBuf> = files.iter().map(|f| dir.join(f)).collect();
        for p in &paths {
            if !p.is_file() {
                return Err(Error::file(
                    p,
                    format!("shard listed in {WEIGHTS_INDEX_FILE} is missing"),
                ));
            }
        }
        return Ok(paths);
    }
    let single = dir.join(WEIGHTS_FILE);
    if single.is_file() {
        return Ok(vec![single]);
    }
    Err(Error::file(
        single,
        format!("missing (neither {WEIGHTS_FILE} nor {WEIGHTS_INDEX_FILE} is in the folder)"),
    ))
}

/// Reads only the safetensors headers and checks that every tensor is bf16, f16 or f32 (the
/// weight reader's header check, each byte range included).
fn read_tensor_dtypes(files: &[PathBuf]) -> Result<BTreeMap<String, DType>> {
    let mut out = BTreeMap::new();
    for path in files {
        out.extend(crate::weights::tensor_dtypes(path)?);
    }
    Ok(out)
}

#[derive(Deserialize)]
struct ProcessorFile {
    #[serde(default)]
    processor_class: Option<String>,
    processor_kwargs: ProcessorConfig,
}

/// Upstream's projector table (`_PROJECTOR_INDEX_GROUPS` in `processing_gr00t_n1d7.py`), used
/// for tags `embodiment_id.json` does not list.
const CODE_PROJECTOR_INDEX: [(&str, usize); 16] = [
    ("simpler_env_google", 0),
    ("simpler_env_widowx", 1),
    ("libero_sim", 2),
    ("new_embodiment", 10),
    ("robocasa_panda_omron", 10),
    ("robocasa_gr1_tabletop", 10),
    ("unitree_g1_sonic", 11),
    ("oxe_droid_relative_eef_relative_joint", 24),
    ("real_g1_relative_eef_relative_joints", 25),
    ("unitree_g1_full_body_with_waist_height_nav_cmd", 25),
    ("real_r1_pro_sharpa_relative_eef", 26),
    ("real_r1_pro_sharpa_relative_eef_human", 26),
    ("real_r1_pro_sharpa_relative_eef_maxinsights", 26),
    ("real_r1_pro_sharpa_relative_eef_mecka", 26),
    ("xdof_relative_eef_relative_joint", 27),
    ("xdof_relative_eef_relative_joint_subtask", 27),
];

/// `processor_kwargs` of `processor_config.json` (Gr00tN1d7Processor), the fields inference uses.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ProcessorConfig {
    /// Per embodiment tag: video/state/action/language modality configs.
    pub modality_configs: BTreeMap<String, ModalityConfigs>,
    /// torchvision `Resize` size ([h, w] or [shorter side]); albumentations' fallback edge.
    pub image_target_size: Option<Vec<usize>>,
    /// torchvision `CenterCrop` size ([h, w] or [side]); albumentations' fallback fraction.
    pub image_crop_size: Option<Vec<usize>>,
    /// Eval transform: albumentations (true) or torchvision (false, upstream's default when
    /// the key is missing).
    pub use_albumentations: bool,
    /// albumentations SmallestMaxSize target (missing: upstream's default 256; null: fallback).
    pub shortest_image_edge: Option<usize>,
    /// albumentations centre-crop fraction (missing: upstream's default 0.95; null: fallback).
    pub crop_fraction: Option<f64>,
    /// Pad every frame to a square with black first.
    pub letter_box_transform: bool,
    /// Lower-case and strip punctuation.
    pub formalize_language: bool,
    /// Padded state width.
    pub max_state_dim: usize,
    /// Padded action width.
    pub max_action_dim: usize,
    /// Action chunk length.
    pub max_action_horizon: usize,
    /// q01/q99 instead of min/max.
    pub use_percentiles: bool,
    /// Clip normalised state to [−1, 1].
    pub clip_outliers: bool,
    /// Relative action groups are converted to absolute.
    pub use_relative_action: bool,
    /// The whole state is zeroed before the model sees it.
    pub exclude_state: bool,
    /// sin/cos state encoding of the state config's `sin_cos_embedding_keys`.
    pub apply_sincos_state_encoding: bool,
    /// Tactile inputs (newer upstream; refused: the model module is not ported).
    pub use_tactile: bool,
}

impl Default for ProcessorConfig {
    fn default() -> Self {
        ProcessorConfig {
            modality_configs: BTreeMap::new(),
            image_target_size: None,
            image_crop_size: None,
            // Gr00tN1d7Processor.__init__'s defaults, which a missing key gets upstream.
            use_albumentations: false,
            shortest_image_edge: Some(256),
            crop_fraction: Some(0.95),
            letter_box_transform: false,
            formalize_language: true,
            max_state_dim: 132,
            max_action_dim: 132,
            max_action_horizon: 40,
            use_percentiles: true,
            clip_outliers: true,
            use_relative_action: true,
            exclude_state: false,
            apply_sincos_state_encoding: false,
            use_tactile: false,
        }
    }
}

/// Modality configs of one embodiment.
#[derive(Debug, Clone, Deserialize)]
pub struct ModalityConfigs {
    /// Cameras and frame offsets.
    pub video: ModalityConfig,
    /// State keys.
    pub state: ModalityConfig,
    /// Action keys, horizon and per-key representation.
    pub action: ModalityConfig,
    /// Language key.
    pub language: ModalityConfig,
}

/// One modality of a modality config.
#[derive(Debug, Clone, Deserialize)]
pub struct ModalityConfig {
    /// Frame/step offsets.
    pub delta_indices: Vec<i64>,
    /// Keys in order.
    pub modality_keys: Vec<String>,
    /// Per-key action representation (action modality only).
    #[serde(default)]
    pub action_configs: Option<Vec<ActionConfig>>,
    /// Keys encoded as `[sin(x), cos(x)]` (state; only with `apply_sincos_state_encoding`).
    #[serde(default)]
    pub sin_cos_embedding_keys: Option<Vec<String>>,
    /// Keys normalised by mean/std instead of min/max (state or action).
    #[serde(default)]
    pub mean_std_embedding_keys: Option<Vec<String>>,
}

impl ModalityConfig {
    /// Whether `key` is listed in `mean_std_embedding_keys`.
    pub fn is_mean_std(&self, key: &str) -> bool {
        self.mean_std_embedding_keys
            .as_ref()
            .is_some_and(|k| k.iter().any(|k| k == key))
    }

    /// Whether `key` is listed in `sin_cos_embedding_keys`.
    pub fn is_sin_cos(&self, key: &str) -> bool {
        self.sin_cos_embedding_keys
            .as_ref()
            .is_some_and(|k| k.iter().any(|k| k == key))
    }
}

/// How one action key is represented.
#[derive(Debug, Clone, Deserialize)]
pub struct ActionConfig {
    /// `RELATIVE` or `ABSOLUTE`.
    pub rep: String,
    /// `EEF` or `NON_EEF`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `XYZ_ROT6D` or `DEFAULT`.
    pub format: String,
    /// State key the relative action refers to.
    #[serde(default)]
    pub state_key: Option<String>,
}

/// Statistics of one key: every field is a list of rows (one row for flat stats, one row per
/// horizon step for per-step relative-action stats).
#[derive(Debug, Clone)]
pub struct KeyStats {
    /// Minimum.
    pub min: Vec<Vec<f64>>,
    /// Maximum.
    pub max: Vec<Vec<f64>>,
    /// 1st percentile.
    pub q01: Vec<Vec<f64>>,
    /// 99th percentile.
    pub q99: Vec<Vec<f64>>,
    /// Mean (empty when the file has none).
    pub mean: Vec<Vec<f64>>,
    /// Standard deviation (empty when the file has none).
    pub std: Vec<Vec<f64>>,
}

impl KeyStats {
    /// Width of the key (number of dims).
    pub fn dim(&self) -> usize {
        self.min.first().map_or(0, |r| r.len())
    }
}

/// `statistics.json` as parsed: tag → group → key → field → JSON value.
type RawStatistics =
    BTreeMap<String, BTreeMap<String, BTreeMap<String, BTreeMap<String, serde_json::Value>>>>;

/// `statistics.json`: tag → group (`state`, `action`, `relative_action`) → key → stats.
#[derive(Debug, Clone, Default)]
pub struct Statistics {
    /// The parsed table.
    pub by_tag: BTreeMap<String, BTreeMap<String, BTreeMap<String, KeyStats>>>,
    /// Where it was read from (for error messages).
    pub path: PathBuf,
}

impl Statistics {
    /// Parses `statistics.json`.
    pub fn from_file(path: &Path) -> Result<Statistics> {
        let raw: RawStatistics = read_json(path)?;
        let mut by_tag = BTreeMap::new();
        for (tag, groups) in raw {
            let mut g_out = BTreeMap::new();
            for (group, keys) in groups {
                let mut k_out = BTreeMap::new();
                for (key, fields) in keys {
                    let field = |f: &str| -> Result<Vec<Vec<f64>>> {
                        let v = fields.get(f).ok_or_else(|| {
                            Error::file(path, format!("{tag}.{group}.{key} has no field {f:?}"))
                        })?;
                        rows(v).ok_or_else(|| {
                            Error::file(
                                path,
                                format!(
                                    "{tag}.{group}.{key}.{f} is not a list of numbers (or of rows)"
                                ),
                            )
                        })
                    };
                    // mean/std are read only for mean/std keys, which check they exist.
                    let optional = |f: &str| -> Result<Vec<Vec<f64>>> {
                        if fields.contains_key(f) {
                            field(f)
                        } else {
                            Ok(Vec::new())
                        }
                    };
                    let s = KeyStats {
                        min: field("min")?,
                        max: field("max")?,
                        q01: field("q01")?,
                        q99: field("q99")?,
                        mean: optional("mean")?,
                        std: optional("std")?,
                    };
                    // Zero-width keys (every list empty) exist in released checkpoints.
                    let d = s.dim();
                    let rows_of = |f: &Vec<Vec<f64>>| f.len();
                    let ok = [&s.min, &s.max, &s.q01, &s.q99]
                        .iter()
                        .all(|f| !f.is_empty() && f.iter().all(|r| r.len() == d))
                        && [&s.mean, &s.std].iter().all(|f| {
                            f.is_empty()
                                || (rows_of(f) == rows_of(&s.min) && f.iter().all(|r| r.len() == d))
                        });
                    if !ok {
                        return Err(Error::file(
                            path,
                            format!("{tag}.{group}.{key}: inconsistent widths"),
                        ));
                    }
                    k_out.insert(key, s);
                }
                g_out.insert(group, k_out);
            }
            by_tag.insert(tag, g_out);
        }
        Ok(Statistics {
            by_tag,
            path: path.to_path_buf(),
        })
    }

    /// Stats of `tag` / `group` / `key`, or an error naming the file and the missing entry.
    pub fn get(&self, tag: &str, group: &str, key: &str) -> Result<&KeyStats> {
        self.by_tag
            .get(tag)
            .and_then(|g| g.get(group))
            .and_then(|k| k.get(key))
            .ok_or_else(|| {
                Error::file(&self.path, format!("no statistics for {tag}.{group}.{key}"))
            })
    }
}

fn rows(v: &serde_json::Value) -> Option<Vec<Vec<f64>>> {
    let arr = v.as_array()?;
    if arr.iter().all(|x| x.is_number()) {
        return Some(vec![arr
            .iter()
            .map(|x| x.as_f64())
            .collect::<Option<Vec<_>>>()?]);
    }
    arr.iter()
        .map(|r| {
            r.as_array()?
                .iter()
                .map(|x| x.as_f64())
                .collect::<Option<Vec<_>>>()
        })
        .collect()
}
