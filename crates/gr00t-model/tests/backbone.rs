//! Parity of the backbone (Qwen3-VL vision tower + truncated LLM) with the golden taps: every
//! stage fed the fixture's own input, and the chains end to end.

use candle_core::{DType, Device, Tensor};
use gr00t_fixtures::{
    assert_tap_close, flat_f32, max_abs, max_abs_diff, pearson, tiny_checkpoint, Taps, CASES,
};
use gr00t_model::backbone::Backbone;
use gr00t_model::taps::Recorder;
use gr00t_model::text::rope_index;
use gr00t_model::{Checkpoint, Error};
use std::sync::OnceLock;

const MIN_R: f64 = 0.99999;
const REL: f32 = 1e-3;

struct Model {
    ckpt: Checkpoint,
    backbone: Backbone,
}

fn model() -> &'static Model {
    static MODEL: OnceLock<Model> = OnceLock::new();
    MODEL.get_or_init(|| {
        let ckpt = Checkpoint::open(tiny_checkpoint()).expect("tiny checkpoint");
        let vb = ckpt
            .var_builder(DType::F32, &Device::Cpu)
            .expect("var builder");
        let backbone =
            Backbone::load(vb, &ckpt.backbone, ckpt.config.select_layer).expect("backbone");
        Model { ckpt, backbone }
    })
}

fn grid(taps: &Taps) -> Vec<[usize; 3]> {
    taps.i64s("proc.image_grid_thw")
        .chunks(3)
        .map(|g| [g[0] as usize, g[1] as usize, g[2] as usize])
        .collect()
}

fn input_ids(taps: &Taps) -> Vec<u32> {
    taps.i64s("proc.input_ids")
        .iter()
        .map(|&i| i as u32)
        .collect()
}

/// Compares `ours` with tap `name` (same shape, gate r ≥ 0.99999 and max|Δ| ≤ 1e-3·max|ref|)
/// and prints the measured numbers.
fn check(case: &str, taps: &Taps, name: &str, ours: &Tensor) {
    assert_eq!(
        ours.dims(),
        taps.dims(name).as_slice(),
        "{case} {name}: shape"
    );
    let (a, b) = (flat_f32(ours), taps.f32s(name));
    let r = pearson(&a, &b);
    let rel = max_abs_diff(&a, &b) / max_abs(&b);
    println!(
        "{case:5} {name:28} 1−r = {:.1e}  max|Δ|/max|ref| = {rel:.2e}",
        1.0 - r
    );
    assert_tap_close(&format!("{case} {name}"), &a, &b, MIN_R, REL);
}

/// Compares every float tap in `names` recorded by `rec` with the fixture.
fn check_recorded(case: &str, taps: &Taps, rec: &Recorder, names: &[String]) {
    for name in names {
        let t = rec
            .get(name)
            .unwrap_or_else(|| panic!("{case}: tap {name} not recorded"));
        check(case, taps, name, &t);
    }
}

/// Integer and mask taps recorded by the backbone, compared exactly.
fn check_integer_taps(case: &str, taps: &Taps, rec: &Recorder) {
    for name in ["llm.position_ids", "backbone.rope_deltas"] {
        let t = rec.get(name).unwrap();
        assert_eq!(t.dims(), taps.dims(name).as_slice(), "{case} {name}: shape");
        let ours = t.flatten_all().unwrap().to_vec1::<i64>().unwrap();
        assert_eq!(ours, taps.i64s(name), "{case} {name}");
    }
    for name in [
        "llm.visual_pos_mask",
        "backbone.image_mask",
        "backbone.attention_mask",
    ] {
        let t = rec.get(name).unwrap();
        assert_eq!(t.dims(), taps.dims(name).as_slice(), "{case} {name}: shape");
        let ours = t.flatten_all().unwrap().to_vec1::<u8>().unwrap();
        assert_eq!(ours, taps.u8s(name), "{case} {name}");
    }
}

fn llm_tap_names(layers: usize) -> Vec<String> {
    let mut names = vec!["llm.inputs_embeds".to_string()];
    for l in 0..layers {
        names.push(format!("llm.layer_in.{l}"));
        names.push(format!("llm.layer_out.{l}"));
    }
    names.push("backbone.features".into());
    names
}

fn vision_tap_names(depth: usize) -> Vec<String> {
    let mut names = vec![
        "vision.patch_embed_out".to_string(),
        "vision.pos_embed_interp".to_string(),
    ];
    names.extend((0..depth).map(|i| format!("vision.block_out.{i}")));
    names.extend((0..3).map(|k| format!("vision.deepstack.{k}")));
    names.push("vision.merger_out".into());
    names
}

fn deepstack(taps: &Taps) -> Vec<Tensor> {
    (0..3)
        .map(|k| taps.get(&format!("vision.deepstack.{k}")))
        .collect()
}

#[test]
fn vision_stages_from_fixture_inputs() {
    let m = model();
    let vision = m.backbone.vision();
    let taps = Taps::load("case0");
    let grid = grid(&taps);
    let pe = vision.patch_embed(&taps.get("proc.pixel_values")).unwrap();
    check("case0", &taps, "vision.patch_embed_out", &pe);
    let pos = vision.pos_embed_interp(&grid).unwrap();
    check("case0", &taps, "vision.pos_embed_interp", &pos);
    let positions = vision.positions(&grid).unwrap();
    let mut input =
        (taps.get("vision.patch_embed_out") + taps.get("vision.pos_embed_interp")).unwrap();
    for (i, block) in vision.blocks().iter().enumerate() {
        let name = format!("vision.block_out.{i}");
        check(
            "case0",
            &taps,
            &name,
            &block.forward(&input, &positions).unwrap(),
        );
        input = taps.get(&name);
    }
    let depth = vision.blocks().len();
    let merged = vision
        .merger()
        .forward(&taps.get(&format!("vision.block_out.{}", depth - 1)))
        .unwrap();
    check("case0", &taps, "vision.merger_out", &merged);
    let indexes = &m.ckpt.backbone.vision_config.deepstack_visual_indexes;
    for (k, (&i, merger)) in indexes.iter().zip(vision.deepstack_mergers()).enumerate() {
        let ds = merger
            .forward(&taps.get(&format!("vision.block_out.{i}")))
            .unwrap();
        check("case0", &taps, &format!("vision.deepstack.{k}"), &ds);
    }
}

#[test]
fn vision_end_to_end_case0() {
    let m = model();
    let taps = Taps::load("case0");
    let rec = Recorder::enabled();
    let out = m
        .backbone
        .vision()
        .forward(&taps.get("proc.pixel_values"), &grid(&taps), &rec)
        .unwrap();
    check("case0", &taps, "vision.merger_out", &out.image_embeds);
    assert_eq!(out.deepstack.len(), 3);
    check_recorded(
        "case0",
        &taps,
        &rec,
        &vision_tap_names(m.backbone.vision().blocks().len()),
    );
}

#[test]
fn rope_index_matches_all_cases() {
    let cfg = &model().ckpt.backbone;
    for case in CASES {
        let taps = Taps::load(case);
        let ids = input_ids(&taps);
        let (pos, delta) = rope_index(
            &ids,
            &grid(&taps),
            cfg.vision_config.spatial_merge_size,
            cfg.image_token_id,
            cfg.vision_start_token_id,
        )
        .unwrap();
        assert_eq!(
            pos.concat(),
            taps.i64s("llm.position_ids"),
            "{case} positions"
        );
        assert_eq!(
            vec![delta],
            taps.i64s("backbone.rope_deltas"),
            "{case} rope delta"
        );
        assert_eq!(
            delta, -392,
            "{case}: README states −392 for 448 image tokens"
        );
    }
}

#[test]
fn llm_layers_from_fixture_inputs_all_cases() {
    let m = model();
    let text = m.backbone.text();
    let cfg = &m.ckpt.backbone;
    for case in CASES {
        let taps = Taps::load(case);
        let ids = input_ids(&taps);
        let mask: Vec<bool> = ids.iter().map(|&i| i == cfg.image_token_id).collect();
        let embeds = text.embed(&ids).unwrap();
        let inputs = text
            .scatter_image_embeds(&embeds, &mask, &taps.get("vision.merger_out"))
            .unwrap();
        check(case, &taps, "llm.inputs_embeds", &inputs);
        let (pos, _) = rope_index(
            &ids,
            &grid(&taps),
            2,
            cfg.image_token_id,
            cfg.vision_start_token_id,
        )
        .unwrap();
        let ctx = text.positions(&pos).unwrap();
        for (l, layer) in text.layers().iter().enumerate() {
            let out = layer
                .forward(&taps.get(&format!("llm.layer_in.{l}")), &ctx)
                .unwrap();
            check(case, &taps, &format!("llm.layer_out.{l}"), &out);
        }
    }
}

#[test]
fn backbone_from_merger_out_all_cases() {
    let m = model();
    for case in CASES {
        let taps = Taps::load(case);
        let rec = Recorder::enabled();
        let out = m
            .backbone
            .forward_with_image_embeds(
                &input_ids(&taps),
                &grid(&taps),
                &taps.get("vision.merger_out"),
                &deepstack(&taps),
                &rec,
            )
            .unwrap();
        check(case, &taps, "backbone.features", &out.features);
        check_recorded(
            case,
            &taps,
            &rec,
            &llm_tap_names(m.backbone.text().layers().len()),
        );
        check_integer_taps(case, &taps, &rec);
        let image: Vec<u8> = out.image_mask.iter().map(|&b| u8::from(b)).collect();
        assert_eq!(image, taps.u8s("backbone.image_mask"), "{case} image mask");
        assert_eq!(
            image.iter().filter(|&&b| b == 1).count(),
            448,
            "{case}: README states 448 image tokens"
        );
        let attn: Vec<u8> = out.attention_mask.iter().map(|&b| u8::from(b)).collect();
        assert_eq!(
            attn,
            taps.u8s("backbone.attention_mask"),
            "{case} attention mask"
        );
    }
}

#[test]
fn backbone_end_to_end_case0() {
    let m = model();
    let taps = Taps::load("case0");
    let rec = Recorder::enabled();
    let out = m
        .backbone
        .forward(
            &input_ids(&taps),
            &taps.get("proc.pixel_values"),
            &grid(&taps),
            &rec,
        )
        .unwrap();
    check("case0", &taps, "backbone.features", &out.features);
    let mut names = vision_tap_names(m.backbone.vision().blocks().len());
    names.extend(llm_tap_names(m.backbone.text().layers().len()));
    check_recorded("case0", &taps, &rec, &names);
    check_integer_taps("case0", &taps, &rec);
}

#[test]
fn backbone_rejects_inconsistent_inputs() {
    let m = model();
    let taps = Taps::load("case1");
    let mut ids = input_ids(&taps);
    let grid = grid(&taps);
    let embeds = taps.get("vision.merger_out");
    let rec = Recorder::disabled();
    // One image token too few: the count no longer matches the 448 merged rows.
    let pos = ids
        .iter()
        .position(|&i| i == m.ckpt.backbone.image_token_id)
        .unwrap();
    ids.remove(pos);
    let err = m
        .backbone
        .forward_with_image_embeds(&ids, &grid, &embeds, &deepstack(&taps), &rec);
    assert!(
        matches!(err, Err(Error::Input(_))),
        "token count mismatch must be an input error"
    );
    // pixel_values with the wrong number of rows.
    let pixels = Tensor::zeros((10, 1536), DType::F32, &Device::Cpu).unwrap();
    let err = m.backbone.forward(&input_ids(&taps), &pixels, &grid, &rec);
    assert!(
        matches!(err, Err(Error::Input(_))),
        "pixel row mismatch must be an input error"
    );
    // An odd grid cannot be merged 2×2.
    let err = m
        .backbone
        .forward(&input_ids(&taps), &pixels, &[[1, 5, 2]], &rec);
    assert!(
        matches!(err, Err(Error::Input(_))),
        "odd grid must be an input error"
    );
}

#[test]
fn text_only_prefix_matches_features() {
    // Causal attention: the 4 template tokens before the first image (`<|im_start|>user\n`
    // `<|vision_start|>`, positions 0..3) see nothing else, so a text-only run on them must
    // reproduce the first 4 feature rows of the full prompt.
    let m = model();
    for case in CASES {
        let taps = Taps::load(case);
        let ids = &input_ids(&taps)[..4];
        assert!(ids.iter().all(|&i| i != m.ckpt.backbone.image_token_id));
        let pixels = Tensor::zeros((0, 1536), DType::F32, &Device::Cpu).unwrap();
        let out = m
            .backbone
            .forward(ids, &pixels, &[], &Recorder::disabled())
            .unwrap();
        assert_eq!(out.image_mask, vec![false; 4]);
        let reference = taps.get("backbone.features").narrow(1, 0, 4).unwrap();
        let (a, b) = (flat_f32(&out.features), flat_f32(&reference));
        let rel = max_abs_diff(&a, &b) / max_abs(&b);
        println!(
            "{case:5} {:28} 1−r = {:.1e}  max|Δ|/max|ref| = {rel:.2e}",
            "features[:4] (text only)",
            1.0 - pearson(&a, &b)
        );
        assert_tap_close(&format!("{case} text-only prefix"), &a, &b, MIN_R, REL);
    }
}
