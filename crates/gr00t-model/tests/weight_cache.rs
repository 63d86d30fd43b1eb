//! The packed-weight cache (`gr00t_model::weight_cache`): a second load maps what the first
//! wrote and answers bit-identically; a truncated, bit-flipped or foreign file is refused and
//! rebuilt, never used; two loads writing at once leave one valid file.

mod common;

use candle_core::{DType, Device};
use gr00t_fixtures::Taps;
use gr00t_model::int8::{Int8Load, Int8Stages};
use gr00t_model::taps::Recorder;
use gr00t_model::weight_cache::{self, CacheKey, CacheLoad, CacheOutcome, Finished};
use gr00t_model::{Checkpoint, Gr00tModel};
use std::path::{Path, PathBuf};

/// A fresh folder for one test's cache.
fn cache_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gr00t-wcache-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn key(ck: &Checkpoint, precision: &str) -> CacheKey {
    CacheKey::new(
        &ck.digest().unwrap(),
        &ck.weight_files,
        &[("precision", precision.to_string())],
    )
}

/// The tiny model loaded int8 in every stage (every linear packed, on any CPU) through the
/// cache in `dir` ("int8"), or bf16 ("bf16"); with what became of the cache.
fn load(dir: &Path, precision: &str) -> (Gr00tModel, CacheOutcome) {
    let ck = Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
    let cache = CacheLoad::begin(dir, key(&ck, precision));
    let (model, cache) = weight_cache::loading_with(Some(cache), || match precision {
        "int8" => {
            Gr00tModel::load_int8(&ck, &Device::Cpu, &Int8Load::stages(Int8Stages::ALL), None)
        }
        _ => Gr00tModel::load_with(&ck, &Device::Cpu, DType::BF16, None),
    });
    let model = model.unwrap();
    let outcome = match cache.expect("the load hands its cache back").finish() {
        Finished::Done(o) => o,
        Finished::ToWrite(w) => w.write(),
    };
    (model, outcome)
}

fn actions(model: &Gr00tModel) -> Vec<u32> {
    let x = common::model_inputs(&Taps::load("case0"));
    let out = model.forward(&x, &Recorder::disabled()).unwrap();
    out.action_pred.iter().map(|v| v.to_bits()).collect()
}

/// The file a written outcome names, and how many weights it holds.
fn written(o: &CacheOutcome) -> (PathBuf, usize) {
    match o {
        CacheOutcome::Written { path, weights, .. } => (path.clone(), *weights),
        other => panic!("expected a written cache, got {other:?}"),
    }
}

fn assert_mapped(o: &CacheOutcome, weights: usize) {
    match o {
        CacheOutcome::Mapped { weights: w, .. } => assert_eq!(*w, weights, "{o}"),
        other => panic!("expected a mapped cache, got {other:?}"),
    }
}

#[test]
fn a_second_load_maps_the_first_ones_weights_and_answers_the_same_bits() {
    let dir = cache_dir("second");
    let (first, o1) = load(&dir, "int8");
    let (path, weights) = written(&o1);
    assert!(weights > 20, "{o1}");
    assert!(path.is_file());
    let (second, o2) = load(&dir, "int8");
    assert_mapped(&o2, weights);
    assert_eq!(actions(&first), actions(&second));
    // And both are what a load without the cache answers.
    let ck = Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
    let plain =
        Gr00tModel::load_int8(&ck, &Device::Cpu, &Int8Load::stages(Int8Stages::ALL), None).unwrap();
    assert_eq!(actions(&plain), actions(&second));
    // Another precision is another file.
    let (_, o3) = load(&dir, "bf16");
    assert!(matches!(o3, CacheOutcome::Written { .. }), "{o3}");
    assert_ne!(written(&o3).0, path);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Damages the cache file with `damage`, then loads: the file must be refused (named why),
/// rebuilt, and the answer be the undamaged one; a third load maps the rebuilt file.
fn refused_and_rebuilt(test: &str, damage: impl Fn(&Path), why: &str) {
    let dir = cache_dir(test);
    let (model, o1) = load(&dir, "int8");
    let (path, weights) = written(&o1);
    let want = actions(&model);
    damage(&path);
    let (again, o2) = load(&dir, "int8");
    match &o2 {
        CacheOutcome::Written {
            refused, path: p, ..
        } => {
            assert_eq!(p, &path);
            let refused = refused
                .as_deref()
                .unwrap_or_else(|| panic!("not refused: {o2}"));
            assert!(refused.contains(why), "{refused}");
        }
        other => panic!("a damaged file was used: {other:?}"),
    }
    assert_eq!(actions(&again), want);
    let (third, o3) = load(&dir, "int8");
    assert_mapped(&o3, weights);
    assert_eq!(actions(&third), want);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_truncated_file_is_refused_and_rebuilt() {
    refused_and_rebuilt(
        "truncated",
        |p| {
            let len = std::fs::metadata(p).unwrap().len();
            let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
            f.set_len(len - 4096).unwrap();
        },
        "bytes, its header says",
    );
}

#[test]
fn a_flipped_bit_in_a_weight_is_refused_and_rebuilt() {
    refused_and_rebuilt(
        "flipped",
        |p| {
            let mut bytes = std::fs::read(p).unwrap();
            // The middle of the last weight's panels, found through the documented preamble
            // (header length at 8, data offset at 16, the JSON header from 24).
            let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
            let (header_len, data) = (word(8) as usize, word(16) as usize);
            let header: serde_json::Value =
                serde_json::from_slice(&bytes[24..24 + header_len]).unwrap();
            let blob = &header["entries"].as_array().unwrap().last().unwrap()["blobs"][0];
            let at = data
                + blob["offset"].as_u64().unwrap() as usize
                + blob["len"].as_u64().unwrap() as usize / 2;
            bytes[at] ^= 0x04;
            std::fs::write(p, bytes).unwrap();
        },
        "checksum",
    );
}

#[test]
fn a_foreign_file_under_the_name_is_refused_and_rebuilt() {
    refused_and_rebuilt(
        "foreign",
        |p| {
            // A valid cache of the bf16 load, renamed to the int8 one's name.
            let other = cache_dir("foreign-bf16");
            let (_, o) = load(&other, "bf16");
            std::fs::copy(written(&o).0, p).unwrap();
            let _ = std::fs::remove_dir_all(&other);
        },
        "another checkpoint, precision or binary",
    );
}

#[test]
fn two_loads_writing_at_once_leave_one_valid_file() {
    let dir = cache_dir("concurrent");
    let loads: Vec<_> = (0..2)
        .map(|_| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                let (model, o) = load(&dir, "int8");
                (actions(&model), o)
            })
        })
        .collect();
    let results: Vec<_> = loads.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(results[0].0, results[1].0);
    let weights = written(&results[0].1).1;
    // No temporary file is left, and the one file maps.
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let (model, o) = load(&dir, "int8");
    assert_mapped(&o, weights);
    assert_eq!(actions(&model), results[0].0);
    let _ = std::fs::remove_dir_all(&dir);
}
