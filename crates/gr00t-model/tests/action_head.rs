//! Parity of the action head with the golden fixtures: every stage fed the reference's own
//! input, and the whole chain from `backbone.features` + state + noise to `head.action_pred`.
//! Gate: Pearson r ≥ 0.99999 and max|Δ| ≤ 1e-3·max|ref| per tap; integer taps exact.

use candle_core::{DType, Device, Tensor};
use gr00t_fixtures::{
    assert_tap_close, flat_f32, max_abs, max_abs_diff, pearson, tensor_bits, tiny_checkpoint, Taps,
    CASES,
};
use gr00t_model::action_head::{ActionHead, RequestContext};
use gr00t_model::taps::Recorder;
use gr00t_model::Checkpoint;
use std::collections::BTreeMap;

const MIN_R: f64 = 0.99999;
const REL: f32 = 1e-3;

fn load_head() -> ActionHead {
    let ckpt = Checkpoint::open(tiny_checkpoint()).expect("tiny checkpoint");
    let vb = ckpt
        .var_builder(DType::F32, &Device::Cpu)
        .expect("var builder");
    ActionHead::load(vb.pp("action_head"), &ckpt.config).expect("action head")
}

/// Worst Pearson r and worst max|Δ|/max|ref| per tap group, printed as a table.
#[derive(Default)]
struct Report {
    groups: BTreeMap<String, (f64, f64, usize)>,
}

impl Report {
    /// Gates `ours` against the fixture tap `name` and keeps the metrics.
    fn check(&mut self, taps: &Taps, name: &str, ours: &Tensor) {
        assert_eq!(ours.dims(), taps.dims(name).as_slice(), "{name}: shape");
        let ours = flat_f32(ours);
        let reference = taps.f32s(name);
        assert_tap_close(name, &ours, &reference, MIN_R, REL);
        let r = pearson(&ours, &reference);
        let rel = (max_abs_diff(&ours, &reference) / max_abs(&reference)) as f64;
        let group = group_of(name);
        let e = self.groups.entry(group).or_insert((1.0, 0.0, 0));
        e.0 = e.0.min(r);
        e.1 = e.1.max(rel);
        e.2 += 1;
    }

    fn print(&self, title: &str) {
        eprintln!("{title}: tap group | taps | 1 - min r | max |Δ|/max|ref|");
        for (g, (r, rel, n)) in &self.groups {
            eprintln!("  {g} | {n} | 1-r={:.2e} | {rel:.3e}", 1.0 - r);
        }
    }
}

/// Loads the head and runs `check` on every case (its name and taps) into one report, printed
/// under `title` at the end.
fn report_every_case(title: &str, mut check: impl FnMut(&ActionHead, &str, &Taps, &mut Report)) {
    let head = load_head();
    let mut report = Report::default();
    for case in CASES {
        check(&head, case, &Taps::load(case), &mut report);
    }
    report.print(title);
}

/// `head.step2.dit_block_out.5` → `head.step*.dit_block_out.*`.
fn group_of(name: &str) -> String {
    name.split('.')
        .map(|p| {
            if p.starts_with("step") && p[4..].chars().all(|c| c.is_ascii_digit()) {
                "step*".to_string()
            } else if !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()) {
                "*".to_string()
            } else {
                p.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

fn mask(taps: &Taps, name: &str) -> Vec<bool> {
    taps.i64s(name).iter().map(|&v| v != 0).collect()
}

fn embodiment(taps: &Taps) -> usize {
    taps.i64s("proc.embodiment_id")[0] as usize
}

/// The request context built from the fixture's own `vl_embeds`.
fn context_from_fixture(head: &ActionHead, taps: &Taps) -> RequestContext {
    head.prepare(
        &taps.get("head.vl_embeds"),
        &mask(taps, "backbone.image_mask"),
        &mask(taps, "backbone.attention_mask"),
        embodiment(taps),
    )
    .expect("prepare")
}

#[test]
fn vl_adapter_stages_match() {
    report_every_case("VL adapter, per stage", |head, _, taps, report| {
        let features = taps.get("backbone.features");
        report.check(taps, "head.vlln_out", &head.vlln(&features).unwrap());
        let mut input = taps.get("head.vlln_out");
        for i in 0..head.num_vl_blocks() {
            let name = format!("head.vl_self_attn.block_out.{i}");
            report.check(taps, &name, &head.vl_block(i, &input).unwrap());
            input = taps.get(&name);
        }
        assert_eq!(head.num_vl_blocks(), 2);
        let chained = head.encode_vl(&features, &Recorder::disabled()).unwrap();
        report.check(taps, "head.vl_embeds", &chained);
    });
}

#[test]
fn state_encoder_matches() {
    report_every_case("state encoder", |head, _, taps, report| {
        assert_eq!(taps.f32s("head.state_input"), taps.f32s("proc.state"));
        let ctx = context_from_fixture(head, taps);
        let ours = head
            .encode_state(&ctx, &taps.get("head.state_input"))
            .unwrap();
        report.check(taps, "head.state_features", &ours);
    });
}

#[test]
fn timestep_buckets_are_exact() {
    let head = load_head();
    for case in CASES {
        let taps = Taps::load(case);
        assert_eq!(head.num_steps(), 4);
        for k in 0..head.num_steps() {
            let want = taps.i64s(&format!("head.step{k}.timestep"));
            assert_eq!(vec![head.timestep(k).unwrap()], want, "{case} step {k}");
        }
    }
}

#[test]
fn euler_step_stages_match() {
    report_every_case("Euler steps, per stage", |head, _, taps, report| {
        let ctx = context_from_fixture(head, taps);
        for k in 0..head.num_steps() {
            let p = format!("head.step{k}");
            let tap = |s: &str| taps.get(&format!("{p}.{s}"));
            let check = |report: &mut Report, s: &str, t: &Tensor| {
                report.check(taps, &format!("{p}.{s}"), t)
            };
            check(report, "temb", &head.temb(k).unwrap());
            let af = head.encode_actions(&ctx, &tap("actions_in"), k).unwrap();
            check(report, "action_features", &af);
            let sa = head
                .dit_input(&taps.get("head.state_features"), &tap("action_features"))
                .unwrap();
            check(report, "sa_embs", &sa);
            let mut input = tap("sa_embs");
            for b in 0..head.num_dit_blocks() {
                let name = format!("dit_block_out.{b}");
                check(report, &name, &head.dit_block(&ctx, b, &input, k).unwrap());
                input = tap(&name);
            }
            assert_eq!(head.num_dit_blocks(), 8);
            check(report, "dit_out", &head.dit_output(&input, k).unwrap());
            check(
                report,
                "decoder_out",
                &head.decode(&ctx, &tap("dit_out")).unwrap(),
            );
            let v = head.velocity(&tap("decoder_out")).unwrap();
            assert_eq!(
                flat_f32(&v),
                flat_f32(&tap("velocity")),
                "{p}.velocity is a slice"
            );
            let next = head
                .euler_step(&tap("actions_in"), &tap("velocity"))
                .unwrap();
            let next_name = if k + 1 < head.num_steps() {
                format!("head.step{}.actions_in", k + 1)
            } else {
                "head.action_pred".to_string()
            };
            report.check(taps, &next_name, &next);
        }
    });
}

/// Runs the whole head on a case's fixture inputs with a recording recorder.
fn run_case(head: &ActionHead, taps: &Taps) -> (Tensor, Recorder) {
    let rec = Recorder::enabled();
    let out = head
        .get_action(
            &taps.get("backbone.features"),
            &mask(taps, "backbone.image_mask"),
            &mask(taps, "backbone.attention_mask"),
            &taps.get("proc.state"),
            embodiment(taps),
            &taps.get("input.noise"),
            &rec,
        )
        .expect("get_action");
    (out, rec)
}

/// Names of every `head.*` tap of a case, from `case_info.json`.
fn head_tap_names(case: &str) -> Vec<String> {
    let info = gr00t_fixtures::case_info(case);
    let shapes = info["tap_shapes"].as_object().expect("tap_shapes");
    shapes
        .keys()
        .filter(|k| k.starts_with("head."))
        .cloned()
        .collect()
}

#[test]
fn end_to_end_matches() {
    report_every_case("end to end", |head, case, taps, report| {
        let (out, rec) = run_case(head, taps);
        let names = head_tap_names(case);
        assert_eq!(names.len(), 4 + 2 + 4 * 16 + 1, "{case}: head tap count");
        for name in &names {
            let ours = rec
                .get(name)
                .unwrap_or_else(|| panic!("{case}: {name} not recorded"));
            if name.ends_with(".timestep") {
                let ours: Vec<i64> = ours.to_vec1().unwrap();
                assert_eq!(ours, taps.i64s(name), "{case}: {name}");
            } else {
                report.check(taps, name, &ours);
            }
        }
        assert_eq!(
            flat_f32(&out),
            flat_f32(&rec.get("head.action_pred").unwrap())
        );
    });
}

#[test]
fn repeated_runs_are_bit_identical() {
    let head = load_head();
    let taps = Taps::load("case1");
    let (a, rec_a) = run_case(&head, &taps);
    let (b, rec_b) = run_case(&head, &taps);
    assert_eq!(tensor_bits(&a), tensor_bits(&b));
    assert_eq!(rec_a.names(), rec_b.names());
    for name in rec_a.names() {
        let (x, y) = (rec_a.get(&name).unwrap(), rec_b.get(&name).unwrap());
        assert_eq!(tensor_bits(&x), tensor_bits(&y), "{name}");
    }
}

#[test]
fn inconsistent_inputs_are_errors() {
    let head = load_head();
    let taps = Taps::load("case0");
    let features = taps.get("backbone.features");
    let image = mask(&taps, "backbone.image_mask");
    let attn = mask(&taps, "backbone.attention_mask");
    let state = taps.get("proc.state");
    let noise = taps.get("input.noise");
    let rec = Recorder::disabled();
    let run = |image: &[bool], attn: &[bool], state: &Tensor, emb: usize, noise: &Tensor| {
        head.get_action(&features, image, attn, state, emb, noise, &rec)
    };
    assert!(
        run(&image, &attn, &state, 32, &noise).is_err(),
        "embodiment out of range"
    );
    assert!(
        run(&image[1..], &attn, &state, 24, &noise).is_err(),
        "short image mask"
    );
    let no_image = vec![false; image.len()];
    assert!(
        run(&no_image, &attn, &state, 24, &noise).is_err(),
        "no image keys"
    );
    let short_noise = noise.narrow(1, 0, 39).unwrap();
    assert!(
        run(&image, &attn, &state, 24, &short_noise).is_err(),
        "noise shape"
    );
    let wide_state = Tensor::zeros((1, 1, 133), DType::F32, &Device::Cpu).unwrap();
    assert!(
        run(&image, &attn, &wide_state, 24, &noise).is_err(),
        "state shape"
    );
    let narrow_features = features.narrow(2, 0, 16).unwrap();
    let rec2 = Recorder::disabled();
    let r = head.get_action(&narrow_features, &image, &attn, &state, 24, &noise, &rec2);
    assert!(r.is_err(), "feature width");
}
