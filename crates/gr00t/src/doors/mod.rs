//! The doors: each turns its wire format into the core's typed request and calls the shared
//! queue; none imports another. The HTTP API (`http`, always on), Isaac-GR00T's ZMQ
//! `PolicyClient` protocol (`zmq`, `--zmq-port`) and openpi's websocket protocol with its
//! RoboArena and vLLM-Omni dialects (`ws`, `--ws-port`); `wire` holds the array encodings the
//! last two share and `answers` the answer counters all three feed. This module also holds the
//! stop switch and starts the ZMQ and websocket listeners.

pub mod answers;
pub mod http;
pub mod request_line;
pub mod wire;
pub mod ws;
pub mod zmq;

use wire::observation;
use ws as websocket;

#[cfg(test)]
mod tests;

use crate::engine::EngineInfo;
use gr00t_core::engine::Layouts;
use gr00t_core::Queue;
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
    /// Token that ZMQ requests (`api_token`), websocket handshakes
    /// (`Authorization: Api-Key <token>`) and HTTP requests other than GET /health
    /// (`Authorization: Bearer <token>`) must carry.
    #[arg(long, value_name = "TOKEN")]
    pub api_token: Option<String>,
    /// Let the ZMQ `kill` endpoint shut the server down.
    #[arg(long)]
    pub allow_kill: bool,
    /// ZMQ observations and actions use the flat `video.<cam>` / `state.<key>` /
    /// `action.<key>` form of Isaac-GR00T's `--use_sim_policy_wrapper`.
    #[arg(long, alias = "use_sim_policy_wrapper")]
    pub use_sim_policy_wrapper: bool,
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

/// Binds every enabled listener (a taken port is an error: clients are configured with it),
/// logs where each listens and starts serving until `stop` fires.
/// `host` is the HTTP `--host`; `max_message_bytes` bounds a websocket message (the HTTP body
/// limit).
pub async fn start(
    opts: &ProtocolOptions,
    host: &str,
    max_message_bytes: usize,
    shared: Shared<'_>,
    stop: &Stop,
) -> Result<Listeners, Box<dyn std::error::Error>> {
    let Shared {
        worker,
        info,
        layouts,
        answers,
    } = shared;
    let mut tasks = Vec::new();
    if opts.zmq_port.is_none() && opts.ws_port.is_none() {
        return Ok(Listeners { tasks });
    }
    // One schema per served embodiment, the default first, from the engine's layouts (the
    // checkpoint is not opened again).
    let schemas = |flat: bool| -> Result<Vec<observation::Schema>, String> {
        Ok(layouts
            .specs
            .iter()
            .zip(&layouts.modalities)
            .map(|(spec, modalities)| {
                observation::Schema::new(
                    spec,
                    modalities,
                    layouts.horizon,
                    layouts.action_dim,
                    flat,
                )
            })
            .collect())
    };
    if let Some(port) = opts.zmq_port {
        let schemas = schemas(opts.use_sim_policy_wrapper)?;
        let (socket, addr) = zmq::bind(host, port).await?;
        tracing::info!(
            "ZMQ policy server (Isaac-GR00T PolicyClient, {} observations) listening on tcp://{addr}",
            if opts.use_sim_policy_wrapper { "flat" } else { "nested" }
        );
        let ctx = zmq::ZmqContext {
            worker: worker.clone(),
            schemas,
            api_token: opts.api_token.clone(),
            allow_kill: opts.allow_kill,
            answers: answers.clone(),
        };
        tasks.push(tokio::spawn(zmq::serve(socket, ctx, stop.clone())));
    }
    if let Some(port) = opts.ws_port {
        let listener = tokio::net::TcpListener::bind((host, port))
            .await
            .map_err(|e| format!("cannot listen for websockets on {host}:{port}: {e}"))?;
        let addr = listener.local_addr()?;
        tracing::info!(
            "websocket policy server (openpi, RoboArena; vLLM-Omni on {}) listening on ws://{addr}",
            websocket::VLLM_OMNI_PATH
        );
        // Every connection holds the context; its sender closes when the last one ends.
        let (alive, mut all_closed) = tokio::sync::mpsc::channel::<()>(1);
        // Websocket clients send the nested GR00T observation whatever
        // --use-sim-policy-wrapper says. vLLM-Omni serves one embodiment per endpoint: the
        // default one; the openpi path any served one.
        let nested = schemas(false)?;
        let schema = nested.first().cloned().ok_or("no embodiment is served")?;
        let ctx = Arc::new(websocket::WsContext {
            worker: worker.clone(),
            metadata: websocket::metadata(info),
            vllm_omni_metadata: websocket::vllm_omni_metadata(info, &schema),
            schema,
            schemas: nested,
            answers: answers.clone(),
            api_token: opts.api_token.clone(),
            max_message_bytes,
            stop: stop.clone(),
            alive,
        });
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let served = axum::serve(listener, websocket::router(ctx))
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
