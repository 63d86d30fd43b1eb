//! The inference queue: one thread owns the model and answers typed requests in arrival order
//! from a bounded queue, so the async runtime never runs model code and a full queue is refused
//! early. Every door holds a cheap [`Queue`] handle.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use crate::engine::Engine;
use crate::error::{FieldError, InferError};
use crate::request::Request;
use crate::response::PredictResponse;
use serde::Serialize;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;
use tokio::sync::oneshot;

/// What one prediction gives.
pub type Outcome = Result<PredictResponse, InferError>;
/// The model call the worker runs for each request ([`Engine::run`], or a stand-in in tests).
pub type PredictFn = Box<dyn FnMut(Request) -> Outcome + Send>;
/// A door's decoding of its request, run on the inference thread just before the request.
pub type DecodeFn = Box<dyn FnOnce() -> Result<Request, FieldError> + Send>;

/// What a job holds: a typed request, or the door's step that decodes one (the HTTP door
/// hands over its body this way: decoding stays serialised on the inference thread, and a
/// refused body counts as a computed request, as it always has).
enum Work {
    Ready(Box<Request>),
    Decode(DecodeFn),
}

struct Job {
    work: Work,
    reply: oneshot::Sender<Outcome>,
}

#[derive(Default)]
struct Stats {
    waiting: AtomicUsize,
    busy: AtomicBool,
    served: AtomicU64,
    last_ms: AtomicU64,
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
    tx: SyncSender<Job>,
    stats: Arc<Stats>,
    capacity: usize,
}

/// Starts the worker thread owning `engine`, with room for `capacity` waiting requests.
pub fn start_engine(
    engine: std::sync::Arc<Engine>,
    capacity: usize,
) -> std::io::Result<(Worker, Queue)> {
    start(Box::new(move |request| engine.run(request)), capacity)
}

/// Starts the worker thread with room for `capacity` waiting requests.
pub fn start(predict: PredictFn, capacity: usize) -> std::io::Result<(Worker, Queue)> {
    let (tx, rx) = sync_channel(capacity);
    let stats = Arc::new(Stats::default());
    let thread = std::thread::Builder::new()
        .name("gr00t-infer".into())
        .spawn({
            let stats = stats.clone();
            move || run(rx, predict, &stats)
        })?;
    Ok((
        Worker { thread },
        Queue {
            tx,
            stats,
            capacity,
        },
    ))
}

fn run(rx: Receiver<Job>, mut predict: PredictFn, stats: &Stats) {
    while let Ok(job) = rx.recv() {
        stats.waiting.fetch_sub(1, Ordering::SeqCst);
        // The client hung up while waiting: don't spend the model on it.
        if job.reply.is_closed() {
            continue;
        }
        stats.busy.store(true, Ordering::SeqCst);
        let t0 = Instant::now();
        let work = job.work;
        let outcome = catch_unwind(AssertUnwindSafe(|| match work {
            Work::Ready(request) => predict(*request),
            Work::Decode(decode) => predict(decode()?),
        }))
        .unwrap_or_else(|payload| {
            Err(InferError::Internal(format!(
                "inference panicked: {}",
                panic_text(&*payload)
            )))
        });
        stats
            .last_ms
            .store(t0.elapsed().as_millis() as u64, Ordering::SeqCst);
        stats.served.fetch_add(1, Ordering::SeqCst);
        stats.busy.store(false, Ordering::SeqCst);
        // A closed receiver only means the client left; nothing to do.
        let _ = job.reply.send(outcome);
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
    /// Queues a request; the receiver yields the outcome. Never blocks.
    pub fn submit(&self, request: Request) -> Result<oneshot::Receiver<Outcome>, InferError> {
        self.submit_work(Work::Ready(Box::new(request)))
    }

    /// Queues a door's decoding step; the request it yields runs right after it on the
    /// inference thread, and its refusal is the outcome. A full queue is refused before
    /// anything is decoded. Never blocks.
    pub fn submit_decode(
        &self,
        decode: DecodeFn,
    ) -> Result<oneshot::Receiver<Outcome>, InferError> {
        self.submit_work(Work::Decode(decode))
    }

    fn submit_work(&self, work: Work) -> Result<oneshot::Receiver<Outcome>, InferError> {
        let (reply, rx) = oneshot::channel();
        // Count before sending so the worker's decrement can never run first.
        self.stats.waiting.fetch_add(1, Ordering::SeqCst);
        match self.tx.try_send(Job { work, reply }) {
            Ok(()) => Ok(rx),
            Err(e) => {
                self.stats.waiting.fetch_sub(1, Ordering::SeqCst);
                Err(match e {
                    TrySendError::Full(_) => self.busy(),
                    TrySendError::Disconnected(_) => InferError::Stopped,
                })
            }
        }
    }

    /// Queues a request behind whatever waits, and waits for its outcome.
    pub async fn infer(&self, request: Request) -> Outcome {
        match self.submit(request)?.await {
            Ok(outcome) => outcome,
            Err(_) => Err(InferError::Internal(
                "the inference worker dropped the request".into(),
            )),
        }
    }

    /// The refusal of a full queue.
    fn busy(&self) -> InferError {
        InferError::Busy {
            capacity: self.capacity,
            retry_after_s: self.retry_after_s(),
        }
    }

    /// The queue's live state.
    pub fn state(&self) -> QueueState {
        QueueState {
            capacity: self.capacity,
            waiting: self.stats.waiting.load(Ordering::SeqCst),
            busy: self.stats.busy.load(Ordering::SeqCst),
            served: self.stats.served.load(Ordering::SeqCst),
            last_ms: self.stats.last_ms.load(Ordering::SeqCst),
        }
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
    use crate::request::{AnyRequest, Item};
    use crate::response::{ActionGroups, TimingMs};
    use gr00t_embodiment::embodiment::Observation;
    use gr00t_embodiment::request::NoiseSource;
    use std::sync::mpsc::channel;

    /// A stand-in request whose instruction is `tag` (the first byte routes the stub).
    fn req(tag: &[u8]) -> Request {
        Request::new(Item::Any(AnyRequest {
            tag: "test".into(),
            observation: Observation {
                images: vec![],
                state: vec![],
                instruction: String::from_utf8_lossy(tag).into_owned(),
                noise: NoiseSource::Seed(0),
            },
        }))
    }

    /// The first instruction byte of a stand-in request.
    fn first_byte(r: &Request) -> u8 {
        match &r.item {
            Item::Any(a) => a.observation.instruction.as_bytes()[0],
            _ => unreachable!("stand-in requests are generic"),
        }
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
            chunk: Vec::new(),
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
        let f: PredictFn = Box::new(move |request: Request| {
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
        // A decoding step is refused the same way, before it runs.
        let decode: DecodeFn = Box::new(|| unreachable!("a refused step never runs"));
        assert!(matches!(
            handle.submit_decode(decode),
            Err(InferError::Busy { .. })
        ));
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
            Err(InferError::Internal(m)) => assert!(m.contains("boom"), "{m}"),
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
    fn decode_steps_run_on_the_worker_and_their_refusals_count() {
        let (f, _started, _release) = blocking_on(0);
        let (worker, handle) = start(f, 1).unwrap();
        let ok: DecodeFn = Box::new(|| Ok(req(b"d")));
        assert_eq!(
            wait(handle.submit_decode(ok).unwrap()).unwrap().seq_len,
            b'd' as usize
        );
        let bad: DecodeFn = Box::new(|| Err(FieldError::new("state", "is required")));
        assert_eq!(
            wait(handle.submit_decode(bad).unwrap()).unwrap_err(),
            InferError::Invalid(FieldError::new("state", "is required"))
        );
        assert_eq!(handle.state().served, 2);
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
}
