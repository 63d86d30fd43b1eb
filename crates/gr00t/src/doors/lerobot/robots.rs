//! The LeRobot door's robots, one per connection, with the semantics of LeRobot's policy server
//! (`policy_server.py`) done per robot: `Ready` resets only the caller, the policy set up is
//! checked against the map and never loaded, observation pieces are reassembled within the
//! message limit, the enqueue filter (`must_go`, timesteps already run, joint distance ≥ 1)
//! decides what runs, the newest observation replaces a waiting one, and `GetActions` waits for
//! one up to its timeout, then runs it through the shared queue in the robot's own session (so a
//! view's frame history is kept per robot) and answers in the robot's form.

use super::mapping::LeRobotMap;
use super::objects::{RemotePolicyConfig, TimedObservation};
use super::pickle::Limits;
use super::{read_config, read_observation, write_actions, Form};
use gr00t_core::request::Request;
use gr00t_core::response::PredictResponse;
use gr00t_core::session::SessionKey;
use gr00t_core::{InferError, Queue};
use gr00t_embodiment::layout::Layout;
use gr00t_embodiment::observation::{NoiseSource, Observation, DEFAULT_SEED};
use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// Why a call got no answer, as the gRPC status it becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The payload is not what a robot client sends (`INVALID_ARGUMENT`).
    Invalid(String),
    /// An observation before the policy was set up (`FAILED_PRECONDITION`).
    NoPolicy,
    /// The queue is full or stopping (`UNAVAILABLE`).
    Unavailable(String),
    /// The server failed (`INTERNAL`).
    Internal(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Invalid(m) | Refusal::Unavailable(m) | Refusal::Internal(m) => f.write_str(m),
            Refusal::NoPolicy => f.write_str("no policy set up: call SendPolicyInstructions first"),
        }
    }
}

/// LeRobot's transfer states (`services.proto`'s `TransferState`).
pub mod transfer {
    /// A message's first piece of several.
    pub const BEGIN: i32 = 1;
    /// A piece between the first and the last.
    pub const MIDDLE: i32 = 2;
    /// A message's last piece, or its only one.
    pub const END: i32 = 3;
}

/// A message being put back together from its pieces, never past `max` bytes.
#[derive(Debug, Default)]
pub struct Reassembly {
    buf: Vec<u8>,
}

impl Reassembly {
    /// Adds one piece; the whole message when `state` is END. A BEGIN starts over (as LeRobot's
    /// receiver does), a message over `max` bytes or an unknown state is refused.
    pub fn push(
        &mut self,
        state: i32,
        data: Vec<u8>,
        max: usize,
    ) -> Result<Option<Vec<u8>>, Refusal> {
        if state == transfer::BEGIN {
            self.buf.clear();
        }
        if !matches!(state, transfer::BEGIN | transfer::MIDDLE | transfer::END) {
            return Err(Refusal::Invalid(format!("unknown transfer_state {state}")));
        }
        if self.buf.len().saturating_add(data.len()) > max {
            self.buf = Vec::new();
            return Err(Refusal::Invalid(format!(
                "an observation over {max} bytes is refused"
            )));
        }
        if self.buf.is_empty() {
            self.buf = data;
        } else {
            self.buf.extend_from_slice(&data);
        }
        Ok((state == transfer::END).then(|| std::mem::take(&mut self.buf)))
    }
}

/// An accepted observation waiting for `GetActions`.
struct Pending {
    /// When it was taken, and after which executed timestep (its reply is timed from them).
    taken: (f64, i64),
    observation: Observation,
    state: Vec<f64>,
}

/// One robot's state.
struct Robot {
    policy: Option<(Form, RemotePolicyConfig)>,
    pending: Option<Pending>,
    /// The joint vector of the last observation run (the filter's reference).
    last_state: Option<Vec<f64>>,
    /// Timesteps already run.
    predicted: HashSet<i64>,
    /// The robot's own session: its frame history.
    session: SessionKey,
}

impl Robot {
    fn new() -> Result<Robot, Refusal> {
        Ok(Robot {
            policy: None,
            pending: None,
            last_state: None,
            predicted: HashSet::new(),
            session: SessionKey::private("lerobot")
                .map_err(|e| Refusal::Internal(format!("session id: {e}")))?,
        })
    }
}

/// One robot's entry: its state, the signal of an observation arriving, and its connection
/// (the entry goes once that is gone).
struct Slot {
    robot: Mutex<Robot>,
    arrived: Notify,
    owner: Weak<dyn Any + Send + Sync>,
}

/// A robot's key: its connection's address, unique while the connection lives.
fn key<P>(peer: &Arc<P>) -> usize {
    Arc::as_ptr(peer) as *const () as usize
}

/// What a client's `pretrained_name_or_path` and `device` must match: the served checkpoint's
/// names and the device it runs on. Nothing is ever loaded on a client's word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// Names the checkpoint answers to (its Hub id, its folder, `--lerobot-policy-name`s).
    pub names: Vec<String>,
    /// The device it runs on (`cpu`, `cuda:0`).
    pub device: String,
}

impl Served {
    /// Refuses a policy that names another checkpoint or device, saying what is served.
    pub fn check(&self, config: &RemotePolicyConfig) -> Result<(), String> {
        let path = config.pretrained_name_or_path.trim_end_matches('/');
        if !self.names.iter().any(|n| n.trim_end_matches('/') == path) {
            return Err(format!(
                "pretrained_name_or_path {:?} is not what this server serves ({:?}; it never \
                 loads another: name one of these, or start it with --lerobot-policy-name)",
                config.pretrained_name_or_path, self.names
            ));
        }
        let kind = |d: &str| d.split(':').next().unwrap_or("").to_ascii_lowercase();
        if kind(&config.device) != kind(&self.device) {
            return Err(format!(
                "device {:?} is not the one this server runs on ({:?}): set --policy_device={}",
                config.device,
                self.device,
                kind(&self.device)
            ));
        }
        Ok(())
    }
}

/// What the LeRobot door serves: the queue, the served layout and its map, and every robot.
pub struct Robots {
    worker: Queue,
    served: Served,
    layout: Arc<Layout>,
    map: LeRobotMap,
    limits: Limits,
    /// Seconds between two actions (LeRobot's `environment_dt`, 1/fps).
    dt: f64,
    /// How long `GetActions` waits for an observation before its empty answer.
    wait: Duration,
    robots: Mutex<HashMap<usize, Arc<Slot>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Robots {
    /// The door's robots, serving `layout` through `map` (checked against it).
    pub fn new(
        worker: Queue,
        served: Served,
        layout: Arc<Layout>,
        map: LeRobotMap,
        limits: Limits,
        fps: f64,
        wait: Duration,
    ) -> Result<Robots, String> {
        map.check_layout(&layout)?;
        Ok(Robots {
            worker,
            served,
            layout,
            map,
            limits,
            dt: 1.0 / fps,
            wait,
            robots: Mutex::new(HashMap::new()),
        })
    }

    /// The robot of connection `peer`, made on its first call. Robots whose connection has
    /// ended are dropped then, with their sessions.
    fn slot<P: Send + Sync + 'static>(&self, peer: &Arc<P>) -> Result<Arc<Slot>, Refusal> {
        let mut robots = lock(&self.robots);
        if let Some(s) = robots.get(&key(peer)) {
            if s.owner.strong_count() > 0 {
                return Ok(s.clone());
            }
        }
        robots.retain(|_, s| {
            let alive = s.owner.strong_count() > 0;
            if !alive {
                self.worker.close_session(&lock(&s.robot).session);
            }
            alive
        });
        let owner: Weak<dyn Any + Send + Sync> =
            Arc::downgrade(peer) as Weak<dyn Any + Send + Sync>;
        let slot = Arc::new(Slot {
            robot: Mutex::new(Robot::new()?),
            arrived: Notify::new(),
            owner,
        });
        robots.insert(key(peer), slot.clone());
        Ok(slot)
    }

    /// Robots being served (connections that have called).
    pub fn len(&self) -> usize {
        lock(&self.robots)
            .values()
            .filter(|s| s.owner.strong_count() > 0)
            .count()
    }

    /// Whether no robot is being served.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `Ready`: the robot starts over (its policy, waiting observation, filter and frames).
    pub fn ready<P: Send + Sync + 'static>(&self, peer: &Arc<P>) -> Result<(), Refusal> {
        let old = lock(&self.robots).remove(&key(peer));
        if let Some(old) = old {
            self.worker.close_session(&lock(&old.robot).session);
            old.arrived.notify_waiters();
        }
        self.slot(peer).map(|_| ())
    }

    /// `SendPolicyInstructions`: the robot's `RemotePolicyConfig`, checked against what is
    /// served (nothing is ever loaded on a client's word).
    pub fn set_policy<P: Send + Sync + 'static>(
        &self,
        peer: &Arc<P>,
        bytes: &[u8],
    ) -> Result<(), Refusal> {
        let (form, config) =
            read_config(bytes, &self.limits).map_err(|e| Refusal::Invalid(e.to_string()))?;
        self.map
            .check_config(&config, &self.layout)
            .map_err(Refusal::Invalid)?;
        self.served.check(&config).map_err(Refusal::Invalid)?;
        lock(&self.slot(peer)?.robot).policy = Some((form, config));
        Ok(())
    }

    /// One whole `SendObservations` message: read, mapped, then kept for `GetActions` if the
    /// filter lets it through (`Ok(false)`: filtered out, as LeRobot's server does).
    pub fn observe<P: Send + Sync + 'static>(
        &self,
        peer: &Arc<P>,
        bytes: &[u8],
    ) -> Result<bool, Refusal> {
        let slot = self.slot(peer)?;
        let (_, timed) =
            read_observation(bytes, &self.limits).map_err(|e| Refusal::Invalid(e.to_string()))?;
        let state_names = {
            let robot = lock(&slot.robot);
            let Some((_, config)) = &robot.policy else {
                return Err(Refusal::NoPolicy);
            };
            config
                .lerobot_features
                .iter()
                .find(|(k, _)| k == "observation.state")
                .map(|(_, f)| f.names.clone())
                .unwrap_or_default()
        };
        let state = joint_state(&timed, &state_names);
        let (taken, must_go) = ((timed.timestamp, timed.timestep), timed.must_go);
        let observation = self
            .map
            .observation(timed, NoiseSource::Seed(DEFAULT_SEED))
            .map_err(|(field, what)| Refusal::Invalid(format!("{field}: {what}")))?;
        let mut robot = lock(&slot.robot);
        let run = must_go
            || robot.last_state.is_none()
            || (!robot.predicted.contains(&taken.1)
                && robot
                    .last_state
                    .as_ref()
                    .is_some_and(|last| distance(last, &state) >= 1.0));
        if run {
            robot.pending = Some(Pending {
                taken,
                observation,
                state,
            });
            drop(robot);
            slot.arrived.notify_waiters();
        }
        Ok(run)
    }

    /// `GetActions`: the robot's waiting observation run, as its reply bytes with the engine's
    /// response; empty bytes and no response when none arrived within the wait (the stock
    /// client skips an empty reply).
    pub async fn actions<P: Send + Sync + 'static>(
        &self,
        peer: &Arc<P>,
    ) -> Result<(Vec<u8>, Option<PredictResponse>), Refusal> {
        let slot = self.slot(peer)?;
        let deadline = tokio::time::Instant::now() + self.wait;
        let pending = loop {
            let arrived = slot.arrived.notified();
            if let Some(p) = lock(&slot.robot).pending.take() {
                break p;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return Ok((Vec::new(), None));
            }
        };
        let (form, n, session) = {
            let mut robot = lock(&slot.robot);
            let Some((form, config)) = &robot.policy else {
                return Err(Refusal::NoPolicy);
            };
            let (form, n) = (
                *form,
                usize::try_from(config.actions_per_chunk).unwrap_or(0),
            );
            robot.predicted.insert(pending.taken.1);
            robot.last_state = Some(pending.state.clone());
            (form, n, robot.session.clone())
        };
        let request =
            Request::new(self.layout.clone(), pending.observation).in_session(Some(session));
        let response = self.worker.infer(request).await.map_err(refusal_of)?;
        let actions = self
            .map
            .timed_actions(&response.actions, pending.taken, n, self.dt);
        let bytes = write_actions(form, &actions).map_err(|e| Refusal::Internal(e.to_string()))?;
        Ok((bytes, Some(response)))
    }
}

/// The queue's or the engine's error as a refusal.
fn refusal_of(e: InferError) -> Refusal {
    match e {
        InferError::Invalid(f) => Refusal::Invalid(f.to_string()),
        InferError::Busy { .. } | InferError::Stopped | InferError::Superseded => {
            Refusal::Unavailable(e.to_string())
        }
        other => Refusal::Internal(other.to_string()),
    }
}

/// The robot's joint vector in `observation.state`'s order (LeRobot's filter compares these).
fn joint_state(obs: &TimedObservation, names: &[String]) -> Vec<f64> {
    names
        .iter()
        .map(|n| {
            obs.observation
                .iter()
                .find(|(k, _)| k == n)
                .and_then(|(_, v)| match v {
                    super::objects::ObsValue::Number(x) => Some(*x),
                    _ => None,
                })
                .unwrap_or(0.0)
        })
        .collect()
}

/// Euclidean distance of two joint vectors.
fn distance(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y) * (x - y))
        .sum::<f64>()
        .sqrt()
}
