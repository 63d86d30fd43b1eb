//! Compact weights: the positioned-read loader returns exactly what candle's memory-mapped
//! loader returns, bf16 weights widened inside the product give the f32 product, and a model
//! loaded for some embodiments refuses the others cleanly.

mod common;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::VarBuilder;
use gr00t_fixtures::{tensor_bits, Taps};
use gr00t_model::cpu_kernel;
use gr00t_model::linear::{linear, Linear};
use gr00t_model::taps::Recorder;
use gr00t_model::weights::{SafetensorsReader, COMPACT};
use gr00t_model::{Checkpoint, Error, Gr00tModel, ModelInputs};
use std::path::PathBuf;

fn tiny() -> Checkpoint {
    Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap()
}

#[test]
fn reader_matches_candle_mmap_for_every_tiny_tensor() {
    let ck = tiny();
    let dev = Device::Cpu;
    let ours = ck.var_builder(DType::F32, &dev).unwrap();
    // SAFETY: the fixture file is not modified while the test runs.
    let mmap_f32 =
        unsafe { VarBuilder::from_mmaped_safetensors(&ck.weight_files, DType::F32, &dev) }.unwrap();
    let mmap_bf16 =
        unsafe { VarBuilder::from_mmaped_safetensors(&ck.weight_files, DType::BF16, &dev) }
            .unwrap();
    let reader = SafetensorsReader::open(&ck.weight_files).unwrap();
    let mut checked = 0;
    for (name, &stored) in &ck.tensor_dtypes {
        assert_eq!(reader.stored_dtype(name), Some(stored), "{name}");
        let a = ours.get_unchecked_dtype(name, DType::F32).unwrap();
        let b = mmap_f32.get_unchecked_dtype(name, DType::F32).unwrap();
        assert_eq!(a.dtype(), DType::F32);
        assert_eq!(a.dims(), b.dims(), "{name}");
        assert_eq!(tensor_bits(&a), tensor_bits(&b), "{name} (f32)");
        let c = ours.get_unchecked_dtype(name, COMPACT).unwrap();
        assert_eq!(c.dtype(), DType::BF16, "{name}: bf16 is kept as stored");
        let d = mmap_bf16.get_unchecked_dtype(name, DType::BF16).unwrap();
        assert_eq!(tensor_bits(&c), tensor_bits(&d), "{name} (bf16)");
        // The shape-checked path returns the same tensor.
        let e = ours.get(a.dims(), name).unwrap();
        assert_eq!(tensor_bits(&e), tensor_bits(&a), "{name} (checked)");
        checked += 1;
    }
    assert_eq!(checked, 338, "the fixture holds 338 tensors");
}

/// A scratch folder removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("gr00t-weights-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn compact_never_rounds_f32_or_f16_weights() {
    let s = Scratch::new("dtypes");
    let path = s.0.join("w.safetensors");
    let dev = Device::Cpu;
    // Values with low mantissa bits set: rounding them to bf16 would change them.
    let v: Vec<f32> = (0..24).map(|i| 1.0 + i as f32 * 1.000_123e-3).collect();
    let f32_t = Tensor::from_vec(v.clone(), (4, 6), &dev).unwrap();
    let f16_t = f32_t.to_dtype(DType::F16).unwrap();
    let bf16_t = f32_t.to_dtype(DType::BF16).unwrap();
    candle_core::safetensors::save(
        &[
            ("a", f32_t.clone()),
            ("b", f16_t.clone()),
            ("c", bf16_t.clone()),
        ]
        .into_iter()
        .map(|(k, t)| (k.to_string(), t))
        .collect(),
        &path,
    )
    .unwrap();
    let reader = SafetensorsReader::open(std::slice::from_ref(&path)).unwrap();
    let a = reader.read_as("a", COMPACT, &dev).unwrap();
    let b = reader.read_as("b", COMPACT, &dev).unwrap();
    let c = reader.read_as("c", COMPACT, &dev).unwrap();
    assert_eq!(
        (a.dtype(), b.dtype(), c.dtype()),
        (DType::F32, DType::F32, DType::BF16)
    );
    assert_eq!(tensor_bits(&a), tensor_bits(&f32_t));
    assert_eq!(tensor_bits(&b), tensor_bits(&f16_t));
    assert_eq!(tensor_bits(&c), tensor_bits(&bf16_t));
    // A linear over an f32-stored weight keeps f32 and is exactly candle's.
    let vb = VarBuilder::from_backend(Box::new(reader), DType::F32, dev.clone());
    let w = vb
        .get_with_hints_dtype((4, 6), "a", Default::default(), COMPACT)
        .unwrap();
    let x = Tensor::from_vec((0..12).map(|i| i as f32 * 0.37).collect(), (2, 6), &dev).unwrap();
    let ours = Linear::new(w.clone(), None).unwrap().forward(&x).unwrap();
    let theirs = candle_nn::Linear::new(w, None).forward(&x).unwrap();
    assert_eq!(tensor_bits(&ours), tensor_bits(&theirs));
}

#[test]
fn reader_errors_name_the_tensor_and_the_file() {
    let ck = tiny();
    let vb = ck.var_builder(DType::F32, &Device::Cpu).unwrap();
    let err = vb.get(3, "no.such.tensor").unwrap_err().to_string();
    assert!(err.contains("no.such.tensor"), "{err}");
    let name = "backbone.model.model.visual.pos_embed.weight";
    let err = vb.get((2304, 65), name).unwrap_err().to_string();
    assert!(
        err.contains(name) && err.contains("shape mismatch"),
        "{err}"
    );

    // A header whose byte range runs past the end of the file.
    let s = Scratch::new("range");
    let path = s.0.join("bad.safetensors");
    let header = br#"{"x":{"dtype":"BF16","shape":[4,4],"data_offsets":[0,32]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header);
    bytes.extend_from_slice(&[0u8; 16]);
    std::fs::write(&path, &bytes).unwrap();
    let err = SafetensorsReader::open(std::slice::from_ref(&path))
        .err()
        .expect("a short file must be refused")
        .to_string();
    assert!(
        err.contains("bad.safetensors") && err.contains("tensor x"),
        "{err}"
    );

    // A header that is not JSON: refused with the parser's error kept as the source, also by
    // the checkpoint's header-only read (the same reader).
    let header = br#"{"x": nope}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header);
    std::fs::write(&path, &bytes).unwrap();
    let err = SafetensorsReader::open(std::slice::from_ref(&path))
        .err()
        .expect("a malformed header must be refused");
    assert!(
        err.to_string().contains("malformed safetensors header"),
        "{err}"
    );
    let source = std::error::Error::source(&err).expect("the parser's error");
    assert!(source.is::<serde_json::Error>(), "{source:?}");
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

#[test]
fn bf16_linear_equals_f32_linear_on_odd_shapes() {
    let dev = Device::Cpu;
    // (M, K, N): single rows, the DiT's 41 rows, N not a multiple of any slab size.
    let shapes = [
        (1, 7, 1),
        (3, 5, 17),
        (41, 96, 130),
        (41, 1536, 1000),
        (64, 300, 257),
        (448, 64, 1031),
        (469, 513, 384),
    ];
    let (mut total, mut exact, mut worst) = (0usize, 0usize, 0f32);
    for (i, &(m, k, n)) in shapes.iter().enumerate() {
        let w = Tensor::from_vec(values(n * k, i as u64), (n, k), &dev)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap();
        let b = Tensor::from_vec(values(n, 100 + i as u64), n, &dev).unwrap();
        let xv = values(m * k, 200 + i as u64);
        let x = Tensor::from_vec(xv.clone(), (1, m, k), &dev).unwrap();
        let ours = Linear::new(w.clone(), Some(b.clone())).unwrap();
        assert_eq!(ours.weight().map(|w| w.dtype()), Some(DType::BF16));
        let reference = candle_nn::Linear::new(w.to_dtype(DType::F32).unwrap(), Some(b));
        let y = ours.forward(&x).unwrap();
        let r = reference.forward(&x).unwrap();
        assert_eq!(y.dims(), [1, m, n]);
        let (y, r) = (tensor_bits(&y), tensor_bits(&r));
        // Bound: the f32 error scale of a K-term dot product of values in [-1, 1].
        let tol = k as f32 * f32::EPSILON;
        for (a, b) in y.iter().zip(&r) {
            let d = (f32::from_bits(*a) - f32::from_bits(*b)).abs();
            worst = worst.max(d);
            assert!(d <= tol, "[{m}, {k}] x [{n}, {k}]ᵀ: |Δ| {d} > {tol}");
            exact += usize::from(a == b);
            total += 1;
        }
        // A transposed (non-contiguous) input gives the same answer.
        let xt = Tensor::from_vec(xv, (k, m), &dev).unwrap().t().unwrap();
        let yt = tensor_bits(&ours.forward(&xt).unwrap());
        let rt = tensor_bits(&reference.forward(&xt).unwrap());
        assert!(yt
            .iter()
            .zip(&rt)
            .all(|(a, b)| (f32::from_bits(*a) - f32::from_bits(*b)).abs() <= tol));
    }
    println!("bf16 vs f32 linear: {exact}/{total} bit-identical, max |Δ| {worst:e}");
}

#[test]
fn a_linear_packed_at_load_equals_the_unpacked_one_bit_for_bit() {
    let dev = Device::Cpu;
    // Shapes the hand-written kernels serve: the DiT's 41 rows, a few hundred rows, N off the panel.
    for (i, &(m, k, n)) in [(41, 1536, 1056), (300, 1024, 1030), (1, 1024, 2048)]
        .iter()
        .enumerate()
    {
        let w = Tensor::from_vec(values(n * k, 300 + i as u64), (n, k), &dev)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap();
        let b = Tensor::from_vec(values(n, 400 + i as u64), n, &dev).unwrap();
        let x = Tensor::from_vec(values(m * k, 500 + i as u64), (1, m, k), &dev).unwrap();
        let dense = Linear::new(w.clone(), Some(b.clone())).unwrap();
        let packed = Linear::new_for_cpu_f32(w, Some(b)).unwrap();
        // Packed whenever a hand-written kernel serves this CPU.
        assert_eq!(
            packed.is_packed(),
            cpu_kernel::current() != cpu_kernel::CpuKernel::Library
        );
        assert_eq!(packed.dims(), (n, k));
        assert_eq!(packed.weight().is_some(), !packed.is_packed());
        let y = packed.forward(&x).unwrap();
        assert_eq!(y.dims(), [1, m, n]);
        assert_eq!(
            tensor_bits(&y),
            tensor_bits(&dense.forward(&x).unwrap()),
            "[{m}, {k}] x [{n}, {k}]ᵀ"
        );
        if packed.is_packed() {
            // Packed for f32 activations only: anything else is refused, not miscomputed.
            let xb = x.to_dtype(DType::BF16).unwrap();
            assert!(packed.forward(&xb).is_err());
        }
    }
}

#[test]
fn checkpoint_linears_keep_bf16_and_biases_f32() {
    let ck = tiny();
    let vb = ck.var_builder(DType::F32, &Device::Cpu).unwrap();
    let l = linear(
        vb.pp("backbone.model.model.visual.blocks.0.attn.qkv"),
        64,
        192,
        true,
    )
    .unwrap();
    assert_eq!(l.weight().map(|w| w.dtype()), Some(DType::BF16));
    assert_eq!(l.dims(), (192, 64));
    assert_eq!(l.bias().map(|b| b.dtype()), Some(DType::F32));
}

fn inputs(taps: &Taps) -> ModelInputs {
    common::model_inputs(taps)
}

#[test]
fn dropped_embodiment_slots_give_a_clean_error() {
    let ck = tiny();
    let droid = ck
        .embodiment_id("oxe_droid_relative_eef_relative_joint")
        .unwrap();
    assert_eq!(droid, 24);
    let dev = Device::Cpu;
    let all = Gr00tModel::load(&ck, &dev).unwrap();
    let kept = Gr00tModel::load_for(&ck, &dev, &[droid]).unwrap();
    let taps = Taps::load("case0");
    let x = inputs(&taps);
    assert_eq!(x.embodiment_id, droid);
    let off = Recorder::disabled();
    let a = all.forward(&x, &off).unwrap().action_pred;
    let b = kept.forward(&x, &off).unwrap().action_pred;
    assert!(
        a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()),
        "keeping one slot must not change its answer"
    );

    let mut other = x.clone();
    other.embodiment_id = 0;
    assert!(
        all.forward(&other, &off).is_ok(),
        "the full model serves id 0"
    );
    match kept.forward(&other, &off) {
        Err(Error::Input(msg)) => {
            assert!(
                msg.contains("embodiment id 0") && msg.contains("[24]"),
                "{msg}"
            );
        }
        Err(e) => panic!("expected an input error, got {e}"),
        Ok(_) => panic!("a dropped embodiment slot must be refused"),
    }
    let err = Gr00tModel::load_for(&ck, &dev, &[99])
        .err()
        .expect("id 99 is out of range");
    assert!(err.to_string().contains("out of range"), "{err}");
}

/// Off the CPU there is no in-product widening: compact requests then give the compute dtype
/// (f32 or bf16) with the same values.
#[test]
fn compact_requests_follow_the_compute_dtype_when_bf16_is_not_kept() {
    let ck = tiny();
    let dev = Device::Cpu;
    let (name, _) = ck
        .tensor_dtypes
        .iter()
        .find(|(_, &d)| d == DType::BF16)
        .expect("the tiny checkpoint stores bf16 tensors");
    let kept = SafetensorsReader::open(&ck.weight_files).unwrap();
    let wide = SafetensorsReader::open(&ck.weight_files)
        .unwrap()
        .for_compute(DType::F32, false);
    let half = SafetensorsReader::open(&ck.weight_files)
        .unwrap()
        .for_compute(DType::BF16, false);
    let a = kept.read_as(name, COMPACT, &dev).unwrap();
    let b = wide.read_as(name, COMPACT, &dev).unwrap();
    let c = half.read_as(name, COMPACT, &dev).unwrap();
    assert_eq!(
        (a.dtype(), b.dtype(), c.dtype()),
        (DType::BF16, DType::F32, DType::BF16)
    );
    assert_eq!(
        tensor_bits(&a),
        tensor_bits(&b),
        "{name}: widening is exact"
    );
    assert_eq!(tensor_bits(&a), tensor_bits(&c), "{name}");
}
