//! Per-robot sessions: what the server keeps between the observations of one robot (its last
//! chunk for real-time chunking, its step count and the time of its last observation), so a
//! control loop need not re-send them. Sessions are named by a [`SessionKey`]: the door's
//! namespace and the client's id, or an id the server drew for a connection, so no client can
//! name another door's or another connection's session. They expire after a time-to-live and
//! are bounded, the least recently used evicted first. A session exists from its first
//! answered observation: a refused one neither creates nor touches it. Each carries a token
//! drawn at creation; a client that echoes it learns when the server no longer holds the
//! session it was in ([`Refusal::Unknown`], [`Refusal::Replaced`]), and once a request has
//! carried it the session is locked to it: a request or reset without it is refused
//! ([`Refusal::Locked`]), so a client that knows only the id cannot drive a robot's session.
//! Only the inference thread changes a session's contents; the doors reset and count them.

use crate::auth::token_matches;
use gr00t_embodiment::frame_history::FrameHistory;
use serde::Serialize;
use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Default `--session-ttl-s`.
pub const DEFAULT_TTL_S: u64 = 300;
/// Default `--max-sessions`.
pub const DEFAULT_MAX_SESSIONS: usize = 256;
/// Default `--max-history-mb`.
pub const DEFAULT_MAX_HISTORY_MB: u64 = 1536;
/// Longest accepted session id (and session token), in bytes.
pub const MAX_SESSION_ID_BYTES: usize = 256;

/// How long sessions live and how much they keep.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionLimits {
    /// A session unused this long is dropped.
    pub ttl: Duration,
    /// Sessions kept at most (at least 1); the least recently used goes first.
    pub max: usize,
    /// Bytes of decoded frames all sessions' frame histories hold together at most; beyond
    /// it the least recently used sessions are dropped.
    pub max_history_bytes: u64,
}

impl Default for SessionLimits {
    fn default() -> SessionLimits {
        SessionLimits {
            ttl: Duration::from_secs(DEFAULT_TTL_S),
            max: DEFAULT_MAX_SESSIONS,
            max_history_bytes: DEFAULT_MAX_HISTORY_MB << 20,
        }
    }
}

/// Checks a client's session id (or session token): 1 to [`MAX_SESSION_ID_BYTES`] bytes of
/// Why a client's session id (or session token) is refused; the door names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionIdError {
    /// Empty or longer than [`MAX_SESSION_ID_BYTES`].
    #[error("expected 1 to {max} bytes, got {0}", max = MAX_SESSION_ID_BYTES)]
    Length(usize),
    /// A byte outside printable ASCII (or a space).
    #[error("expected printable ASCII without spaces")]
    NotPrintable,
}

impl From<SessionIdError> for String {
    /// The text, for the doors that put it in a field's message.
    fn from(e: SessionIdError) -> String {
        e.to_string()
    }
}

/// printable ASCII.
pub fn check_session_id(id: &str) -> Result<(), SessionIdError> {
    if id.is_empty() || id.len() > MAX_SESSION_ID_BYTES {
        return Err(SessionIdError::Length(id.len()));
    }
    if !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(SessionIdError::NotPrintable);
    }
    Ok(())
}

/// 128 random bits from the operating system, as 32 hex digits.
pub fn random_id() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A session's name in the table: a namespace the door chose (never client text) and an id
/// within it. Keys of different namespaces never meet, whatever the ids.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionKey {
    namespace: String,
    id: String,
}

impl SessionKey {
    /// The client's `id` in the door's `namespace`.
    pub fn named(namespace: &str, id: &str) -> SessionKey {
        SessionKey {
            namespace: namespace.to_string(),
            id: id.to_string(),
        }
    }

    /// A fresh key in `namespace` with a random 128-bit id (a connection's own session).
    pub fn private(namespace: &str) -> std::io::Result<SessionKey> {
        Ok(SessionKey::named(namespace, &random_id()?))
    }

    /// The client's `id` in `namespace` under this key (sessions a connection's clients name,
    /// reachable through that connection only).
    pub fn within(&self, namespace: &str, id: &str) -> SessionKey {
        SessionKey::named(&format!("{self}/{namespace}"), id)
    }

    /// The id within the namespace (the client's own name for a named session).
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.id)
    }
}

/// Why a request (or reset) may not touch the session it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// It echoed a token, and the server holds no session of that name (expired, evicted,
    /// reset, or never here: another replica or a restarted one).
    Unknown,
    /// It echoed a token, and the server holds a session of that name, but another one (it
    /// was reset and began again, or another client created it), or the token is not its.
    Replaced,
    /// It carried no token, and the session is locked to the token an earlier request
    /// carried.
    Locked,
}

/// The last chunk a session was answered.
#[derive(Debug, Clone, PartialEq)]
pub struct LastChunk {
    /// The embodiment it was computed for.
    pub tag: String,
    /// Its rows (the embodiment's action horizon).
    pub rows: usize,
    /// The model's whole normalised chunk, `horizon × action_dim` (as RTC reads it).
    pub values: Vec<f32>,
}

/// One robot's state between observations.
#[derive(Debug)]
struct Session {
    /// Which incarnation: a reset and a new session get a new one, so a request computed
    /// across a reset does not write into the fresh session.
    epoch: u64,
    /// Drawn at creation, echoed by clients that want to know of a restart.
    token: String,
    /// A request has carried the token: from then on every request and reset must.
    locked: bool,
    last_chunk: Option<LastChunk>,
    /// Earlier frames of each view.
    frames: FrameHistory,
    /// Observations answered.
    step: u64,
    /// When the last answered observation began computing.
    last_seen: Instant,
    /// When the newest answered observation reached its door: one that arrived earlier is
    /// stale once this one is answered.
    newest_arrival: Instant,
    /// A request of it is computing: neither expired nor evicted meanwhile.
    busy: bool,
}

/// What a request of a session starts from, taken on the inference thread before it runs.
#[derive(Debug, Clone)]
pub struct SessionView {
    /// The session's incarnation (hand it back to [`Sessions::record`]); `None`: the session
    /// does not exist yet, and is created when this request is answered.
    pub epoch: Option<u64>,
    /// The session's token (drawn now for a session not created yet).
    pub token: String,
    /// The last chunk, if one was answered.
    pub last_chunk: Option<LastChunk>,
    /// The frame history, taken out for the request (hand it back to [`Sessions::record`]).
    pub frames: FrameHistory,
    /// Observations answered before this one.
    pub step: u64,
    /// Time since the session's previous answered observation began (none for its first).
    pub since_last: Option<Duration>,
    /// When this request began.
    pub began: Instant,
    /// When this request reached its door: `now` from [`Sessions::begin`], which the queue
    /// replaces with the door's stamp.
    pub arrived: Instant,
}

/// Session counts, as `/info` and `/metrics` report them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SessionStats {
    /// Sessions alive now.
    pub active: usize,
    /// `--max-sessions`.
    pub max: usize,
    /// `--session-ttl-s`.
    pub ttl_s: u64,
    /// Sessions created since start-up.
    pub created: u64,
    /// Sessions dropped after their time-to-live.
    pub expired: u64,
    /// Sessions dropped to make room (least recently used), for `--max-sessions` or for
    /// `--max-history-mb`.
    pub evicted: u64,
    /// Of those, dropped because the frame histories together exceeded `--max-history-mb`.
    pub evicted_for_history: u64,
    /// Bytes of decoded frames the sessions' histories hold now (a request computing holds
    /// its session's meanwhile).
    pub history_bytes: u64,
    /// `--max-history-mb`.
    pub max_history_mb: u64,
    /// Sessions cleared by a client's reset.
    pub resets: u64,
    /// Requests refused because the session their token named is gone or another one.
    pub restarted: u64,
    /// Requests and resets refused because their session is locked to a token they did not
    /// carry.
    pub locked: u64,
}

#[derive(Debug, Default)]
struct Table {
    map: HashMap<SessionKey, Session>,
    next_epoch: u64,
    stats: SessionStats,
}

/// Every session of the server; shared by the doors and the inference thread.
#[derive(Debug)]
pub struct Sessions {
    table: Mutex<Table>,
    limits: SessionLimits,
}

impl Default for Sessions {
    fn default() -> Sessions {
        Sessions::new(SessionLimits::default())
    }
}

impl Sessions {
    /// An empty store with these limits.
    pub fn new(limits: SessionLimits) -> Sessions {
        let limits = SessionLimits {
            max: limits.max.max(1),
            ..limits
        };
        let stats = SessionStats {
            max: limits.max,
            ttl_s: limits.ttl.as_secs(),
            max_history_mb: limits.max_history_bytes >> 20,
            ..Default::default()
        };
        Sessions {
            table: Mutex::new(Table {
                stats,
                ..Default::default()
            }),
            limits,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // The table holds plain data, consistent after any panic.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops the sessions unused for longer than the time-to-live (not one computing now).
    fn expire(&self, t: &mut Table, now: Instant) {
        let ttl = self.limits.ttl;
        let before = t.map.len();
        t.map
            .retain(|_, s| s.busy || now.saturating_duration_since(s.last_seen) <= ttl);
        t.stats.expired += (before - t.map.len()) as u64;
    }

    /// Whether a request (or reset) carrying `token` may touch the session `key`: the check
    /// the queue makes before the request takes a waiting one's place, and [`Sessions::begin`]
    /// again when it runs. A refusal is counted.
    pub fn admit(&self, key: &SessionKey, token: Option<&str>) -> Result<(), Refusal> {
        let mut t = self.lock();
        self.expire(&mut t, Instant::now());
        admit(&mut t, key, token)
    }

    /// The session `key` as a request starts at `now`. With the client's `token`, a session
    /// that is gone or another one is refused, and a session it names is locked to it from
    /// now on; without, a locked session is refused, and a missing one is begun, and created
    /// only once the request is answered ([`Sessions::record`]).
    pub fn begin(
        &self,
        key: &SessionKey,
        token: Option<&str>,
        now: Instant,
    ) -> Result<SessionView, Refusal> {
        let mut t = self.lock();
        self.expire(&mut t, now);
        admit(&mut t, key, token)?;
        let Some(s) = t.map.get_mut(key) else {
            // A token the client can echo from this answer on; drawing it cannot fail in
            // practice, and a session without one still serves clients that send none.
            let token = random_id().unwrap_or_default();
            return Ok(SessionView {
                epoch: None,
                token,
                last_chunk: None,
                frames: FrameHistory::default(),
                step: 0,
                since_last: None,
                began: now,
                arrived: now,
            });
        };
        s.locked |= token.is_some();
        s.busy = true;
        let since_last = (s.step > 0).then(|| now.saturating_duration_since(s.last_seen));
        Ok(SessionView {
            epoch: Some(s.epoch),
            token: s.token.clone(),
            last_chunk: s.last_chunk.clone(),
            frames: std::mem::take(&mut s.frames),
            step: s.step,
            since_last,
            began: now,
            arrived: now,
        })
    }

    /// Evicts the least recently used session when the table is full (never one computing).
    fn make_room(&self, t: &mut Table) {
        if t.map.len() < self.limits.max {
            return;
        }
        if let Some(k) = least_recently_used(t) {
            t.map.remove(&k);
            t.stats.evicted += 1;
            tracing::info!("session {k} evicted (--max-sessions {})", self.limits.max);
        }
    }

    /// Evicts the least recently used sessions (never one computing) while the frame
    /// histories together hold more than `--max-history-mb`; first `recorded` (the session
    /// just answered) if its history alone holds more, so one client's frames never flush
    /// every other session.
    fn trim_history(&self, t: &mut Table, recorded: &SessionKey) {
        let budget = self.limits.max_history_bytes;
        let mut held = history_bytes(t);
        let too_big = |t: &Table| {
            t.map
                .get(recorded)
                .is_some_and(|s| s.frames.bytes() as u64 > budget)
        };
        while held > budget {
            let next = if too_big(t) {
                Some(recorded.clone())
            } else {
                least_recently_used(t)
            };
            let Some(k) = next else {
                return;
            };
            tracing::info!(
                "session {k} evicted (--max-history-mb {}: the frame histories held {} MB)",
                budget >> 20,
                held >> 20
            );
            if let Some(s) = t.map.remove(&k) {
                held -= s.frames.bytes() as u64;
            }
            t.stats.evicted += 1;
            t.stats.evicted_for_history += 1;
        }
    }

    /// Ends a request that began as `view`: with its answered chunk the session keeps the
    /// request's frame history and chunk (and is created, if it began missing); refused
    /// (`None`), the session is as before the request. Returns the session's step count, or
    /// `None` when nothing is kept (refused, or the session was reset or dropped meanwhile).
    pub fn record(
        &self,
        key: &SessionKey,
        view: SessionView,
        chunk: Option<LastChunk>,
    ) -> Option<u64> {
        let mut t = self.lock();
        let Some(epoch) = view.epoch else {
            let chunk = chunk?;
            self.make_room(&mut t);
            t.next_epoch += 1;
            t.stats.created += 1;
            let epoch = t.next_epoch;
            t.map.insert(
                key.clone(),
                Session {
                    epoch,
                    token: view.token,
                    locked: false,
                    last_chunk: Some(chunk),
                    frames: view.frames,
                    step: 1,
                    last_seen: view.began,
                    newest_arrival: view.arrived,
                    busy: false,
                },
            );
            self.trim_history(&mut t, key);
            return Some(1);
        };
        let s = t.map.get_mut(key).filter(|s| s.epoch == epoch)?;
        s.frames = view.frames;
        s.busy = false;
        // Refused: the history is the one taken out at `begin`, already within the budget.
        let chunk = chunk?;
        s.last_chunk = Some(chunk);
        s.step += 1;
        s.last_seen = view.began;
        s.newest_arrival = s.newest_arrival.max(view.arrived);
        let step = s.step;
        self.trim_history(&mut t, key);
        Some(step)
    }

    /// Whether session `key` has answered an observation that reached its door after
    /// `arrived`: one that arrived at `arrived` is older than what its robot already has.
    pub fn answered_after(&self, key: &SessionKey, arrived: Instant) -> bool {
        self.lock()
            .map
            .get(key)
            .is_some_and(|s| s.newest_arrival > arrived)
    }

    /// Clears the session `key` for a client carrying `token`; whether it existed. A locked
    /// session is cleared only with its token, and a token that is not the session's clears
    /// nothing ([`Refusal::Locked`], [`Refusal::Replaced`]).
    pub fn reset(&self, key: &SessionKey, token: Option<&str>) -> Result<bool, Refusal> {
        let mut t = self.lock();
        if !t.map.contains_key(key) {
            return Ok(false);
        }
        admit(&mut t, key, token)?;
        t.map.remove(key);
        t.stats.resets += 1;
        Ok(true)
    }

    /// Drops the session `key` because its connection ended (not counted as a reset).
    pub fn close(&self, key: &SessionKey) {
        self.lock().map.remove(key);
    }

    /// The counts now (expired sessions dropped first).
    pub fn stats(&self) -> SessionStats {
        let mut t = self.lock();
        self.expire(&mut t, Instant::now());
        SessionStats {
            active: t.map.len(),
            history_bytes: history_bytes(&t),
            ..t.stats.clone()
        }
    }
}

/// The least recently used session not computing now.
fn least_recently_used(t: &Table) -> Option<SessionKey> {
    t.map
        .iter()
        .filter(|(_, s)| !s.busy)
        .min_by_key(|(_, s)| s.last_seen)
        .map(|(k, _)| k.clone())
}

/// Bytes of decoded frames the sessions' histories hold.
fn history_bytes(t: &Table) -> u64 {
    t.map.values().map(|s| s.frames.bytes() as u64).sum()
}

/// [`Sessions::admit`] on the locked table.
fn admit(t: &mut Table, key: &SessionKey, token: Option<&str>) -> Result<(), Refusal> {
    let refusal = match (t.map.get(key), token) {
        (None, Some(_)) => Refusal::Unknown,
        (Some(s), Some(given)) if !token_matches(given.as_bytes(), s.token.as_bytes()) => {
            Refusal::Replaced
        }
        (Some(s), None) if s.locked => Refusal::Locked,
        _ => return Ok(()),
    };
    match refusal {
        Refusal::Locked => t.stats.locked += 1,
        Refusal::Unknown | Refusal::Replaced => t.stats.restarted += 1,
    }
    Err(refusal)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(v: f32) -> LastChunk {
        LastChunk {
            tag: "t".into(),
            rows: 2,
            values: vec![v; 4],
        }
    }

    fn key(id: &str) -> SessionKey {
        SessionKey::named("http", id)
    }

    /// A table of at most `max` sessions, each kept 10 s.
    fn sessions(max: usize) -> Sessions {
        Sessions::new(SessionLimits {
            ttl: Duration::from_secs(10),
            max,
            ..SessionLimits::default()
        })
    }

    /// One answered observation of `id` at `at`; its step.
    fn answer(s: &Sessions, id: &str, v: f32, at: Instant) -> Option<u64> {
        let view = s.begin(&key(id), None, at).unwrap();
        s.record(&key(id), view, Some(chunk(v)))
    }

    #[test]
    fn a_session_keeps_its_last_chunk_and_counts_steps() {
        let s = Sessions::default();
        let t0 = Instant::now();
        let v = s.begin(&key("a"), None, t0).unwrap();
        assert_eq!(
            (v.step, v.last_chunk.is_none(), v.since_last, v.epoch),
            (0, true, None, None)
        );
        assert_eq!(s.record(&key("a"), v, Some(chunk(1.0))), Some(1));
        let later = t0 + Duration::from_millis(250);
        let v = s.begin(&key("a"), None, later).unwrap();
        assert_eq!(v.step, 1);
        assert_eq!(v.last_chunk, Some(chunk(1.0)));
        assert_eq!(v.since_last, Some(Duration::from_millis(250)));
        // Another session sees none of it.
        assert_eq!(s.begin(&key("b"), None, later).unwrap().last_chunk, None);
        assert_eq!(s.stats().created, 1);
    }

    #[test]
    fn namespaces_keep_equal_ids_apart() {
        let s = Sessions::default();
        let now = Instant::now();
        let http = SessionKey::named("http", "ws/1");
        let zmq = SessionKey::named("zmq", "ws/1");
        let ws = SessionKey::named("ws", "1");
        let v = s.begin(&http, None, now).unwrap();
        s.record(&http, v, Some(chunk(1.0)));
        for other in [&zmq, &ws] {
            assert_eq!(s.begin(other, None, now).unwrap().last_chunk, None);
        }
        // The same text, other keys: "http/ws/1" is not "ws/1" in any namespace.
        assert_eq!(http.to_string(), "http/ws/1");
        assert_ne!(http, SessionKey::named("http/ws", "1"));
        let conn = SessionKey::private("ws").unwrap();
        assert_eq!(conn.id().len(), 32);
        assert_ne!(conn, SessionKey::private("ws").unwrap());
        assert_ne!(
            conn.within("roboarena", "7"),
            SessionKey::named("roboarena", "7")
        );
    }

    #[test]
    fn a_refused_observation_creates_and_touches_nothing() {
        let s = sessions(1);
        let t0 = Instant::now();
        answer(&s, "robot", 1.0, t0);
        // 50 refused observations of new sessions: none created, the robot's stays.
        for i in 0..50 {
            let k = key(&format!("x{i}"));
            let v = s.begin(&k, None, t0).unwrap();
            assert_eq!(s.record(&k, v, None), None);
        }
        let st = s.stats();
        assert_eq!((st.active, st.created, st.evicted), (1, 1, 0));
        // A refused observation of the robot's session does not count as its use.
        let v = s
            .begin(&key("robot"), None, t0 + Duration::from_secs(8))
            .unwrap();
        assert_eq!(s.record(&key("robot"), v, None), None);
        let v = s
            .begin(&key("robot"), None, t0 + Duration::from_secs(9))
            .unwrap();
        assert_eq!(v.since_last, Some(Duration::from_secs(9)));
        assert_eq!(v.step, 1);
        s.record(&key("robot"), v, None);
        assert_eq!(
            s.begin(&key("robot"), None, t0 + Duration::from_secs(11))
                .unwrap()
                .step,
            0
        );
    }

    #[test]
    fn an_echoed_token_is_refused_when_the_session_is_gone_or_another() {
        let s = Sessions::default();
        let now = Instant::now();
        let v = s.begin(&key("a"), None, now).unwrap();
        let token = v.token.clone();
        assert_eq!(token.len(), 32);
        s.record(&key("a"), v, Some(chunk(1.0)));
        let v = s.begin(&key("a"), Some(&token), now).unwrap();
        assert_eq!((v.step, v.token == token), (1, true));
        s.record(&key("a"), v, Some(chunk(2.0)));
        assert_eq!(
            s.begin(&key("a"), Some("not-it"), now).unwrap_err(),
            Refusal::Replaced
        );
        // Reset (with the token: it locked the session) and begun again without it: a new
        // token; the old one is refused.
        assert_eq!(s.reset(&key("a"), Some(&token)), Ok(true));
        assert_eq!(
            s.begin(&key("a"), Some(&token), now).unwrap_err(),
            Refusal::Unknown
        );
        answer(&s, "a", 3.0, now);
        assert_eq!(
            s.begin(&key("a"), Some(&token), now).unwrap_err(),
            Refusal::Replaced
        );
        // Another server's (or this one before a restart) token for a name it never held.
        assert_eq!(
            s.begin(&key("b"), Some(&token), now).unwrap_err(),
            Refusal::Unknown
        );
        let st = s.stats();
        assert_eq!((st.restarted, st.active), (4, 1));
    }

    #[test]
    fn a_session_whose_token_came_back_is_locked_to_it() {
        let s = Sessions::default();
        let now = Instant::now();
        let v = s.begin(&key("a"), None, now).unwrap();
        let token = v.token.clone();
        s.record(&key("a"), v, Some(chunk(1.0)));
        // Never echoed yet: a client without the token is served, as before.
        assert_eq!(s.admit(&key("a"), None), Ok(()));
        assert_eq!(answer(&s, "a", 2.0, now), Some(2));
        let v = s.begin(&key("a"), Some(&token), now).unwrap();
        s.record(&key("a"), v, Some(chunk(3.0)));
        // From now on neither a request nor a reset without it touches the session.
        assert_eq!(s.admit(&key("a"), None), Err(Refusal::Locked));
        assert_eq!(s.begin(&key("a"), None, now).unwrap_err(), Refusal::Locked);
        assert_eq!(s.reset(&key("a"), None), Err(Refusal::Locked));
        assert_eq!(s.reset(&key("a"), Some("forged")), Err(Refusal::Replaced));
        let v = s.begin(&key("a"), Some(&token), now).unwrap();
        assert_eq!((v.step, v.last_chunk.clone()), (3, Some(chunk(3.0))));
        assert_eq!(s.record(&key("a"), v, Some(chunk(4.0))), Some(4));
        let st = s.stats();
        assert_eq!((st.locked, st.restarted, st.resets), (3, 1, 0));
        // Its holder resets it; the next session under that id starts unlocked.
        assert_eq!(s.reset(&key("a"), Some(&token)), Ok(true));
        assert_eq!(answer(&s, "a", 5.0, now), Some(1));
        assert_eq!(s.admit(&key("a"), None), Ok(()));
        // Other sessions were never locked by it.
        assert_eq!(answer(&s, "b", 6.0, now), Some(1));
    }

    /// An answered observation of `id` at `at` that leaves `mb` MiB of frames in its history.
    fn answer_with_frames(s: &Sessions, id: &str, mb: usize, at: Instant) -> Option<u64> {
        use gr00t_embodiment::frame_history::KeptFrame;
        use gr00t_embodiment::image::Frame;
        let mut view = s.begin(&key(id), None, at).unwrap();
        let side = 1024 * mb;
        let frame = Frame::new(side, 1024 / 3 + 1, vec![0; side * (1024 / 3 + 1) * 3]).unwrap();
        let kept = KeptFrame::Sent(std::sync::Arc::new(frame));
        view.frames
            .record(vec![("cam".to_string(), kept)], &[-1, 0]);
        s.record(&key(id), view, Some(chunk(0.0)))
    }

    #[test]
    fn frame_histories_beyond_the_budget_drop_the_least_recently_used_sessions() {
        let s = Sessions::new(SessionLimits {
            ttl: Duration::from_secs(10),
            max: 16,
            max_history_bytes: 10 << 20,
        });
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mb = |s: &Sessions| s.stats().history_bytes as f64 / f64::from(1 << 20);
        // A robot's small history, then a client's large ones.
        assert_eq!(answer_with_frames(&s, "robot", 1, at(0)), Some(1));
        assert!((mb(&s) - 1.0).abs() < 0.01, "{}", mb(&s));
        assert_eq!(answer_with_frames(&s, "big-1", 4, at(10)), Some(1));
        assert_eq!(answer_with_frames(&s, "robot", 1, at(20)), Some(2));
        assert_eq!(answer_with_frames(&s, "big-2", 4, at(30)), Some(1));
        assert_eq!(s.stats().evicted, 0);
        // Over 10 MiB: the least recently used (big-1) goes, the robot stays.
        assert_eq!(answer_with_frames(&s, "big-3", 4, at(40)), Some(1));
        let st = s.stats();
        assert_eq!((st.active, st.evicted, st.evicted_for_history), (3, 1, 1));
        assert!(st.history_bytes <= 10 << 20, "{}", st.history_bytes);
        assert_eq!(answer_with_frames(&s, "robot", 1, at(50)), Some(3));
        assert_eq!(answer_with_frames(&s, "big-1", 4, at(60)), Some(1));
        // big-2 went this time. A history larger than the whole budget is dropped alone.
        assert_eq!(answer_with_frames(&s, "huge", 11, at(70)), Some(1));
        let st = s.stats();
        assert_eq!((st.active, st.evicted, st.max_history_mb), (3, 3, 10));
        assert_eq!(s.begin(&key("huge"), None, at(80)).unwrap().step, 0);
        assert_eq!(answer_with_frames(&s, "robot", 1, at(90)), Some(4));
    }

    #[test]
    fn reset_clears_and_a_request_across_it_writes_nothing() {
        let s = Sessions::default();
        let now = Instant::now();
        answer(&s, "a", 0.0, now);
        let v = s.begin(&key("a"), None, now).unwrap();
        assert_eq!(s.reset(&key("a"), None), Ok(true));
        assert_eq!(s.reset(&key("a"), None), Ok(false));
        // The request that began before the reset finishes after it.
        assert_eq!(s.record(&key("a"), v, Some(chunk(1.0))), None);
        let fresh = s.begin(&key("a"), None, now).unwrap();
        assert_eq!((fresh.step, fresh.last_chunk.clone()), (0, None));
        assert_eq!(s.stats().active, 0);
        assert_eq!(s.stats().resets, 1);
    }

    #[test]
    fn sessions_expire_and_the_least_recently_used_is_evicted() {
        let s = sessions(2);
        let t0 = Instant::now();
        for (id, dt) in [("a", 0), ("b", 1), ("a", 2)] {
            answer(&s, id, dt as f32, t0 + Duration::from_secs(dt));
        }
        // Full: "b" was used least recently.
        answer(&s, "c", 3.0, t0 + Duration::from_secs(3));
        assert_eq!(
            s.begin(&key("a"), None, t0 + Duration::from_secs(4))
                .unwrap()
                .step,
            2
        );
        assert_eq!(
            s.begin(&key("b"), None, t0 + Duration::from_secs(4))
                .unwrap()
                .step,
            0
        );
        let st = s.stats();
        assert_eq!((st.evicted, st.max, st.ttl_s), (1, 2, 10));
        // 11 s after its last use "c" is gone.
        answer(&s, "x", 0.0, t0 + Duration::from_secs(16));
        assert!(s.stats().expired >= 1);
        assert_eq!(
            s.begin(&key("c"), None, t0 + Duration::from_secs(16))
                .unwrap()
                .step,
            0
        );
    }

    #[test]
    fn a_session_computing_is_neither_expired_nor_evicted() {
        let s = sessions(1);
        let t0 = Instant::now();
        answer(&s, "a", 1.0, t0);
        let v = s
            .begin(&key("a"), None, t0 + Duration::from_secs(9))
            .unwrap();
        // Past its time-to-live and with a new session wanting room, while it computes.
        let late = t0 + Duration::from_secs(30);
        answer(&s, "b", 2.0, late);
        assert_eq!(s.record(&key("a"), v, Some(chunk(3.0))), Some(2));
        assert_eq!(s.stats().evicted, 0);
    }

    #[test]
    fn session_ids_are_bounded_printable_ascii() {
        assert!(check_session_id("robot-7/arm:left").is_ok());
        for bad in ["", "a b", "é", "x\n"] {
            assert!(check_session_id(bad).is_err(), "{bad:?}");
        }
        assert!(check_session_id(&"a".repeat(MAX_SESSION_ID_BYTES + 1)).is_err());
    }
}
