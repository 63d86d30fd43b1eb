//! Synthetic checkpoints have the real layout: the tiny one lists exactly the fixture's tensor
//! names and shapes, the full one has the released 3.14 B parameters, and both open as
//! checkpoints that declare themselves synthetic.

use gr00t_model::checkpoint::Checkpoint;
use gr00t_model::synth::{parameter_specs, synth_configs, write_synthetic_checkpoint, SynthSize};

#[test]
fn tiny_specs_equal_fixture_layout() {
    let fixture = Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
    let specs = parameter_specs(&fixture.config, &fixture.backbone);
    let ours: Vec<&str> = specs.iter().map(|p| p.name.as_str()).collect();
    let theirs: Vec<&str> = fixture.tensor_dtypes.keys().map(|s| s.as_str()).collect();
    assert_eq!(ours, theirs);
    // SAFETY: the fixture file is not modified while mapped.
    let st = unsafe { candle_core::safetensors::MmapedSafetensors::new(&fixture.weight_files[0]) }
        .unwrap();
    for p in &specs {
        let view = st.get(&p.name).unwrap();
        assert_eq!(view.shape(), p.shape.as_slice(), "{}", p.name);
    }
}

#[test]
fn full_has_released_parameter_count() {
    let (cfg, bb) = synth_configs(SynthSize::Full).unwrap();
    let n: usize = parameter_specs(&cfg, &bb).iter().map(|p| p.numel()).sum();
    // gr00t_n17_model.md §1: 3.1440 B (vision 407.0 M, text 1116.5 M, DiT 1091.7 M, ...).
    assert!((3_143_500_000..3_144_500_000).contains(&n), "{n}");
}

#[test]
fn tiny_synthetic_checkpoint_opens_and_says_synthetic() {
    let dir = std::env::temp_dir().join(format!("gr00t-synth-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut calls = 0;
    let mut last = (0, 0);
    write_synthetic_checkpoint(&dir, SynthSize::Tiny, &mut |d, t| {
        calls += 1;
        last = (d, t);
    })
    .unwrap();
    assert!(calls > 0 && last.0 == last.1);
    let ck = Checkpoint::open(&dir).unwrap();
    assert!(ck.is_synthetic());
    let fixture = Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
    assert!(!fixture.is_synthetic());
    assert_eq!(ck.tensor_dtypes, fixture.tensor_dtypes);
    assert_eq!(ck.config.select_layer, fixture.config.select_layer);
    // Deterministic: a second write gives the same bytes.
    let first = std::fs::read(dir.join("model.safetensors")).unwrap();
    write_synthetic_checkpoint(&dir, SynthSize::Tiny, &mut |_, _| {}).unwrap();
    assert_eq!(first, std::fs::read(dir.join("model.safetensors")).unwrap());
    // Values are at a sensible scale (norm weights near 1).
    let vb = ck
        .var_builder(candle_core::DType::F32, &candle_core::Device::Cpu)
        .unwrap();
    let w = vb
        .get(32, "action_head.vlln.weight")
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    assert!(w.iter().all(|x| (0.9..1.1).contains(x)), "{w:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
