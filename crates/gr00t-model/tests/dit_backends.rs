//! The two denoise backends (upstream-shaped "reference" and hoisted "fused") compute the same
//! function: on every fixture case, from the fixture's `backbone.features`, their `action_pred`
//! agree to Pearson r ≥ 0.999999 and each stays at parity with the golden `head.action_pred`.

use candle_core::{DType, Device, Tensor};
use gr00t_fixtures::{
    assert_tap_close, flat_f32, max_abs, max_abs_diff, pearson, tiny_checkpoint, Taps, CASES,
};
use gr00t_model::action_head::{ActionHead, DenoiseBackend};
use gr00t_model::taps::Recorder;
use gr00t_model::Checkpoint;

/// Gate between the backends (the bound).
const BACKENDS_MIN_R: f64 = 0.999999;
/// Gate against the fixtures (the crate's usual parity bound).
const FIXTURE_MIN_R: f64 = 0.99999;
const FIXTURE_REL: f32 = 1e-3;

fn load_head(backend: DenoiseBackend) -> ActionHead {
    let ckpt = Checkpoint::open(tiny_checkpoint()).expect("tiny checkpoint");
    let vb = ckpt
        .var_builder(DType::F32, &Device::Cpu)
        .expect("var builder");
    let mut head = ActionHead::load(vb.pp("action_head"), &ckpt.config).expect("action head");
    head.set_backend(backend);
    assert_eq!(head.backend(), backend);
    head
}

fn mask(taps: &Taps, name: &str) -> Vec<bool> {
    taps.i64s(name).iter().map(|&v| v != 0).collect()
}

/// `action_pred` of `head` on a case's fixture features, state and noise.
fn action_pred(head: &ActionHead, taps: &Taps, rec: &Recorder) -> Vec<f32> {
    let out: Tensor = head
        .get_action(
            &taps.get("backbone.features"),
            &mask(taps, "backbone.image_mask"),
            &mask(taps, "backbone.attention_mask"),
            &taps.get("proc.state"),
            taps.i64s("proc.embodiment_id")[0] as usize,
            &taps.get("input.noise"),
            rec,
        )
        .expect("get_action");
    assert_eq!(out.dims(), [1, 40, 132]);
    flat_f32(&out)
}

#[test]
fn default_backend_is_fused() {
    assert_eq!(DenoiseBackend::default(), DenoiseBackend::Fused);
    let ckpt = Checkpoint::open(tiny_checkpoint()).unwrap();
    let vb = ckpt.var_builder(DType::F32, &Device::Cpu).unwrap();
    let head = ActionHead::load(vb.pp("action_head"), &ckpt.config).unwrap();
    assert_eq!(head.backend(), DenoiseBackend::Fused);
}

#[test]
fn reference_and_fused_agree_on_every_case() {
    let fused = load_head(DenoiseBackend::Fused);
    let reference = load_head(DenoiseBackend::Reference);
    let off = Recorder::disabled();
    for case in CASES {
        let taps = Taps::load(case);
        let golden = taps.f32s("head.action_pred");
        let f = action_pred(&fused, &taps, &off);
        let r = action_pred(&reference, &taps, &off);
        let corr = pearson(&f, &r);
        let same_bits = f.iter().zip(&r).filter(|(a, b)| a.to_bits() == b.to_bits());
        eprintln!(
            "{case}: fused vs reference r = {corr:.9}, max|Δ| = {:.3e} (max|x| {:.3}), \
             {} of {} values bit-identical",
            max_abs_diff(&f, &r),
            max_abs(&f),
            same_bits.count(),
            f.len()
        );
        assert!(
            corr >= BACKENDS_MIN_R,
            "{case}: fused vs reference r = {corr}"
        );
        assert_tap_close("fused action_pred", &f, &golden, FIXTURE_MIN_R, FIXTURE_REL);
        assert_tap_close(
            "reference action_pred",
            &r,
            &golden,
            FIXTURE_MIN_R,
            FIXTURE_REL,
        );
    }
}

#[test]
fn reference_backend_records_the_step_taps_at_parity() {
    let reference = load_head(DenoiseBackend::Reference);
    let taps = Taps::load("case1");
    let rec = Recorder::enabled();
    action_pred(&reference, &taps, &rec);
    let mut checked = 0;
    for k in 0..4 {
        // The step taps (their shapes checked too), then the eight blocks' outputs.
        let steps = ["temb", "action_features", "sa_embs", "dit_out", "velocity"]
            .map(|tap| (format!("head.step{k}.{tap}"), true));
        let blocks = (0..8).map(|b| (format!("head.step{k}.dit_block_out.{b}"), false));
        for (name, check_dims) in steps.into_iter().chain(blocks) {
            let ours = rec
                .get(&name)
                .unwrap_or_else(|| panic!("{name} not recorded"));
            if check_dims {
                assert_eq!(ours.dims(), taps.dims(&name).as_slice(), "{name}");
            }
            assert_tap_close(
                &name,
                &flat_f32(&ours),
                &taps.f32s(&name),
                FIXTURE_MIN_R,
                FIXTURE_REL,
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 4 * (5 + 8));
}
