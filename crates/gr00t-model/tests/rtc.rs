//! Real-time chunking against goldens from NVIDIA's own `get_action_with_features`
//! (`tests/fixtures/rtc`, made by `tools/goldens/rtc_goldens.py`): `action_pred` within the
//! action gates on both denoise backends and through the whole network, the velocity ramp, the
//! frozen rows equal to the previous chunk exactly, no RTC bit-identical to the plain path, and
//! invalid options refused naming the field.

mod common;

use candle_core::{DType, Device, Tensor};
use gr00t_fixtures::{
    assert_tap_close, bit_exact_count, flat_f32, max_abs_diff, max_ulp_diff, rtc_goldens,
    tiny_checkpoint, Taps,
};
use gr00t_model::action_head::{ActionHead, DenoiseBackend};
use gr00t_model::taps::Recorder;
use gr00t_model::{Checkpoint, Error, Gr00tModel, Rtc, RtcField};

/// The chain tests' gates for actions: Pearson r and max |Δ| relative to max |ref|.
const MIN_R: f64 = 0.99999;
const REL: f32 = 1e-3;
const H: usize = 40;
const A: usize = 132;

struct Setting {
    name: String,
    rtc: Rtc,
}

/// The goldens' tensors and option sets, each as the model's `Rtc` on their previous chunk.
fn goldens() -> (Taps, Vec<Setting>) {
    let (taps, settings) = rtc_goldens();
    let prev = taps.f32s("previous_chunk");
    let settings = settings
        .into_iter()
        .map(|s| Setting {
            name: s.name,
            rtc: Rtc {
                previous_chunk: prev.clone(),
                action_horizon: s.action_horizon,
                overlap_steps: s.overlap_steps,
                frozen_steps: s.frozen_steps,
                ramp_rate: s.ramp_rate,
            },
        })
        .collect();
    (taps, settings)
}

/// The head on each denoise backend.
fn heads() -> impl Iterator<Item = (DenoiseBackend, ActionHead)> {
    [DenoiseBackend::Fused, DenoiseBackend::Reference]
        .into_iter()
        .map(|b| (b, load_head(b)))
}

fn load_head(backend: DenoiseBackend) -> ActionHead {
    let ckpt = Checkpoint::open(tiny_checkpoint()).unwrap();
    let vb = ckpt.var_builder(DType::F32, &Device::Cpu).unwrap();
    let mut head = ActionHead::load(vb.pp("action_head"), &ckpt.config).unwrap();
    head.set_backend(backend);
    head
}

fn mask(taps: &Taps, name: &str) -> Vec<bool> {
    taps.i64s(name).iter().map(|&v| v != 0).collect()
}

/// `action_pred` of the head on case0's fixture backbone outputs with `noise` and `rtc`.
fn run(head: &ActionHead, noise: &Tensor, rtc: Option<&Rtc>) -> gr00t_model::Result<Vec<f32>> {
    let case = Taps::load("case0");
    let out = head.get_action_with_rtc(
        &case.get("backbone.features"),
        &mask(&case, "backbone.image_mask"),
        &mask(&case, "backbone.attention_mask"),
        &case.get("proc.state"),
        case.i64s("proc.embodiment_id")[0] as usize,
        noise,
        rtc,
        &Recorder::disabled(),
    )?;
    assert_eq!(out.dims(), [1, H, A]);
    Ok(flat_f32(&out))
}

fn rows(x: &[f32], from: usize, n: usize) -> &[f32] {
    &x[from * A..(from + n) * A]
}

#[test]
fn action_pred_matches_upstream_on_both_backends() {
    let (g, settings) = goldens();
    let noise = g.get("noise");
    for (backend, head) in heads() {
        let plain = run(&head, &noise, None).unwrap();
        assert_tap_close("plain", &plain, &g.f32s("action_pred.plain"), MIN_R, REL);
        for s in &settings {
            let name = format!("action_pred.{}", s.name);
            let ours = run(&head, &noise, Some(&s.rtc)).unwrap();
            let golden = g.f32s(&name);
            println!(
                "{backend} {name}: max|Δ| {:.3e} (vs plain golden {:.3e})",
                max_abs_diff(&ours, &golden),
                max_abs_diff(&plain, &golden)
            );
            assert_tap_close(&format!("{backend} {name}"), &ours, &golden, MIN_R, REL);
            // RTC must change the answer well beyond the gate, or the test proves nothing.
            assert!(max_abs_diff(&plain, &golden) > 100.0 * REL);
        }
    }
}

#[test]
fn frozen_rows_equal_the_previous_chunk_exactly() {
    let (g, settings) = goldens();
    let prev = g.f32s("previous_chunk");
    for (backend, head) in heads() {
        for s in &settings {
            let r = &s.rtc;
            let ours = run(&head, &g.get("noise"), Some(r)).unwrap();
            let first = r.action_horizon - r.overlap_steps;
            assert_eq!(
                rows(&ours, 0, r.frozen_steps),
                rows(&prev, first, r.frozen_steps),
                "{backend} {}",
                s.name
            );
            // The first unfrozen row moves (a ramp of rate > 0 is > 0 there).
            let next = r.frozen_steps;
            assert_ne!(rows(&ours, next, 1), rows(&prev, first + next, 1));
        }
    }
}

#[test]
fn without_rtc_or_with_zero_overlap_the_answer_is_bit_identical() {
    let (g, _) = goldens();
    let noise = g.get("noise");
    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for (backend, head) in heads() {
        let case = Taps::load("case0");
        let plain = head
            .get_action(
                &case.get("backbone.features"),
                &mask(&case, "backbone.image_mask"),
                &mask(&case, "backbone.attention_mask"),
                &case.get("proc.state"),
                24,
                &noise,
                &Recorder::disabled(),
            )
            .unwrap();
        let plain = bits(&flat_f32(&plain));
        assert_eq!(bits(&run(&head, &noise, None).unwrap()), plain, "{backend}");
        // overlap 0: x₀ is the noise and every row's scale is 1, so (dt·v)·1 = dt·v exactly.
        let zero = Rtc::new(g.f32s("previous_chunk"), 40, 0, 0);
        assert_eq!(
            bits(&run(&head, &noise, Some(&zero)).unwrap()),
            plain,
            "{backend}"
        );
    }
}

#[test]
fn velocity_ramp_matches_upstream() {
    let (g, settings) = goldens();
    for s in &settings {
        let ours = s.rtc.velocity_strength(H);
        let golden = g.f32s(&format!("vel_strength.{}", s.name));
        let worst = max_ulp_diff(&ours, &golden);
        let exact = bit_exact_count(&ours, &golden);
        println!("{}: {exact}/{H} bit-exact, worst {worst} ulp", s.name);
        // torch's vectorised exp and libm's can differ by an ulp.
        assert!(worst <= 1, "{}: {worst} ulp", s.name);
        let r = &s.rtc;
        assert!(golden[..r.frozen_steps].iter().all(|&v| v == 0.0));
        assert!(golden[r.overlap_steps..].iter().all(|&v| v == 1.0));
    }
}

#[test]
fn velocity_ramp_matches_upstream_over_a_sweep() {
    let (g, _) = goldens();
    let opts = g.f32s("vel_strength_sweep_options");
    let golden = g.f32s("vel_strength_sweep");
    let k = opts.len() / 4;
    assert!(k >= 10);
    let (mut exact, mut worst) = (0, 0);
    for (o, gold) in opts.chunks(4).zip(golden.chunks(H)) {
        let r = Rtc {
            previous_chunk: vec![0.0; H * A],
            action_horizon: o[0] as usize,
            overlap_steps: o[1] as usize,
            frozen_steps: o[2] as usize,
            ramp_rate: o[3] as f64,
        };
        r.validate(H, A).unwrap();
        let ours = r.velocity_strength(H);
        exact += bit_exact_count(&ours, gold);
        worst = worst.max(max_ulp_diff(&ours, gold));
    }
    println!(
        "sweep of {k}: {exact}/{} bit-exact, worst {worst} ulp",
        k * H
    );
    assert!(worst <= 1, "{worst} ulp");
}

#[test]
fn the_network_applies_model_inputs_rtc() {
    let (g, settings) = goldens();
    let ck = Checkpoint::open(tiny_checkpoint()).unwrap();
    let model = Gr00tModel::load(&ck, &Device::Cpu).unwrap();
    let mut x = common::model_inputs(&Taps::load("case0"));
    assert_eq!(x.noise, g.f32s("noise"));
    let s = &settings[0];
    x.rtc = Some(s.rtc.clone());
    let out = model.forward(&x, &Recorder::disabled()).unwrap();
    let golden = g.f32s(&format!("action_pred.{}", s.name));
    assert_tap_close("network rtc", &out.action_pred, &golden, MIN_R, REL);
    let r = &s.rtc;
    let first = r.action_horizon - r.overlap_steps;
    assert_eq!(
        rows(&out.action_pred, 0, r.frozen_steps),
        rows(&s.rtc.previous_chunk, first, r.frozen_steps)
    );
    // Invalid options are refused before any work, naming the field.
    x.rtc.as_mut().unwrap().frozen_steps = r.overlap_steps + 1;
    match model.forward(&x, &Recorder::disabled()) {
        Err(Error::Rtc(e)) => assert_eq!(e.field, RtcField::FrozenSteps),
        other => panic!("expected an RTC error, got {other:?}"),
    }
}

#[test]
fn invalid_options_are_refused_naming_the_field() {
    let (g, settings) = goldens();
    let head = load_head(DenoiseBackend::Fused);
    let noise = g.get("noise");
    let base = settings[0].rtc.clone();
    let refused = |r: Rtc| match run(&head, &noise, Some(&r)) {
        Err(Error::Rtc(e)) => {
            assert!(e.to_string().starts_with(e.field.name()), "{e}");
            e.field
        }
        other => panic!("expected an RTC error, got {other:?}"),
    };
    let with = |f: &dyn Fn(&mut Rtc)| {
        let mut r = base.clone();
        f(&mut r);
        r
    };
    assert_eq!(
        refused(with(&|r| r.overlap_steps = r.action_horizon + 1)),
        RtcField::OverlapSteps
    );
    assert_eq!(
        refused(with(&|r| r.frozen_steps = r.overlap_steps + 1)),
        RtcField::FrozenSteps
    );
    assert_eq!(refused(with(&|r| r.ramp_rate = -0.5)), RtcField::RampRate);
    assert_eq!(
        refused(with(&|r| r.ramp_rate = f64::NAN)),
        RtcField::RampRate
    );
    assert_eq!(
        refused(with(&|r| r.action_horizon = H + 1)),
        RtcField::ActionHorizon
    );
    assert_eq!(
        refused(with(&|r| r.previous_chunk.truncate((H - 1) * A))),
        RtcField::PreviousChunk
    );
    assert_eq!(
        refused(with(&|r| r.previous_chunk[5] = f32::INFINITY)),
        RtcField::PreviousChunk
    );
    assert_eq!(
        RtcField::OverlapSteps.name(),
        "rtc_overlap_steps",
        "wire names"
    );
    assert_eq!(RtcField::FrozenSteps.name(), "rtc_frozen_steps");
    assert_eq!(RtcField::RampRate.name(), "rtc_ramp_rate");
    assert_eq!(RtcField::ActionHorizon.name(), "action_horizon");
    assert_eq!(RtcField::PreviousChunk.name(), "previous_chunk");
}
