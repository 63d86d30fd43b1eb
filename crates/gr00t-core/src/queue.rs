//! The inference queue: one thread owns the model and answers typed requests in arrival order
//! from a bounded queue, so the async runtime never runs model code and a full queue is refused
//! early. Within one session the newest observation wins, by when each reached its door (not
//! when its parse ended): one that arrives while an older one of its session still waits takes
//! the older one's place, and the older one is answered [`InferError::Superseded`] at once; one
//! older than its session's waiting, computing or answered observation is answered so itself.
//! Every door holds a cheap [`Queue`] handle.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use crate::engine::Engine;
use crate::error::InferError;
use crate::request::Request;
use crate::response::{PredictResponse, SessionReply};
use crate::rtc::RtcPlan;
use crate::session::{LastChunk, Refusal, SessionKey, SessionStats, Sessions};
use gr00t_embodiment::frame_history::FrameHistory;
use serde::Serialize;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;
use tokio::sync::oneshot;

/// What one prediction gives.
pub type Outcome = Result<PredictResponse, InferError>;
/// The model call the worker runs for each request, with its session's frame history
/// ([`Engine::run_with`], or a stand-in in tests).
pub type PredictFn = Box<dyn FnMut(Request, Option<&mut FrameHistory>) -> Outcome + Send>;
struct Job {
    request: Box<Request>,
    reply: oneshot::Sender<Outcome>,
    /// The session whose newest observation this is.
    session: Option<SessionKey>,
    /// When the door queued it.
    queued: Instant,
    /// When it reached its door (latest-wins compares these).
    arrived: Instant,
    /// The door's request span, current at submit: the worker computes inside it.
    span: tracing::Span,
    /// Its `queue_wait` child, open until the worker takes the job.
    wait: tracing::Span,
}

#[derive(Default)]
struct Stats {
    busy: AtomicBool,
    served: AtomicU64,
    superseded: AtomicU64,
    last_ms: AtomicU64,
}

#[derive(Default)]
struct Jobs {
    waiting: VecDeque<Job>,
    /// The session and arrival of the request computing now.
    running: Option<(SessionKey, Instant)>,
    /// Every handle is gone: the worker finishes what waits, then ends.
    closed: bool,
    /// The worker has ended.
    stopped: bool,
}

/// What the worker and the handles share.
struct Shared {
    jobs: Mutex<Jobs>,
    ready: Condvar,
    stats: Stats,
    sessions: Arc<Sessions>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Jobs> {
        // Plain data, consistent after any panic.
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Closes the queue when the last [`Queue`] handle is dropped.
struct Open(Arc<Shared>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.lock().closed = true;
        self.0.ready.notify_all();
    }
}

/// The live state of the queue, as `/info` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct QueueState {
    /// Requests that may wait behind the one in flight.
    pub capacity: usize,
    /// Requests waiting now.
    pub waiting: usize,
    /// Whether a request is being computed now.
    pub busy: bool,
    /// Requests computed since start-up.
    pub served: u64,
    /// Requests answered 409 because a newer observation of their session replaced them.
    pub superseded: u64,
    /// Duration of the last computed request.
    pub last_ms: u64,
}

/// The worker thread; `join` waits for it after every [`Queue`] handle is dropped.
pub struct Worker {
    thread: JoinHandle<()>,
}

/// Cheap, cloneable access to the queue.
#[derive(Clone)]
pub struct Queue {
    shared: Arc<Shared>,
    _open: Arc<Open>,
    capacity: usize,
}

/// Starts the worker thread owning `engine`, with room for `capacity` waiting requests, and
/// `sessions` for the requests that name one.
pub fn start_engine(
    engine: Arc<Engine>,
    capacity: usize,
    sessions: Arc<Sessions>,
) -> std::io::Result<(Worker, Queue)> {
    let predict =
        move |request, history: Option<&mut FrameHistory>| engine.run_with(request, history);
    start_with(Box::new(predict), capacity, sessions)
}

/// Starts the worker thread with room for `capacity` waiting requests (default sessions).
pub fn start(predict: PredictFn, capacity: usize) -> std::io::Result<(Worker, Queue)> {
    start_with(predict, capacity, Arc::default())
}

/// Starts the worker thread with room for `capacity` waiting requests and `sessions`.
pub fn start_with(
    predict: PredictFn,
    capacity: usize,
    sessions: Arc<Sessions>,
) -> std::io::Result<(Worker, Queue)> {
    let shared = Arc::new(Shared {
        jobs: Mutex::default(),
        ready: Condvar::new(),
        stats: Stats::default(),
        sessions,
    });
    let thread = std::thread::Builder::new()
        .name("gr00t-infer".into())
        .spawn({
            let shared = shared.clone();
            move || {
                run(&shared, predict);
                shared.lock().stopped = true;
            }
        })?;
    Ok((
        Worker { thread },
        Queue {
            _open: Arc::new(Open(shared.clone())),
            shared,
            capacity,
        },
    ))
}

/// The next job, or `None` once the queue is closed and empty.
fn next_job(shared: &Shared) -> Option<Job> {
    let mut jobs = shared.lock();
    loop {
        if let Some(job) = jobs.waiting.pop_front() {
            jobs.running = job.session.clone().map(|key| (key, job.arrived));
            return Some(job);
        }
        if jobs.closed {
            return None;
        }
        jobs = shared.ready.wait(jobs).unwrap_or_else(|e| e.into_inner());
    }
}

fn run(shared: &Shared, mut predict: PredictFn) {
    let stats = &shared.stats;
    while let Some(job) = next_job(shared) {
        // The client hung up while waiting: don't spend the model on it.
        if job.reply.is_closed() {
            shared.lock().running = None;
            continue;
        }
        stats.busy.store(true, Ordering::SeqCst);
        drop(job.wait);
        let _in_request = job.span.enter();
        let t0 = Instant::now();
        let (request, session) = (*job.request, job.session);
        // The door decoded it before queueing.
        let door_ms = request.decode_ms;
        let outcome = match &session {
            Some(key) => {
                let sessions = &shared.sessions;
                in_session(sessions, key, request, job.arrived, t0, &mut predict)
            }
            None => guarded(&mut predict, request, None),
        }
        .map(|mut r| {
            let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
            r.queue_ms = ms(job.queued, t0);
            r.observation_age_ms = ms(job.queued, Instant::now()) + door_ms;
            r
        });
        stats
            .last_ms
            .store(t0.elapsed().as_millis() as u64, Ordering::SeqCst);
        stats.served.fetch_add(1, Ordering::SeqCst);
        stats.busy.store(false, Ordering::SeqCst);
        shared.lock().running = None;
        // A closed receiver only means the client left; nothing to do.
        let _ = job.reply.send(outcome);
    }
}

/// Runs the model on one request; a panic becomes an internal error.
fn guarded(
    predict: &mut PredictFn,
    request: Request,
    history: Option<&mut FrameHistory>,
) -> Outcome {
    catch_unwind(AssertUnwindSafe(|| predict(request, history))).unwrap_or_else(|payload| {
        Err(InferError::internal(format!(
            "inference panicked: {}",
            panic_text(&*payload)
        )))
    })
}

/// One request of session `key` that reached its door at `arrived` and starts at `now`: RTC
/// gets the session's last chunk, and the answer becomes it; a refusal leaves the session as
/// it was (and a missing one uncreated).
fn in_session(
    sessions: &Sessions,
    key: &SessionKey,
    mut request: Request,
    arrived: Instant,
    now: Instant,
    predict: &mut PredictFn,
) -> Outcome {
    let token = request.session_token.take();
    let mut view = match sessions.begin(key, token.as_deref(), now) {
        Ok(view) => view,
        Err(why) => return Err(refused(key, why)),
    };
    view.arrived = arrived;
    if let Some(RtcPlan::SessionChunk { last, .. }) = request.rtc.as_mut() {
        *last = view.last_chunk.take();
    }
    let outcome = guarded(predict, request, Some(&mut view.frames));
    let chunk = outcome.as_ref().ok().map(|r| LastChunk {
        tag: r.embodiment.clone(),
        rows: r.action_horizon,
        values: r.chunk.clone(),
    });
    let (before, since_last) = (view.step, view.since_last);
    let token = (!view.token.is_empty()).then(|| view.token.clone());
    let step = sessions.record(key, view, chunk);
    let mut response = outcome?;
    response.session = Some(SessionReply {
        step: step.unwrap_or(before + 1),
        since_last_ms: since_last.map(|d| d.as_secs_f64() * 1e3),
    });
    response.session_token = token;
    Ok(response)
}

/// The refusal of a request (or reset) whose session token does not let it touch its session.
fn refused(key: &SessionKey, why: Refusal) -> InferError {
    let id = key.id();
    match why {
        Refusal::Unknown => InferError::SessionRestarted(format!(
            "this server holds no session {id:?} (it expired, was reset or evicted, or this is \
             another or a restarted server): start over without session_token"
        )),
        Refusal::Replaced => InferError::SessionRestarted(format!(
            "the session {id:?} held here is another one than session_token names (it was \
             reset and began again, or the token is not its): start over without session_token"
        )),
        Refusal::Locked => InferError::SessionLocked(format!(
            "the session {id:?} is locked to the session_token its client echoed: send that \
             token, or use another session_id"
        )),
    }
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

impl Worker {
    /// Waits for the thread to finish (it ends when every handle is dropped).
    pub fn join(self) {
        if self.thread.join().is_err() {
            tracing::error!("the inference thread ended with a panic");
        }
    }
}

impl Queue {
    /// Queues a request that reaches the queue as it arrives ([`Queue::submit_at`] now).
    pub fn submit(&self, request: Request) -> Result<oneshot::Receiver<Outcome>, InferError> {
        self.submit_at(request, Instant::now())
    }

    /// Queues a request that reached its door at `arrived`; the receiver yields the outcome.
    /// A request of a session replaces that session's request still waiting if it arrived
    /// later (the replaced one is answered [`InferError::Superseded`]), and is answered so
    /// itself if its session has a later one waiting, computing or answered. Never blocks.
    pub fn submit_at(
        &self,
        request: Request,
        arrived: Instant,
    ) -> Result<oneshot::Receiver<Outcome>, InferError> {
        let (reply, rx) = oneshot::channel();
        let span = tracing::Span::current();
        if let Some(key) = &request.session {
            span.record("session", key.id());
        }
        // No request span (a bench, a test): no orphan `queue_wait` either.
        let wait = if span.is_none() {
            tracing::Span::none()
        } else {
            tracing::info_span!(parent: &span, "queue_wait")
        };
        let job = Job {
            session: request.session.clone(),
            request: Box::new(request),
            reply,
            queued: Instant::now(),
            arrived,
            span,
            wait,
        };
        // The token is checked before the request can take a waiting one's place.
        let token = job.request.session_token.as_deref();
        if let Some(key) = &job.session {
            self.shared
                .sessions
                .admit(key, token)
                .map_err(|why| refused(key, why))?;
        }
        let mut jobs = self.shared.lock();
        if jobs.stopped {
            return Err(InferError::Stopped);
        }
        // Under the queue's lock, so that the worker cannot record a newer answer between
        // this check and the ones below (it takes the sessions' lock without the queue's).
        if let Some(key) = &job.session {
            if self.shared.sessions.answered_after(key, arrived) {
                drop(jobs);
                return Err(self.superseded());
            }
        }
        let older = job.session.as_ref().and_then(|key| {
            jobs.waiting
                .iter()
                .position(|j| j.session.as_ref() == Some(key))
        });
        // A newer observation of its session is computing, or waits: this one is stale.
        let newer_running = jobs
            .running
            .as_ref()
            .is_some_and(|(key, at)| job.session.as_ref() == Some(key) && *at > arrived);
        if newer_running || older.is_some_and(|i| jobs.waiting[i].arrived > arrived) {
            drop(jobs);
            return Err(self.superseded());
        }
        // A waiting request that carries a token (locking the session once it runs) is not
        // replaced by one without (one with a wrong token was refused above).
        if let (Some(i), Some(key)) = (older, &job.session) {
            if token.is_none() && jobs.waiting[i].request.session_token.is_some() {
                drop(jobs);
                return Err(refused(key, Refusal::Locked));
            }
        }
        if let Some(i) = older {
            let old = std::mem::replace(&mut jobs.waiting[i], job);
            drop(jobs);
            // A closed receiver only means that client left too.
            let _ = old.reply.send(Err(self.superseded()));
            return Ok(rx);
        }
        if jobs.waiting.len() >= self.capacity {
            drop(jobs);
            return Err(self.busy());
        }
        jobs.waiting.push_back(job);
        drop(jobs);
        self.shared.ready.notify_one();
        Ok(rx)
    }

    /// Queues a request behind whatever waits, and waits for its outcome.
    pub async fn infer(&self, request: Request) -> Outcome {
        match self.submit(request)?.await {
            Ok(outcome) => outcome,
            Err(_) => Err(InferError::internal(
                "the inference worker dropped the request",
            )),
        }
    }

    /// The answer of a request older than its session's newest, counted.
    fn superseded(&self) -> InferError {
        self.shared.stats.superseded.fetch_add(1, Ordering::SeqCst);
        InferError::Superseded
    }

    /// The refusal of a full queue.
    pub fn busy(&self) -> InferError {
        InferError::Busy {
            capacity: self.capacity,
            retry_after_s: self.retry_after_s(),
        }
    }

    /// The queue's live state.
    pub fn state(&self) -> QueueState {
        let stats = &self.shared.stats;
        QueueState {
            capacity: self.capacity,
            waiting: self.shared.lock().waiting.len(),
            busy: stats.busy.load(Ordering::SeqCst),
            served: stats.served.load(Ordering::SeqCst),
            superseded: stats.superseded.load(Ordering::SeqCst),
            last_ms: stats.last_ms.load(Ordering::SeqCst),
        }
    }

    /// Whether a request of no waiting session would be refused now.
    pub fn is_full(&self) -> bool {
        self.shared.lock().waiting.len() >= self.capacity
    }

    /// The sessions' counts.
    pub fn session_stats(&self) -> SessionStats {
        self.shared.sessions.stats()
    }

    /// Clears session `key` for a client carrying `token` (a request of it computing now keeps
    /// nothing); whether it existed. A locked session needs its token (409 otherwise).
    pub fn reset_session(&self, key: &SessionKey, token: Option<&str>) -> Result<bool, InferError> {
        self.shared
            .sessions
            .reset(key, token)
            .map_err(|why| refused(key, why))
    }

    /// Drops session `key`, whose connection ended.
    pub fn close_session(&self, key: &SessionKey) {
        self.shared.sessions.close(key);
    }

    /// Seconds a refused client should wait: the queue's expected drain time, at least 1.
    pub fn retry_after_s(&self) -> u64 {
        let s = self.state();
        let ms = s.last_ms.saturating_mul(s.waiting as u64 + 1);
        ms.div_ceil(1000).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::{ActionGroups, TimingMs};
    use gr00t_embodiment::embodiment::Observation;
    use gr00t_embodiment::observation::NoiseSource;
    use std::sync::mpsc::channel;
    use std::sync::OnceLock;

    /// The tiny checkpoint's DROID layout, read once (the stub never looks at it).
    fn layout() -> std::sync::Arc<gr00t_embodiment::layout::Layout> {
        static LAYOUT: OnceLock<std::sync::Arc<gr00t_embodiment::layout::Layout>> = OnceLock::new();
        LAYOUT
            .get_or_init(|| {
                let ckpt = gr00t_model::Checkpoint::open(gr00t_fixtures::tiny_checkpoint())
                    .expect("the tiny checkpoint opens");
                crate::layouts::Layouts::of_checkpoint(&ckpt, &[gr00t_embodiment::EMBODIMENT_TAG])
                    .expect("the tiny checkpoint serves DROID")
                    .all()[0]
                    .clone()
            })
            .clone()
    }

    /// A stand-in request whose instruction is `tag` (the first byte routes the stub).
    fn req(tag: &[u8]) -> Request {
        Request::new(
            layout(),
            Observation {
                images: vec![],
                state: vec![],
                instruction: String::from_utf8_lossy(tag).into_owned(),
                noise: NoiseSource::Seed(0),
            },
        )
    }

    /// The first instruction byte of a stand-in request.
    fn first_byte(r: &Request) -> u8 {
        r.observation.instruction.as_bytes()[0]
    }

    /// A response whose `seq_len` carries the first body byte, to check routing and order.
    fn response(tag: u8) -> PredictResponse {
        PredictResponse {
            actions: ActionGroups(vec![
                ("eef_9d".into(), vec![]),
                ("gripper_position".into(), vec![]),
                ("joint_position".into(), vec![]),
            ]),
            action_horizon: 40,
            embodiment: String::new(),
            seq_len: tag as usize,
            noise_source: "seed",
            seed: Some(42),
            actions_normalized: None,
            timing_ms: TimingMs::default(),
            ..Default::default()
        }
    }

    fn blocking_on(
        block: u8,
    ) -> (
        PredictFn,
        std::sync::mpsc::Receiver<()>,
        std::sync::mpsc::Sender<()>,
    ) {
        let (started_tx, started_rx) = channel();
        let (release_tx, release_rx) = channel::<()>();
        let f: PredictFn = Box::new(move |request: Request, _| {
            let body = [first_byte(&request)];
            if body[0] == block {
                started_tx.send(()).unwrap();
                release_rx.recv().unwrap();
            }
            if body[0] == b'p' {
                panic!("boom");
            }
            Ok(response(body[0]))
        });
        (f, started_rx, release_tx)
    }

    fn wait(rx: oneshot::Receiver<Outcome>) -> Outcome {
        rx.blocking_recv().expect("worker dropped the reply")
    }

    #[test]
    fn answers_in_order_and_refuses_when_full() {
        let (f, started, release) = blocking_on(b'b');
        let (worker, handle) = start(f, 2).unwrap();
        let first = handle.submit(req(b"b")).unwrap();
        started.recv().unwrap(); // the worker holds 'b': the queue is empty again
        assert!(handle.state().busy);
        let second = handle.submit(req(b"1")).unwrap();
        let third = handle.submit(req(b"2")).unwrap();
        assert_eq!(handle.state().waiting, 2);
        assert_eq!(
            handle.submit(req(b"3")).unwrap_err(),
            InferError::Busy {
                capacity: 2,
                retry_after_s: handle.retry_after_s()
            }
        );
        assert!(handle.retry_after_s() >= 1);
        release.send(()).unwrap();
        assert_eq!(wait(first).unwrap().seq_len, b'b' as usize);
        assert_eq!(wait(second).unwrap().seq_len, b'1' as usize);
        assert_eq!(wait(third).unwrap().seq_len, b'2' as usize);
        assert_eq!(handle.state().served, 3);
        drop(handle);
        worker.join();
    }

    #[test]
    fn a_panic_becomes_an_internal_error_and_the_worker_goes_on() {
        let (f, _started, _release) = blocking_on(0);
        let (worker, handle) = start(f, 1).unwrap();
        let out = wait(handle.submit(req(b"p")).unwrap());
        match out {
            Err(InferError::Internal(m)) => assert!(m.message().contains("boom"), "{m}"),
            other => panic!("expected an internal error, got {other:?}"),
        }
        assert_eq!(
            wait(handle.submit(req(b"x")).unwrap()).unwrap().seq_len,
            b'x' as usize
        );
        drop(handle);
        worker.join();
    }

    #[test]
    fn abandoned_requests_are_skipped() {
        let (f, started, release) = blocking_on(b'b');
        let (worker, handle) = start(f, 2).unwrap();
        let first = handle.submit(req(b"b")).unwrap();
        started.recv().unwrap();
        drop(handle.submit(req(b"1")).unwrap()); // client gave up
        let third = handle.submit(req(b"2")).unwrap();
        release.send(()).unwrap();
        wait(first).unwrap();
        assert_eq!(wait(third).unwrap().seq_len, b'2' as usize);
        assert_eq!(handle.state().served, 2);
        drop(handle);
        worker.join();
    }

    fn key(id: &str) -> SessionKey {
        SessionKey::named("test", id)
    }

    fn in_session(tag: &[u8], id: &str) -> Request {
        req(tag).in_session(Some(key(id)))
    }

    /// A stub that blocks on 'b' until released and reports each byte it computes.
    fn recording_blocking_on_b() -> (
        PredictFn,
        std::sync::mpsc::Receiver<()>,
        std::sync::mpsc::Sender<()>,
        std::sync::mpsc::Receiver<u8>,
    ) {
        let (started_tx, started) = channel();
        let (release, release_rx) = channel::<()>();
        let (computed_tx, computed) = channel();
        let f: PredictFn = Box::new(move |r: Request, _| {
            let b = first_byte(&r);
            if b == b'b' {
                started_tx.send(()).unwrap();
                release_rx.recv().unwrap();
            }
            computed_tx.send(b).unwrap();
            Ok(response(b))
        });
        (f, started, release, computed)
    }

    #[test]
    fn a_newer_observation_of_a_session_replaces_the_waiting_one() {
        let (f, started, release, computed) = recording_blocking_on_b();
        let (worker, handle) = start(f, 2).unwrap();
        let first = handle.submit(in_session(b"b", "r1")).unwrap();
        started.recv().unwrap(); // 'b' computes: only waiting requests can be replaced
        let old = handle.submit(in_session(b"1", "r1")).unwrap();
        let other = handle.submit(in_session(b"3", "r2")).unwrap();
        let newer = handle.submit(in_session(b"2", "r1")).unwrap();
        // Answered at once, while 'b' still computes; the newer one took its place.
        assert_eq!(wait(old).unwrap_err(), InferError::Superseded);
        assert_eq!(handle.state().waiting, 2);
        assert_eq!(handle.state().superseded, 1);
        // The queue is full: a third session is refused.
        assert!(matches!(
            handle.submit(in_session(b"4", "r3")),
            Err(InferError::Busy { .. })
        ));
        release.send(()).unwrap();
        assert_eq!(wait(first).unwrap().seq_len, b'b' as usize);
        assert_eq!(wait(newer).unwrap().seq_len, b'2' as usize);
        assert_eq!(wait(other).unwrap().seq_len, b'3' as usize);
        // Computed: never the replaced one, and r1's slot before r2 (FIFO across sessions).
        let order: Vec<u8> = computed.try_iter().collect();
        assert_eq!(order, b"b23");
        assert_eq!(handle.state().served, 3);
        drop(handle);
        worker.join();
    }

    #[test]
    fn latest_wins_by_arrival_at_the_door_not_at_the_queue() {
        let (f, started, release, computed) = recording_blocking_on_b();
        let (worker, handle) = start(f, 4).unwrap();
        let base = Instant::now();
        let at = |ms: u64| base + std::time::Duration::from_millis(ms);
        let submit = |tag: &[u8], ms| handle.submit_at(in_session(tag, "r1"), at(ms));
        let first = submit(b"b", 10).unwrap();
        started.recv().unwrap();
        // Observations whose parse ends out of their order of arrival.
        let third = submit(b"3", 30).unwrap();
        let stale = |r: Result<_, InferError>| matches!(r, Err(InferError::Superseded));
        assert!(stale(submit(b"2", 20)), "older than the one waiting");
        assert!(stale(submit(b"0", 5)), "older than the one computing");
        let fourth = submit(b"4", 40).unwrap();
        assert_eq!(wait(third).unwrap_err(), InferError::Superseded);
        release.send(()).unwrap();
        assert_eq!(wait(first).unwrap().seq_len, b'b' as usize);
        assert_eq!(wait(fourth).unwrap().seq_len, b'4' as usize);
        assert!(stale(submit(b"5", 35)), "older than the one answered");
        assert_eq!(
            wait(submit(b"6", 50).unwrap()).unwrap().seq_len,
            b'6' as usize
        );
        // Another session is not compared with r1's.
        let other = handle.submit_at(in_session(b"7", "r2"), at(1)).unwrap();
        assert_eq!(wait(other).unwrap().seq_len, b'7' as usize);
        assert_eq!(computed.try_iter().collect::<Vec<u8>>(), b"b467");
        assert_eq!(handle.state().superseded, 4);
        drop(handle);
        worker.join();
    }

    #[test]
    fn a_session_hands_its_last_chunk_to_the_next_rtc_request() {
        use crate::rtc::{RtcPlan, RtcSteps};
        // The stub answers a chunk of the first instruction byte and reports, in seq_len,
        // the first value of the previous chunk it was given (0 without one).
        let f: PredictFn = Box::new(|r: Request, _| {
            let prev = match &r.rtc {
                Some(RtcPlan::SessionChunk { last: Some(c), .. }) => c.values[0] as usize,
                _ => 0,
            };
            let mut out = response(first_byte(&r));
            out.seq_len = prev;
            out.chunk = vec![first_byte(&r) as f32; 4];
            Ok(out)
        });
        let (worker, handle) = start(f, 4).unwrap();
        let steps = RtcSteps {
            prefix: String::new(),
            action_horizon: None,
            overlap_steps: 2,
            frozen_steps: 0,
            ramp_rate: 6.0,
        };
        let rtc = |tag: &[u8], id: &str| {
            in_session(tag, id).with_rtc_plan(Some(RtcPlan::SessionChunk {
                steps: steps.clone(),
                last: None,
            }))
        };
        let a1 = wait(handle.submit(rtc(b"a", "A")).unwrap()).unwrap();
        assert_eq!((a1.seq_len, a1.session.map(|s| s.step)), (0, Some(1)));
        let b1 = wait(handle.submit(rtc(b"x", "B")).unwrap()).unwrap();
        assert_eq!(b1.seq_len, 0, "session B saw A's chunk");
        let a2 = wait(handle.submit(rtc(b"c", "A")).unwrap()).unwrap();
        assert_eq!(a2.seq_len, b'a' as usize);
        let a2s = a2.session.unwrap();
        assert_eq!(a2s.step, 2);
        assert!(a2s.since_last_ms.is_some());
        assert_eq!(handle.reset_session(&key("A"), None), Ok(true));
        let a3 = wait(handle.submit(rtc(b"d", "A")).unwrap()).unwrap();
        assert_eq!((a3.seq_len, a3.session.map(|s| s.step)), (0, Some(1)));
        let st = handle.session_stats();
        assert_eq!((st.active, st.created, st.resets), (2, 3, 1));
        drop(handle);
        worker.join();
    }

    #[test]
    fn a_session_begins_with_its_first_answer_and_its_token_says_when_it_is_gone() {
        // 'e' is refused, 'p' panics, anything else is answered.
        let f: PredictFn = Box::new(|r: Request, _| match first_byte(&r) {
            b'e' => Err(InferError::internal("refused")),
            b'p' => panic!("boom"),
            b => Ok(response(b)),
        });
        let (worker, handle) = start(f, 4).unwrap();
        for tag in [b"e", b"p"] {
            assert!(wait(handle.submit(in_session(tag, "A")).unwrap()).is_err());
        }
        assert_eq!(handle.session_stats().created, 0);
        let first = wait(handle.submit(in_session(b"a", "A")).unwrap()).unwrap();
        let token = first.session_token.clone().unwrap();
        assert_eq!(first.session.unwrap().step, 1);
        // A panic inside the session leaves it usable, its step as it was.
        assert!(wait(handle.submit(in_session(b"p", "A")).unwrap()).is_err());
        let echo = |tag: &[u8], id: &str, t: &str| {
            in_session(tag, id).with_session_token(Some(t.to_string()))
        };
        let second = wait(handle.submit(echo(b"b", "A", &token)).unwrap()).unwrap();
        assert_eq!(
            (second.session.unwrap().step, second.session_token),
            (2, Some(token.clone()))
        );
        // Gone, or another incarnation: 409-style refusals naming the session, at once.
        assert_eq!(handle.reset_session(&key("A"), Some(&token)), Ok(true));
        match handle.submit(echo(b"c", "A", &token)) {
            Err(InferError::SessionRestarted(m)) => assert!(m.contains("\"A\""), "{m}"),
            other => panic!("expected a restart, got {other:?}"),
        }
        let fresh = wait(handle.submit(in_session(b"d", "A")).unwrap()).unwrap();
        assert_ne!(fresh.session_token, Some(token.clone()));
        assert!(matches!(
            handle.submit(echo(b"f", "A", &token)),
            Err(InferError::SessionRestarted(_))
        ));
        let st = handle.session_stats();
        assert_eq!((st.active, st.created, st.restarted), (1, 2, 2));
        drop(handle);
        worker.join();
    }
    #[test]
    fn without_its_token_a_locked_session_is_refused_before_it_replaces_a_waiting_step() {
        let (f, started, release) = blocking_on(b'b');
        let (worker, handle) = start(f, 4).unwrap();
        let first = wait(handle.submit(in_session(b"a", "R")).unwrap()).unwrap();
        let token = first.session_token.unwrap();
        let echo =
            |tag: &[u8], t: &str| in_session(tag, "R").with_session_token(Some(t.to_string()));
        // The robot's step computes; its next step waits behind it.
        let computing = handle.submit(echo(b"b", &token)).unwrap();
        started.recv().unwrap();
        let next = handle.submit(echo(b"n", &token)).unwrap();
        // Another client that knows only the id: a forged token, then none. Neither takes
        // the robot's waiting step's place.
        assert!(matches!(
            handle.submit(echo(b"x", "forged")),
            Err(InferError::SessionRestarted(_))
        ));
        match handle.submit(in_session(b"y", "R")) {
            Err(InferError::SessionLocked(m)) => assert!(m.contains("\"R\""), "{m}"),
            other => panic!("expected a locked session, got {other:?}"),
        }
        assert!(matches!(
            handle.reset_session(&key("R"), None),
            Err(InferError::SessionLocked(_))
        ));
        assert_eq!(handle.state().superseded, 0);
        // The holder's own newer step still replaces its waiting one.
        let newer = handle.submit(echo(b"m", &token)).unwrap();
        assert_eq!(wait(next), Err(InferError::Superseded));
        release.send(()).unwrap();
        assert_eq!(wait(computing).unwrap().session.unwrap().step, 2);
        let newer = wait(newer).unwrap();
        assert_eq!(
            (newer.seq_len, newer.session.unwrap().step),
            (b'm' as usize, 3)
        );
        assert_eq!(handle.reset_session(&key("R"), Some(&token)), Ok(true));
        let st = handle.session_stats();
        assert_eq!((st.locked, st.restarted, st.resets), (2, 1, 1));
        drop(handle);
        worker.join();
    }
}
