//! Command-line interface: argument parsing and one function per subcommand.

use crate::device_args::DeviceArgs;
use crate::engine::{Engine, EngineOptions};
use clap::{Parser, Subcommand, ValueEnum};
use gr00t_core::InferError;
use gr00t_model::synth::{write_synthetic_checkpoint, SynthSize};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;

/// gr00t-rs: NVIDIA GR00T N1.7-3B inference for every embodiment a checkpoint carries.
#[derive(Parser, Debug)]
#[command(name = "gr00t", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log format on stderr: human-readable text, or one JSON object per line.
    #[arg(long, global = true, value_enum, default_value_t = crate::logging::LogFormat::Text)]
    log_format: crate::logging::LogFormat,
}

// Parsed once per process: the size of `Serve`'s flags does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the model over HTTP (docs/API.md), and over ZMQ and websockets when asked
    /// (--zmq-port, --ws-port).
    Serve {
        /// Checkpoint folder [default: the pinned snapshot in the Hugging Face cache].
        #[arg(long)]
        checkpoint: Option<PathBuf>,
        /// Tokenizer file [default: the bundled Qwen3 tokenizer].
        #[arg(long)]
        tokenizer: Option<PathBuf>,
        /// Embodiment to serve (tag or upstream enum name, e.g. NEW_EMBODIMENT); repeat for
        /// several. The first is the default of requests that name none [default: every
        /// embodiment of the checkpoint this server can serve, DROID first].
        #[arg(long = "embodiment", value_name = "TAG")]
        embodiments: Vec<String>,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// Port; when taken, the next free one up to 99 above is used.
        #[arg(long, default_value_t = 20000)]
        port: u16,
        /// Requests that may wait behind the one being computed; more get 503.
        #[arg(long, default_value_t = 8)]
        queue: usize,
        /// Seconds a session (`session_id`) lives after its last observation.
        #[arg(long, default_value_t = gr00t_core::session::DEFAULT_TTL_S,
              value_parser = clap::value_parser!(u64).range(1..))]
        session_ttl_s: u64,
        /// Sessions kept at most; the least recently used is dropped first.
        #[arg(long, default_value_t = gr00t_core::session::DEFAULT_MAX_SESSIONS as u32,
              value_parser = clap::value_parser!(u32).range(1..))]
        max_sessions: u32,
        /// MiB of decoded frames all sessions' frame histories may hold together; beyond it
        /// the least recently used sessions are dropped (/info sessions.history_bytes).
        #[arg(long, default_value_t = gr00t_core::session::DEFAULT_MAX_HISTORY_MB,
              value_parser = clap::value_parser!(u64).range(1..=1 << 24))]
        max_history_mb: u64,
        /// Largest /predict body in MiB; larger ones get 413.
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
        max_body_mb: u32,
        /// Turn off the status page at / (GET /metrics stays).
        #[arg(long)]
        no_ui: bool,
        /// Requests the status page keeps in memory.
        #[arg(long, default_value_t = crate::doors::http::DEFAULT_HISTORY as u32,
              value_parser = clap::value_parser!(u32).range(1..=1000))]
        history: u32,
        /// Name of this replica behind a load balancer, echoed in every response's
        /// X-Gr00t-Replica header and in /info (an empty variable counts as unset).
        #[arg(long, value_name = "ID", env = "GR00T_REPLICA_ID")]
        replica_id: Option<String>,
        /// Export each request's spans (queue wait, decode, vision, LLM, adapter, denoise,
        /// decode actions) over OTLP/HTTP JSON to the collector at URL (POST URL/v1/traces),
        /// e.g. http://127.0.0.1:4318 [default: off].
        #[arg(long, value_name = "URL", env = "GR00T_OTLP_ENDPOINT")]
        otlp_endpoint: Option<String>,
        /// Folder of the packed-weight cache: the first start writes the weights as the
        /// kernels read them (one file per checkpoint, precision, kernel and binary, ~6 GB
        /// for the full model), later starts map that file instead of reading and packing
        /// [default: gr00t-rs/packed-weights in the Hugging Face hub cache].
        #[arg(long, value_name = "DIR", env = "GR00T_WEIGHT_CACHE")]
        weight_cache: Option<PathBuf>,
        /// Pack the weights at every start; read or write no cache file (wins over
        /// --weight-cache and $GR00T_WEIGHT_CACHE).
        #[arg(long)]
        no_weight_cache: bool,
        #[command(flatten)]
        protocols: crate::doors::ProtocolOptions,
        #[command(flatten)]
        connections: crate::doors::connections::ConnectionOptions,
        #[command(flatten)]
        browser: crate::doors::browser::BrowserOptions,
        #[command(flatten)]
        device: DeviceArgs,
    },
    /// Download nvidia/GR00T-N1.7-3B at the pinned revision into the Hugging Face cache.
    Pull {
        /// Revision (commit, commit prefix or branch).
        #[arg(long, default_value = gr00t_model::hub::MODEL_REVISION)]
        revision: String,
    },
    /// Run one request JSON file through the model and print the response JSON.
    Predict {
        /// Checkpoint folder (default: the pinned snapshot in the Hugging Face cache).
        #[arg(long)]
        checkpoint: Option<PathBuf>,
        /// Request body (JSON, the `/predict` schema of docs/API.md); `-` reads stdin.
        #[arg(long)]
        request: PathBuf,
        /// Tokenizer file (default: the bundled Qwen3 tokenizer).
        #[arg(long)]
        tokenizer: Option<PathBuf>,
        #[command(flatten)]
        device: DeviceArgs,
    },
    /// Time the DROID demo request per stage on a warm engine (FLOPs, GFLOP/s, peak RSS).
    Bench {
        /// Checkpoint folder [default: the pinned snapshot in the Hugging Face cache]; a
        /// `gr00t synth-checkpoint --size full` folder times the real architecture.
        #[arg(long)]
        checkpoint: Option<PathBuf>,
        /// Timed runs; medians are reported.
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Untimed runs first.
        #[arg(long, default_value_t = 1)]
        warmup: usize,
        /// Run `gr00t serve`'s start-up warm-up (one pass over the layers at minimal size) right
        /// after the load; with --warmup 0 the first timed request is then a served robot's
        /// first ("first_ms").
        #[arg(long)]
        warm_up_pass: bool,
        /// Print one JSON object: {"stages": {name: {"median_ms", "gflop"}}, "total_ms",
        /// "first_ms" (the first timed request), "cpu_ms", "peak_rss_mb", "threads", "dtype", "cpu_kernel", "cpu_blocks",
        /// "denoise_weight_gb", "denoise_backend", "vision_cache_images"}; with --interleave-f32: {"dtype", "cpu_kernel", "threads", "runs",
        /// "f32", "f32_cpu_kernel", "total_ratio_median_of_pairs", "peak_rss_mb_both_models"}.
        #[arg(long)]
        json: bool,
        /// Simulate a control loop (each request's t−15 frames are the previous request's t
        /// frames) and report its steady state instead of cold requests.
        #[arg(long = "loop")]
        control_loop: bool,
        /// Also load an f32 engine and alternate cold requests between it and the --dtype one,
        /// reporting both side by side and the ratio per pair (steadier than two processes on
        /// a shared machine; needs both models' memory).
        #[arg(long, conflicts_with = "control_loop")]
        interleave_f32: bool,
        /// With --loop: a simulated robot at this control rate executing each chunk while the
        /// next is computed (async, through the inference queue), run without and with RTC;
        /// prints the achieved rate, chunk-boundary jumps and queue delays.
        #[arg(long, value_name = "HZ", requires = "control_loop")]
        control_hz: Option<f64>,
        /// With --control-hz: actions of each chunk executed before the next observation is
        /// sent.
        #[arg(long, value_name = "K", default_value_t = 8, requires = "control_hz")]
        execute: usize,
        /// With --control-hz: answers collected per mode (without RTC, with RTC).
        #[arg(long, value_name = "N", default_value_t = 20, requires = "control_hz")]
        chunks: usize,
        #[command(flatten)]
        device: DeviceArgs,
    },
    /// Check a reduced precision on this checkpoint: the demo and your own observations through
    /// f32 and through --dtype int8 or bf16, PCC and max|Δ| per action group against the gate
    /// (PCC ≥ 0.9999, max|Δ| ≤ 2·10⁻²·max|ref|); the verdict is remembered for `serve --dtype
    /// auto`. Exit 0 passed, 1 failed, 2 could not run.
    CheckDtype {
        /// Checkpoint folder [default: the pinned snapshot in the Hugging Face cache].
        #[arg(long)]
        checkpoint: Option<PathBuf>,
        /// Tokenizer file [default: the bundled Qwen3 tokenizer].
        #[arg(long)]
        tokenizer: Option<PathBuf>,
        /// A recorded `/predict` body (JSON, as `predict --request` takes), a folder of them
        /// (*.json), or a GR00T-format LeRobot v2 dataset folder (one step in ten of
        /// --episode, at most 8, read by tools/episode_requests.py: python3 with numpy,
        /// pyarrow, av and pillow), run besides the DROID demo.
        #[arg(long, value_name = "FILE|DIR")]
        observations: Option<PathBuf>,
        /// With a dataset folder: the embodiment its episodes were recorded as.
        #[arg(long, value_name = "TAG")]
        embodiment: Option<String>,
        /// With a dataset folder: the episode read.
        #[arg(long, value_name = "N", default_value_t = 0)]
        episode: usize,
        /// With --int8-smooth: the observations (a body file or a folder of them) whose f32
        /// activations calibrate the smoothing [default: the DROID demo, or --observations
        /// where the checkpoint has no DROID].
        #[arg(long, value_name = "FILE|DIR", requires = "int8_smooth")]
        calibration: Option<PathBuf>,
        /// Print one JSON object ({"verdict", "checks", "verdict_file"}) instead of the table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        device: DeviceArgs,
    },
    /// Write a checkpoint with the real layout and pseudo-random weights (speed runs only).
    SynthCheckpoint {
        /// Output folder.
        #[arg(long)]
        out: PathBuf,
        /// Model size.
        #[arg(long, value_enum, default_value_t = Size::Full)]
        size: Size,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum Size {
    /// The released N1.7-3B architecture (3.14 B parameters, ~6.3 GB).
    Full,
    /// The tiny architecture of the test fixtures.
    Tiny,
}

/// `gr00t-rs/packed-weights` in the Hugging Face hub cache, beside the pulled checkpoints and
/// the dtype verdicts.
fn default_weight_cache() -> PathBuf {
    gr00t_model::hub::own_cache_dir("packed-weights")
}

/// Parses the process's command line (exits on a usage error, as clap does), noting what only
/// the parser knows: whether the API token was typed on the command line.
pub fn parse() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let (Command::Serve { protocols, .. }, Some(("serve", serve))) =
        (&mut cli.command, matches.subcommand())
    {
        protocols.api_token_on_command_line =
            serve.value_source("api_token") == Some(clap::parser::ValueSource::CommandLine);
    }
    cli
}

/// Runs the parsed command line's subcommand, returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    let otlp = match &cli.command {
        Command::Serve { otlp_endpoint, .. } => otlp_endpoint.as_deref(),
        _ => None,
    };
    crate::logging::init_logging(cli.log_format, otlp);
    let result: Result<i32, CliError> = match cli.command {
        Command::Serve {
            checkpoint,
            tokenizer,
            embodiments,
            host,
            port,
            queue,
            session_ttl_s,
            max_sessions,
            max_history_mb,
            max_body_mb,
            no_ui,
            history,
            replica_id,
            otlp_endpoint: _,
            weight_cache,
            no_weight_cache,
            protocols,
            connections,
            browser,
            device,
        } => crate::serve::run(crate::serve::ServeOptions {
            checkpoint,
            tokenizer,
            embodiments,
            host,
            port,
            queue,
            sessions: gr00t_core::session::SessionLimits {
                ttl: std::time::Duration::from_secs(session_ttl_s),
                max: max_sessions as usize,
                max_history_bytes: max_history_mb << 20,
            },
            max_body_mb: max_body_mb as usize,
            history: if no_ui { 0 } else { history as usize },
            protocols,
            connections,
            browser,
            device: device.into(),
            // A manifest may leave the variable blank.
            replica_id: replica_id.filter(|v| !v.is_empty()),
            weight_cache: (!no_weight_cache).then(|| {
                weight_cache
                    .filter(|d| !d.as_os_str().is_empty())
                    .unwrap_or_else(default_weight_cache)
            }),
        })
        .map_err(Into::into),
        Command::Pull { revision } => {
            crate::pull::run(crate::pull::PullOptions { revision }).map_err(Into::into)
        }
        Command::Predict {
            checkpoint,
            request,
            tokenizer,
            device,
        } => predict(checkpoint, request, tokenizer, device.into()),
        Command::CheckDtype {
            checkpoint,
            tokenizer,
            observations,
            embodiment,
            episode,
            calibration,
            json,
            device,
        } => resolve_checkpoint(checkpoint).and_then(|checkpoint| {
            crate::check_dtype::run(&crate::check_dtype::CheckOptions {
                checkpoint,
                tokenizer,
                device: device.into(),
                observations,
                episode: crate::episode_bodies::EpisodeChoice {
                    embodiment,
                    episode,
                },
                calibration,
                json,
            })
            .map_err(Into::into)
        }),
        Command::Bench {
            checkpoint,
            runs,
            warmup,
            warm_up_pass,
            json,
            control_loop,
            interleave_f32,
            control_hz,
            execute,
            chunks,
            device,
        } => match resolve_checkpoint(checkpoint) {
            Err(e) => Err(e),
            Ok(checkpoint) => crate::bench::run(&crate::bench::BenchOptions {
                checkpoint,
                runs,
                warmup,
                warm_up_pass,
                json,
                control_loop,
                interleave_f32,
                realtime: control_hz.map(|control_hz| crate::bench::control_loop::LoopOptions {
                    control_hz,
                    execute,
                    chunks,
                }),
                device: device.into(),
            })
            .map_err(Into::into),
        },
        Command::SynthCheckpoint { out, size } => synth_checkpoint(out, size),
    };
    match result {
        Ok(code) => code,
        // 1 is check-dtype's failed verdict.
        Err(e @ CliError::CheckDtype(_)) => {
            eprintln!("error: {e}");
            2
        }
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}

/// Why a command failed (exit code 1): its own error, or `predict`'s, `synth-checkpoint`'s
/// or finding the checkpoint's.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// `gr00t serve`.
    #[error(transparent)]
    Serve(#[from] crate::serve::ServeError),
    /// `gr00t pull`.
    #[error(transparent)]
    Pull(#[from] crate::pull::PullError),
    /// `gr00t bench`.
    #[error(transparent)]
    Bench(#[from] crate::bench::BenchError),
    /// `gr00t check-dtype` could not run.
    #[error(transparent)]
    CheckDtype(#[from] crate::check_dtype::CheckError),
    /// The checkpoint cannot be found, or the synthetic one written.
    #[error(transparent)]
    Model(#[from] gr00t_model::Error),
    /// The request file cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file named.
        path: PathBuf,
        /// Why not.
        source: std::io::Error,
    },
    /// Standard input cannot be read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The engine did not load.
    #[error(transparent)]
    Load(#[from] gr00t_core::LoadError),
    /// The engine failed on the request.
    #[error("{0}")]
    Internal(#[source] gr00t_core::error::InternalError),
    /// The request was not answered otherwise (the queue's refusal).
    #[error(transparent)]
    Infer(InferError),
    /// The response does not serialize.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// The progress bar's template is invalid.
    #[error(transparent)]
    Template(#[from] indicatif::style::TemplateError),
}

/// The checkpoint given, or the pinned snapshot in the HF cache.
fn resolve_checkpoint(given: Option<PathBuf>) -> Result<PathBuf, CliError> {
    match given {
        Some(dir) => Ok(dir),
        None => Ok(gr00t_model::hub::default_checkpoint_dir()?),
    }
}

fn predict(
    checkpoint: Option<PathBuf>,
    request: PathBuf,
    tokenizer: Option<PathBuf>,
    device: gr00t_core::device::DeviceOptions,
) -> Result<i32, CliError> {
    let body = if request.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)?;
        buf
    } else {
        std::fs::read(&request).map_err(|source| CliError::Read {
            path: request.clone(),
            source,
        })?
    };
    let opts = EngineOptions {
        checkpoint: resolve_checkpoint(checkpoint)?,
        tokenizer,
        device,
        // A request names its embodiment; every servable one is loaded.
        embodiments: Vec::new(),
        weight_cache: None,
    };
    let engine = Engine::load(&opts)?;
    if engine.info().synthetic_weights {
        tracing::warn!("SYNTHETIC checkpoint: pseudo-random weights, the actions mean nothing");
    }
    if let Some(warning) = engine.info().int8_check_warning() {
        tracing::warn!("{warning}");
    }
    match crate::doors::http::body::predict_body(&engine, &body) {
        Ok(resp) => {
            let body = crate::doors::http::reply::PredictBody::from(&resp);
            println!("{}", serde_json::to_string(&body)?);
            Ok(0)
        }
        Err(InferError::Invalid(e)) => {
            println!("{}", serde_json::json!({ "error": e.to_string() }));
            Ok(2)
        }
        Err(InferError::Internal(m)) => Err(CliError::Internal(m)),
        Err(e) => Err(CliError::Infer(e)),
    }
}

fn synth_checkpoint(out: PathBuf, size: Size) -> Result<i32, CliError> {
    let size = match size {
        Size::Full => SynthSize::Full,
        Size::Tiny => SynthSize::Tiny,
    };
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
        )?
        .progress_chars("=> "),
    );
    bar.set_message("writing synthetic weights");
    write_synthetic_checkpoint(&out, size, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })?;
    bar.finish();
    eprintln!(
        "wrote a SYNTHETIC checkpoint to {} (pseudo-random weights: for speed runs only, its actions mean nothing)",
        out.display()
    );
    Ok(0)
}
