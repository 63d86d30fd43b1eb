//! `gr00t bench`: per-stage timings of the DROID demo request on a warm engine, with the FLOPs
//! of each network stage, the achieved GFLOP/s, peak RSS and threads. Two scenarios:
//! - cold (default): the vision cache is emptied before every run, so every run encodes all
//!   four frames, as a first request does;
//! - `--loop`: a simulated control loop, where request k+1's t−15 frames are request k's t
//!   frames (two of four images come from the vision cache) and the t frames are new;
//! - `--loop --control-hz R`: a simulated robot at R Hz executing chunks while the next is
//!   computed, with and without RTC ([`control_loop`]).
//!
//! Besides wall times it reports the CPU time the process's threads ran per request (summed
//! over threads, from /proc): on a machine shared with other work it moves far less than the
//! wall time, so comparing two runs (f32 against bf16) by it is steadier.

use crate::engine::{Engine, EngineOptions};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use gr00t_core::response::TimingMs;
use gr00t_core::InferError;
use gr00t_embodiment::image::decode::decode_base64_frame;
use gr00t_model::action_head::DenoiseBackend;
use gr00t_model::flops::{denoise_step_weights, request_flops, RequestShape, StageFlops};
use gr00t_model::Checkpoint;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;

pub mod control_loop;

/// The demo `/predict` body (fixture case0: DROID frames, state, instruction, noise).
pub(crate) const DEMO_REQUEST: &str = include_str!("../../../assets/demo/request.json");

/// Camera fields of the request, in the order of `images`.
const CAMERAS: [&str; 2] = ["exterior_image_1_left", "wrist_image_left"];

/// Stages reported, in pipeline order (a request's stage spans too).
pub const STAGES: [&str; 7] = [
    "decode",
    "encode",
    "vision",
    "llm",
    "adapter",
    "denoise",
    "decode_actions",
];

/// What `gr00t bench` runs.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Checkpoint folder.
    pub checkpoint: PathBuf,
    /// Timed runs (after the warm-up).
    pub runs: usize,
    /// Untimed runs first.
    pub warmup: usize,
    /// Run serve's start-up warm-up pass (the layers at minimal size) right after the load.
    pub warm_up_pass: bool,
    /// Print one JSON object instead of a table.
    pub json: bool,
    /// Simulate a control loop instead of cold requests.
    pub control_loop: bool,
    /// Alternate cold requests with an f32 engine (see [`interleaved`]).
    pub interleave_f32: bool,
    /// The real-time robot of [`control_loop`] instead of back-to-back requests.
    pub realtime: Option<control_loop::LoopOptions>,
    /// `--device` / `--dtype`.
    pub device: crate::device::DeviceOptions,
}

/// Medians of one scenario.
struct Summary {
    /// Per stage, in [`STAGES`] order: median ms.
    stages: Vec<f64>,
    total_ms: f64,
    /// 90th percentile of the end-to-end time (nearest rank).
    total_p90_ms: f64,
    /// The first timed request's end-to-end time (with `--warmup 0`: the first after the load).
    first_ms: f64,
    /// Median CPU time of all threads per request.
    cpu_ms: f64,
    /// Vision cache hits and misses per timed request (loop mode), summed.
    hits: u64,
    misses: u64,
    /// Prompt length of the timed requests.
    seq_len: usize,
}

/// Why `gr00t bench` failed (exit code 1).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// `--runs 0`.
    #[error("--runs must be at least 1")]
    NoRuns,
    /// The checkpoint cannot be opened.
    #[error(transparent)]
    Model(#[from] gr00t_model::Error),
    /// The engine did not load.
    #[error("cannot load the {what}: {cause}")]
    Load {
        /// Which model (`model`, `f32 model`).
        what: &'static str,
        /// The engine's reason.
        #[source]
        cause: gr00t_core::LoadError,
    },
    /// The real-time control loop failed.
    #[error(transparent)]
    Loop(#[from] control_loop::LoopError),
    /// The engine names a backend this build does not know.
    #[error(transparent)]
    Backend(#[from] gr00t_model::SettingError),
    /// The built-in demo request lacks a camera's t frame.
    #[error("demo request lacks images.{0}[1]")]
    DemoFrame(String),
    /// The demo frame does not decode.
    #[error(transparent)]
    Frame(#[from] gr00t_embodiment::image::ImageError),
    /// A shifted frame's bytes do not fit its size.
    #[error("frame size mismatch")]
    FrameSize,
    /// A shifted frame does not encode as PNG.
    #[error(transparent)]
    Png(#[from] image::ImageError),
    /// The demo request is not the JSON expected.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// The engine refused the bench's own request.
    #[error("the bench request was refused: {0}")]
    Refused(gr00t_core::error::FieldError),
    /// The engine failed on the request.
    #[error("{0}")]
    Internal(#[source] gr00t_core::error::InternalError),
    /// The request was not answered otherwise.
    #[error(transparent)]
    Infer(InferError),
    /// /proc does not say what the bench reads from it.
    #[error("{0}")]
    Proc(&'static str),
    /// /proc cannot be read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Runs the benchmark; returns the process exit code.
pub fn run(opts: &BenchOptions) -> Result<i32, BenchError> {
    if opts.runs == 0 {
        return Err(BenchError::NoRuns);
    }
    let ckpt = Checkpoint::open(&opts.checkpoint)?;
    let engine = Engine::load(&EngineOptions {
        checkpoint: opts.checkpoint.clone(),
        tokenizer: None,
        device: opts.device.clone(),
        embodiments: Vec::new(),
        weight_cache: None,
    })
    .map_err(|cause| BenchError::Load {
        what: "model",
        cause,
    })?;
    let info = engine.info().clone();
    if info.synthetic_weights {
        tracing::warn!("SYNTHETIC checkpoint: pseudo-random weights (fine for timing)");
    }
    if opts.warm_up_pass {
        let t = std::time::Instant::now();
        engine.warm_up_pass().map_err(BenchError::Infer)?;
        tracing::info!(
            "warm-up pass over the layers done in {:.2} s",
            t.elapsed().as_secs_f64()
        );
    }
    if opts.interleave_f32 {
        return interleaved(&engine, opts);
    }
    if let Some(lo) = &opts.realtime {
        return Ok(control_loop::run(Arc::new(engine), opts, lo)?);
    }
    let summary = if opts.control_loop {
        control_loop(&engine, opts)?
    } else {
        cold(&engine, opts)?
    };
    let backend: DenoiseBackend = info.denoise_backend.parse()?;
    let seq_len = summary.seq_len;
    let mut flops = request_flops(
        &ckpt.config,
        &ckpt.backbone,
        &RequestShape::droid(seq_len),
        backend,
    );
    // In the loop only the images missing from the cache go through the tower.
    if summary.hits + summary.misses > 0 {
        flops.vision *= summary.misses as f64 / (summary.hits + summary.misses) as f64;
    }
    // The DiT blocks' weights the Euler steps read, each step from memory: bf16 (the f32
    // kernels widen them in registers), one byte under int8.
    let int8_dit = info.int8_stages.contains(&"dit");
    let (weight_bytes, weight_type) = if int8_dit {
        (1.0, "int8")
    } else {
        (2.0, "bf16")
    };
    let denoise_weight_gb = ckpt.config.num_inference_timesteps as f64
        * denoise_step_weights(&ckpt.config, backend)
        * weight_bytes
        / 1e9;
    let peak_rss_mb = peak_rss_mb()?;
    if opts.json {
        let mut stages = serde_json::Map::new();
        for (name, &ms) in STAGES.iter().zip(&summary.stages) {
            stages.insert(
                name.to_string(),
                json!({"median_ms": round3(ms), "gflop": round3(stage_flops(&flops, name) / 1e9)}),
            );
        }
        let out = json!({
            "stages": stages,
            "total_ms": round3(summary.total_ms),
            "first_ms": round3(summary.first_ms),
            "cpu_ms": round3(summary.cpu_ms),
            "denoise_weight_gb": round3(denoise_weight_gb),
            "peak_rss_mb": round3(peak_rss_mb),
            "threads": info.threads,
            "cpu_kernel": info.cpu_kernel,
            "cpu_blocks": info.cpu_blocks,
            "dtype": info.dtype,
            "int8_kernel": info.int8_kernel,
            "int8_stages": info.int8_stages,
            "int8_smooth": info.int8_smooth,
            "denoise_backend": info.denoise_backend,
            "vision_cache_images": info.vision_cache_images,
        });
        println!("{out}");
        return Ok(0);
    }
    let scenario = if opts.control_loop {
        "control loop (t−15 frames = previous t frames; vision cache on)"
    } else {
        "cold request (vision cache emptied before each run)"
    };
    print_title(&opts.checkpoint, info.synthetic_weights);
    println!(
        "scenario: {scenario}; {} timed runs after {} warm-up; seq_len {seq_len}",
        opts.runs, opts.warmup
    );
    println!(
        "threads {}, dtype {}, denoise backend {}, CPU kernel {} [{}], device {}",
        info.threads,
        info.dtype,
        info.denoise_backend,
        info.kernels(),
        info.cpu_blocks,
        info.device
    );
    if opts.control_loop {
        println!(
            "vision cache per timed request: {:.1} hits, {:.1} misses",
            summary.hits as f64 / opts.runs as f64,
            summary.misses as f64 / opts.runs as f64
        );
    }
    println!(
        "{:<16}{:>12}{:>12}{:>12}",
        "stage", "median ms", "GFLOP", "GFLOP/s"
    );
    for (name, &ms) in STAGES.iter().zip(&summary.stages) {
        let gflop = stage_flops(&flops, name) / 1e9;
        if gflop > 0.0 {
            println!(
                "{name:<16}{ms:>12.1}{gflop:>12.1}{:>12.1}",
                gflop / (ms / 1e3)
            );
        } else {
            println!("{name:<16}{ms:>12.1}{:>12}{:>12}", "-", "-");
        }
    }
    let total_gflop = flops.total() / 1e9;
    println!(
        "{:<16}{:>12.1}{total_gflop:>12.1}{:>12.1}",
        "total",
        summary.total_ms,
        total_gflop / (summary.total_ms / 1e3)
    );
    let denoise_ms = STAGES
        .iter()
        .zip(&summary.stages)
        .find(|(name, _)| **name == "denoise")
        .map_or(f64::NAN, |(_, &ms)| ms);
    println!(
        "denoise streams {denoise_weight_gb:.2} GB of {weight_type} DiT weights ({} steps): {:.1} GB/s",
        ckpt.config.num_inference_timesteps,
        denoise_weight_gb / (denoise_ms / 1e3)
    );
    println!(
        "end to end over {} runs: median {:.1} ms, p90 {:.1} ms, first {:.1} ms ({} untimed before it)",
        opts.runs, summary.total_ms, summary.total_p90_ms, summary.first_ms, opts.warmup
    );
    println!(
        "CPU time per request (all threads): median {:.1} ms",
        summary.cpu_ms
    );
    println!("peak RSS {peak_rss_mb:.0} MB (VmHWM)");
    Ok(0)
}

/// Cold requests alternating between `engine` and an f32 engine of the same checkpoint: both
/// see the same load, so their ratio holds on a shared machine where two separate processes
/// minutes apart do not. Prints per-stage medians of both, the ratio of medians and the median
/// of the per-pair ratios of the whole request.
fn interleaved(engine: &Engine, opts: &BenchOptions) -> Result<i32, BenchError> {
    let mut f32_device = opts.device.clone();
    f32_device.dtype = Some(crate::device::DtypeSetting::F32);
    let base = Engine::load(&EngineOptions {
        checkpoint: opts.checkpoint.clone(),
        tokenizer: None,
        device: f32_device,
        embodiments: Vec::new(),
        weight_cache: None,
    })
    .map_err(|cause| BenchError::Load {
        what: "f32 model",
        cause,
    })?;
    let body = DEMO_REQUEST.as_bytes();
    let run = |e: &Engine| {
        e.clear_vision_cache();
        predict(e, body)
    };
    for _ in 0..opts.warmup {
        run(engine)?;
        run(&base)?;
    }
    let (mut ours, mut theirs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..opts.runs {
        // Alternate which goes first, so neither always follows the other.
        let (a, b) = if i % 2 == 0 {
            let a = run(engine)?;
            (a, run(&base)?)
        } else {
            let b = run(&base)?;
            (run(engine)?, b)
        };
        ratios.push(a.0.total / b.0.total);
        ours.push(a);
        theirs.push(b);
    }
    let (ours, theirs) = (summarise(&ours, 0, 0), summarise(&theirs, 0, 0));
    let (a, b) = (engine.info(), base.info());
    let pair_ratio = median(ratios);
    let peak_rss_mb = peak_rss_mb()?;
    if opts.json {
        let side = |s: &Summary| {
            let stages: serde_json::Map<String, Value> = STAGES
                .iter()
                .zip(&s.stages)
                .map(|(n, &ms)| (n.to_string(), json!({"median_ms": round3(ms)})))
                .collect();
            json!({"stages": stages, "total_ms": round3(s.total_ms), "cpu_ms": round3(s.cpu_ms)})
        };
        println!(
            "{}",
            json!({
                "dtype": a.dtype, "cpu_kernel": a.cpu_kernel, "threads": a.threads,
                "int8_kernel": a.int8_kernel, "int8_stages": a.int8_stages,
                "runs": side(&ours),
                "f32": side(&theirs), "f32_cpu_kernel": b.cpu_kernel,
                "total_ratio_median_of_pairs": round3(pair_ratio),
                "peak_rss_mb_both_models": round3(peak_rss_mb),
            })
        );
        return Ok(0);
    }
    println!(
        "gr00t bench: {} — {} runs alternating with f32 after {} warm-up each; threads {}",
        opts.checkpoint.display(),
        opts.runs,
        opts.warmup,
        a.threads
    );
    println!("{}: {}; f32: {}", a.dtype, a.kernels(), b.kernels());
    let (da, db) = (
        format!("{} ({})", a.dtype, a.cpu_kernel),
        format!("{} ({})", b.dtype, b.cpu_kernel),
    );
    println!("{:<16}{da:>22}{db:>22}{:>8}", "stage ms", "ratio");
    let rows = STAGES
        .iter()
        .zip(ours.stages.iter().zip(&theirs.stages))
        .map(|(n, (&x, &y))| (n.to_string(), x, y))
        .chain([
            ("total".to_string(), ours.total_ms, theirs.total_ms),
            ("CPU time".to_string(), ours.cpu_ms, theirs.cpu_ms),
        ]);
    for (name, x, y) in rows {
        println!("{name:<16}{x:>22.1}{y:>22.1}{:>8.3}", x / y);
    }
    println!("whole request, median of the per-pair ratios: {pair_ratio:.3}");
    println!("peak RSS {peak_rss_mb:.0} MB (VmHWM, both models loaded)");
    Ok(0)
}

/// Cold requests: every run encodes all four frames.
fn cold(engine: &Engine, opts: &BenchOptions) -> Result<Summary, BenchError> {
    let body = DEMO_REQUEST.as_bytes();
    for _ in 0..opts.warmup {
        engine.clear_vision_cache();
        predict(engine, body)?;
    }
    let mut timings = Vec::with_capacity(opts.runs);
    for _ in 0..opts.runs {
        engine.clear_vision_cache();
        timings.push(predict(engine, body)?);
    }
    Ok(summarise(&timings, 0, 0))
}

/// A control loop over distinct frames: request k shows frames k and k+1 of each camera.
fn control_loop(engine: &Engine, opts: &BenchOptions) -> Result<Summary, BenchError> {
    let requests = opts.warmup.max(1) + opts.runs;
    let bodies = loop_requests(requests)?;
    engine.clear_vision_cache();
    // The first request of a loop is cold: always untimed.
    let timed_from = opts.warmup.max(1);
    let mut timings = Vec::with_capacity(opts.runs);
    let (mut hits, mut misses) = (0, 0);
    for (k, body) in bodies.iter().enumerate() {
        let before = engine.vision_cache_stats();
        let t = predict(engine, body)?;
        let after = engine.vision_cache_stats();
        if k >= timed_from {
            hits += after.hits - before.hits;
            misses += after.misses - before.misses;
            timings.push(t);
        }
    }
    Ok(summarise(&timings, hits, misses))
}

/// `count` demo bodies whose frames walk through a sequence: camera c's frame j is the demo's
/// t frame of c shifted right by j pixels (wrapping), so every frame is new pixels, and request
/// k sends frames k (as t−15) and k+1 (as t).
fn loop_requests(count: usize) -> Result<Vec<Vec<u8>>, BenchError> {
    let demo: Value = serde_json::from_str(DEMO_REQUEST)?;
    let mut sequences = Vec::with_capacity(CAMERAS.len());
    for cam in CAMERAS {
        let t_frame = demo["images"][cam][1]
            .as_str()
            .ok_or_else(|| BenchError::DemoFrame(cam.to_string()))?;
        let frame = decode_base64_frame(t_frame)?;
        let frames = (0..=count)
            .map(|j| {
                encode_png(
                    frame.width,
                    frame.height,
                    &shift_right(&frame.data, frame.width, j),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        sequences.push(frames);
    }
    let mut bodies = Vec::with_capacity(count);
    for k in 0..count {
        let mut req = demo.clone();
        for (cam, frames) in CAMERAS.iter().zip(&sequences) {
            req["images"][*cam] = json!([frames[k], frames[k + 1]]);
        }
        bodies.push(serde_json::to_vec(&req)?);
    }
    Ok(bodies)
}

/// RGB8 rows shifted right by `by` pixels, wrapping around.
fn shift_right(data: &[u8], width: usize, by: usize) -> Vec<u8> {
    let row = 3 * width;
    let cut = 3 * (width - by % width);
    data.chunks(row)
        .flat_map(|r| r[cut..].iter().chain(&r[..cut]).copied())
        .collect()
}

/// A base64 PNG of an RGB8 frame.
fn encode_png(width: usize, height: usize, rgb: &[u8]) -> Result<String, BenchError> {
    let img = image::RgbImage::from_raw(width as u32, height as u32, rgb.to_vec())
        .ok_or(BenchError::FrameSize)?;
    let mut png = std::io::Cursor::new(Vec::new());
    img.write_to(&mut png, image::ImageFormat::Png)?;
    Ok(STANDARD.encode(png.into_inner()))
}

/// Stage timings, sequence length and CPU ms of one request.
fn predict(engine: &Engine, body: &[u8]) -> Result<(TimingMs, usize, f64), BenchError> {
    let cpu0 = process_cpu_ms()?;
    let resp = crate::predict_body(engine, body);
    let cpu = process_cpu_ms()? - cpu0;
    match resp {
        Ok(resp) => Ok((resp.timing_ms, resp.seq_len, cpu)),
        Err(InferError::Invalid(e)) => Err(BenchError::Refused(e)),
        Err(InferError::Internal(m)) => Err(BenchError::Internal(m)),
        Err(e) => Err(BenchError::Infer(e)),
    }
}

fn summarise(runs: &[(TimingMs, usize, f64)], hits: u64, misses: u64) -> Summary {
    let timings: Vec<&TimingMs> = runs.iter().map(|(t, _, _)| t).collect();
    let pick = |f: &dyn Fn(&TimingMs) -> f64| median(timings.iter().map(|t| f(t)).collect());
    let stages = STAGES
        .iter()
        .map(|&name| pick(&|t: &TimingMs| stage_ms(t, name)))
        .collect();
    Summary {
        stages,
        total_ms: pick(&|t: &TimingMs| t.total),
        total_p90_ms: percentile(timings.iter().map(|t| t.total).collect(), 0.9),
        first_ms: timings.first().map_or(f64::NAN, |t| t.total),
        cpu_ms: median(runs.iter().map(|r| r.2).collect()),
        hits,
        misses,
        seq_len: runs.last().map_or(0, |r| r.1),
    }
}

fn stage_ms(t: &TimingMs, name: &str) -> f64 {
    match name {
        "decode" => t.decode,
        "encode" => t.encode,
        "vision" => t.vision.unwrap_or(0.0),
        "llm" => t.llm.unwrap_or(0.0),
        "adapter" => t.adapter.unwrap_or(0.0),
        "denoise" => t.denoise.unwrap_or(0.0),
        "decode_actions" => t.decode_actions,
        _ => 0.0,
    }
}

fn stage_flops(f: &StageFlops, name: &str) -> f64 {
    match name {
        "vision" => f.vision,
        "llm" => f.llm,
        "adapter" => f.adapter,
        "denoise" => f.denoise,
        _ => 0.0,
    }
}

/// Median (mean of the middle two for an even count); 0 for none.
fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Nearest-rank percentile `q` (0..=1); 0 for none.
fn percentile(mut v: Vec<f64>, q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let rank = (q * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

/// CPU time all threads of this process have run so far, in ms (the first field of each
/// `/proc/self/task/*/schedstat`, in ns).
fn process_cpu_ms() -> Result<f64, BenchError> {
    let mut ns = 0u64;
    for task in std::fs::read_dir("/proc/self/task")? {
        // A thread may exit between the listing and the read.
        let Ok(stat) = std::fs::read_to_string(task?.path().join("schedstat")) else {
            continue;
        };
        ns += stat
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or(BenchError::Proc("unreadable /proc/self/task/*/schedstat"))?;
    }
    Ok(ns as f64 / 1e6)
}

/// Peak resident set size of this process in MB (`VmHWM` of /proc/self/status).
fn peak_rss_mb() -> Result<f64, BenchError> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or(BenchError::Proc("no VmHWM line in /proc/self/status"))?;
    Ok(kb / 1024.0)
}

/// The first line of a table: the checkpoint, and whether its weights are synthetic.
pub(crate) fn print_title(checkpoint: &std::path::Path, synthetic: bool) {
    let note = if synthetic {
        " (synthetic weights)"
    } else {
        ""
    };
    println!("gr00t bench: {}{note}", checkpoint.display());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![]), 0.0);
    }

    #[test]
    fn p90_is_the_nearest_rank() {
        let v: Vec<f64> = (1..=50).map(f64::from).collect();
        assert_eq!(percentile(v, 0.9), 45.0);
        assert_eq!(percentile(vec![7.0, 1.0, 3.0], 0.9), 7.0);
        assert_eq!(percentile(vec![2.0], 0.9), 2.0);
        assert_eq!(percentile(vec![], 0.9), 0.0);
    }

    #[test]
    fn shifting_wraps_each_row() {
        // Two rows of three pixels (one byte per channel shown as the pixel index).
        let px = |i: u8| [i, i, i];
        let data: Vec<u8> = (0..6).flat_map(px).collect();
        let shifted = shift_right(&data, 3, 1);
        let want: Vec<u8> = [2, 0, 1, 5, 3, 4].into_iter().flat_map(px).collect();
        assert_eq!(shifted, want);
        assert_eq!(shift_right(&data, 3, 3), data);
    }

    #[test]
    fn loop_requests_pass_each_t_frame_on_as_the_next_t_minus_15() {
        let bodies = loop_requests(3).unwrap();
        let parsed: Vec<Value> = bodies
            .iter()
            .map(|b| serde_json::from_slice(b).unwrap())
            .collect();
        for cam in CAMERAS {
            for k in 0..2 {
                assert_eq!(parsed[k]["images"][cam][1], parsed[k + 1]["images"][cam][0]);
                assert_ne!(parsed[k]["images"][cam][0], parsed[k]["images"][cam][1]);
            }
        }
    }

    #[test]
    fn cpu_time_is_read_and_never_decreases() {
        let a = process_cpu_ms().unwrap();
        let b = process_cpu_ms().unwrap();
        assert!(a > 0.0 && b >= a, "{a} then {b}");
    }

    #[test]
    fn peak_rss_is_read() {
        assert!(peak_rss_mb().unwrap() > 0.0);
    }
}
