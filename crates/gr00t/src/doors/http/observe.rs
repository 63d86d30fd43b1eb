//! What the server records about finished predictions (metrics and the status page's history),
//! behind one entry point that every protocol can call.

use super::history::{History, Pending, Shown};
use super::metrics::{process_rss_bytes, CacheCounts, Gauges, Metrics, Outcome};
use crate::doors::answers::FieldLabels;
use gr00t_core::queue::QueueState;
use gr00t_core::response::PredictResponse;
use gr00t_core::session::SessionStats;
use gr00t_embodiment::image::ImagePipeline;
use std::sync::Arc;

/// Reads the engine's vision-cache counters at scrape time.
pub type CacheProbe = Arc<dyn Fn() -> CacheCounts + Send + Sync>;

/// History size when not configured.
pub const DEFAULT_HISTORY: usize = 20;

/// How to build an [`Observer`].
pub struct ObserveOptions {
    /// Requests the status page keeps; 0 turns the page off (`--no-ui`).
    pub history: usize,
    /// The checkpoint's image pipeline, to show the frames as the model saw them.
    pub pipeline: Option<ImagePipeline>,
    /// Seconds the model took to load.
    pub model_load_s: f64,
    /// Labels of `gr00t_build_info`.
    pub build: Vec<(&'static str, String)>,
    /// Vision-cache counters; `None` exports zeros.
    pub vision_cache: Option<CacheProbe>,
    /// What a refused field is counted as (the served layouts' keys and the doors' fields).
    pub field_labels: FieldLabels,
}

impl Default for ObserveOptions {
    fn default() -> ObserveOptions {
        ObserveOptions {
            history: DEFAULT_HISTORY,
            pipeline: None,
            model_load_s: 0.0,
            build: Vec::new(),
            vision_cache: None,
            field_labels: FieldLabels::default(),
        }
    }
}

/// A finished prediction request, as any protocol reports it.
pub enum Finished {
    /// Computed and answered.
    Served {
        /// The request's input as the status page shows it (`None` when the page is off).
        shown: Option<Arc<Shown>>,
        /// The answer.
        response: Arc<PredictResponse>,
        /// Time spent waiting for the worker.
        queue_ms: f64,
    },
    /// Refused or failed with an HTTP-like status (400 with its field, 413, 503, 500).
    Refused {
        /// Status code.
        status: u16,
        /// The refused field of a 400.
        field: Option<String>,
        /// The message sent to the client.
        message: String,
    },
}

struct Inner {
    metrics: Metrics,
    history: Option<History>,
    vision_cache: Option<CacheProbe>,
}

/// Shared recorder of finished requests; cloning shares it.
#[derive(Clone)]
pub struct Observer(Arc<Inner>);

impl Observer {
    /// Metrics, plus the history (and its builder thread) unless `history` is 0.
    pub fn new(opts: ObserveOptions) -> std::io::Result<Observer> {
        let history = match opts.history {
            0 => None,
            n => Some(History::start(n, opts.pipeline)?),
        };
        Ok(Observer(Arc::new(Inner {
            metrics: Metrics::new(opts.model_load_s, opts.build, opts.field_labels),
            history,
            vision_cache: opts.vision_cache,
        })))
    }

    /// The counters and histograms.
    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    /// The status page's history; `None` with `--no-ui`.
    pub fn history(&self) -> Option<&History> {
        self.0.history.as_ref()
    }

    /// Records a finished prediction: counts it, times its stages, and hands it to the
    /// history. Cheap (a few counters and a channel send); call it after answering.
    pub fn finished(&self, request_id: &str, finished: Finished) {
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let metrics = &self.0.metrics;
        let pending = match finished {
            Finished::Served {
                shown,
                response,
                queue_ms,
            } => {
                metrics.count_request(Outcome::Ok);
                metrics.observe_timings(&response.timing_ms, queue_ms);
                shown.map(|shown| Pending::Served {
                    request_id: request_id.to_string(),
                    unix_ms,
                    shown,
                    response,
                    queue_ms,
                })
            }
            Finished::Refused {
                status,
                field,
                message,
            } => {
                metrics.count_request(Outcome::from_status(status, field.as_deref()));
                // Load shedding is counted but not listed: a burst of 503s would push every
                // computed request off the page.
                (status != 503).then(|| Pending::Refused {
                    request_id: request_id.to_string(),
                    unix_ms,
                    status,
                    message,
                })
            }
        };
        if let (Some(h), Some(p)) = (&self.0.history, pending) {
            h.offer(p);
        }
    }

    /// The scrape-time values for `/metrics`.
    pub fn gauges(&self, queue: &QueueState, sessions: SessionStats) -> Gauges {
        Gauges {
            superseded: queue.superseded,
            sessions,
            queue_waiting: queue.waiting,
            queue_capacity: queue.capacity,
            busy: queue.busy,
            computed: queue.served,
            rss_bytes: process_rss_bytes(),
            vision_cache: self
                .0
                .vision_cache
                .as_ref()
                .map(|probe| probe())
                .unwrap_or_default(),
            history_entries: self.0.history.as_ref().map_or(0, History::len),
        }
    }
}
