//! `--dtype int8` on every fixture case (DROID, the multi-embodiment set, the extra
//! embodiments and image pipelines): every action group against NVIDIA's fp32 goldens at the
//! seed port's gate (PCC ≥ 0.9999, max|Δ| ≤ 2·10⁻²·max|ref|), per stage and for the default
//! stages; bf16 beside it. `--nocapture` prints the table of docs/accuracy.md.

use gr00t::predict_body;
use gr00t_core::device::{DeviceOptions, DtypeSetting};
use gr00t_core::dtype_check::{check_group, GroupCheck, GATE};
use gr00t_core::precision::DEFAULT_INT8_STAGES;
use gr00t_core::{Engine, EngineOptions};
use gr00t_fixtures::{
    extra_case_checkpoint, multi_checkpoint, multi_dir, tiny_checkpoint, MultiCase, Taps, CASES,
    EXTRA_CASES, EXTRA_IMAGE_CASES, MULTI_CASES,
};
use gr00t_model::int8::{Int8Stages, Stage};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One fixture case: its checkpoint, request body and NVIDIA's action groups.
struct Case {
    name: String,
    checkpoint: PathBuf,
    body: Vec<u8>,
    /// `(key, values)` of upstream's `action.{key}` (DROID: `output.{key}`).
    reference: Vec<(String, Vec<f32>)>,
}

fn droid_case(name: &str) -> Case {
    let taps = Taps::load(name);
    Case {
        name: name.to_string(),
        checkpoint: tiny_checkpoint(),
        body: gr00t_fixtures::request_json(name).into_bytes(),
        reference: ["eef_9d", "gripper_position", "joint_position"]
            .into_iter()
            .map(|g| (g.to_string(), taps.f32s(&format!("output.{g}"))))
            .collect(),
    }
}

fn multi_case(case: MultiCase, checkpoint: PathBuf) -> Case {
    let reference = case
        .outputs
        .names()
        .into_iter()
        .filter_map(|n| n.strip_prefix("action.").map(str::to_string))
        .map(|key| {
            let values = case.outputs.f32s(&format!("action.{key}"));
            (key, values)
        })
        .collect();
    Case {
        name: case.name.clone(),
        body: std::fs::read(case.request_path()).unwrap(),
        checkpoint,
        reference,
    }
}

/// Every fixture case with goldens: 4 DROID, 8 multi-embodiment, 6 extra.
fn every_case() -> Vec<Case> {
    let mut cases: Vec<Case> = CASES.iter().map(|n| droid_case(n)).collect();
    assert_eq!(multi_dir(), multi_checkpoint().parent().unwrap());
    for name in MULTI_CASES {
        cases.push(multi_case(MultiCase::load(name), multi_checkpoint()));
    }
    for name in EXTRA_CASES.iter().chain(&EXTRA_IMAGE_CASES) {
        cases.push(multi_case(
            MultiCase::load_extra(name),
            extra_case_checkpoint(name),
        ));
    }
    cases
}

fn engine(checkpoint: &std::path::Path, dtype: DtypeSetting, stages: Option<Int8Stages>) -> Engine {
    Engine::load(&EngineOptions {
        checkpoint: checkpoint.to_path_buf(),
        tokenizer: None,
        device: DeviceOptions {
            dtype: Some(dtype),
            int8: stages,
            ..DeviceOptions::default()
        },
        embodiments: Vec::new(),
        weight_cache: None,
    })
    .unwrap()
}

/// Every group of every case in `dtype` (and `stages`) against the goldens.
fn gate_checks(cases: &[Case], dtype: DtypeSetting, stages: Option<Int8Stages>) -> Vec<GroupCheck> {
    let mut engines: BTreeMap<PathBuf, Engine> = BTreeMap::new();
    let mut checks = Vec::new();
    for case in cases {
        let engine = engines
            .entry(case.checkpoint.clone())
            .or_insert_with(|| engine(&case.checkpoint, dtype, stages));
        if dtype == DtypeSetting::Int8 {
            let want: Vec<&str> = stages.unwrap().names();
            assert_eq!(engine.info().dtype, "int8");
            assert_eq!(engine.info().int8_stages, want);
        }
        let resp =
            predict_body(engine, &case.body).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        assert_eq!(resp.actions.0.len(), case.reference.len(), "{}", case.name);
        for (key, want) in &case.reference {
            let ours: Vec<f32> = resp.actions.rows(key).iter().flatten().copied().collect();
            checks.push(check_group(&case.name, key, want, &ours, GATE));
        }
    }
    checks
}

/// The worst PCC and max|Δ|/max|ref| per case, one line each.
fn table(label: &str, checks: &[GroupCheck]) -> String {
    let mut per_case: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    for c in checks {
        let e = per_case.entry(&c.case).or_insert((f64::INFINITY, 0.0));
        e.0 = e.0.min(c.pcc);
        e.1 = e.1.max(c.rel());
    }
    let mut out = format!("{label}\n");
    for (case, (pcc, rel)) in per_case {
        out += &format!("  {case:44} 1-pcc {:9.2e}  rel {rel:10.3e}\n", 1.0 - pcc);
    }
    out
}

fn failures(checks: &[GroupCheck]) -> Vec<String> {
    checks
        .iter()
        .filter(|c| !c.pass)
        .map(|c| format!("{} {}: pcc {} rel {:e}", c.case, c.group, c.pcc, c.rel()))
        .collect()
}

/// The default `--dtype int8` stages pass the gate with margin (half its max|Δ| budget, a
/// tenth of its 1 − PCC) on every group of every fixture case.
#[test]
fn default_int8_passes_the_gate_with_margin_on_every_fixture_case() {
    let cases = every_case();
    assert_eq!(cases.len(), 18);
    let checks = gate_checks(&cases, DtypeSetting::Int8, Some(DEFAULT_INT8_STAGES));
    eprintln!("{}", table(&format!("int8 {DEFAULT_INT8_STAGES}"), &checks));
    assert!(checks.len() > 3 * cases.len() / 2);
    assert_eq!(failures(&checks), Vec::<String>::new());
    let margin: Vec<String> = checks
        .iter()
        .filter(|c| c.rel() > GATE.max_rel / 2.0 || 1.0 - c.pcc > (1.0 - GATE.min_pcc) / 10.0)
        .map(|c| format!("{} {}: pcc {} rel {:e}", c.case, c.group, c.pcc, c.rel()))
        .collect();
    assert_eq!(
        margin,
        Vec::<String>::new(),
        "within the gate, without margin"
    );
    // Not the f32 answer: int8 rounding shows.
    assert!(
        checks.iter().any(|c| c.max_abs > 1e-4),
        "int8 is suspiciously exact"
    );
}

/// Each stage alone and bf16 pass the gate; all four stages together keep the PCC bound (their
/// max|Δ| is reported, for the docs' table: it exceeds the bound on one case).
#[test]
fn each_int8_stage_and_bf16_pass_the_gate() {
    let cases = every_case();
    let mut report = String::new();
    let mut failed = Vec::new();
    let runs = Stage::ALL
        .into_iter()
        .map(|s| (DtypeSetting::Int8, Some(Int8Stages::only(s))))
        .chain([(DtypeSetting::Bf16, None)]);
    for (dtype, stages) in runs {
        let checks = gate_checks(&cases, dtype, stages);
        let label = match stages {
            Some(s) => format!("int8 {s}"),
            None => "bf16".to_string(),
        };
        report += &table(&label, &checks);
        failed.extend(
            failures(&checks)
                .into_iter()
                .map(|f| format!("{label}: {f}")),
        );
    }
    let all = gate_checks(&cases, DtypeSetting::Int8, Some(Int8Stages::ALL));
    report += &table("int8 all", &all);
    eprintln!("{report}");
    assert_eq!(failed, Vec::<String>::new());
    let worst = all.iter().map(|c| c.pcc).fold(1.0, f64::min);
    assert!(worst >= GATE.min_pcc, "all stages: PCC {worst}");
}
