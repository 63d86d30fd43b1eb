//! `gr00t check-dtype`: the same observations (the shipped demo plus the user's recorded
//! `/predict` bodies) through f32 and through `--dtype int8` or `bf16`, every action group held
//! to the gate, a pass/fail verdict remembered for this checkpoint so that `serve` knows.

use crate::device::{DeviceOptions, DtypeSetting};
use crate::doors::http::body::predict_body;
use crate::engine::{Engine, EngineOptions};
use crate::episode_bodies::{episode_bodies, is_dataset, EpisodeChoice, EpisodeError};
use gr00t_core::dtype_check::{self, GroupCheck, Verdict, GATE};
use gr00t_core::{InferError, PredictResponse};
use gr00t_model::int8::{Int8Stages, Stage};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};

/// What `gr00t check-dtype` was asked.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Checkpoint folder.
    pub checkpoint: PathBuf,
    /// Tokenizer file; `None` = the bundled one.
    pub tokenizer: Option<PathBuf>,
    /// The precision checked (`dtype` int8 or bf16, `int8` stages) and the compute flags.
    pub device: DeviceOptions,
    /// A `/predict` body file, a folder of them (`*.json`) or a LeRobot / GR00T-format
    /// dataset folder, besides the demo.
    pub observations: Option<PathBuf>,
    /// A dataset folder's episode and embodiment.
    pub episode: EpisodeChoice,
    /// With `int8_smooth`: the calibration observations (default: the demo, or the checked
    /// observations when the checkpoint has no DROID).
    pub calibration: Option<PathBuf>,
    /// Print one JSON object (the verdict and every group) instead of the table.
    pub json: bool,
}

/// Why the check could not run (a failed verdict is not an error: exit code 1).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// `--dtype` is missing or not a reduced precision.
    #[error(
        "check-dtype compares a reduced precision with f32: give --dtype int8 or --dtype bf16"
    )]
    Dtype,
    /// An observation file or folder cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The path.
        path: PathBuf,
        /// Why not.
        source: std::io::Error,
    },
    /// A folder that is not a folder of request files.
    #[error("{}: {source}", path.display())]
    Observations {
        /// The path.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: ObservationsError,
    },
    /// An observation is not a request this checkpoint serves.
    #[error("observation {name}: {message}")]
    Request {
        /// The observation.
        name: String,
        /// The refusal.
        message: String,
    },
    /// The engine did not load.
    #[error(transparent)]
    Load(#[from] gr00t_core::LoadError),
    /// The calibration could not be written.
    #[error("writing the int8 calibration to {}: {source}", path.display())]
    Calibration {
        /// The file.
        path: PathBuf,
        /// Why not.
        source: candle_core::Error,
    },
    /// A dataset folder's episode could not be read.
    #[error("{}: {source}", path.display())]
    Episode {
        /// The dataset folder.
        path: PathBuf,
        /// Why not.
        #[source]
        source: EpisodeError,
    },
    /// The verdict could not be written.
    #[error("writing the verdict to {}: {source}", path.display())]
    Save {
        /// The verdict folder.
        path: PathBuf,
        /// Why not.
        source: std::io::Error,
    },
    /// The progress bar's template is invalid.
    #[error(transparent)]
    Template(#[from] indicatif::style::TemplateError),
    /// The report does not serialize.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// What is wrong with an observation folder.
#[derive(Debug, thiserror::Error)]
pub enum ObservationsError {
    /// No `*.json` file in it.
    #[error("no *.json request bodies in this folder")]
    Empty,
}

/// One observation: its name (file name or `demo`) and its `/predict` body.
#[derive(Clone)]
struct Observation {
    name: String,
    body: Vec<u8>,
}

/// The shipped DROID demo request.
fn demo() -> Observation {
    Observation {
        name: "demo".into(),
        body: crate::bench::DEMO_REQUEST.as_bytes().to_vec(),
    }
}

/// Runs the check; exit code 0 when it passed, 1 when it failed.
pub fn run(opts: &CheckOptions) -> Result<i32, CheckError> {
    let dtype = match opts.device.dtype {
        Some(d @ (DtypeSetting::Int8 | DtypeSetting::Bf16)) => d,
        _ => return Err(CheckError::Dtype),
    };
    let mut observations = vec![demo()];
    if let Some(path) = &opts.observations {
        observations.extend(read_observations(path, opts)?);
    }
    let engine_in = |dtype: DtypeSetting, int8: Option<Int8Stages>| {
        Engine::load(&EngineOptions {
            checkpoint: opts.checkpoint.clone(),
            tokenizer: opts.tokenizer.clone(),
            device: DeviceOptions {
                dtype: Some(dtype),
                int8: int8.or(opts.device.int8),
                ..opts.device.clone()
            },
            embodiments: Vec::new(),
            weight_cache: None,
        })
    };
    let engine_with = |dtype: DtypeSetting| engine_in(dtype, None);
    let bar = ProgressBar::new(2 * observations.len() as u64);
    bar.set_style(ProgressStyle::with_template(
        "{msg:24} [{bar:40}] {pos}/{len} observations ({elapsed}, {eta})",
    )?);

    bar.set_message("loading f32");
    let f32_engine = engine_with(DtypeSetting::F32)?;
    // The demo is DROID: a fine-tune without that embodiment skips it.
    let droid = f32_engine.layouts().serves_droid();
    if !droid {
        observations.remove(0);
        bar.set_length(2 * observations.len() as u64);
        tracing::info!("the demo observation is DROID's, which this checkpoint lacks: skipped");
    }
    if observations.is_empty() {
        return Err(CheckError::Request {
            name: "demo".into(),
            message: "this checkpoint has no DROID embodiment: give --observations with \
                      requests of its own embodiments"
                .into(),
        });
    }
    let digest = f32_engine.info().checkpoint_digest.clone();
    let dir = dtype_check::verdict_dir();
    let smooth = dtype == DtypeSetting::Int8 && opts.device.int8_smooth;
    if smooth {
        // SmoothQuant's maxima from f32 runs, kept for this checkpoint for `serve`.
        let calibration = match &opts.calibration {
            Some(path) => read_observations(path, opts)?,
            None if droid => vec![demo()],
            None => observations.to_vec(),
        };
        bar.set_message("f32 calibration");
        bar.inc_length(calibration.len() as u64);
        let (done, max) =
            gr00t_model::smoothing::calibrate(|| answers(&f32_engine, &calibration, &bar));
        done?;
        let path = dtype_check::calibration_file(&dir, &digest);
        std::fs::create_dir_all(&dir)
            .map_err(candle_core::Error::from)
            .and_then(|()| max.save(&path))
            .map_err(|source| CheckError::Calibration {
                path: path.clone(),
                source,
            })?;
        tracing::info!(layers = max.len(), file = %path.display(), "int8 calibration saved");
    }
    bar.set_message("f32");
    let reference = answers(&f32_engine, &observations, &bar)?;
    drop(f32_engine);

    bar.set_message(format!("loading {}", dtype.as_str()));
    let engine = engine_with(dtype)?;
    let stages = match engine.info().int8_stages.as_slice() {
        [] => "none".to_string(),
        s => dtype_check::int8_variant(&s.join(","), &opts.device.int8_keep, smooth),
    };
    bar.set_message(match dtype {
        DtypeSetting::Int8 => format!("int8 {stages}"),
        _ => dtype.as_str().to_string(),
    });
    let got = answers(&engine, &observations, &bar)?;
    bar.finish_and_clear();

    let checks = groups(&observations, &reference, &got);
    let verdict = Verdict::of(
        &checks,
        observations.len(),
        &digest,
        dtype.as_str(),
        &stages,
    );
    let save = |v: &Verdict| {
        dtype_check::save_verdict(&dir, v).map_err(|source| CheckError::Save {
            path: dir.clone(),
            source,
        })
    };
    let file = save(&verdict)?;
    let kernel = engine.info().int8_kernel;
    let names = engine.info().int8_stages.clone();
    drop(engine);

    // Several int8 stages failed together: each alone, to say which to leave f32.
    let mut per_stage = Vec::new();
    if !verdict.passed && names.len() > 1 {
        bar.reset();
        bar.set_length((names.len() * observations.len()) as u64);
        let stages = Stage::ALL
            .into_iter()
            .filter(|s| names.contains(&s.as_str()));
        for stage in stages {
            let name = stage.as_str();
            bar.set_message(format!("loading int8 {name}"));
            let engine = engine_in(dtype, Some(Int8Stages::only(stage)))?;
            bar.set_message(format!("int8 {name}"));
            let got = answers(&engine, &observations, &bar)?;
            let checks = groups(&observations, &reference, &got);
            let variant = dtype_check::int8_variant(name, &opts.device.int8_keep, smooth);
            let v = Verdict::of(&checks, observations.len(), &digest, "int8", &variant);
            save(&v)?;
            per_stage.push(v);
        }
        bar.finish_and_clear();
    }
    if opts.json {
        let report = serde_json::json!({ "verdict": verdict, "checks": checks,
                                         "verdict_file": file, "per_stage": per_stage });
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_table(&checks, &verdict, kernel, &file);
        for v in &per_stage {
            println!(
                "  int8 in {} alone: {} (worst PCC {:.8}, worst max|Δ|/max|ref| {:.2e})",
                v.stages,
                if v.passed { "passes" } else { "FAILS" },
                v.worst_pcc,
                v.worst_rel
            );
        }
    }
    Ok(if verdict.passed { 0 } else { 1 })
}

/// Each action group of each observation: `got` against the f32 `reference`, named by the
/// embodiment that answered.
fn groups(
    observations: &[Observation],
    reference: &[PredictResponse],
    got: &[PredictResponse],
) -> Vec<GroupCheck> {
    let mut checks = Vec::new();
    for (o, (r, g)) in observations.iter().zip(reference.iter().zip(got)) {
        for mut c in dtype_check::compare_groups(&o.name, &r.actions, &g.actions, GATE) {
            c.embodiment.clone_from(&r.embodiment);
            checks.push(c);
        }
    }
    checks
}

/// Every observation through `engine`, advancing `bar`.
fn answers(
    engine: &Engine,
    observations: &[Observation],
    bar: &ProgressBar,
) -> Result<Vec<PredictResponse>, CheckError> {
    observations
        .iter()
        .map(|o| {
            let r = predict_body(engine, &o.body).map_err(|e| CheckError::Request {
                name: o.name.clone(),
                message: match e {
                    InferError::Invalid(e) => e.to_string(),
                    e => e.to_string(),
                },
            });
            bar.inc(1);
            r
        })
        .collect()
}

/// The request bodies of `path`: one file, a folder's `*.json` files in name order, or the
/// chosen episode of a dataset folder.
fn read_observations(path: &Path, opts: &CheckOptions) -> Result<Vec<Observation>, CheckError> {
    if is_dataset(path) {
        let bodies = episode_bodies(path, &opts.checkpoint, &opts.episode).map_err(|source| {
            CheckError::Episode {
                path: path.to_path_buf(),
                source,
            }
        })?;
        // The folder is removed when `bodies` drops, after reading.
        return read_observations(&bodies.dir, opts);
    }
    let read = |p: &Path| {
        std::fs::read(p).map_err(|source| CheckError::Read {
            path: p.to_path_buf(),
            source,
        })
    };
    let named = |p: &Path| {
        p.file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    };
    if !path.is_dir() {
        return Ok(vec![Observation {
            name: named(path),
            body: read(path)?,
        }]);
    }
    let refuse = |source| CheckError::Observations {
        path: path.to_path_buf(),
        source,
    };
    let entries = std::fs::read_dir(path).map_err(|source| CheckError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(refuse(ObservationsError::Empty));
    }
    files
        .iter()
        .map(|p| {
            Ok(Observation {
                name: named(p),
                body: read(p)?,
            })
        })
        .collect()
}

/// The groups, worst first, and the verdict.
fn print_table(checks: &[GroupCheck], verdict: &Verdict, kernel: &str, file: &Path) {
    println!(
        "{:28} {:28} {:24} {:>12} {:>11} {:>11} {:>9}  gate: PCC ≥ {}, max|Δ| ≤ {}·max|ref|",
        "observation",
        "embodiment",
        "group",
        "PCC",
        "max|Δ|",
        "max|ref|",
        "rel",
        GATE.min_pcc,
        GATE.max_rel
    );
    let mut sorted: Vec<&GroupCheck> = checks.iter().collect();
    sorted.sort_by(|a, b| b.rel().total_cmp(&a.rel()));
    for c in sorted {
        println!(
            "{:28} {:28} {:24} {:>12.8} {:>11.3e} {:>11.3e} {:>9.2e}  {}",
            c.case,
            c.embodiment,
            c.group,
            c.pcc,
            c.max_abs,
            c.max_ref,
            c.rel(),
            if c.pass { "pass" } else { "FAIL" }
        );
    }
    let what = match verdict.dtype.as_str() {
        "int8" => format!("int8 in {} (kernel {kernel})", verdict.stages),
        d => d.to_string(),
    };
    println!(
        "{}: {what} against f32 on {} observations, {} groups; worst PCC {:.8}, worst max|Δ|/max|ref| {:.2e} (verdict in {})",
        if verdict.passed { "PASSED" } else { "FAILED" },
        verdict.observations,
        verdict.groups,
        verdict.worst_pcc,
        verdict.worst_rel,
        file.display()
    );
}
