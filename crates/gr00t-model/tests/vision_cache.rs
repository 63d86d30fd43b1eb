//! The vision cache is exact: requests answered partly or wholly from cached per-image vision
//! outputs give bit-for-bit the `action_pred` of a cold run (cache disabled), in a simulated
//! control loop (the t−15 frames are the previous request's t frames), with duplicate frames in
//! one request, across evictions, and with the cache disabled.

mod common;

use candle_core::Device;
use gr00t_fixtures::{assert_tap_close, bit_exact_count, Taps};
use gr00t_model::taps::Recorder;
use gr00t_model::vision_cache::VisionCacheStats;
use gr00t_model::{Checkpoint, Gr00tModel, ModelInputs};

fn load(capacity: usize) -> Gr00tModel {
    let ck = Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
    let model = Gr00tModel::load(&ck, &Device::Cpu).unwrap();
    model.set_vision_cache_capacity(capacity);
    model
}

/// case0's processed inputs (the case whose taps hold `pixel_values`): four 16×28-patch
/// images in the order [exterior t−15, wrist t−15, exterior t, wrist t].
fn case0() -> ModelInputs {
    common::model_inputs(&Taps::load("case0"))
}

/// The pixel rows of each image of `x`.
fn images(x: &ModelInputs) -> Vec<Vec<f32>> {
    let mut out = Vec::new();
    let mut start = 0;
    for g in &x.image_grid_thw {
        let n = g[0] * g[1] * g[2] * x.patch_dim;
        out.push(x.pixel_values[start..start + n].to_vec());
        start += n;
    }
    out
}

/// `x` with its images replaced (all four have the same grid in these tests).
fn with_images(x: &ModelInputs, imgs: &[Vec<f32>]) -> ModelInputs {
    assert_eq!(imgs.len(), x.image_grid_thw.len());
    ModelInputs {
        pixel_values: imgs.concat(),
        ..x.clone()
    }
}

/// A frame no request has shown before: `img` mirrored in value and shifted.
fn new_frame(img: &[f32], shift: f32) -> Vec<f32> {
    img.iter().map(|v| shift - v).collect()
}

/// The next request of a control loop: the t frames move to t−15, two new t frames arrive.
fn next_step(x: &ModelInputs, shift: f32) -> ModelInputs {
    let i = images(x);
    with_images(
        x,
        &[
            i[2].clone(),
            i[3].clone(),
            new_frame(&i[2], shift),
            new_frame(&i[3], shift),
        ],
    )
}

fn run(model: &Gr00tModel, x: &ModelInputs) -> Vec<f32> {
    model.forward(x, &Recorder::disabled()).unwrap().action_pred
}

/// A model without the cache, one caching `slots` images, case0's inputs and the uncached
/// model's answer to them.
fn cold_and_cached(slots: usize) -> (Gr00tModel, Gr00tModel, ModelInputs, Vec<f32>) {
    let (cold, cached, a) = (load(0), load(slots), case0());
    let a_cold = run(&cold, &a);
    (cold, cached, a, a_cold)
}

fn assert_bits_equal(what: &str, a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    let differ = a.len() - bit_exact_count(a, b);
    assert_eq!(differ, 0, "{what}: {differ} of {} values differ", a.len());
}

fn counts(s: VisionCacheStats) -> (u64, u64, u64, usize) {
    (s.hits, s.misses, s.evictions, s.entries)
}

#[test]
fn cold_cached_and_mixed_requests_are_bit_identical() {
    let (cold, cached, a, a_cold) = cold_and_cached(16);
    let golden = Taps::load("case0").f32s("head.action_pred");
    assert_tap_close("cold action_pred", &a_cold, &golden, 0.99999, 1e-3);

    // First request: every image misses and is stored.
    assert_bits_equal("first request", &run(&cached, &a), &a_cold);
    assert_eq!(counts(cached.vision_cache_stats()), (0, 4, 0, 4));
    // The same request again: every image hits.
    assert_bits_equal("repeated request", &run(&cached, &a), &a_cold);
    assert_eq!(counts(cached.vision_cache_stats()), (4, 4, 0, 4));

    // Control loop: two images cached (the old t frames), two new.
    let mut x = a;
    for step in 1..=3 {
        x = next_step(&x, 0.25 * step as f32);
        let before = cached.vision_cache_stats();
        let ours = run(&cached, &x);
        let after = cached.vision_cache_stats();
        assert_eq!(
            (after.hits - before.hits, after.misses - before.misses),
            (2, 2),
            "loop step {step}"
        );
        assert_bits_equal(&format!("loop step {step}"), &ours, &run(&cold, &x));
    }
}

#[test]
fn a_frame_repeated_inside_one_request_is_encoded_once() {
    let cold = load(0);
    let cached = load(16);
    let a = case0();
    let i = images(&a);
    // A static scene: each camera's t−15 and t frames are the same picture.
    let x = with_images(
        &a,
        &[i[0].clone(), i[1].clone(), i[0].clone(), i[1].clone()],
    );
    let ours = run(&cached, &x);
    assert_eq!(counts(cached.vision_cache_stats()), (2, 2, 0, 2));
    assert_bits_equal("duplicate frames", &ours, &run(&cold, &x));
}

#[test]
fn eviction_keeps_the_bound_and_stays_exact() {
    let (cold, cached, a, a_cold) = cold_and_cached(2);
    assert_bits_equal("first", &run(&cached, &a), &a_cold);
    // Four misses into two slots: images 0 and 1 were evicted, 2 and 3 stay.
    assert_eq!(counts(cached.vision_cache_stats()), (0, 4, 2, 2));
    let b = next_step(&a, 0.5);
    assert_bits_equal("loop step", &run(&cached, &b), &run(&cold, &b));
    // Images 2 and 3 hit; the two new frames then push them out.
    assert_eq!(counts(cached.vision_cache_stats()), (2, 6, 4, 2));
    // `a` again: all four miss (0 and 1 went first, 2 and 3 just now), four more evictions.
    assert_bits_equal("after eviction", &run(&cached, &a), &a_cold);
    assert_eq!(counts(cached.vision_cache_stats()), (2, 10, 8, 2));
    // Shrinking evicts at once; clearing resets the counters.
    cached.set_vision_cache_capacity(1);
    assert_eq!(cached.vision_cache_stats().entries, 1);
    cached.clear_vision_cache();
    assert_eq!(counts(cached.vision_cache_stats()), (0, 0, 0, 0));
    assert_eq!(cached.vision_cache_stats().capacity, 1);
}

#[test]
fn capacity_zero_disables_the_cache() {
    let model = load(0);
    let a = case0();
    let first = run(&model, &a);
    assert_bits_equal("second run", &run(&model, &a), &first);
    assert_eq!(
        model.vision_cache_stats(),
        VisionCacheStats {
            capacity: 0,
            ..VisionCacheStats::default()
        }
    );
}

#[test]
fn recording_runs_bypass_the_cache_and_stay_at_parity() {
    let model = load(16);
    let a = case0();
    let rec = Recorder::enabled();
    let out = model.forward(&a, &rec).unwrap().action_pred;
    assert_eq!(counts(model.vision_cache_stats()), (0, 0, 0, 0));
    assert!(rec.get("vision.block_out.0").is_some());
    let golden = Taps::load("case0").f32s("head.action_pred");
    assert_tap_close("recorded action_pred", &out, &golden, 0.99999, 1e-3);
    let plain = run(&model, &a);
    let same = bit_exact_count(&plain, &out);
    eprintln!(
        "whole-tower (recording) vs per-image path: {same} of {} action values bit-identical",
        out.len()
    );
}
