//! Test support for gr00t-rs: where the bundled golden fixtures live, how to load their taps,
//! and the comparison metrics the parity gates use.

pub mod http_client;

use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::PathBuf;

/// The four golden cases produced by NVIDIA's reference code.
pub const CASES: [&str; 4] = ["case0", "case1", "case2", "case3"];

/// Environment variable naming the device the device-generic tests run on: `cpu` (default),
/// `cuda` or `cuda:N` (needs a binary built with the `cuda` feature and a GPU).
pub const TEST_DEVICE_ENV: &str = "GR00T_TEST_DEVICE";

/// The device named by [`TEST_DEVICE_ENV`]; panics with the reason when it cannot be opened.
pub fn test_device() -> Device {
    let name = std::env::var(TEST_DEVICE_ENV).unwrap_or_default();
    let name = name.trim();
    if name.is_empty() || name == "cpu" {
        return Device::Cpu;
    }
    let ordinal = match name.strip_prefix("cuda") {
        Some("") => 0,
        Some(rest) => rest
            .strip_prefix(':')
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{TEST_DEVICE_ENV}={name:?}: use cpu, cuda or cuda:N")),
        None => panic!("{TEST_DEVICE_ENV}={name:?}: use cpu, cuda or cuda:N"),
    };
    Device::new_cuda(ordinal).unwrap_or_else(|e| panic!("{TEST_DEVICE_ENV}={name:?}: {e}"))
}

/// Environment variable pointing prebuilt test binaries at a copy of the repository (for
/// running them on another machine, e.g. the GPU check bundle of scripts/build-cuda.sh).
pub const REPO_ROOT_ENV: &str = "GR00T_REPO_ROOT";

/// Root of the project: `$GR00T_REPO_ROOT`, else the workspace this crate was built in.
pub fn repo_root() -> PathBuf {
    match std::env::var_os(REPO_ROOT_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."),
    }
}

/// `tests/fixtures/gr00t_n17_tiny` inside the repository.
pub fn tiny_dir() -> PathBuf {
    repo_root().join("tests/fixtures/gr00t_n17_tiny")
}

/// The tiny checkpoint folder.
pub fn tiny_checkpoint() -> PathBuf {
    tiny_dir().join("checkpoint")
}

/// A case folder, e.g. `case_dir("case0")`.
pub fn case_dir(case: &str) -> PathBuf {
    tiny_dir().join(case)
}

/// The eight multi-embodiment cases (`tests/fixtures/gr00t_n17_tiny_multi`), two per tag.
pub const MULTI_CASES: [&str; 8] = [
    "case_simpler_env_google_1",
    "case_simpler_env_google_2",
    "case_simpler_env_widowx_1",
    "case_simpler_env_widowx_2",
    "case_new_embodiment_1",
    "case_new_embodiment_2",
    "case_real_r1_pro_sharpa_relative_eef_1",
    "case_real_r1_pro_sharpa_relative_eef_2",
];

/// `tests/fixtures/gr00t_n17_tiny_multi`: the tiny model with four more embodiments.
pub fn multi_dir() -> PathBuf {
    repo_root().join("tests/fixtures/gr00t_n17_tiny_multi")
}

/// The multi-embodiment checkpoint folder.
pub fn multi_checkpoint() -> PathBuf {
    multi_dir().join("checkpoint")
}

/// The LIBERO-like and 4×4-EEF cases of `tests/fixtures/gr00t_n17_tiny_extra` (checkpoint
/// variant `checkpoint`).
pub const EXTRA_CASES: [&str; 4] = [
    "case_libero_sim_1",
    "case_libero_sim_2",
    "case_new_embodiment_eef4x4_1",
    "case_new_embodiment_eef4x4_2",
];

/// The image-pipeline cases of the extra fixture, each on its own checkpoint variant
/// (`letter_box_transform: true`; `use_albumentations: false`).
pub const EXTRA_IMAGE_CASES: [&str; 2] = ["case_letterbox_1", "case_torchvision_1"];

/// `tests/fixtures/gr00t_n17_tiny_extra`: more embodiments on the tiny model, JSON files only.
pub fn extra_dir() -> PathBuf {
    repo_root().join("tests/fixtures/gr00t_n17_tiny_extra")
}

/// A loadable checkpoint folder for an extra-fixture variant (`checkpoint`,
/// `checkpoint_letterbox`, `checkpoint_torchvision`): assembled once per process in a temp
/// folder from `gr00t_n17_tiny`'s model files (linked) and the variant's JSON files (copied).
pub fn extra_checkpoint(variant: &str) -> PathBuf {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let src = extra_dir().join(variant);
    assert!(src.is_dir(), "no extra-fixture variant {}", src.display());
    let dst = std::env::temp_dir().join(format!("gr00t-extra-{}-{variant}", std::process::id()));
    if dst.join(".complete").exists() {
        return dst;
    }
    let _ = std::fs::remove_dir_all(&dst);
    std::fs::create_dir_all(&dst).expect("temp checkpoint dir");
    let tiny = tiny_checkpoint();
    for name in ["config.json", "model.safetensors", "backbone"] {
        link_or_copy(&tiny.join(name), &dst.join(name));
    }
    for entry in std::fs::read_dir(&src).expect("variant dir") {
        let path = entry.expect("entry").path();
        std::fs::copy(&path, dst.join(path.file_name().unwrap())).expect("copy JSON");
    }
    std::fs::write(dst.join(".complete"), b"").expect("marker");
    dst
}

/// The checkpoint variant an extra case runs on (its `case_info.json` `checkpoint`).
pub fn extra_case_checkpoint(case: &str) -> PathBuf {
    let info: serde_json::Value = serde_json::from_slice(
        &std::fs::read(extra_dir().join(case).join("case_info.json")).expect("case_info.json"),
    )
    .expect("case_info.json");
    extra_checkpoint(info["checkpoint"].as_str().expect("checkpoint"))
}

fn link_or_copy(from: &std::path::Path, to: &std::path::Path) {
    let from = from.canonicalize().expect("tiny checkpoint file");
    #[cfg(unix)]
    if std::os::unix::fs::symlink(&from, to).is_ok() {
        return;
    }
    if from.is_dir() {
        std::fs::create_dir_all(to).expect("dir");
        for entry in std::fs::read_dir(&from).expect("dir") {
            let p = entry.expect("entry").path();
            std::fs::copy(&p, to.join(p.file_name().unwrap())).expect("copy");
        }
    } else {
        std::fs::copy(&from, to).expect("copy");
    }
}

/// One multi-embodiment case: its observation and what NVIDIA's code returned.
pub struct MultiCase {
    /// Case folder name.
    pub name: String,
    /// Case folder.
    pub dir: PathBuf,
    /// Embodiment tag.
    pub tag: String,
    /// Raw instruction.
    pub instruction: String,
    /// State keys in the observation's order with their float32 values.
    pub state: Vec<(String, Vec<f32>)>,
    /// `[40][132]` initial noise, flattened.
    pub noise: Vec<f32>,
    /// The language key the observation's instruction goes under.
    pub language_key: String,
    /// Each view with its frame files (PNG, oldest first, relative to [`MultiCase::dir`]).
    pub video: Vec<(String, Vec<String>)>,
    /// `outputs.safetensors`.
    pub outputs: Taps,
}

impl MultiCase {
    /// Loads a case of [`MULTI_CASES`].
    pub fn load(name: &str) -> MultiCase {
        Self::load_from(&multi_dir(), name)
    }

    /// Loads a case of [`EXTRA_CASES`] or [`EXTRA_IMAGE_CASES`].
    pub fn load_extra(name: &str) -> MultiCase {
        Self::load_from(&extra_dir(), name)
    }

    /// Loads the case folder `root/name` (observation.json + outputs.safetensors).
    pub fn load_from(root: &std::path::Path, name: &str) -> MultiCase {
        let dir = root.join(name);
        let obs: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("observation.json")).expect("obs"))
                .expect("observation.json");
        let state = obs["state"]
            .as_object()
            .expect("state")
            .iter()
            .map(|(k, v)| (k.clone(), json_f32s(v)))
            .collect();
        let video = obs["video"]
            .as_object()
            .expect("video")
            .iter()
            .map(|(view, files)| {
                let files = files.as_array().expect("frame files").iter();
                let files = files.map(|f| f.as_str().expect("file name").to_string());
                (view.clone(), files.collect())
            })
            .collect();
        MultiCase {
            name: name.to_string(),
            outputs: Taps::from_file(&dir.join("outputs.safetensors")),
            dir,
            tag: obs["embodiment_tag"].as_str().expect("tag").to_string(),
            instruction: obs["instruction"].as_str().expect("instr").to_string(),
            state,
            noise: json_rows(&obs["noise"]),
            language_key: obs["language_key"]
                .as_str()
                .expect("language_key")
                .to_string(),
            video,
        }
    }

    /// The case's HTTP request body file (`request.json`).
    pub fn request_path(&self) -> PathBuf {
        self.dir.join("request.json")
    }

    /// Asserts that `ours` is the case's `action.<key>` to within `1e-5·max(1, max|ref|)` (and
    /// as long); returns the largest difference.
    pub fn assert_action(&self, key: &str, ours: &[f32]) -> f32 {
        let want = self.outputs.f32s(&format!("action.{key}"));
        assert_eq!(ours.len(), want.len(), "{} {key}: length", self.name);
        let scale = want.iter().fold(1.0f32, |m, x| m.max(x.abs()));
        let d = max_abs_diff(ours, &want);
        assert!(d <= 1e-5 * scale, "{} {key}: max|Δ| {d:e}", self.name);
        d
    }

    /// The state as `(key, values)` pairs.
    pub fn raw_state(&self) -> Vec<(&str, &[f32])> {
        self.state
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_slice()))
            .collect()
    }
}

/// The bundled Qwen3 tokenizer.
pub fn tokenizer_path() -> PathBuf {
    repo_root().join("assets/tokenizer/qwen3/tokenizer.json")
}

/// The recorded tensors of one case.
pub struct Taps {
    tensors: HashMap<String, Tensor>,
}

impl Taps {
    /// Loads `taps.safetensors` of a case.
    pub fn load(case: &str) -> Taps {
        Taps::from_file(&case_dir(case).join("taps.safetensors"))
    }

    /// Loads any safetensors file of recorded tensors.
    pub fn from_file(path: &std::path::Path) -> Taps {
        let tensors = candle_core::safetensors::load(path, &Device::Cpu)
            .unwrap_or_else(|e| panic!("loading {}: {e}", path.display()));
        Taps { tensors }
    }

    /// The `__metadata__` strings of a case's `taps.safetensors` header.
    pub fn metadata(case: &str) -> HashMap<String, String> {
        let path = case_dir(case).join("taps.safetensors");
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + len])
            .unwrap_or_else(|e| panic!("{}: header: {e}", path.display()));
        header["__metadata__"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every tap name, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut n: Vec<String> = self.tensors.keys().cloned().collect();
        n.sort();
        n
    }

    /// Whether a tap exists in this case (some taps exist only in case0/case3).
    pub fn has(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// A tap as a tensor in its stored dtype.
    pub fn get(&self, name: &str) -> Tensor {
        self.tensors
            .get(name)
            .unwrap_or_else(|| panic!("tap {name} missing"))
            .clone()
    }

    /// A float tap flattened to f32.
    pub fn f32s(&self, name: &str) -> Vec<f32> {
        flat_f32(&self.get(name))
    }

    /// An integer tap flattened to i64.
    pub fn i64s(&self, name: &str) -> Vec<i64> {
        let t = self.get(name);
        t.to_dtype(DType::I64)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<i64>())
            .unwrap_or_else(|e| panic!("tap {name}: {e}"))
    }

    /// A u8 tap flattened.
    pub fn u8s(&self, name: &str) -> Vec<u8> {
        let t = self.get(name);
        t.flatten_all()
            .and_then(|t| t.to_vec1::<u8>())
            .unwrap_or_else(|e| panic!("tap {name}: {e}"))
    }

    /// The shape of a tap.
    pub fn dims(&self, name: &str) -> Vec<usize> {
        self.get(name).dims().to_vec()
    }
}

/// The 40×132 noise of seed `seed` from `noise_seeds.safetensors`.
pub fn noise_seed(seed: u64) -> Vec<f32> {
    let path = tiny_dir().join("noise_seeds.safetensors");
    let all = candle_core::safetensors::load(&path, &Device::Cpu).expect("noise_seeds");
    flat_f32(&all[&format!("seed_{seed}")])
}

/// The seeds stored in `noise_seeds.safetensors`.
pub fn noise_seeds() -> Vec<u64> {
    let path = tiny_dir().join("noise_seeds.safetensors");
    let all = candle_core::safetensors::load(&path, &Device::Cpu).expect("noise_seeds");
    let mut seeds: Vec<u64> = all
        .keys()
        .filter_map(|k| k.strip_prefix("seed_")?.parse().ok())
        .collect();
    seeds.sort();
    seeds
}

/// A case's `case_info.json`.
pub fn case_info(case: &str) -> serde_json::Value {
    let path = case_dir(case).join("case_info.json");
    serde_json::from_slice(&std::fs::read(&path).expect("case_info")).expect("case_info json")
}

/// A case's `request.json` as text.
pub fn request_json(case: &str) -> String {
    std::fs::read_to_string(case_dir(case).join("request.json")).expect("request.json")
}

/// A JSON array of numbers as f32.
pub fn json_f32s(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap_or_else(|| panic!("not a number: {x}")) as f32)
        .collect()
}

/// A JSON array of rows of numbers (`[[f32; D]; T]`), flattened row-major.
pub fn json_rows(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array of rows: {v}"))
        .iter()
        .flat_map(json_f32s)
        .collect()
}

/// The value of the sample of `series` (a metric name with its labels, exactly as exposed) in
/// a Prometheus text exposition; `None` when absent.
pub fn metric_sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|e| panic!("{series}: bad value {v:?}: {e}"))
        })
}

/// [`metric_sample`], which must be there.
pub fn metric_value(text: &str, series: &str) -> f64 {
    metric_sample(text, series).unwrap_or_else(|| panic!("no sample {series} in\n{text}"))
}

/// One option set of the RTC goldens (`tests/fixtures/rtc/settings.json`).
pub struct RtcSetting {
    /// The set's name (its taps are `action_pred.<name>`).
    pub name: String,
    /// `action_horizon`.
    pub action_horizon: usize,
    /// `rtc_overlap_steps`.
    pub overlap_steps: usize,
    /// `rtc_frozen_steps`.
    pub frozen_steps: usize,
    /// `rtc_ramp_rate`.
    pub ramp_rate: f64,
}

/// The RTC goldens of NVIDIA's action head (`tests/fixtures/rtc`): the recorded tensors of
/// `rtc.safetensors` and the three option sets.
pub fn rtc_goldens() -> (Taps, Vec<RtcSetting>) {
    let dir = repo_root().join("tests/fixtures/rtc");
    let taps = Taps::from_file(&dir.join("rtc.safetensors"));
    let info: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("settings.json")).expect("settings.json"),
    )
    .expect("settings.json");
    let settings = info["settings"]
        .as_array()
        .expect("settings")
        .iter()
        .map(|s| {
            let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k}")) as usize;
            RtcSetting {
                name: s["name"].as_str().expect("name").to_string(),
                action_horizon: n("action_horizon"),
                overlap_steps: n("rtc_overlap_steps"),
                frozen_steps: n("rtc_frozen_steps"),
                ramp_rate: s["rtc_ramp_rate"].as_f64().expect("rtc_ramp_rate"),
            }
        })
        .collect::<Vec<_>>();
    assert_eq!(settings.len(), 3);
    (taps, settings)
}

/// Any tensor flattened to f32.
pub fn flat_f32(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .expect("tensor to f32")
}

/// Pearson correlation of two equally long series (computed in f64).
pub fn pearson(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "pearson: length mismatch");
    let n = a.len() as f64;
    let ma = a.iter().map(|&x| x as f64).sum::<f64>() / n;
    let mb = b.iter().map(|&x| x as f64).sum::<f64>() / n;
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (&x, &y) in a.iter().zip(b) {
        let (dx, dy) = (x as f64 - ma, y as f64 - mb);
        sab += dx * dy;
        saa += dx * dx;
        sbb += dy * dy;
    }
    if saa == 0.0 && sbb == 0.0 {
        return 1.0;
    }
    sab / (saa.sqrt() * sbb.sqrt())
}

/// Largest absolute difference.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "max_abs_diff: length mismatch");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Largest absolute value.
pub fn max_abs(a: &[f32]) -> f32 {
    a.iter().map(|x| x.abs()).fold(0.0, f32::max)
}

/// The network gate of the fixtures: Pearson r ≥ `min_r` and max |Δ| ≤ `rel`·max|ref|.
pub fn assert_tap_close(name: &str, ours: &[f32], reference: &[f32], min_r: f64, rel: f32) {
    assert_eq!(ours.len(), reference.len(), "{name}: length mismatch");
    assert!(
        ours.iter().all(|x| x.is_finite()),
        "{name}: non-finite output"
    );
    let r = pearson(ours, reference);
    let d = max_abs_diff(ours, reference);
    let lim = rel * max_abs(reference);
    assert!(
        r >= min_r && d <= lim,
        "{name}: pearson {r:.8} (need ≥ {min_r}), max|Δ| {d:.3e} (limit {lim:.3e})"
    );
}

/// Elementwise absolute tolerance.
pub fn assert_abs_close(name: &str, ours: &[f32], reference: &[f32], tol: f32) {
    let d = max_abs_diff(ours, reference);
    assert!(d <= tol, "{name}: max|Δ| {d:.3e} > {tol:.1e}");
}

/// A tensor's values (widened to f32) as bit patterns, for bit-for-bit comparisons.
pub fn tensor_bits(t: &Tensor) -> Vec<u32> {
    flat_f32(t).iter().map(|x| x.to_bits()).collect()
}

/// How many pairs of `a` and `b` (zipped) are bit-identical.
pub fn bit_exact_count(a: &[f32], b: &[f32]) -> usize {
    a.iter()
        .zip(b)
        .filter(|(x, y)| x.to_bits() == y.to_bits())
        .count()
}

/// The largest [`ulp_diff`] over the pairs of `a` and `b` (zipped; panics when empty).
pub fn max_ulp_diff(a: &[f32], b: &[f32]) -> u32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| ulp_diff(x, y))
        .max()
        .expect("max_ulp_diff: no values")
}

/// CRC-32 (IEEE, as PNG chunks carry it) of `bytes`, for hand-made PNG headers.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A loopback TCP port that nothing listens on (bound by the OS, then released).
pub fn unused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// Difference in units in the last place between two f32 values (same sign assumed near zero).
pub fn ulp_diff(a: f32, b: f32) -> u32 {
    fn key(x: f32) -> i64 {
        let bits = x.to_bits() as i32 as i64;
        if bits < 0 {
            i32::MIN as i64 - bits
        } else {
            bits
        }
    }
    (key(a) - key(b)).unsigned_abs() as u32
}
