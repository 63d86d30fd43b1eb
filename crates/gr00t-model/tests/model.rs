//! The assembled network: fixture inputs → `action_pred` at parity, every tap of the chain
//! recorded, and bit-identical answers when requests repeat or interleave.

mod common;

use candle_core::Device;
use gr00t_fixtures::{assert_tap_close, Taps};
use gr00t_model::taps::Recorder;
use gr00t_model::{Checkpoint, Gr00tModel, ModelInputs};

fn load() -> Gr00tModel {
    let ck = Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
    Gr00tModel::load(&ck, &Device::Cpu).unwrap()
}

fn inputs(taps: &Taps) -> ModelInputs {
    common::model_inputs(taps)
}

#[test]
fn network_matches_every_tap_end_to_end() {
    let model = load();
    let taps = Taps::load("case0");
    let rec = Recorder::enabled();
    let out = model.forward(&inputs(&taps), &rec).unwrap();
    assert_eq!(out.seq_len, 469);
    assert_tap_close(
        "head.action_pred",
        &out.action_pred,
        &taps.f32s("head.action_pred"),
        0.99999,
        1e-3,
    );
    let info = gr00t_fixtures::case_info("case0");
    let mut checked = 0;
    for (name, meta) in info["tap_shapes"].as_object().unwrap() {
        let dtype = meta[1].as_str().unwrap();
        if dtype != "float32"
            || name.starts_with("proc.")
            || name.starts_with("input.")
            || name.starts_with("decode.")
            || name.starts_with("output.")
        {
            continue;
        }
        let ours = rec
            .get(name)
            .unwrap_or_else(|| panic!("tap {name} not recorded"));
        assert_eq!(ours.dims(), taps.dims(name).as_slice(), "{name}");
        assert_tap_close(
            name,
            &gr00t_fixtures::flat_f32(&ours),
            &taps.f32s(name),
            0.99999,
            1e-3,
        );
        checked += 1;
    }
    assert!(checked > 90, "only {checked} taps compared");
}

#[test]
fn repeated_and_interleaved_requests_are_bit_identical() {
    let model = load();
    let taps = Taps::load("case0");
    let a = inputs(&taps);
    let mut b = a.clone();
    b.noise = gr00t_fixtures::noise_seed(42);
    b.state[0] = -b.state[0];
    let off = Recorder::disabled();
    let a1 = model.forward(&a, &off).unwrap().action_pred;
    let b1 = model.forward(&b, &off).unwrap().action_pred;
    assert_ne!(a1, b1);
    for _ in 0..2 {
        let a2 = model.forward(&a, &off).unwrap().action_pred;
        let b2 = model.forward(&b, &off).unwrap().action_pred;
        assert!(a1.iter().zip(&a2).all(|(x, y)| x.to_bits() == y.to_bits()));
        assert!(b1.iter().zip(&b2).all(|(x, y)| x.to_bits() == y.to_bits()));
    }
}

/// `--dtype bf16` on the CPU (bf16 operands in every product, attention's included): the same
/// bits on 1, 2 or 3 threads and on repeats; not the f32 bits.
#[test]
fn bf16_products_do_not_depend_on_the_thread_count() {
    let ck = Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
    let model = Gr00tModel::load_with(&ck, &Device::Cpu, candle_core::DType::BF16, None).unwrap();
    let a = inputs(&Taps::load("case0"));
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let y = pool.install(|| {
            model
                .forward(&a, &Recorder::disabled())
                .unwrap()
                .action_pred
        });
        y.iter().map(|x| x.to_bits()).collect::<Vec<u32>>()
    };
    let one = run(1);
    for threads in [2, 3, 1] {
        assert_eq!(run(threads), one, "{threads} threads");
    }
    let f32_bits: Vec<u32> = load()
        .forward(&a, &Recorder::disabled())
        .unwrap()
        .action_pred
        .iter()
        .map(|x| x.to_bits())
        .collect();
    assert_ne!(one, f32_bits);
}

#[test]
fn inconsistent_inputs_are_errors_not_panics() {
    let model = load();
    let taps = Taps::load("case0");
    let good = inputs(&taps);
    let off = Recorder::disabled();
    let mut x = good.clone();
    x.noise.pop();
    assert!(model.forward(&x, &off).is_err());
    let mut x = good.clone();
    x.state.push(0.0);
    assert!(model.forward(&x, &off).is_err());
    let mut x = good.clone();
    x.pixel_values.truncate(100);
    assert!(model.forward(&x, &off).is_err());
    let mut x = good.clone();
    x.input_ids.retain(|&t| t != 151655);
    assert!(model.forward(&x, &off).is_err());
    let mut x = good;
    x.embodiment_id = 99;
    assert!(model.forward(&x, &off).is_err());
}
