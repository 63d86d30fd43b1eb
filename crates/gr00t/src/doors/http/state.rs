//! What the HTTP door's handlers share: the queue, the served layouts, the engine's description,
//! the limits, the observer. Below the routes, the request log and the status page, which all
//! read it.

use super::demo::demo_body;
use super::observe::Observer;
use axum::body::Bytes;
use axum::http::HeaderValue;
use gr00t_core::layouts::Layouts;
use gr00t_core::queue::{Queue, QueueState};
use gr00t_core::EngineInfo;
use std::sync::Arc;

/// Request limits, reported by `/info`.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Requests that may wait behind the one in flight.
    pub queue: usize,
    /// Largest accepted `/predict` body.
    pub max_body_bytes: usize,
    /// Connections per door.
    pub connections: crate::doors::connections::Caps,
}

/// What the handlers share.
#[derive(Clone)]
pub struct AppState(pub(super) Arc<Inner>);

pub(super) struct Inner {
    pub(super) worker: Queue,
    /// The served layouts a `/predict` body is read against.
    pub(super) layouts: Arc<Layouts>,
    pub(super) replica: Option<HeaderValue>,
    pub(super) info: EngineInfo,
    pub(super) limits: Limits,
    pub(super) started_unix: u64,
    pub(super) demo: Bytes,
    pub(super) observer: Observer,
    /// Bodies parsed at once (one per core): a burst of large bodies queues here instead of
    /// taking every blocking thread and its memory.
    pub(super) parsing: tokio::sync::Semaphore,
}

/// Bodies parsed at the same time.
const PARSERS: usize = 2;

impl AppState {
    /// State with default observation (metrics, and a status page without frames), for tests.
    #[cfg(test)]
    pub fn new(worker: Queue, layouts: Layouts, info: EngineInfo, limits: Limits) -> AppState {
        let observer = Observer::new(Default::default()).expect("start the history thread");
        AppState::with_observer(worker, layouts, info, limits, observer, None)
    }

    /// State over a running queue, the served layouts, the engine's description, an observer
    /// and the replica id that every response names (see [`super::routes::replica_id`]).
    pub fn with_observer(
        worker: Queue,
        layouts: Layouts,
        info: EngineInfo,
        limits: Limits,
        observer: Observer,
        replica: Option<HeaderValue>,
    ) -> AppState {
        let started_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        AppState(Arc::new(Inner {
            worker,
            layouts: Arc::new(layouts),
            replica,
            info,
            limits,
            started_unix,
            demo: Bytes::from(demo_body()),
            observer,
            parsing: tokio::sync::Semaphore::new(PARSERS),
        }))
    }

    /// Metrics and history.
    pub fn observer(&self) -> &Observer {
        &self.0.observer
    }

    /// The queue's live state.
    pub fn queue_state(&self) -> QueueState {
        self.0.worker.state()
    }

    /// The sessions' counts.
    pub fn session_stats(&self) -> gr00t_core::session::SessionStats {
        self.0.worker.session_stats()
    }
}
