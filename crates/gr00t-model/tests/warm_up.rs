//! The start-up warm-up pass (`Gr00tModel::warm_up_pass`): the smallest inputs run through
//! every stage, for any embodiment slot, without leaving a trace a request could see (the
//! vision cache untouched, the next answer bit-identical to a model that never warmed up).

mod common;

use candle_core::Device;
use gr00t_fixtures::Taps;
use gr00t_model::taps::Recorder;
use gr00t_model::vision_cache::VisionCacheStats;
use gr00t_model::{Checkpoint, Gr00tModel};

fn load(checkpoint: std::path::PathBuf) -> Gr00tModel {
    let ck = Checkpoint::open(checkpoint).unwrap();
    let model = Gr00tModel::load(&ck, &Device::Cpu).unwrap();
    model.set_vision_cache_capacity(8);
    model
}

#[test]
fn the_pass_runs_every_stage_and_changes_no_answer() {
    let (warmed, fresh) = (
        load(gr00t_fixtures::tiny_checkpoint()),
        load(gr00t_fixtures::tiny_checkpoint()),
    );
    let case0 = common::model_inputs(&Taps::load("case0"));
    let t = warmed.warm_up_pass(case0.embodiment_id).unwrap();
    for (stage, ms) in [
        ("vision", t.vision_ms),
        ("llm", t.llm_ms),
        ("adapter", t.adapter_ms),
        ("denoise", t.denoise_ms),
    ] {
        assert!(ms > 0.0, "{stage} did not run ({ms} ms)");
    }
    assert_eq!(
        warmed.vision_cache_stats(),
        VisionCacheStats {
            capacity: 8,
            ..VisionCacheStats::default()
        },
        "the pass went through the vision cache"
    );
    let a = warmed.forward(&case0, &Recorder::disabled()).unwrap();
    let b = fresh.forward(&case0, &Recorder::disabled()).unwrap();
    assert_eq!(
        a.action_pred
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>(),
        b.action_pred
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>(),
        "an answer after the pass differs from a cold model's"
    );
}

#[test]
fn minimal_inputs_are_one_merged_image_token_for_every_embodiment() {
    let model = load(gr00t_fixtures::multi_checkpoint());
    let cfg = model.config().clone();
    for id in [0, 24, 25, 26, 27, cfg.max_num_embodiments - 1] {
        let x = model.minimal_inputs(id);
        assert_eq!(x.image_grid_thw, vec![[1, 2, 2]], "one 2×2-patch image");
        assert_eq!(x.pixel_values.len(), 4 * x.patch_dim);
        assert_eq!(
            x.input_ids.len(),
            3,
            "vision start, one image pad, vision end"
        );
        let out = model.forward(&x, &Recorder::disabled()).unwrap();
        assert_eq!(
            out.action_pred.len(),
            cfg.action_horizon * cfg.max_action_dim,
            "embodiment {id}"
        );
        assert!(
            out.action_pred.iter().all(|v| v.is_finite()),
            "embodiment {id}: non-finite actions"
        );
        assert_eq!(out.seq_len, 3);
    }
}
