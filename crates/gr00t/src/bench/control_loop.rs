//! `gr00t bench --loop --control-hz R`: a simulated robot driving the model the way a real
//! asynchronous client does, with and without real-time chunking (RTC).
//!
//! The robot ticks at R Hz in real time (one sleep per tick until its deadline, no busy wait)
//! and executes one row of its current chunk per tick. Once the next row to execute is row
//! `K` (`--execute`), it sends the next observation through the core queue and keeps executing
//! the current chunk while the worker computes. The answer to a request sent right after tick
//! `t_s` is adopted at the first tick `t` after it arrives; rows `0..t−t_s−1` of the new chunk
//! belonged to ticks already gone, so the robot continues at row `d = t − t_s − 1`
//! ([`switch_row`], as openpi's action-chunk broker and the RTC paper skip the stale rows). If
//! the current chunk runs out first, the robot holds (a missed tick), so the achieved control
//! rate falls below R; an answer whose every row is already gone is dropped (stale) and the
//! observation re-sent. K counts rows, not ticks since the switch: while answers take fewer
//! than K ticks the robot sends every K ticks; otherwise right after adopting an answer.
//!
//! RTC ([`rtc_for`]): a request sent when the next row of the executing chunk is `s` carries
//! that chunk (the response's whole normalised `chunk`) as `previous_chunk` with
//! `overlap = rows − s` and `action_horizon = s + overlap`. The model writes
//! `x[:, :overlap] = prev[:, ah−overlap : ah]` (spec §4.9), i.e. new row i starts from prev row
//! `s + i`: new row 0 is the action for tick `t_s + 1`, the tick the old chunk's row `s` runs
//! at. `rtc_frozen_steps` is the expected delay `D = ⌈latency · R⌉` of the previous answer
//! ([`expected_delay`]; the warm-up answer's for the first request), ramp rate 6.0. When the
//! latency does not grow, the answer comes at tick `t_s + D`, so the robot starts at row
//! `D − 1` < frozen: the first executed new action IS the old chunk's next action (the frozen
//! rows are copied, bit for bit, in normalised space), and the ramp blends the rows after it.
//!
//! Reported per mode: achieved control rate (the tick rate actually kept × the share of ticks
//! that executed), missed ticks, the chunk-boundary discontinuity (max |Δ| over every action
//! value between the last executed action of the old chunk and the first executed one of the
//! new, in physical units over all DROID groups and in normalised units over the valid dims),
//! the first new action's distance from the old chunk's next one (what RTC pins), the same
//! max |Δ| between consecutive rows of one chunk for scale, the switch rows; request latency
//! (submit → answer) and queue delay (the response's `queue_ms`: submit → the worker taking
//! it).
//!
//! Simplifications: the robot's state in every observation is the demo's (the simulated robot
//! does not feed its executed actions back), so DROID's relative actions decode against the
//! same state in every chunk and a frozen row decodes to the same physical action. A real
//! robot's state moves; RTC's previous chunk is then relative to the old state while the new
//! chunk decodes against the new one. Frames walk as in `--loop` and each request has its own
//! noise seed. The pure part ([`Robot`], [`switch_row`], [`rtc_for`], [`expected_delay`],
//! [`max_abs_diff`]) has no clock: [`simulate`] runs it with a fixed delay in ticks, for tests.

use super::{loop_requests, median, percentile, round3};
use crate::engine::Engine;
use crate::request_from_body;
use gr00t_core::queue::{start_engine, Outcome, Queue};
use gr00t_core::request::Request;
use gr00t_core::response::PredictResponse;
use gr00t_core::rtc::valid_action_width;
use gr00t_model::rtc::DEFAULT_RAMP_RATE;
use gr00t_model::Rtc;
use serde_json::{json, Value};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why the real-time loop could not run.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    /// A loop option is out of range.
    #[error("{0}")]
    Option(String),
    /// The loop's observations could not be prepared from the demo request.
    #[error("{0}")]
    Prepare(String),
    /// The demo request's frames could not be walked into the loop's observations.
    #[error(transparent)]
    Demo(#[from] Box<crate::bench::BenchError>),
    /// A loop observation's JSON could not be edited.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A loop observation was refused by the served layout.
    #[error("the loop request was refused: {0}")]
    Refused(#[source] gr00t_embodiment::observation::RequestError),
    /// A response does not have the model's chunk shape.
    #[error("{0}")]
    Chunk(String),
    /// The queue or the engine refused or failed a loop request.
    #[error("{context}: {cause}")]
    Request {
        /// Which request, in the bench's words.
        context: &'static str,
        /// The core's reason.
        #[source]
        cause: gr00t_core::InferError,
    },
    /// The queue's thread, or a reply thread, did not start.
    #[error(transparent)]
    Thread(#[from] std::io::Error),
    /// The reply channel closed before a warm-up answer came.
    #[error(transparent)]
    Reply(#[from] mpsc::RecvError),
}

/// What the realistic loop runs.
#[derive(Debug, Clone)]
pub struct LoopOptions {
    /// Control rate R in Hz.
    pub control_hz: f64,
    /// Rows of each chunk executed before the next observation is sent (K).
    pub execute: usize,
    /// Answers per mode.
    pub chunks: usize,
}

/// The row of a new chunk executed first when the answer to a request sent right after tick
/// `sent_tick` is adopted at tick `now_tick`: row 0 belongs to tick `sent_tick + 1`.
pub fn switch_row(sent_tick: u64, now_tick: u64) -> usize {
    now_tick.saturating_sub(sent_tick + 1) as usize
}

/// The expected delay in ticks of an answer that took `latency_ticks` ticks, rounded up (at
/// least 1: the earliest an answer can be used is the next tick).
pub fn expected_delay(latency_ticks: f64) -> usize {
    if latency_ticks.is_finite() && latency_ticks > 0.0 {
        (latency_ticks.ceil() as usize).max(1)
    } else {
        1
    }
}

/// RTC options for a request sent when `send_row` is the next row of the executing chunk:
/// `previous` (the response's padded normalised chunk) with its rows `send_row..rows` as the
/// overlap, so prev row `send_row` lands on new row 0; `frozen` is clamped to the overlap.
pub fn rtc_for(
    previous: &[f32],
    rows: usize,
    send_row: usize,
    frozen: usize,
    ramp_rate: f64,
) -> Rtc {
    let overlap = rows.saturating_sub(send_row);
    Rtc {
        previous_chunk: previous.to_vec(),
        // ah − overlap = send_row: the rows copied are prev[send_row .. rows].
        action_horizon: send_row.min(rows) + overlap,
        overlap_steps: overlap,
        frozen_steps: frozen.min(overlap),
        ramp_rate,
    }
}

/// max |a − b| over paired values (0 for none).
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).abs())
        .fold(0.0, f64::max)
}

/// One chunk as the robot executes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    /// The model's whole normalised chunk (`horizon × action_dim`, padded): RTC's previous chunk.
    pub model: Vec<f32>,
    /// Normalised rows, the embodiment's valid values only.
    pub normalized: Vec<Vec<f32>>,
    /// Physical rows, every action key's values concatenated in key order.
    pub physical: Vec<Vec<f32>>,
}

impl Chunk {
    /// The chunk of a response of a model with `action_dim` values per row, `valid` of them
    /// decoded by the embodiment.
    pub fn from_response(
        resp: &PredictResponse,
        action_dim: usize,
        valid: usize,
    ) -> Result<Chunk, LoopError> {
        let rows = resp.action_horizon;
        if valid > action_dim || resp.chunk.len() < rows * action_dim {
            return Err(LoopError::Chunk(format!(
                "the response's chunk has {} values, expected {rows} rows of {action_dim}",
                resp.chunk.len()
            )));
        }
        let normalized = resp
            .chunk
            .chunks(action_dim)
            .take(rows)
            .map(|r| r[..valid].to_vec())
            .collect();
        let mut physical = vec![Vec::new(); rows];
        for (key, key_rows) in resp.actions.iter() {
            if key_rows.len() != rows {
                return Err(LoopError::Chunk(format!(
                    "action key {key} has {} rows, expected {rows}",
                    key_rows.len()
                )));
            }
            for (row, values) in physical.iter_mut().zip(key_rows) {
                row.extend_from_slice(values);
            }
        }
        Ok(Chunk {
            model: resp.chunk.clone(),
            normalized,
            physical,
        })
    }

    /// Rows the robot can execute.
    pub fn rows(&self) -> usize {
        self.normalized.len()
    }
}

/// One switch from an old chunk to a new one.
#[derive(Debug, Clone, PartialEq)]
pub struct Boundary {
    /// Next row of the old chunk when the observation was sent (s).
    pub send_row: usize,
    /// Row of the new chunk executed first (d, the ticks gone since the request).
    pub switch_row: usize,
    /// Ticks the robot held just before the switch (the old chunk ran out).
    pub held: u64,
    /// The last executed action (normalised valid values, physical values).
    pub last: (Vec<f32>, Vec<f32>),
    /// The first executed action of the new chunk.
    pub first: (Vec<f32>, Vec<f32>),
    /// What the old chunk would have executed at that tick, if it had a row left.
    pub old_next: Option<(Vec<f32>, Vec<f32>)>,
}

impl Boundary {
    /// The discontinuity: max |Δ| between the last old and the first new action, normalised.
    pub fn jump_normalized(&self) -> f64 {
        max_abs_diff(&self.last.0, &self.first.0)
    }

    /// The same in physical units.
    pub fn jump_physical(&self) -> f64 {
        max_abs_diff(&self.last.1, &self.first.1)
    }

    /// How far the first new action is from what the old chunk would have done instead:
    /// max |Δ| (normalised, physical); `None` when the old chunk had run out.
    pub fn deviation(&self) -> Option<(f64, f64)> {
        self.old_next.as_ref().map(|(n, p)| {
            (
                max_abs_diff(n, &self.first.0),
                max_abs_diff(p, &self.first.1),
            )
        })
    }
}

#[derive(Debug, Clone, Copy)]
struct Sent {
    tick: u64,
    row: usize,
}

/// The simulated robot: the chunk it executes and what it measured; no clock.
#[derive(Debug)]
pub struct Robot {
    execute: usize,
    chunk: Chunk,
    /// Bumped at every switch, so within-chunk steps never span a boundary.
    chunk_id: u64,
    next_row: usize,
    in_flight: Option<Sent>,
    last: Option<(Vec<f32>, Vec<f32>)>,
    last_at: Option<(u64, usize)>,
    held_run: u64,
    /// Ticks that executed an action.
    pub executed: u64,
    /// Ticks that held (no row left).
    pub missed: u64,
    /// Answers dropped because every row of them was already gone.
    pub stale: u64,
    /// Every switch, in order.
    pub boundaries: Vec<Boundary>,
    /// max |Δ| between consecutive rows of one chunk (normalised, physical), for scale.
    pub steps: Vec<(f64, f64)>,
}

impl Robot {
    /// A robot about to execute row 0 of `chunk`, sending after `execute` rows.
    pub fn new(chunk: Chunk, execute: usize) -> Robot {
        Robot {
            execute: execute.max(1),
            chunk,
            chunk_id: 0,
            next_row: 0,
            in_flight: None,
            last: None,
            last_at: None,
            held_run: 0,
            executed: 0,
            missed: 0,
            stale: 0,
            boundaries: Vec::new(),
            steps: Vec::new(),
        }
    }

    /// The chunk being executed.
    pub fn chunk(&self) -> &Chunk {
        &self.chunk
    }

    /// One control tick `tick`, given the answer to the request in flight if it arrived
    /// before the tick. Returns the next row of the executing chunk when an observation is to
    /// be sent now (the robot then counts a request in flight, sent at this tick).
    pub fn tick(&mut self, tick: u64, answer: Option<Chunk>) -> Option<usize> {
        let mut switch = None;
        if let (Some(new), Some(sent)) = (answer, self.in_flight) {
            self.in_flight = None;
            let row = switch_row(sent.tick, tick);
            if row >= new.rows() {
                self.stale += 1;
            } else {
                let old_next = (self.next_row < self.chunk.rows()).then(|| {
                    (
                        self.chunk.normalized[self.next_row].clone(),
                        self.chunk.physical[self.next_row].clone(),
                    )
                });
                self.chunk = new;
                self.chunk_id += 1;
                self.next_row = row;
                switch = Some((sent.row, row, old_next));
            }
        }
        if self.next_row < self.chunk.rows() {
            let r = self.next_row;
            let now = (
                self.chunk.normalized[r].clone(),
                self.chunk.physical[r].clone(),
            );
            if let Some(last) = &self.last {
                if let Some((send_row, switch_row, old_next)) = switch {
                    self.boundaries.push(Boundary {
                        send_row,
                        switch_row,
                        held: self.held_run,
                        last: last.clone(),
                        first: now.clone(),
                        old_next,
                    });
                } else if r > 0 && self.last_at == Some((self.chunk_id, r - 1)) {
                    self.steps
                        .push((max_abs_diff(&last.0, &now.0), max_abs_diff(&last.1, &now.1)));
                }
            }
            self.last = Some(now);
            self.last_at = Some((self.chunk_id, r));
            self.held_run = 0;
            self.executed += 1;
            self.next_row += 1;
        } else {
            self.missed += 1;
            self.held_run += 1;
        }
        if self.in_flight.is_none() && self.next_row >= self.execute {
            self.in_flight = Some(Sent {
                tick,
                row: self.next_row,
            });
            return Some(self.next_row);
        }
        None
    }
}

/// One answer as the driver sees it.
struct Answer {
    response: PredictResponse,
    /// Submit → answer.
    latency_ms: f64,
    /// The same in ticks.
    latency_ticks: f64,
    /// The response's `queue_ms`.
    queue_ms: f64,
}

/// Where the robot's observations go.
trait Server {
    /// Sends a request at tick `tick`.
    fn send(&mut self, tick: u64, request: Request) -> Result<(), LoopError>;
    /// The answer, if one arrived before tick `tick`.
    fn poll(&mut self, tick: u64) -> Result<Option<Answer>, LoopError>;
}

/// When ticks happen.
trait Clock {
    /// Returns at tick `tick`'s time.
    fn wait(&mut self, tick: u64);
    /// Ticks per second actually kept, if there is a wall clock.
    fn tick_rate(&self) -> Option<f64>;
}

/// One mode's measurements.
#[derive(Debug)]
pub struct ModeReport {
    /// Whether requests carried RTC options.
    pub rtc: bool,
    /// Ticks run (executed + held).
    pub ticks: u64,
    /// The robot, with its counters, boundaries and within-chunk steps.
    pub robot: Robot,
    /// `rtc_frozen_steps` of each request sent (0 without RTC).
    pub frozen: Vec<usize>,
    /// Submit → answer per answer, ms.
    pub latency_ms: Vec<f64>,
    /// Queue delay per answer, ms.
    pub queue_ms: Vec<f64>,
    /// Ticks per second kept (real time only).
    pub tick_rate: Option<f64>,
}

impl ModeReport {
    /// Executed ticks per second: the tick rate kept times the share of ticks that executed.
    pub fn control_rate(&self) -> Option<f64> {
        let share = self.robot.executed as f64 / self.ticks.max(1) as f64;
        self.tick_rate.map(|r| r * share)
    }
}

/// Mode settings of [`run_mode`].
struct Mode {
    rtc: bool,
    execute: usize,
    chunks: usize,
    action_dim: usize,
    valid: usize,
}

/// Runs the robot until `mode.chunks` answers came back (adopted or stale).
fn run_mode(
    server: &mut dyn Server,
    clock: &mut dyn Clock,
    first: (&PredictResponse, f64),
    requests: Vec<Request>,
    mode: &Mode,
) -> Result<ModeReport, LoopError> {
    let chunk = |r: &PredictResponse| Chunk::from_response(r, mode.action_dim, mode.valid);
    let mut robot = Robot::new(chunk(first.0)?, mode.execute);
    let mut delay = expected_delay(first.1);
    let mut requests = requests.into_iter();
    let (mut frozen, mut latency_ms, mut queue_ms) = (Vec::new(), Vec::new(), Vec::new());
    let mut tick = 0u64;
    loop {
        clock.wait(tick);
        let answer = match server.poll(tick)? {
            Some(a) => {
                latency_ms.push(a.latency_ms);
                queue_ms.push(a.queue_ms);
                delay = expected_delay(a.latency_ticks);
                Some(chunk(&a.response)?)
            }
            None => None,
        };
        let send = robot.tick(tick, answer);
        if latency_ms.len() >= mode.chunks {
            break;
        }
        if let Some(row) = send {
            let mut request = requests.next().ok_or_else(|| {
                LoopError::Prepare("the loop ran out of prepared observations".into())
            })?;
            let mut frozen_steps = 0;
            if mode.rtc {
                let c = robot.chunk();
                let rtc = rtc_for(&c.model, c.rows(), row, delay, DEFAULT_RAMP_RATE);
                frozen_steps = rtc.frozen_steps;
                request = request.with_rtc(Some(rtc));
            }
            frozen.push(frozen_steps);
            server.send(tick, request)?;
        }
        tick += 1;
    }
    Ok(ModeReport {
        rtc: mode.rtc,
        ticks: tick + 1,
        robot,
        frozen,
        latency_ms,
        queue_ms,
        tick_rate: clock.tick_rate(),
    })
}

/// `count` typed requests of walking frames (as `--loop`), request k with noise seed k.
fn requests(engine: &Engine, count: usize) -> Result<Vec<Request>, LoopError> {
    let layouts = engine.layouts();
    loop_requests(count)
        .map_err(Box::new)?
        .into_iter()
        .enumerate()
        .map(|(k, body)| {
            let mut v: Value = serde_json::from_slice(&body)?;
            let obj = v
                .as_object_mut()
                .ok_or_else(|| LoopError::Prepare("the demo body is not an object".into()))?;
            obj.remove("noise");
            obj.insert("seed".into(), json!(k));
            let body = serde_json::to_vec(&v)?;
            let mut r = request_from_body(&body, layouts, None).map_err(LoopError::Refused)?;
            // Parsed ahead of the loop: none of it belongs to the request's latency.
            r.decode_ms = 0.0;
            Ok(r)
        })
        .collect()
}

/// The engine's action width and DROID's valid width.
fn widths(engine: &Engine) -> Result<(usize, usize), LoopError> {
    let layouts = engine.layouts();
    let layout = layouts
        .resolve(gr00t_embodiment::EMBODIMENT_TAG)
        .ok_or_else(|| LoopError::Prepare("the checkpoint does not serve DROID".into()))?;
    Ok((layouts.action_dim, valid_action_width(&layout.spec)))
}

fn run_engine(engine: &Engine, request: Request) -> Result<PredictResponse, LoopError> {
    engine.run(request).map_err(|cause| LoopError::Request {
        context: "the loop request failed",
        cause,
    })
}

/// The engine called at send time, its answer held back so that the robot adopts it at row
/// `delay` (the tick `sent + delay + 1`).
struct FixedDelay<'a> {
    engine: &'a Engine,
    delay: u64,
    pending: Option<(u64, PredictResponse)>,
}

impl Server for FixedDelay<'_> {
    fn send(&mut self, tick: u64, request: Request) -> Result<(), LoopError> {
        let resp = run_engine(self.engine, request)?;
        self.pending = Some((tick + self.delay + 1, resp));
        Ok(())
    }

    fn poll(&mut self, tick: u64) -> Result<Option<Answer>, LoopError> {
        match self.pending.take() {
            Some((due, response)) if due <= tick => Ok(Some(Answer {
                latency_ms: response.timing_ms.total,
                // Arrived within tick `delay + 1` after the send.
                latency_ticks: self.delay as f64 + 0.5,
                queue_ms: 0.0,
                response,
            })),
            other => {
                self.pending = other;
                Ok(None)
            }
        }
    }
}

/// No wall clock: ticks happen as fast as the loop runs.
struct NoClock;

impl Clock for NoClock {
    fn wait(&mut self, _tick: u64) {}
    fn tick_rate(&self) -> Option<f64> {
        None
    }
}

/// What [`simulate`] runs.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Rows executed before each observation is sent.
    pub execute: usize,
    /// Answers to collect.
    pub chunks: usize,
    /// Ticks every answer takes; the robot adopts it at this row.
    pub delay: u64,
    /// Whether requests carry RTC options.
    pub rtc: bool,
}

/// The loop without a clock: every request computed at once and delivered `delay` ticks
/// later, so the expected delay is `delay + 1` ticks (tests).
pub fn simulate(engine: &Engine, opts: &SimOptions) -> Result<ModeReport, LoopError> {
    let (action_dim, valid) = widths(engine)?;
    let mut reqs = requests(engine, opts.chunks + 1)?;
    let first = run_engine(engine, reqs.remove(0))?;
    let mode = Mode {
        rtc: opts.rtc,
        execute: opts.execute,
        chunks: opts.chunks,
        action_dim,
        valid,
    };
    let mut server = FixedDelay {
        engine,
        delay: opts.delay,
        pending: None,
    };
    let latency = opts.delay as f64 + 0.5;
    run_mode(&mut server, &mut NoClock, (&first, latency), reqs, &mode)
}

/// The core queue, answers forwarded with their arrival time.
struct Live {
    queue: Queue,
    hz: f64,
    tx: mpsc::Sender<(Outcome, Instant)>,
    rx: mpsc::Receiver<(Outcome, Instant)>,
    sent_at: Instant,
}

impl Server for Live {
    fn send(&mut self, _tick: u64, request: Request) -> Result<(), LoopError> {
        self.sent_at = Instant::now();
        let reply = self
            .queue
            .submit(request)
            .map_err(|cause| LoopError::Request {
                context: "the queue refused the loop request",
                cause,
            })?;
        let tx = self.tx.clone();
        // A thread waits for the answer, so its arrival time is not rounded to a tick.
        std::thread::Builder::new()
            .name("gr00t-bench-reply".into())
            .spawn(move || {
                let outcome = reply.blocking_recv().unwrap_or_else(|_| {
                    Err(gr00t_core::InferError::internal(
                        "the inference worker dropped the request",
                    ))
                });
                let _ = tx.send((outcome, Instant::now()));
            })?;
        Ok(())
    }

    fn poll(&mut self, _tick: u64) -> Result<Option<Answer>, LoopError> {
        let Ok((outcome, at)) = self.rx.try_recv() else {
            return Ok(None);
        };
        let response = outcome.map_err(|cause| LoopError::Request {
            context: "the loop request failed",
            cause,
        })?;
        let latency = at.duration_since(self.sent_at).as_secs_f64();
        Ok(Some(Answer {
            latency_ms: latency * 1e3,
            latency_ticks: latency * self.hz,
            queue_ms: response.queue_ms,
            response,
        }))
    }
}

/// Real time: tick k at `start + k / R`.
struct Wall {
    start: Instant,
    period: Duration,
    first: Option<Instant>,
    last: Instant,
    ticks: u64,
}

impl Clock for Wall {
    fn wait(&mut self, tick: u64) {
        let due = self.start + self.period.mul_f64(tick as f64);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        let now = Instant::now();
        self.first.get_or_insert(now);
        self.last = now;
        self.ticks += 1;
    }

    fn tick_rate(&self) -> Option<f64> {
        let span = self.last.duration_since(self.first?).as_secs_f64();
        (self.ticks > 1 && span > 0.0).then(|| (self.ticks - 1) as f64 / span)
    }
}

/// One mode in real time through the core queue.
fn live_mode(
    engine: &Arc<Engine>,
    lo: &LoopOptions,
    warmup: usize,
    rtc: bool,
) -> Result<ModeReport, LoopError> {
    let (action_dim, valid) = widths(engine)?;
    let warm = warmup.max(1);
    let mut reqs = requests(engine, warm + 1 + lo.chunks)?;
    engine.clear_vision_cache();
    let (worker, queue) = start_engine(engine.clone(), 2, Default::default())?;
    let (tx, rx) = mpsc::channel();
    let mut live = Live {
        queue,
        hz: lo.control_hz,
        tx,
        rx,
        sent_at: Instant::now(),
    };
    // Warm-up (the first is cold), then one more whose answer is the first chunk and whose
    // latency the first expected delay.
    let mut first = None;
    for request in reqs.drain(..=warm) {
        live.send(0, request)?;
        let (outcome, at) = live.rx.recv()?;
        let latency = at.duration_since(live.sent_at).as_secs_f64();
        first = Some((
            outcome.map_err(|cause| LoopError::Request {
                context: "warm-up failed",
                cause,
            })?,
            latency,
        ));
    }
    let (first, latency) = first.ok_or_else(|| LoopError::Prepare("no warm-up answer".into()))?;
    let mode = Mode {
        rtc,
        execute: lo.execute,
        chunks: lo.chunks,
        action_dim,
        valid,
    };
    let mut clock = Wall {
        start: Instant::now(),
        period: Duration::from_secs_f64(1.0 / lo.control_hz),
        first: None,
        last: Instant::now(),
        ticks: 0,
    };
    let report = run_mode(
        &mut live,
        &mut clock,
        (&first, latency * lo.control_hz),
        reqs,
        &mode,
    );
    // The request still in flight, if any, is answered before the worker stops.
    drop(live);
    worker.join();
    report
}

/// Runs both modes in real time and prints them; returns the exit code.
pub fn run(
    engine: Arc<Engine>,
    opts: &super::BenchOptions,
    lo: &LoopOptions,
) -> Result<i32, LoopError> {
    if !(lo.control_hz.is_finite() && lo.control_hz > 0.0 && lo.control_hz <= 1000.0) {
        return Err(LoopError::Option(
            "--control-hz must be a rate in (0, 1000] Hz".into(),
        ));
    }
    let horizon = engine.info().action_horizon;
    if lo.execute == 0 || lo.execute > horizon {
        return Err(LoopError::Option(format!(
            "--execute must be in 1..={horizon} (the action horizon)"
        )));
    }
    if lo.chunks == 0 {
        return Err(LoopError::Option("--chunks must be at least 1".into()));
    }
    let modes = [
        live_mode(&engine, lo, opts.warmup, false)?,
        live_mode(&engine, lo, opts.warmup, true)?,
    ];
    let info = engine.info();
    if opts.json {
        let out = json!({
            "control_hz": lo.control_hz,
            "execute": lo.execute,
            "chunks": lo.chunks,
            "action_horizon": horizon,
            "threads": info.threads,
            "dtype": info.dtype,
            "device": info.device,
            "synthetic_weights": info.synthetic_weights,
            "modes": {"no_rtc": mode_json(&modes[0]), "rtc": mode_json(&modes[1])},
        });
        println!("{out}");
        return Ok(0);
    }
    super::print_title(&opts.checkpoint, info.synthetic_weights);
    println!(
        "scenario: robot at {} Hz executing {} rows of each {horizon}-row chunk before sending the \
         next observation (async, core queue); {} answers per mode after {} warm-up",
        lo.control_hz,
        lo.execute,
        lo.chunks,
        opts.warmup.max(1) + 1
    );
    println!(
        "threads {}, dtype {}, device {}",
        info.threads, info.dtype, info.device
    );
    print_table(&modes, lo.control_hz);
    Ok(0)
}

/// Median and max.
fn med_max(v: &[f64]) -> (f64, f64) {
    (median(v.to_vec()), v.iter().copied().fold(0.0, f64::max))
}

fn p50_p90(v: &[f64]) -> (f64, f64) {
    (median(v.to_vec()), percentile(v.to_vec(), 0.9))
}

/// The figures of one mode, as (name, value) pairs shared by the table and the JSON.
fn figures(m: &ModeReport) -> Vec<(&'static str, f64, f64)> {
    let b = &m.robot.boundaries;
    let jump_n: Vec<f64> = b.iter().map(Boundary::jump_normalized).collect();
    let jump_p: Vec<f64> = b.iter().map(Boundary::jump_physical).collect();
    let step_n: Vec<f64> = m.robot.steps.iter().map(|s| s.0).collect();
    let step_p: Vec<f64> = m.robot.steps.iter().map(|s| s.1).collect();
    let dev: Vec<(f64, f64)> = b.iter().filter_map(Boundary::deviation).collect();
    let dev_n: Vec<f64> = dev.iter().map(|d| d.0).collect();
    let dev_p: Vec<f64> = dev.iter().map(|d| d.1).collect();
    let rows: Vec<f64> = b.iter().map(|b| b.switch_row as f64).collect();
    let frozen: Vec<f64> = m.frozen.iter().map(|&f| f as f64).collect();
    let pair = |name, (a, b): (f64, f64)| (name, a, b);
    vec![
        pair("boundary_jump_physical", med_max(&jump_p)),
        pair("boundary_jump_normalized", med_max(&jump_n)),
        pair("deviation_physical", med_max(&dev_p)),
        pair("deviation_normalized", med_max(&dev_n)),
        pair("step_physical", med_max(&step_p)),
        pair("step_normalized", med_max(&step_n)),
        pair("switch_row", med_max(&rows)),
        pair("frozen_steps", med_max(&frozen)),
        pair("latency_ms", p50_p90(&m.latency_ms)),
        pair("queue_ms", p50_p90(&m.queue_ms)),
    ]
}

fn mode_json(m: &ModeReport) -> Value {
    let mut out = serde_json::Map::new();
    out.insert(
        "control_rate_hz".into(),
        json!(m.control_rate().map(round3)),
    );
    out.insert("tick_rate_hz".into(), json!(m.tick_rate.map(round3)));
    out.insert("ticks".into(), json!(m.ticks));
    out.insert("executed".into(), json!(m.robot.executed));
    out.insert("missed".into(), json!(m.robot.missed));
    out.insert("stale".into(), json!(m.robot.stale));
    out.insert("boundaries".into(), json!(m.robot.boundaries.len()));
    for (name, a, b) in figures(m) {
        let (ka, kb) = if name.ends_with("_ms") {
            ("p50", "p90")
        } else {
            ("median", "max")
        };
        out.insert(name.into(), json!({ka: round3(a), kb: round3(b)}));
    }
    Value::Object(out)
}

fn print_table(modes: &[ModeReport; 2], hz: f64) {
    let (a, b) = (&modes[0], &modes[1]);
    let rate = |m: &ModeReport| m.control_rate().map_or("-".into(), |r| format!("{r:.2}"));
    let tick = |m: &ModeReport| m.tick_rate.map_or("-".into(), |r| format!("{r:.2}"));
    println!("{:<46}{:>20}{:>20}", "", "no RTC", "RTC");
    let line = |name: &str, x: String, y: String| println!("{name:<46}{x:>20}{y:>20}");
    line(&format!("control rate, Hz (target {hz})"), rate(a), rate(b));
    line("tick rate kept, Hz", tick(a), tick(b));
    let counts = |m: &ModeReport| {
        format!(
            "{} / {} / {}",
            m.robot.executed, m.robot.missed, m.robot.stale
        )
    };
    line(
        "ticks executed / missed, stale chunks",
        counts(a),
        counts(b),
    );
    let labels = [
        "boundary max|Δ| physical, median / max",
        "boundary max|Δ| normalised, median / max",
        "first new − old chunk's next, physical",
        "first new − old chunk's next, normalised",
        "in-chunk step max|Δ| physical, median / max",
        "in-chunk step max|Δ| normalised, median / max",
        "switch row (ticks gone), median / max",
        "rtc_frozen_steps, median / max",
        "latency ms, p50 / p90",
        "queue delay ms, p50 / p90",
    ];
    let (fa, fb) = (figures(a), figures(b));
    for (label, (x, y)) in labels.iter().zip(fa.iter().zip(&fb)) {
        let digits = if label.contains("ms") || label.contains("row") || label.contains("frozen") {
            1
        } else {
            3
        };
        let cell = |f: &(&str, f64, f64)| format!("{:.digits$} / {:.digits$}", f.1, f.2);
        line(label, cell(x), cell(y));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chunk of `rows` rows whose row r is `[base + r, −(base + r)]` (normalised) and
    /// `[10·(base + r)]` (physical).
    fn chunk(rows: usize, base: f32) -> Chunk {
        let n = |r: usize| base + r as f32;
        Chunk {
            model: (0..rows).flat_map(|r| [n(r), -n(r), 0.0]).collect(),
            normalized: (0..rows).map(|r| vec![n(r), -n(r)]).collect(),
            physical: (0..rows).map(|r| vec![10.0 * n(r)]).collect(),
        }
    }

    #[test]
    fn row_zero_of_an_answer_belongs_to_the_tick_after_the_send() {
        assert_eq!(switch_row(7, 8), 0);
        assert_eq!(switch_row(7, 10), 2);
        assert_eq!(switch_row(7, 7), 0);
    }

    #[test]
    fn the_expected_delay_rounds_up_to_whole_ticks() {
        assert_eq!(expected_delay(0.2), 1);
        assert_eq!(expected_delay(2.0), 2);
        assert_eq!(expected_delay(2.01), 3);
        assert_eq!(expected_delay(0.0), 1);
        assert_eq!(expected_delay(f64::NAN), 1);
    }

    #[test]
    fn rtc_overlap_puts_the_send_row_on_new_row_zero() {
        let prev: Vec<f32> = (0..40 * 4).map(|v| v as f32).collect();
        let r = rtc_for(&prev, 40, 8, 3, 6.0);
        assert_eq!(
            (r.action_horizon, r.overlap_steps, r.frozen_steps),
            (40, 32, 3)
        );
        // §4.9: x[:, :overlap] = prev[:, ah − overlap : ah].
        assert_eq!(r.action_horizon - r.overlap_steps, 8);
        assert!(r.validate(40, 4).is_ok());
        // Frozen never exceeds the overlap; an exhausted chunk overlaps nothing.
        let r = rtc_for(&prev, 40, 38, 5, 6.0);
        assert_eq!((r.overlap_steps, r.frozen_steps), (2, 2));
        let r = rtc_for(&prev, 40, 40, 5, 6.0);
        assert_eq!(
            (r.action_horizon, r.overlap_steps, r.frozen_steps),
            (40, 0, 0)
        );
        assert!(r.validate(40, 4).is_ok());
    }

    #[test]
    fn discontinuity_is_the_largest_absolute_difference() {
        assert_eq!(max_abs_diff(&[1.0, -2.0, 3.0], &[1.5, 2.0, 3.0]), 4.0);
        assert_eq!(max_abs_diff(&[], &[]), 0.0);
    }

    #[test]
    fn the_robot_sends_after_k_rows_and_switches_at_the_ticks_gone() {
        let mut robot = Robot::new(chunk(10, 0.0), 3);
        assert_eq!(robot.tick(0, None), None);
        assert_eq!(robot.tick(1, None), None);
        // Rows 0..3 executed: send, the next row being 3.
        assert_eq!(robot.tick(2, None), Some(3));
        assert_eq!(robot.tick(3, None), None);
        assert_eq!(robot.tick(4, None), None);
        // Adopted at tick 5: ticks 3 and 4 ran old rows 3 and 4, so new row 2 runs now, and
        // with row 3 next the robot sends again, K ticks after the last send.
        assert_eq!(robot.tick(5, Some(chunk(10, 100.0))), Some(3));
        let b = &robot.boundaries[0];
        assert_eq!((b.send_row, b.switch_row, b.held), (3, 2, 0));
        assert_eq!(b.last, (vec![4.0, -4.0], vec![40.0]));
        assert_eq!(b.first, (vec![102.0, -102.0], vec![1020.0]));
        assert_eq!(b.old_next, Some((vec![5.0, -5.0], vec![50.0])));
        assert_eq!(b.jump_normalized(), 98.0);
        assert_eq!(b.jump_physical(), 980.0);
        assert_eq!(b.deviation(), Some((97.0, 970.0)));
        assert_eq!(robot.tick(6, None), None);
        assert_eq!((robot.executed, robot.missed, robot.stale), (7, 0, 0));
        // Steps within a chunk only: 0→1, 1→2, 2→3, 3→4 of the old, 2→3 of the new.
        assert_eq!(robot.steps.len(), 5);
        assert!(robot.steps.iter().all(|&s| s == (1.0, 10.0)));
    }

    #[test]
    fn an_exhausted_chunk_holds_and_a_stale_answer_is_dropped() {
        let mut robot = Robot::new(chunk(3, 0.0), 2);
        assert_eq!(robot.tick(0, None), None);
        assert_eq!(robot.tick(1, None), Some(2));
        assert_eq!(robot.tick(2, None), None);
        // Rows gone: ticks 3 and 4 hold.
        robot.tick(3, None);
        robot.tick(4, None);
        assert_eq!((robot.executed, robot.missed), (3, 2));
        // Adopted at tick 5, row 3 of 4.
        assert_eq!(robot.tick(5, Some(chunk(4, 10.0))), Some(4));
        let b = &robot.boundaries[0];
        assert_eq!((b.switch_row, b.held, b.old_next.is_none()), (3, 2, true));
        assert_eq!(b.first.0, vec![13.0, -13.0]);
        // The next answer comes after all its 4 rows are gone: dropped, re-sent.
        for t in 6..10 {
            robot.tick(t, None);
        }
        assert_eq!(robot.tick(10, Some(chunk(4, 50.0))), Some(4));
        assert_eq!((robot.stale, robot.boundaries.len()), (1, 1));
        assert_eq!(robot.chunk().normalized[0], vec![10.0, -10.0]);
    }

    #[test]
    fn a_chunk_is_read_from_a_response() {
        use gr00t_core::response::{ActionGroups, TimingMs};
        let resp = PredictResponse {
            actions: ActionGroups(vec![
                ("a".into(), vec![vec![1.0, 2.0], vec![3.0, 4.0]]),
                ("b".into(), vec![vec![5.0], vec![6.0]]),
            ]),
            action_horizon: 2,
            embodiment: "x".into(),
            seq_len: 1,
            noise_source: "seed",
            seed: Some(0),
            actions_normalized: None,
            timing_ms: TimingMs::default(),
            chunk: (0..12).map(|v| v as f32).collect(),
            ..Default::default()
        };
        let c = Chunk::from_response(&resp, 4, 3).unwrap();
        assert_eq!(c.normalized, vec![vec![0.0, 1.0, 2.0], vec![4.0, 5.0, 6.0]]);
        assert_eq!(c.physical, vec![vec![1.0, 2.0, 5.0], vec![3.0, 4.0, 6.0]]);
        assert_eq!(c.rows(), 2);
        assert!(Chunk::from_response(&resp, 7, 3).is_err());
        assert!(Chunk::from_response(&resp, 4, 5).is_err());
    }
}
