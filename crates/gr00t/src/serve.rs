//! `gr00t serve`, the wiring: the HTTP door answers `loading` → `Engine::load` → warm-up on the
//! demo request → the queue's thread owns the engine → the HTTP door switches to its routes and
//! every other door (`doors::{zmq, ws, lerobot}`) starts, each with a queue handle and the stop
//! switch, until SIGINT/SIGTERM.

use crate::doors::answers::{Answers, FieldLabels};
use crate::doors::browser::{BrowserOptions, BrowserRules};
use crate::doors::connections::{self, ConnectionOptions, Timers};
use crate::doors::http::state::{AppState, Limits};
use crate::doors::http::Switch;
use crate::doors::http::{body, demo, metrics, observe, routes};
use crate::doors::ports::{self, BoundPort};
use crate::doors::{DoorError, DoorLimits, ProtocolOptions, Stop};
use crate::shutdown;
use gr00t_core::engine::{Engine, EngineOptions};
use gr00t_core::info::EngineInfo;
use gr00t_core::layouts::Layouts;
use gr00t_core::queue::{self, Queue};
use gr00t_core::session::{SessionLimits, Sessions};
use gr00t_core::InferError;
use gr00t_model::hub;
use observe::{ObserveOptions, Observer};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tokio::task::JoinHandle;

/// Options of `gr00t serve`.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Checkpoint folder; `None` = the pinned snapshot in the Hugging Face cache.
    pub checkpoint: Option<PathBuf>,
    /// Tokenizer file; `None` = the bundled one.
    pub tokenizer: Option<PathBuf>,
    /// `--embodiment` tags; empty = every servable one.
    pub embodiments: Vec<String>,
    /// Address to listen on.
    pub host: String,
    /// First port to try.
    pub port: u16,
    /// Requests that may wait behind the one in flight.
    pub queue: usize,
    /// `--session-ttl-s`, `--max-sessions`.
    pub sessions: SessionLimits,
    /// Largest `/predict` body in MiB.
    pub max_body_mb: usize,
    /// Requests the status page at `/` keeps; 0 turns the page off (`--no-ui`).
    pub history: usize,
    /// The ZMQ and websocket listeners (`--zmq-port`, `--ws-port`, …).
    pub protocols: ProtocolOptions,
    /// Connection caps and timers of every door (`--max-connections`, …).
    pub connections: ConnectionOptions,
    /// `--cors-origin`, `--allowed-host`.
    pub browser: BrowserOptions,
    /// `--device` / `--dtype`.
    pub device: crate::device::DeviceOptions,
    /// `--replica-id` (or $GR00T_REPLICA_ID): named in every response's `x-gr00t-replica`
    /// header and in `/info`.
    pub replica_id: Option<String>,
    /// Folder of the packed-weight cache; `None` (`--no-weight-cache`): pack at every start.
    pub weight_cache: Option<PathBuf>,
}

/// Why `gr00t serve` did not start, or stopped with an error (exit code 1).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// `--replica-id` is not a header value.
    #[error(transparent)]
    Replica(#[from] crate::doors::http::HttpError),
    /// The API token cannot be read, or a ZMQ or websocket door did not start.
    #[error(transparent)]
    Door(#[from] DoorError),
    /// The engine did not load.
    #[error("cannot load the model: {0}")]
    Load(#[source] gr00t_core::LoadError),
    /// The warm-up request failed.
    #[error("warm-up request failed: {0}")]
    WarmUp(#[source] InferError),
    /// The bundled demo reference does not parse.
    #[error(transparent)]
    Reference(#[from] serde_json::Error),
    /// A port, the runtime, the signal handler, the worker thread or a listener failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Runs the server; returns the process exit code.
pub fn run(opts: ServeOptions) -> Result<i32, ServeError> {
    // Checked before the (long) model load.
    let replica = opts
        .replica_id
        .as_deref()
        .map(routes::replica_id)
        .transpose()?;
    let doors = door_limits(&opts)?;
    let checkpoint = match opts.checkpoint.clone() {
        Some(dir) => dir,
        None => match hub::default_checkpoint_dir() {
            Ok(dir) => dir,
            Err(_) => {
                eprintln!("{}", no_weights_help());
                return Ok(2);
            }
        },
    };
    // Before the (long) load: a LeRobot map that cannot be read, and a taken port, fail now.
    // Listening starts when the model is ready (the map is checked against it then).
    if let Some(path) = &opts.protocols.lerobot_map {
        crate::doors::lerobot::mapping::LeRobotMap::load(path).map_err(DoorError::LeRobot)?;
    }
    let bound = ports::bind_all(
        &opts.host,
        opts.port,
        opts.protocols.zmq_port,
        opts.protocols.ws_port,
        opts.protocols.lerobot_port,
    )?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("gr00t-http")
        .enable_all()
        .build()?;
    // One switch stops every listener: the first signal, or the ZMQ `kill` endpoint.
    let stop = Stop::new();
    // HTTP answers from now on: 503 `loading` until the model is ready, then the routes.
    let app = Switch::loading(replica.clone());
    let (http, addr) = {
        let _in_runtime = runtime.enter();
        let listener = bound.http.listen()?;
        let addr = listener.local_addr()?;
        let served =
            crate::doors::http::serve_switch(listener, app.clone(), doors.clone(), stop.clone());
        (runtime.spawn(served), addr)
    };
    if opts.port != 0 && addr.port() != opts.port {
        tracing::warn!("port {} is taken; using {}", opts.port, addr.port());
    }
    // Tooling reads the address from this line as it stands.
    tracing::info!("listening on http://{addr}");
    tracing::info!("/health answers 503 \"loading\" until the model is ready");
    tracing::info!("loading checkpoint {}", checkpoint.display());
    let t0 = Instant::now();
    let engine = Engine::load(&EngineOptions {
        checkpoint: checkpoint.clone(),
        tokenizer: opts.tokenizer.clone(),
        device: opts.device.clone(),
        embodiments: opts.embodiments.clone(),
        weight_cache: opts.weight_cache.clone(),
    })
    .map_err(ServeError::Load)?;
    let info = engine.info().clone();
    let model_load_s = t0.elapsed().as_secs_f64();
    tracing::info!(
        "model loaded in {:.1} s (backend {}, CPU kernel {} [{}], {} on {}, {} threads, digest {})",
        t0.elapsed().as_secs_f64(),
        info.denoise_backend,
        info.kernels(),
        info.cpu_blocks,
        info.dtype,
        info.device,
        info.threads,
        info.checkpoint_digest
    );
    if info.synthetic_weights {
        warn_synthetic(&info);
    }
    if let Some(warning) = info.int8_check_warning() {
        tracing::warn!("{warning}");
    }
    warm_up(&engine, &info)?;
    // After the warm-up, so that the file's copy and checksums do not slow it down.
    let _cache_writer = engine.write_weight_cache();
    // Clients' frames only: the warm-up's shipped demo frames are ours.
    gr00t_embodiment::image::decode::set_max_pixels(opts.connections.max_image_pixels);
    // Shared with the metrics, which read the vision cache's counters at scrape time.
    let engine = std::sync::Arc::new(engine);
    let probe = engine.clone();
    let vision_cache: observe::CacheProbe = std::sync::Arc::new(move || {
        let s = probe.vision_cache_stats();
        metrics::CacheCounts {
            hits: s.hits,
            misses: s.misses,
        }
    });
    let observer = observer(&opts, &engine, &info, model_load_s, vision_cache)?;
    // Every door counts its answers where /metrics reads them.
    let answers = observer.metrics().answers();
    let layouts = engine.layouts().clone();

    let sessions = std::sync::Arc::new(Sessions::new(opts.sessions));
    let (worker, handle) = queue::start_engine(engine, opts.queue, sessions)?;
    let limits = Limits {
        queue: opts.queue,
        max_body_bytes: doors.max_message_bytes,
        connections: doors.caps,
    };
    let protocols = (handle.clone(), info.clone(), layouts.clone(), answers);
    if let Some(id) = &opts.replica_id {
        tracing::info!("replica id {id}");
    }
    let state = AppState::with_observer(handle, layouts.clone(), info, limits, observer, replica);
    app.ready(crate::doors::http::guarded_routes(state, &doors));
    let others = (bound.zmq, bound.ws, bound.lerobot);
    let served = runtime.block_on(serve(&opts, others, &doors, (stop, http, addr), protocols));
    // Dropping the runtime and the switch drops the router and with it the last queue handle,
    // so the worker ends.
    drop((runtime, app));
    worker.join();
    served?;
    tracing::info!("server stopped");
    Ok(0)
}

/// Metrics and, unless `--no-ui`, the status page's history with the checkpoint's image
/// pipeline (to show the frames as the model saw them).
fn observer(
    opts: &ServeOptions,
    engine: &Engine,
    info: &EngineInfo,
    model_load_s: f64,
    vision_cache: observe::CacheProbe,
) -> Result<Observer, ServeError> {
    // The engine's pipeline: the checkpoint is not opened again.
    let pipeline = (opts.history > 0).then(|| engine.image_pipeline().clone());
    Ok(Observer::new(ObserveOptions {
        history: opts.history,
        pipeline,
        model_load_s,
        build: vec![
            ("version", info.version.clone()),
            ("model", info.model_id.clone()),
            ("revision", info.revision.clone()),
            ("checkpoint_digest", info.checkpoint_digest.clone()),
            ("backend", info.denoise_backend.clone()),
        ],
        vision_cache: Some(vision_cache),
        field_labels: FieldLabels::of_layouts(engine.layouts()),
    })?)
}

/// What every door enforces, from the flags: the token, the caps within the process's file
/// limit (raised to its hard limit first), the timers and the browser rules; warns about a
/// token on the command line and about a server open to the network without one.
fn door_limits(opts: &ServeOptions) -> Result<DoorLimits, ServeError> {
    let (api_token, on_command_line) = opts.protocols.token()?;
    if on_command_line {
        tracing::warn!(
            "--api-token puts the token on the command line, where every local user can read it \
             (ps): prefer --api-token-file FILE or ${}",
            crate::doors::TOKEN_ENV
        );
    }
    let open_files = connections::raise_open_files().unwrap_or(1024);
    let p = &opts.protocols;
    let caps = connections::size_caps(
        &opts.connections,
        p.ws_port.is_some(),
        p.zmq_port.is_some(),
        p.lerobot_port.is_some(),
        open_files,
    );
    let asked = &opts.connections;
    if caps.http < asked.max_connections
        || (p.ws_port.is_some() && caps.ws < asked.ws_max_connections)
        || (p.zmq_port.is_some() && caps.zmq < asked.zmq_max_connections)
        || (p.lerobot_port.is_some() && caps.lerobot < asked.lerobot_max_connections)
    {
        tracing::warn!(
            "the process may open {open_files} files: connection caps lowered to fit \
             (raise `ulimit -n` for more)"
        );
    }
    tracing::info!(
        "connection caps: http {}, websocket {}, zmq {}, lerobot {} (of {open_files} files); \
         idle {:.0} s, handshake {:.0} s",
        caps.http,
        caps.ws,
        caps.zmq,
        caps.lerobot,
        asked.idle_timeout_s,
        asked.handshake_timeout_s
    );
    let unspecified = opts
        .host
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified());
    if unspecified && api_token.is_none() {
        loud_warning(&[
            format!(
                "--host {} WITHOUT --api-token: anyone on the network can drive this robot policy",
                opts.host
            ),
            format!(
                "set a token (--api-token-file FILE or ${}) or listen on 127.0.0.1",
                crate::doors::TOKEN_ENV
            ),
        ]);
    }
    let max_message_bytes = opts.max_body_mb.saturating_mul(1024 * 1024);
    Ok(DoorLimits {
        max_message_bytes,
        caps,
        timers: Timers::new(&opts.connections, max_message_bytes),
        body: connections::BodyPace::new(&opts.connections),
        api_token,
        browser: std::sync::Arc::new(BrowserRules::new(&opts.browser, &opts.host)),
    })
}

/// The other doors, then the HTTP door (already answering, now with the routes) until a
/// signal or the ZMQ `kill` endpoint fires `stop`.
async fn serve(
    opts: &ServeOptions,
    others: (Option<BoundPort>, Option<BoundPort>, Option<BoundPort>),
    limits: &DoorLimits,
    (stop, http, addr): (Stop, JoinHandle<std::io::Result<()>>, SocketAddr),
    protocols: (Queue, EngineInfo, Layouts, Arc<Answers>),
) -> Result<(), ServeError> {
    let shutdown = shutdown::Shutdown::register()?;
    let (worker, info, layouts, answers) = protocols;
    let listeners = crate::doors::start(
        &opts.protocols,
        others,
        limits,
        crate::doors::Shared {
            worker: &worker,
            info: &info,
            layouts: &layouts,
            answers: &answers,
        },
        &stop,
    )
    .await?;
    drop(worker);
    tokio::spawn({
        let stop = stop.clone();
        async move {
            shutdown.requested().await;
            stop.trigger();
        }
    });
    tracing::info!("ready on http://{addr}");
    // Printed bare (not through the log formatter): tooling waits for exactly this line.
    eprintln!("Application startup complete");
    let served = http.await.map_err(std::io::Error::other);
    stop.trigger();
    listeners.join().await;
    served??;
    Ok(())
}

/// What `serve` says when no weights are given and none are cached: how to get the real ones,
/// and the bundled test checkpoint to try the server with meanwhile.
fn no_weights_help() -> String {
    // Under `cargo run` the binary is not on PATH: name the command that was used.
    let gr00t = if std::env::var_os("CARGO").is_some() {
        "cargo run --release -p gr00t --"
    } else {
        "gr00t"
    };
    let mut help = format!(
        "error: no GR00T N1.7-3B weights: {repo} at revision {rev} is not in the Hugging Face \
         cache ({cache}), and no --checkpoint was given.\n\n\
         The weights are gated: accept the licence at https://huggingface.co/{repo}, create a \
         read token, then\n\
         \x20 export HF_TOKEN=hf_...\n\
         \x20 {gr00t} pull\n\
         \x20 {gr00t} serve\n\
         or serve a local copy: {gr00t} serve --checkpoint DIR\n",
        repo = hub::MODEL_REPO,
        rev = hub::MODEL_REVISION,
        cache = hub::hub_cache_dir().display(),
    );
    let tiny = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/gr00t_n17_tiny/checkpoint"
    );
    if let Ok(tiny) = std::fs::canonicalize(tiny) {
        // Relative to the working directory when inside it (the repository root under cargo).
        let cwd = std::env::current_dir().unwrap_or_default();
        let tiny = tiny.strip_prefix(&cwd).map(PathBuf::from).unwrap_or(tiny);
        help.push_str(&format!(
            "\nTo try the server now (status page, doors, metrics), serve the bundled tiny TEST \
             checkpoint; its actions are random and mean nothing to a robot:\n\
             \x20 {gr00t} serve --checkpoint {}\n",
            tiny.display()
        ));
    }
    help
}

fn warn_synthetic(info: &EngineInfo) {
    loud_warning(&[
        format!(
            "SYNTHETIC WEIGHTS: {} holds pseudo-random weights",
            info.checkpoint
        ),
        "(from `gr00t synth-checkpoint`): speed runs only, every action it returns is meaningless"
            .into(),
    ]);
}

/// Warning lines between two bars of `!`, so that no operator misses them in the log.
fn loud_warning(lines: &[String]) {
    let bar = "!".repeat(78);
    tracing::warn!("{bar}");
    for line in lines {
        tracing::warn!("{line}");
    }
    tracing::warn!("{bar}");
}

/// Pays the first-call costs before a client arrives. For the checkpoint the shipped demo's
/// reference was computed with, the demo request itself, its answer checked against the
/// reference; for any other, one pass over the layers at minimal size (every weight read and
/// every kernel run, at a fraction of a request's cost).
fn warm_up(engine: &Engine, info: &EngineInfo) -> Result<(), ServeError> {
    let t0 = Instant::now();
    let reference = demo::reference()?;
    if reference.checkpoint_digest != info.checkpoint_digest || !engine.layouts().serves_droid() {
        let t = engine.warm_up_pass().map_err(ServeError::WarmUp)?;
        tracing::info!(
            "warm-up pass over the layers done in {:.2} s (vision {:.0} ms, llm {:.0} ms, \
             adapter {:.0} ms, denoise {:.0} ms)",
            t0.elapsed().as_secs_f64(),
            t.vision_ms,
            t.llm_ms,
            t.adapter_ms,
            t.denoise_ms
        );
        return Ok(());
    }
    let response =
        body::predict_body(engine, demo::DEMO_REQUEST.as_bytes()).map_err(ServeError::WarmUp)?;
    tracing::info!(
        "warm-up request (the demo) done in {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    let groups: Vec<(&str, &Vec<Vec<f32>>)> = response.actions.iter().collect();
    // The reference is fp32; bf16 compute lands within a few 1e-3 on the tiny model.
    let tolerance = if info.dtype == "f32" { 1e-4 } else { 3e-2 };
    match demo::max_abs_diff(&reference, &groups) {
        Some(d) if d <= tolerance => {
            tracing::info!(
                "demo reference reproduced (max |Δ| = {d:.2e}, {})",
                info.dtype
            )
        }
        Some(d) => tracing::warn!("demo answer differs from its reference by up to {d:.2e}"),
        None => tracing::warn!("demo answer does not have the reference's groups/shapes"),
    }
    Ok(())
}
