//! The doors: each turns its wire format into the core's typed request and calls the shared
//! queue; none imports another. The HTTP API (`http`, always on), Isaac-GR00T's ZMQ
//! `PolicyClient` protocol (`zmq`, `--zmq-port`) and openpi's websocket protocol with its
//! RoboArena and vLLM-Omni dialects (`ws`, `--ws-port`); `wire` holds the array encodings the
//! last two share and `answers` the answer counters all three feed. This module also holds the
//! stop switch and starts the ZMQ and websocket listeners.

pub mod answers;
pub mod browser;
pub mod connections;
pub mod excerpt;
pub mod http;
pub mod lerobot;
pub mod ports;
pub mod request_line;
pub mod wire;
pub mod ws;
pub mod zmq;

use wire::schema;
use ws as websocket;

use browser::BrowserRules;
use connections::{BodyPace, Caps, ConnInfo, LimitedListener, Timers};
use gr00t_core::info::EngineInfo;
use gr00t_core::layouts::Layouts;
use gr00t_core::Queue;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Flags of `gr00t serve` for the extra listeners (flattened into its command line).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ProtocolOptions {
    /// Also serve Isaac-GR00T's ZMQ policy protocol (PolicyClient) on this port, e.g. 5555
    /// (0: any free port).
    #[arg(long, value_name = "PORT")]
    pub zmq_port: Option<u16>,
    /// Also serve openpi's websocket policy protocol (and GET /healthz) on this port, e.g. 8000
    /// (0: any free port).
    #[arg(long, value_name = "PORT")]
    pub ws_port: Option<u16>,
    /// Also serve LeRobot's async inference (`robot_client`, gRPC `transport.AsyncInference`)
    /// on this port, e.g. 8080; needs --lerobot-map.
    #[arg(long, value_name = "PORT", requires = "lerobot_map")]
    pub lerobot_port: Option<u16>,
    /// The LeRobot robot's features onto a served embodiment (JSON; docs/protocols.md,
    /// examples/lerobot_so101.json).
    #[arg(long, value_name = "FILE", requires = "lerobot_port")]
    pub lerobot_map: Option<PathBuf>,
    /// A name LeRobot clients may give the served checkpoint as `pretrained_name_or_path`
    /// besides its Hub id and folder (repeatable); another name is refused, never loaded.
    #[arg(long, value_name = "NAME")]
    pub lerobot_policy_name: Vec<String>,
    /// The robot's control rate: LeRobot's server times action i at `timestamp + i/fps`.
    #[arg(long, value_name = "HZ", default_value_t = 30.0)]
    pub lerobot_fps: f64,
    /// Token that ZMQ requests (`api_token`), websocket handshakes
    /// (`Authorization: Api-Key <token>`) and HTTP requests other than GET /health
    /// (`Authorization: Bearer <token>`) must carry. Prefer --api-token-file or
    /// $GR00T_API_TOKEN: a command line is visible to every local user.
    #[arg(long, value_name = "TOKEN", env = TOKEN_ENV, hide_env_values = true)]
    pub api_token: Option<String>,
    /// File holding the API token (its first line; e.g. a mounted secret).
    #[arg(long, value_name = "FILE", conflicts_with = "api_token")]
    pub api_token_file: Option<PathBuf>,
    /// Whether `--api-token` was given on the command line (not through $GR00T_API_TOKEN): set
    /// by the command-line parser, which alone knows the difference.
    #[arg(skip)]
    pub api_token_on_command_line: bool,
    /// Let the ZMQ `kill` endpoint shut the server down.
    #[arg(long)]
    pub allow_kill: bool,
    /// Batch items one ZMQ `get_action` may carry (each waits its own turn in the queue, so a
    /// batch never holds the door for long); larger batches are refused.
    #[arg(long, default_value_t = zmq::DEFAULT_MAX_BATCH, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..))]
    pub zmq_max_batch: u16,
    /// ZMQ observations and actions use the flat `video.<cam>` / `state.<key>` /
    /// `action.<key>` form of Isaac-GR00T's `--use_sim_policy_wrapper`.
    #[arg(long, alias = "use_sim_policy_wrapper")]
    pub use_sim_policy_wrapper: bool,
}

/// Why the API token cannot be read, or the ZMQ or websocket door did not start.
#[derive(Debug, thiserror::Error)]
pub enum DoorError {
    /// `--api-token-file` cannot be read.
    #[error("--api-token-file {}: {source}", path.display())]
    TokenFile {
        /// The file named.
        path: PathBuf,
        /// Why it cannot be read.
        source: std::io::Error,
    },
    /// `--api-token-file`'s first line is empty.
    #[error("--api-token-file {}: the file holds no token", .0.display())]
    EmptyTokenFile(PathBuf),
    /// `--api-token` is empty.
    #[error("--api-token: the token is empty")]
    EmptyToken,
    /// A bound port did not start listening.
    #[error(transparent)]
    Listen(#[from] std::io::Error),
    /// The engine serves no embodiment.
    #[error("no embodiment is served")]
    NoEmbodiment,
    /// The LeRobot door cannot start (its map file, its embodiment).
    #[error("--lerobot-map: {0}")]
    LeRobot(String),
}

/// The credentials of an `Authorization: <scheme> <credentials>` header whose scheme is
/// `scheme` in any case (RFC 9110 §11.1: `bearer` is `Bearer`), trimmed.
pub(crate) fn authorization<'h>(
    headers: &'h axum::http::HeaderMap,
    scheme: &str,
) -> Option<&'h str> {
    headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .trim_start()
        .split_once(' ')
        .filter(|(s, _)| s.eq_ignore_ascii_case(scheme))
        .map(|(_, credentials)| credentials.trim())
}

/// Environment variable holding the API token (clap's `env` for `--api-token`).
pub const TOKEN_ENV: &str = "GR00T_API_TOKEN";

impl ProtocolOptions {
    /// The API token from `--api-token-file`, `$GR00T_API_TOKEN` or `--api-token`, and
    /// whether it came from the command line itself (then the server warns).
    pub fn token(&self) -> Result<(Option<Arc<str>>, bool), DoorError> {
        if let Some(path) = &self.api_token_file {
            let text = std::fs::read_to_string(path).map_err(|source| DoorError::TokenFile {
                path: path.clone(),
                source,
            })?;
            // A byte-order mark (Windows editors write one) is not part of the token.
            let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
            let token = text.lines().next().unwrap_or("").trim();
            if token.is_empty() {
                return Err(DoorError::EmptyTokenFile(path.clone()));
            }
            return Ok((Some(token.into()), false));
        }
        match self.api_token.as_deref().map(str::trim) {
            Some("") => Err(DoorError::EmptyToken),
            Some(t) => Ok((Some(t.into()), self.api_token_on_command_line)),
            None => Ok((None, false)),
        }
    }
}

/// What every door enforces alike: the message size, the connection caps and timers, the
/// token and the browser rules.
#[derive(Clone, Debug)]
pub struct DoorLimits {
    /// Largest HTTP body, ZMQ message or websocket message.
    pub max_message_bytes: usize,
    /// Connections per door.
    pub caps: Caps,
    /// Handshake and idle timers, lingering budget.
    pub timers: Timers,
    /// How a whole HTTP body or ZMQ message must arrive once begun.
    pub body: BodyPace,
    /// `--api-token`.
    pub api_token: Option<Arc<str>>,
    /// Origin, Host and content-type rules (HTTP and the websocket upgrade).
    pub browser: Arc<BrowserRules>,
}

/// A shutdown switch shared by every listener; the ZMQ `kill` endpoint flips it too.
#[derive(Clone)]
pub struct Stop(Arc<watch::Sender<bool>>);

impl Default for Stop {
    fn default() -> Stop {
        Stop::new()
    }
}

impl Stop {
    /// A switch that has not fired.
    pub fn new() -> Stop {
        Stop(Arc::new(watch::channel(false).0))
    }

    /// Fires the switch (idempotent).
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }

    /// Resolves once the switch has fired.
    pub async fn wait(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives in `self`, so this only ends when the value turns true.
        let _ = rx.wait_for(|stopped| *stopped).await;
    }
}

/// The running listeners.
pub struct Listeners {
    tasks: Vec<JoinHandle<()>>,
}

impl Listeners {
    /// Waits until every listener has ended (after the stop switch fired).
    pub async fn join(self) {
        for t in self.tasks {
            if let Err(e) = t.await {
                tracing::error!("a protocol listener ended abnormally: {e}");
            }
        }
    }
}

/// What the ZMQ and websocket listeners share with the HTTP door.
pub struct Shared<'a> {
    /// The inference queue.
    pub worker: &'a Queue,
    /// The loaded engine's description (the metadata frames).
    pub info: &'a EngineInfo,
    /// The served layouts (the schemas).
    pub layouts: &'a Layouts,
    /// Where answers are counted (the HTTP door's `/metrics` renders them).
    pub answers: &'a Arc<answers::Answers>,
}

/// Serves the ZMQ and websocket listeners bound before the model loaded (`ports::bind_all`),
/// logs where each listens, until `stop` fires.
pub async fn start(
    opts: &ProtocolOptions,
    ports: (
        Option<ports::BoundPort>,
        Option<ports::BoundPort>,
        Option<ports::BoundPort>,
    ),
    limits: &DoorLimits,
    shared: Shared<'_>,
    stop: &Stop,
) -> Result<Listeners, DoorError> {
    let Shared {
        worker,
        info,
        layouts,
        answers,
    } = shared;
    let (zmq_port, ws_port, lerobot_port) = ports;
    let mut tasks = Vec::new();
    if let Some(listener) = lerobot_port {
        tasks.push(lerobot_door(
            opts,
            listener,
            limits,
            (worker, answers),
            (layouts, info),
            stop,
        )?);
    }
    if zmq_port.is_none() && ws_port.is_none() {
        return Ok(Listeners { tasks });
    }
    // One schema per served embodiment, the default first, from the engine's layouts (the
    // checkpoint is not opened again).
    let schemas = |flat: bool| -> Vec<schema::Schema> {
        layouts
            .all()
            .iter()
            .map(|l| schema::Schema::new(l.clone(), layouts.horizon, layouts.action_dim, flat))
            .collect()
    };
    if let Some(listener) = zmq_port {
        let schemas = schemas(opts.use_sim_policy_wrapper);
        let listener = listener.listen()?;
        let addr = listener.local_addr()?;
        tracing::info!(
            "ZMQ policy server (Isaac-GR00T PolicyClient, {} observations) listening on tcp://{addr}",
            if opts.use_sim_policy_wrapper { "flat" } else { "nested" }
        );
        let ctx = zmq::ZmqContext {
            worker: worker.clone(),
            schemas,
            api_token: limits.api_token.clone(),
            allow_kill: opts.allow_kill,
            max_batch: usize::from(opts.zmq_max_batch.max(1)),
            answers: answers.clone(),
            turn: tokio::sync::Mutex::new(()),
        };
        tasks.push(tokio::spawn(zmq::serve(
            listener,
            ctx,
            limits.clone(),
            stop.clone(),
        )));
    }
    if let Some(listener) = ws_port {
        let listener = listener.listen()?;
        let addr = listener.local_addr()?;
        tracing::info!(
            "websocket policy server (openpi, RoboArena; vLLM-Omni on {}) listening on ws://{addr}",
            websocket::VLLM_OMNI_PATH
        );
        let listener = LimitedListener::new(listener, "ws", limits.caps.ws, limits.timers);
        // Every connection holds the context; its sender closes when the last one ends.
        let (alive, mut all_closed) = tokio::sync::mpsc::channel::<()>(1);
        // Websocket clients send the nested GR00T observation whatever
        // --use-sim-policy-wrapper says. vLLM-Omni serves one embodiment per endpoint: the
        // default one; the openpi path any served one.
        let nested = schemas(false);
        let schema = nested.first().cloned().ok_or(DoorError::NoEmbodiment)?;
        let ctx = Arc::new(websocket::WsContext {
            worker: worker.clone(),
            metadata: websocket::metadata(info),
            vllm_omni_metadata: websocket::vllm_omni_metadata(&schema),
            schema,
            schemas: nested,
            answers: answers.clone(),
            api_token: limits.api_token.clone(),
            browser: limits.browser.clone(),
            max_message_bytes: limits.max_message_bytes,
            write_timeout: limits.timers.write,
            stop: stop.clone(),
            alive,
        });
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let app = websocket::router(ctx).into_make_service_with_connect_info::<ConnInfo>();
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.wait().await })
                .await;
            if let Err(e) = served {
                tracing::error!("websocket listener failed: {e}");
            }
            // Open connections finish their request in progress, then close (1001).
            let _ = all_closed.recv().await;
        }));
    }
    Ok(Listeners { tasks })
}

/// Starts the LeRobot gRPC door (`--lerobot-port`) on its bound port.
fn lerobot_door(
    opts: &ProtocolOptions,
    listener: ports::BoundPort,
    limits: &DoorLimits,
    (worker, answers): (&Queue, &Arc<answers::Answers>),
    (layouts, info): (&Layouts, &EngineInfo),
    stop: &Stop,
) -> Result<JoinHandle<()>, DoorError> {
    let lerobot_err = |e: String| DoorError::LeRobot(e);
    let path = opts
        .lerobot_map
        .as_ref()
        .ok_or_else(|| lerobot_err("--lerobot-port needs --lerobot-map FILE".into()))?;
    let map = lerobot::mapping::LeRobotMap::load(path).map_err(lerobot_err)?;
    let layout = layouts.resolve(&map.embodiment).cloned().ok_or_else(|| {
        lerobot_err(format!(
            "{}: embodiment {:?} is not served (serving {:?})",
            path.display(),
            map.embodiment,
            layouts.tags()
        ))
    })?;
    if !(opts.lerobot_fps > 0.0 && opts.lerobot_fps.is_finite()) {
        return Err(lerobot_err(format!(
            "--lerobot-fps {} is not a rate",
            opts.lerobot_fps
        )));
    }
    let pickle_limits = lerobot::pickle::Limits {
        max_bytes: limits.max_message_bytes.min(LEROBOT_MAX_MESSAGE),
        ..lerobot::pickle::Limits::default()
    };
    let mut names = vec![info.model_id.clone(), info.checkpoint.clone()];
    if let Ok(p) = std::fs::canonicalize(&info.checkpoint) {
        names.push(p.display().to_string());
    }
    names.extend(opts.lerobot_policy_name.iter().cloned());
    names.dedup();
    let served = lerobot::robots::Served {
        names,
        device: info.device.clone(),
    };
    let robots = lerobot::robots::Robots::new(
        worker.clone(),
        served,
        layout,
        map,
        pickle_limits,
        opts.lerobot_fps,
        std::time::Duration::from_secs(2),
    )
    .map_err(|e| lerobot_err(format!("{}: {e}", path.display())))?;
    let service = lerobot::grpc::AsyncInference {
        robots: Arc::new(robots),
        api_token: limits.api_token.clone(),
        max_message_bytes: pickle_limits.max_bytes,
        answers: answers.clone(),
    };
    let listener = listener.listen()?;
    let addr = listener.local_addr()?;
    tracing::info!(
        "LeRobot async inference (robot_client, gRPC transport.AsyncInference) listening on {addr}"
    );
    let listener = LimitedListener::new(listener, "lerobot", limits.caps.lerobot, limits.timers);
    let stop = stop.clone();
    Ok(tokio::spawn(async move {
        let app = lerobot::grpc::router(service).into_make_service_with_connect_info::<ConnInfo>();
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.wait().await })
            .await;
        if let Err(e) = served {
            tracing::error!("LeRobot listener failed: {e}");
        }
    }))
}

/// LeRobot's own limit on a message (`transport/utils.py`'s `MAX_MESSAGE_SIZE`, 4 MiB).
pub const LEROBOT_MAX_MESSAGE: usize = 4 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorization_schemes_match_in_any_case() {
        let mut h = axum::http::HeaderMap::new();
        assert_eq!(authorization(&h, "Api-Key"), None);
        let with = |h: &mut axum::http::HeaderMap, v: &str| {
            h.insert(axum::http::header::AUTHORIZATION, v.parse().unwrap());
        };
        for v in [
            "Api-Key k3y",
            "api-key k3y",
            "API-KEY  k3y ",
            " Api-Key k3y",
        ] {
            with(&mut h, v);
            assert_eq!(authorization(&h, "Api-Key"), Some("k3y"), "{v}");
            assert_eq!(authorization(&h, "Bearer"), None, "{v}");
        }
        for v in ["Api-Keyk3y", "k3y", "Api-Key-2 k3y"] {
            with(&mut h, v);
            assert_eq!(authorization(&h, "Api-Key"), None, "{v}");
        }
    }

    #[test]
    fn a_token_file_is_read_without_its_byte_order_mark_and_line_end() {
        let dir = std::env::temp_dir().join(format!("gr00t-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in [
            ("bom", &b"\xef\xbb\xbfs3cret\r\n"[..]),
            ("plain", &b"s3cret\n"[..]),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, bytes).unwrap();
            let opts = ProtocolOptions {
                api_token_file: Some(path),
                ..ProtocolOptions::default()
            };
            let (token, warn) = opts.token().unwrap();
            assert_eq!(token.as_deref(), Some("s3cret"), "{name}");
            assert!(!warn);
        }
        let path = dir.join("only-bom");
        std::fs::write(&path, b"\xef\xbb\xbf\n").unwrap();
        let opts = ProtocolOptions {
            api_token_file: Some(path),
            ..ProtocolOptions::default()
        };
        assert!(matches!(opts.token(), Err(DoorError::EmptyTokenFile(_))));
        std::fs::remove_dir_all(&dir).ok();
    }
}
