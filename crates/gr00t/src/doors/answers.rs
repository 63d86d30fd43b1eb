//! What every door records about its predictions: answers by door and outcome
//! (`gr00t_predict_requests_total{door=...}`) and the per-stage latency histograms
//! (`gr00t_stage_duration_seconds`); the HTTP door's `/metrics` renders them. A module of its
//! own so that the doors share it without importing one another.

use crate::doors::request_line::{
    request_span, PredictFields, RequestId, RequestLine, TraceParent,
};
use gr00t_core::layouts::Layouts;
use gr00t_core::response::{PredictResponse, TimingMs};
use gr00t_core::InferError;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// The door that answered, as the `door` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Door {
    /// `POST /predict` (and the other prediction routes).
    Http,
    /// ZMQ `get_action`.
    Zmq,
    /// A websocket observation (openpi, RoboArena `infer`, vLLM-Omni `infer`).
    Ws,
    /// LeRobot's gRPC `SendObservations` / `GetActions`.
    LeRobot,
}

impl Door {
    /// Every door, in the order they are rendered.
    pub const ALL: [Door; 4] = [Door::Http, Door::Zmq, Door::Ws, Door::LeRobot];

    /// The log line's `method`: HTTP's is the request's own.
    fn method(self) -> &'static str {
        match self {
            Door::Http => "HTTP",
            Door::Zmq => "ZMQ",
            Door::Ws => "WS",
            Door::LeRobot => "GRPC",
        }
    }

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Door::Http => "http",
            Door::Zmq => "zmq",
            Door::Ws => "ws",
            Door::LeRobot => "lerobot",
        }
    }
}

/// Upper bounds (seconds) of the latency buckets: 0.5 ms to 2 min, roughly ×2.5 apart, so both
/// the tiny test model and the full model on a CPU land in the middle.
pub const BUCKETS_S: [f64; 18] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0,
    40.0, 60.0, 120.0,
];

/// The timed stages of a prediction, as the `stage` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// Waiting in the queue for the worker.
    Queue,
    /// JSON parse, base64 and image decode.
    Decode,
    /// Resize, patchify, tokenise, state normalisation, noise.
    Encode,
    /// Vision tower.
    Vision,
    /// Language model.
    Llm,
    /// VL adapter.
    Adapter,
    /// Flow-matching loop.
    Denoise,
    /// Un-normalisation and relative → absolute.
    DecodeActions,
    /// The whole computation in the worker.
    Compute,
    /// The whole request as its door saw it (an HTTP request, a ZMQ or websocket message).
    Request,
}

impl Stage {
    /// Every stage, in the order they are rendered.
    pub const ALL: [Stage; 10] = [
        Stage::Queue,
        Stage::Decode,
        Stage::Encode,
        Stage::Vision,
        Stage::Llm,
        Stage::Adapter,
        Stage::Denoise,
        Stage::DecodeActions,
        Stage::Compute,
        Stage::Request,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Queue => "queue",
            Stage::Decode => "decode",
            Stage::Encode => "encode",
            Stage::Vision => "vision",
            Stage::Llm => "llm",
            Stage::Adapter => "adapter",
            Stage::Denoise => "denoise",
            Stage::DecodeActions => "decode_actions",
            Stage::Compute => "compute",
            Stage::Request => "request",
        }
    }
}

/// A cumulative-on-render latency histogram over [`BUCKETS_S`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Observations per bucket (not cumulative); the last slot is `+Inf`.
    pub(crate) counts: [u64; BUCKETS_S.len() + 1],
    /// Sum of the observations, seconds.
    pub(crate) sum: f64,
    /// Number of observations.
    pub(crate) count: u64,
}

impl Histogram {
    /// Adds one observation in seconds (negative or NaN values are ignored).
    pub fn observe(&mut self, seconds: f64) {
        if seconds.is_nan() || seconds < 0.0 {
            return;
        }
        let slot = BUCKETS_S
            .iter()
            .position(|&le| seconds <= le)
            .unwrap_or(BUCKETS_S.len());
        self.counts[slot] += 1;
        self.sum += seconds;
        self.count += 1;
    }
}

/// Fields a 400 may be labelled by whatever is served: HTTP's own, then the top-level keys of
/// the msgpack doors' messages (GR00T's nested observation and options, openpi's
/// `observation/…` keys, vLLM-Omni and RoboArena). The served layouts add their own keys
/// ([`FieldLabels::of_layouts`]).
const DOOR_FIELDS: [&str; 20] = [
    "body",
    "content-type",
    "images",
    "instruction",
    "state",
    "seed",
    "noise",
    "return_normalized",
    "tokenizer",
    "session_id",
    "session_token",
    "x-session-id",
    "video",
    "language",
    "annotation",
    "options",
    "observation",
    "prompt",
    "endpoint",
    "embodiment",
];

/// The field labels `/metrics` may carry: [`DOOR_FIELDS`] and the served layouts' keys as the
/// doors name them (`images.<view>`, `video.<view>`, `state.<key>`, the language key). Nothing
/// is taken from client text, so the label set stays bounded.
#[derive(Debug, Clone)]
pub struct FieldLabels(BTreeSet<String>);

impl Default for FieldLabels {
    /// The doors' own fields only (no layout served).
    fn default() -> FieldLabels {
        FieldLabels(DOOR_FIELDS.iter().map(|f| f.to_string()).collect())
    }
}

impl FieldLabels {
    /// The doors' fields and every served layout's keys.
    pub fn of_layouts(layouts: &Layouts) -> FieldLabels {
        let mut labels = FieldLabels::default();
        for layout in layouts.all() {
            let spec = &layout.spec;
            for view in &spec.views {
                labels.0.insert(format!("images.{view}"));
                labels.0.insert(format!("video.{view}"));
            }
            for (key, _) in spec.state.keys() {
                labels.0.insert(format!("state.{key}"));
            }
            labels.0.insert(spec.language_key.clone());
        }
        labels
    }

    /// A refused field reduced to a label: array indices dropped (`noise[3][7]` → `noise`), a
    /// served key as itself, else its top-level key when that is a door field
    /// (`video.<unknown view>` → `video`, `observation/state` → `observation`), unknown names
    /// → `other`, no field → `none`.
    pub fn label(&self, field: &str) -> String {
        let base: String = {
            let mut out = String::with_capacity(field.len());
            let mut depth = 0usize;
            for c in field.chars() {
                match c {
                    '[' => depth += 1,
                    ']' => depth = depth.saturating_sub(1),
                    _ if depth == 0 => out.push(c),
                    _ => {}
                }
            }
            out
        };
        if base.is_empty() {
            return "none".into();
        }
        if self.0.contains(&base) {
            return base;
        }
        match base.split_once(['.', '/']) {
            Some((top, _)) if self.0.contains(top) => top.to_string(),
            _ => "other".into(),
        }
    }
}

/// How a prediction request ended, as the `outcome`/`code`/`field` labels (the HTTP status, or
/// the one HTTP would have answered, on every door).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// 200.
    Ok,
    /// 400, with the field at fault as the refusal names it; [`Answers::count`] reduces it to
    /// a bounded label ([`FieldLabels::label`]).
    BadRequest(String),
    /// 413.
    TooLarge,
    /// 503: the queue was full.
    Busy,
    /// 500.
    Internal,
    /// Any other status.
    Other(u16),
}

impl Outcome {
    /// Classifies a status code; `field` is the refused field of a 400, if any.
    pub fn from_status(status: u16, field: Option<&str>) -> Outcome {
        match status {
            200 => Outcome::Ok,
            400 => Outcome::BadRequest(field.unwrap_or("").to_string()),
            413 => Outcome::TooLarge,
            503 => Outcome::Busy,
            500 => Outcome::Internal,
            other => Outcome::Other(other),
        }
    }

    /// The `outcome` label value.
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::BadRequest(_) => "bad_request",
            Outcome::TooLarge => "too_large",
            Outcome::Busy => "busy",
            Outcome::Internal => "error",
            Outcome::Other(_) => "other",
        }
    }

    /// The HTTP status.
    pub fn code(&self) -> u16 {
        match self {
            Outcome::Ok => 200,
            Outcome::BadRequest(_) => 400,
            Outcome::TooLarge => 413,
            Outcome::Busy => 503,
            Outcome::Internal => 500,
            Outcome::Other(c) => *c,
        }
    }
}

impl Outcome {
    /// A request the msgpack doors refused while reading it, with the key at fault (empty:
    /// none is).
    pub fn refused(field: &str) -> Outcome {
        Outcome::BadRequest(field.to_string())
    }

    /// The outcome of a request the queue or the engine did not answer, as HTTP maps it.
    pub fn of_error(e: &InferError) -> Outcome {
        match e {
            InferError::Invalid(f) => Outcome::BadRequest(f.field.clone()),
            InferError::Busy { .. } => Outcome::Busy,
            InferError::Superseded
            | InferError::SessionRestarted(_)
            | InferError::SessionLocked(_) => Outcome::Other(409),
            InferError::Stopped | InferError::Internal(_) => Outcome::Internal,
        }
    }
}

/// How a prediction message of the ZMQ or websocket door ended, for [`Answers::record`].
pub enum Answered<'a> {
    /// Computed: one response per queued item, in order.
    Served(&'a [PredictResponse]),
    /// Refused or failed, with the text sent to the client.
    Refused(Outcome, &'a str),
}

/// Answers counted by door and outcome, and the stage latencies of every door's predictions;
/// shared by every door.
#[derive(Debug, Default)]
pub struct Answers {
    /// What a refused field may be counted as.
    labels: FieldLabels,
    counts: Mutex<BTreeMap<(Door, Outcome), u64>>,
    stages: Mutex<BTreeMap<Stage, Histogram>>,
}

impl Answers {
    /// No answers yet; refused fields are labelled by `labels`.
    pub fn new(labels: FieldLabels) -> Answers {
        Answers {
            labels,
            ..Answers::default()
        }
    }

    /// Counts one answer of `door` (a 400 by its field's label).
    pub fn count(&self, door: Door, outcome: Outcome) {
        self.count_labelled(door, self.labelled(outcome));
    }

    /// Counts one answer whose 400 field is a label already.
    fn count_labelled(&self, door: Door, outcome: Outcome) {
        // Every update is one increment: the map stays consistent after a panic elsewhere.
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        *counts.entry((door, outcome)).or_insert(0) += 1;
    }

    /// The outcome with a 400's field as its label.
    fn labelled(&self, outcome: Outcome) -> Outcome {
        match outcome {
            Outcome::BadRequest(field) => Outcome::BadRequest(self.labels.label(&field)),
            other => other,
        }
    }

    /// The counts now.
    pub fn snapshot(&self) -> BTreeMap<(Door, Outcome), u64> {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn stages(&self) -> std::sync::MutexGuard<'_, BTreeMap<Stage, Histogram>> {
        // Every update is one observation: the histograms stay consistent after a panic.
        self.stages.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds one latency observation to a stage.
    pub fn observe(&self, stage: Stage, seconds: f64) {
        self.stages().entry(stage).or_default().observe(seconds);
    }

    /// Adds a computed request's stage timings (ms, as the response reports them).
    pub fn observe_timings(&self, t: &TimingMs, queue_ms: f64) {
        let mut stages = self.stages();
        let mut put = |stage: Stage, ms: Option<f64>| {
            if let Some(ms) = ms {
                stages.entry(stage).or_default().observe(ms / 1e3);
            }
        };
        put(Stage::Queue, Some(queue_ms));
        put(Stage::Decode, Some(t.decode));
        put(Stage::Encode, Some(t.encode));
        put(Stage::Vision, t.vision);
        put(Stage::Llm, t.llm);
        put(Stage::Adapter, t.adapter);
        put(Stage::Denoise, t.denoise);
        put(Stage::DecodeActions, Some(t.decode_actions));
        put(Stage::Compute, Some(t.total));
    }

    /// Records one prediction message of the ZMQ or websocket door (`what`: its endpoint or
    /// path; `ms`: the whole message): counted, timed (each computed item's stages, the
    /// message as `request`) and logged as HTTP requests are, one line per computed item with
    /// a fresh request id shared by the message's lines.
    pub fn record(&self, door: Door, what: &str, ms: f64, answered: Answered<'_>) {
        self.record_as(&RequestId::generate(), door, what, ms, answered);
    }

    /// Runs one message's `work` on `door` under a request span of its own (a child of the
    /// client's `parent` span), then records what `answered` says of its result (nothing for
    /// `None`: no prediction was asked of the engine), counted, timed and logged inside the
    /// span so that the log line carries its fields, as every door's messages are.
    pub async fn answer_in_span<R>(
        &self,
        door: Door,
        what: &str,
        parent: Option<TraceParent>,
        work: impl std::future::Future<Output = R>,
        answered: impl for<'a> FnOnce(&'a R) -> Option<Answered<'a>>,
    ) -> R {
        use tracing::Instrument;
        let t0 = std::time::Instant::now();
        let id = RequestId::generate();
        let span = request_span(door.name(), &id, parent);
        let result = work.instrument(span.clone()).await;
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let _in_request = span.enter();
        if let Some(a) = answered(&result) {
            self.record_as(&id, door, what, ms, a);
        }
        result
    }

    /// [`Self::record`] of the message whose request span
    /// ([`request_span`](crate::doors::request_line::request_span)) has id `id`.
    pub fn record_as(
        &self,
        id: &RequestId,
        door: Door,
        what: &str,
        ms: f64,
        answered: Answered<'_>,
    ) {
        let line = |status: u16, error: Option<&str>, predict| {
            RequestLine {
                door: door.name(),
                request_id: id.as_str(),
                method: door.method(),
                path: what,
                status,
                ms,
                error,
                predict: Some(predict),
            }
            .emit()
        };
        let outcome = match answered {
            Answered::Served(responses) => {
                for r in responses {
                    self.observe_timings(&r.timing_ms, r.queue_ms);
                    line(200, None, PredictFields::served(r, r.queue_ms));
                }
                Outcome::Ok
            }
            Answered::Refused(outcome, message) => {
                let outcome = self.labelled(outcome);
                let field = match &outcome {
                    Outcome::BadRequest(f) => Some(f.as_str()),
                    _ => None,
                };
                line(
                    outcome.code(),
                    Some(message),
                    PredictFields::refused(outcome.name(), field),
                );
                outcome
            }
        };
        self.count_labelled(door, outcome);
        self.observe(Stage::Request, ms / 1e3);
    }

    /// The stage histograms now.
    pub fn stage_snapshot(&self) -> BTreeMap<Stage, Histogram> {
        self.stages().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gr00t_embodiment::observation::RequestError;

    #[test]
    fn field_labels_stay_bounded() {
        let labels = FieldLabels::default();
        let label = |f: &str| labels.label(f);
        assert_eq!(label("images.front_cam"), "images");
        assert_eq!(label("noise[39][131]"), "noise");
        assert_eq!(label("my_custom_key"), "other");
        assert_eq!(label(""), "none");
        // The msgpack doors' keys: the top-level key, never the client's own sub-key.
        assert_eq!(label("video.exterior_image_1_left"), "video");
        assert_eq!(label("options.rtc_overlap_steps"), "options");
        assert_eq!(label("observation/joint_position"), "observation");
        assert_eq!(label("observation/my_custom_key"), "observation");
        assert_eq!(label("annotation.language.task"), "annotation");
        assert_eq!(label("mine/video"), "other");
        // Without a layout DROID's keys are nobody's: their top-level key.
        assert_eq!(label("state.eef_9d"), "state");
    }

    #[test]
    fn the_served_layouts_keys_are_labels_and_nothing_else_is() {
        let ckpt = gr00t_model::Checkpoint::open(gr00t_fixtures::multi_checkpoint()).unwrap();
        let tags = [
            "oxe_droid_relative_eef_relative_joint",
            "simpler_env_widowx",
        ];
        let layouts = Layouts::of_checkpoint(&ckpt, &tags).unwrap();
        let labels = FieldLabels::of_layouts(&layouts);
        let label = |f: &str| labels.label(f);
        // DROID's keys come from its layout, not from a list of their own.
        assert_eq!(label("state.eef_9d"), "state.eef_9d");
        assert_eq!(
            label("images.wrist_image_left[1]"),
            "images.wrist_image_left"
        );
        assert_eq!(
            label("video.exterior_image_1_left"),
            "video.exterior_image_1_left"
        );
        // Every key of every served layout is its own label, on every door's spelling.
        let mut keys = 0;
        for layout in layouts.all() {
            for view in &layout.spec.views {
                assert_eq!(
                    label(&format!("images.{view}[0]")),
                    format!("images.{view}")
                );
                assert_eq!(label(&format!("video.{view}")), format!("video.{view}"));
                keys += 1;
            }
            for (key, _) in layout.spec.state.keys() {
                assert_eq!(label(&format!("state.{key}")), format!("state.{key}"));
                keys += 1;
            }
            let language = &layout.spec.language_key;
            assert_eq!(&label(language), language);
        }
        assert!(keys > 6, "{keys}");
        // A layout that is not served adds nothing: new_embodiment's view and state key.
        assert_eq!(label("images.front"), "images");
        assert_eq!(label("video.front"), "video");
        assert_eq!(label("state.single_arm"), "state");
        assert_eq!(label("annotation.human.task_description"), "annotation");
    }

    #[test]
    fn errors_map_to_the_outcomes_http_answers() {
        let invalid = InferError::Invalid(RequestError::new("noise[3][7]", "bad"));
        assert_eq!(
            Outcome::of_error(&invalid),
            Outcome::BadRequest("noise[3][7]".into())
        );
        let busy = InferError::Busy {
            capacity: 4,
            retry_after_s: 1,
        };
        assert_eq!(Outcome::of_error(&busy).code(), 503);
        assert_eq!(Outcome::of_error(&InferError::Superseded).code(), 409);
        assert_eq!(Outcome::of_error(&InferError::Stopped).name(), "error");
        assert_eq!(Outcome::refused("video.ego_view").code(), 400);
        let wire = crate::doors::wire::error::WireError::field("options.seed", "options.seed: bad");
        assert_eq!(
            Outcome::refused(wire.field_at_fault()),
            Outcome::BadRequest("options.seed".into())
        );
        let whole = crate::doors::wire::error::WireError::bytes("not msgpack");
        assert_eq!(
            Outcome::refused(whole.field_at_fault()),
            Outcome::BadRequest(String::new())
        );
        // Counted by their labels.
        let answers = Answers::default();
        answers.count(Door::Zmq, Outcome::refused(wire.field_at_fault()));
        answers.count(Door::Zmq, Outcome::refused(whole.field_at_fault()));
        answers.count(Door::Http, Outcome::of_error(&invalid));
        let counted: Vec<_> = answers.snapshot().into_keys().collect();
        assert!(counted.contains(&(Door::Zmq, Outcome::BadRequest("options".into()))));
        assert!(counted.contains(&(Door::Zmq, Outcome::BadRequest("none".into()))));
        assert!(counted.contains(&(Door::Http, Outcome::BadRequest("noise".into()))));
    }

    #[test]
    fn answers_are_counted_per_door() {
        let a = Answers::default();
        a.count(Door::Zmq, Outcome::Ok);
        a.count(Door::Zmq, Outcome::Ok);
        a.count(Door::Ws, Outcome::refused("prompt"));
        let s = a.snapshot();
        assert_eq!(s.get(&(Door::Zmq, Outcome::Ok)), Some(&2));
        assert_eq!(s.get(&(Door::Ws, Outcome::refused("prompt"))), Some(&1));
        assert_eq!(s.get(&(Door::Http, Outcome::Ok)), None);
    }
}
