//! Checkpoint loading: the tiny fixture checkpoint opens with its real layout, and every
//! missing or malformed file is reported with its name and what is wrong.

use gr00t_model::checkpoint::{Checkpoint, WEIGHTS_FILE};
use std::path::{Path, PathBuf};

/// A scratch copy of the tiny checkpoint that a test may break.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("gr00t-ckpt-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        copy_dir(&gr00t_fixtures::tiny_checkpoint(), &dir);
        Scratch(dir)
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
    fn open_err(&self) -> String {
        Checkpoint::open(&self.0)
            .expect_err("open should fail")
            .to_string()
    }
    /// Opening fails with an error that names every one of `needles`.
    fn assert_refused(&self, needles: &[&str]) {
        let err = self.open_err();
        assert!(
            needles.iter().all(|n| err.contains(n)),
            "{err} (should name {needles:?})"
        );
    }
    /// Writes `contents` to `rel`, then [`Scratch::assert_refused`].
    fn write_refused(&self, rel: &str, contents: impl AsRef<[u8]>, needles: &[&str]) {
        std::fs::write(self.path(rel), contents).unwrap();
        self.assert_refused(needles);
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
            let mut perm = std::fs::metadata(&dst).unwrap().permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            perm.set_readonly(false);
            std::fs::set_permissions(&dst, perm).unwrap();
        }
    }
}

#[test]
fn tiny_checkpoint_opens_with_released_layout() {
    let ck = Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
    // config.json values win over class defaults (select_layer default 12, DiT 16 layers).
    assert_eq!(ck.config.select_layer, 4);
    assert_eq!(ck.config.diffusion_model_cfg.num_layers, 8);
    assert_eq!(ck.config.diffusion_model_cfg.inner_dim(), 96);
    assert_eq!(ck.config.vl_self_attention().unwrap().num_layers, 2);
    assert_eq!(ck.config.backbone_embedding_dim, 32);
    assert!(!ck.is_synthetic());
    // backbone/config.json overrides the built-in Qwen3-VL-2B architecture.
    assert_eq!(ck.backbone.vision_config.depth, 8);
    assert_eq!(
        ck.backbone.vision_config.deepstack_visual_indexes,
        vec![1, 3, 5]
    );
    assert_eq!(
        ck.backbone.text_config.rope_scaling.mrope_section,
        vec![4, 2, 2]
    );
    assert_eq!(ck.image_processor.size.shortest_edge, 65536);
    assert_eq!(ck.processor.shortest_image_edge, Some(256));
    assert_eq!(ck.processor.crop_fraction, Some(0.95));
    assert_eq!(
        ck.embodiment_id("oxe_droid_relative_eef_relative_joint")
            .unwrap(),
        24
    );
    let modality = &ck.processor.modality_configs["oxe_droid_relative_eef_relative_joint"];
    assert_eq!(modality.video.delta_indices, vec![-15, 0]);
    assert_eq!(modality.action.delta_indices.len(), 40);
    let stats = ck
        .statistics
        .get(
            "oxe_droid_relative_eef_relative_joint",
            "relative_action",
            "eef_9d",
        )
        .unwrap();
    assert_eq!(stats.dim(), 9);
    assert_eq!(ck.weight_files.len(), 1);
    assert_eq!(ck.tensor_dtypes.len(), 338, "README: 338 tensors");
    assert!(ck
        .tensor_dtypes
        .values()
        .all(|d| *d == candle_core::DType::BF16));
}

#[test]
fn builtin_backbone_is_qwen3_vl_2b() {
    let b = gr00t_model::BackboneConfig::default();
    assert_eq!(
        (
            b.text_config.hidden_size,
            b.text_config.num_attention_heads,
            b.text_config.num_key_value_heads
        ),
        (2048, 16, 8)
    );
    assert_eq!(b.vision_config.deepstack_visual_indexes, vec![5, 11, 17]);
    assert_eq!(b.vision_config.patch_dim(), 1536);
    let released = gr00t_model::Gr00tConfig::released_n17_3b();
    assert_eq!(released.select_layer, 16);
    assert_eq!(released.diffusion_model_cfg.num_layers, 32);
}

#[test]
fn weights_var_builder_converts_bf16_to_f32() {
    let ck = Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
    let vb = ck
        .var_builder(candle_core::DType::F32, &candle_core::Device::Cpu)
        .unwrap();
    let t = vb
        .get((2304, 64), "backbone.model.model.visual.pos_embed.weight")
        .unwrap();
    assert_eq!(t.dtype(), candle_core::DType::F32);
    // Values were rounded to bf16, so the low 16 bits of every f32 are zero.
    let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert!(v.iter().all(|x| x.to_bits() & 0xFFFF == 0));
    assert!(v.iter().any(|x| *x != 0.0));
}

#[test]
fn missing_folder() {
    let err = Checkpoint::open("/nonexistent/gr00t")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("/nonexistent/gr00t") && err.contains("does not exist"),
        "{err}"
    );
}

#[test]
fn missing_and_malformed_config() {
    let s = Scratch::new("cfg");
    std::fs::remove_file(s.path("config.json")).unwrap();
    s.assert_refused(&["config.json", "cannot read"]);
    s.write_refused(
        "config.json",
        "{\"select_layer\": \"four\"}",
        &["config.json", "malformed JSON", "select_layer"],
    );
    s.write_refused(
        "config.json",
        "{\"model_type\": \"Gr00tN1d5\"}",
        &["config.json", "Gr00tN1d5"],
    );
}

#[test]
fn a_lerobot_format_policy_is_named_as_such() {
    let dir = std::env::temp_dir().join(format!("gr00t-ckpt-lerobot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.json"),
        r#"{"type": "groot", "chunk_size": 40}"#,
    )
    .unwrap();
    std::fs::write(dir.join("policy_preprocessor.json"), r#"{"steps": []}"#).unwrap();
    std::fs::write(dir.join("model.safetensors"), b"").unwrap();
    let err = Checkpoint::open(&dir).unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        err.contains("LeRobot-format policy") && err.contains("--lerobot-map"),
        "{err}"
    );
}

#[test]
fn missing_side_files() {
    for file in ["processor_config.json", "statistics.json"] {
        let s = Scratch::new("side");
        std::fs::remove_file(s.path(file)).unwrap();
        s.assert_refused(&[file]);
    }
}

#[test]
fn malformed_statistics() {
    let s = Scratch::new("stats");
    let text = std::fs::read_to_string(s.path("statistics.json")).unwrap();
    let broken = text.replacen("\"q99\"", "\"q98\"", 1);
    s.write_refused("statistics.json", broken, &["statistics.json", "q99"]);
}

#[test]
fn processor_subfolder_fallback() {
    let s = Scratch::new("procdir");
    std::fs::create_dir_all(s.path("processor")).unwrap();
    for f in [
        "processor_config.json",
        "statistics.json",
        "embodiment_id.json",
    ] {
        std::fs::rename(s.path(f), s.path(&format!("processor/{f}"))).unwrap();
    }
    let ck = Checkpoint::open(&s.0).unwrap();
    assert_eq!(
        ck.embodiment_id("oxe_droid_relative_eef_relative_joint")
            .unwrap(),
        24
    );
}

#[test]
fn missing_weights_and_shards() {
    let s = Scratch::new("weights");
    std::fs::rename(
        s.path(WEIGHTS_FILE),
        s.path("model-00001-of-00001.safetensors"),
    )
    .unwrap();
    s.assert_refused(&[WEIGHTS_FILE, "missing"]);
    // A shard index pointing at the renamed file works.
    let index = r#"{"metadata": {}, "weight_map": {"a": "model-00001-of-00001.safetensors"}}"#;
    std::fs::write(s.path("model.safetensors.index.json"), index).unwrap();
    let ck = Checkpoint::open(&s.0).unwrap();
    assert_eq!(ck.weight_files.len(), 1);
    // A shard listed but absent is named.
    let index = r#"{"weight_map": {"a": "model-00001-of-00001.safetensors", "b": "model-00002-of-00002.safetensors"}}"#;
    s.write_refused(
        "model.safetensors.index.json",
        index,
        &["model-00002-of-00002.safetensors", "missing"],
    );
}

#[test]
fn truncated_and_non_safetensors_weights() {
    let s = Scratch::new("trunc");
    s.write_refused(WEIGHTS_FILE, b"abc", &[WEIGHTS_FILE, "not a safetensors"]);
    let bytes = std::fs::read(gr00t_fixtures::tiny_checkpoint().join(WEIGHTS_FILE)).unwrap();
    s.write_refused(WEIGHTS_FILE, &bytes[..1000], &[WEIGHTS_FILE]);
}

#[test]
fn too_few_llm_layers_for_select_layer() {
    let s = Scratch::new("layers");
    let text = std::fs::read_to_string(s.path("config.json")).unwrap();
    s.write_refused(
        "config.json",
        text.replace("\"select_layer\": 4", "\"select_layer\": 5"),
        &["select_layer is 5", "layer 4"],
    );
}

#[test]
fn digest_identifies_weights() {
    let ck = Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
    let d = ck.digest().unwrap();
    assert_eq!(d.len(), 64);
    assert_eq!(d, ck.digest().unwrap());
    // Same layout, one changed weight byte in the middle of the data: a different digest.
    let s = Scratch::new("digest");
    let path = s.path(WEIGHTS_FILE);
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    // Sample 32 of 64 starts at (len - 64 KiB)·32/63; flip a byte inside it.
    let len = bytes.len() as u64;
    let off = ((len - 65536) * 32 / 63) as usize + 10;
    assert!(off < bytes.len() && mid > 0);
    bytes[off] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let other = Checkpoint::open(&s.0).unwrap().digest().unwrap();
    assert_ne!(d, other);
}

#[test]
fn embodiment_ids_come_from_the_file_then_the_code_table() {
    // Without the file, upstream's code table.
    let s = Scratch::new("ids-none");
    std::fs::remove_file(s.path("embodiment_id.json")).unwrap();
    let ckpt = Checkpoint::open(&s.0).unwrap();
    assert_eq!(
        ckpt.embodiment_id("oxe_droid_relative_eef_relative_joint")
            .unwrap(),
        24
    );
    assert_eq!(ckpt.embodiment_id("new_embodiment").unwrap(), 10);
    // The file wins on conflict (the released file says robocasa_panda_omron 13, the code 10),
    // and tags it lacks are filled in from the code.
    let s = Scratch::new("ids-file");
    std::fs::write(
        s.path("embodiment_id.json"),
        r#"{"oxe_droid_relative_eef_relative_joint": 24, "robocasa_panda_omron": 13}"#,
    )
    .unwrap();
    let ckpt = Checkpoint::open(&s.0).unwrap();
    assert_eq!(ckpt.embodiment_id("robocasa_panda_omron").unwrap(), 13);
    assert_eq!(ckpt.embodiment_id("libero_sim").unwrap(), 2);
    // An index past the model's projector slots is refused, naming the file.
    s.write_refused(
        "embodiment_id.json",
        r#"{"my_robot": 32}"#,
        &["embodiment_id.json", "my_robot", "32"],
    );
}

#[test]
fn tactile_and_other_processor_classes_are_refused() {
    let s = Scratch::new("tactile");
    let text = std::fs::read_to_string(s.path("processor_config.json")).unwrap();
    let tactile = text.replacen(
        "\"exclude_state\"",
        "\"use_tactile\": true, \"exclude_state\"",
        1,
    );
    assert_ne!(tactile, text);
    s.write_refused(
        "processor_config.json",
        tactile,
        &["processor_config.json", "use_tactile"],
    );
    let n16 = text.replacen("Gr00tN1d7Processor", "Gr00tN1d6Processor", 1);
    assert_ne!(n16, text);
    s.write_refused("processor_config.json", n16, &["Gr00tN1d6Processor"]);
}

#[test]
fn missing_image_keys_take_upstream_constructor_defaults_and_null_clears() {
    let s = Scratch::new("image-defaults");
    let path = s.path("processor_config.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let kw = v["processor_kwargs"].as_object_mut().unwrap();
    for key in [
        "use_albumentations",
        "shortest_image_edge",
        "crop_fraction",
        "letter_box_transform",
    ] {
        assert!(kw.remove(key).is_some(), "{key}");
    }
    std::fs::write(&path, v.to_string()).unwrap();
    let p = Checkpoint::open(&s.0).unwrap().processor;
    // Gr00tN1d7Processor.__init__: torchvision, 256, 0.95, no letterbox.
    assert!(!p.use_albumentations && !p.letter_box_transform);
    assert_eq!(
        (p.shortest_image_edge, p.crop_fraction),
        (Some(256), Some(0.95))
    );

    let kw = v["processor_kwargs"].as_object_mut().unwrap();
    kw.insert("shortest_image_edge".into(), serde_json::Value::Null);
    kw.insert("crop_fraction".into(), serde_json::Value::Null);
    kw.insert("letter_box_transform".into(), true.into());
    std::fs::write(&path, v.to_string()).unwrap();
    let p = Checkpoint::open(&s.0).unwrap().processor;
    assert_eq!((p.shortest_image_edge, p.crop_fraction), (None, None));
    assert!(p.letter_box_transform);
}
