//! Per-robot sessions: what the server keeps between the observations of one robot (its last
//! chunk for real-time chunking, its step count and the time of its last observation), so a
//! control loop need not re-send them. Sessions are named by the client (`session_id`), expire
//! after a time-to-live and are bounded, the least recently used evicted first. Only the
//! inference thread changes a session's contents; the doors reset and count them.

use gr00t_embodiment::frame_history::FrameHistory;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Default `--session-ttl-s`.
pub const DEFAULT_TTL_S: u64 = 300;
/// Default `--max-sessions`.
pub const DEFAULT_MAX_SESSIONS: usize = 256;
/// Longest accepted session id, in bytes.
pub const MAX_SESSION_ID_BYTES: usize = 256;

/// How long sessions live and how many are kept.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionLimits {
    /// A session unused this long is dropped.
    pub ttl: Duration,
    /// Sessions kept at most (at least 1); the least recently used goes first.
    pub max: usize,
}

impl Default for SessionLimits {
    fn default() -> SessionLimits {
        SessionLimits {
            ttl: Duration::from_secs(DEFAULT_TTL_S),
            max: DEFAULT_MAX_SESSIONS,
        }
    }
}

/// Checks a client's session id: 1 to [`MAX_SESSION_ID_BYTES`] bytes of printable ASCII.
pub fn check_session_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_SESSION_ID_BYTES {
        return Err(format!(
            "expected 1 to {MAX_SESSION_ID_BYTES} bytes, got {}",
            id.len()
        ));
    }
    if !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("expected printable ASCII without spaces".into());
    }
    Ok(())
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
    last_chunk: Option<LastChunk>,
    /// Earlier frames of each view.
    frames: FrameHistory,
    /// Observations answered.
    step: u64,
    last_seen: Instant,
}

/// What a request of a session starts from, taken on the inference thread before it runs.
#[derive(Debug, Clone)]
pub struct SessionView {
    /// The session's incarnation (hand it back to [`Sessions::record`]).
    pub epoch: u64,
    /// The last chunk, if one was answered.
    pub last_chunk: Option<LastChunk>,
    /// The frame history, taken out for the request (hand it back to [`Sessions::record`]).
    pub frames: FrameHistory,
    /// Observations answered before this one.
    pub step: u64,
    /// Time since the session's previous observation (none for its first).
    pub since_last: Option<Duration>,
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
    /// Sessions dropped to make room (least recently used).
    pub evicted: u64,
    /// Sessions cleared by a client's reset.
    pub resets: u64,
}

#[derive(Debug, Default)]
struct Table {
    map: HashMap<String, Session>,
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

    /// Drops the sessions unused for longer than the time-to-live.
    fn expire(&self, t: &mut Table, now: Instant) {
        let ttl = self.limits.ttl;
        let before = t.map.len();
        t.map
            .retain(|_, s| now.saturating_duration_since(s.last_seen) <= ttl);
        t.stats.expired += (before - t.map.len()) as u64;
    }

    /// The session `id` as a request starts (created, evicting the least recently used one
    /// when full), marked used at `now`.
    pub fn begin(&self, id: &str, now: Instant) -> SessionView {
        let mut t = self.lock();
        self.expire(&mut t, now);
        if !t.map.contains_key(id) {
            self.make_room(&mut t);
            t.next_epoch += 1;
            t.stats.created += 1;
        }
        let epoch = t.next_epoch;
        let s = t.map.entry(id.to_string()).or_insert_with(|| Session {
            epoch,
            last_chunk: None,
            frames: FrameHistory::default(),
            step: 0,
            last_seen: now,
        });
        let since_last = (s.step > 0).then(|| now.saturating_duration_since(s.last_seen));
        s.last_seen = now;
        SessionView {
            epoch: s.epoch,
            last_chunk: s.last_chunk.clone(),
            frames: std::mem::take(&mut s.frames),
            step: s.step,
            since_last,
        }
    }

    /// Evicts the least recently used session when the table is full.
    fn make_room(&self, t: &mut Table) {
        if t.map.len() < self.limits.max {
            return;
        }
        let oldest = t
            .map
            .iter()
            .min_by_key(|(_, s)| s.last_seen)
            .map(|(k, _)| k.clone());
        if let Some(k) = oldest {
            t.map.remove(&k);
            t.stats.evicted += 1;
            tracing::info!("session {k:?} evicted (--max-sessions {})", self.limits.max);
        }
    }

    /// Hands back the frame history of a request that began at `epoch`, with its answered
    /// chunk (`None`: it was refused, and the step count stays); returns the session's step
    /// count, or `None` when the session was reset or dropped meanwhile (then nothing is kept).
    pub fn record(
        &self,
        id: &str,
        epoch: u64,
        frames: FrameHistory,
        chunk: Option<LastChunk>,
        now: Instant,
    ) -> Option<u64> {
        let mut t = self.lock();
        let s = t.map.get_mut(id).filter(|s| s.epoch == epoch)?;
        s.frames = frames;
        if let Some(chunk) = chunk {
            s.last_chunk = Some(chunk);
            s.step += 1;
        }
        s.last_seen = now;
        Some(s.step)
    }

    /// Clears the session `id`; whether it existed.
    pub fn reset(&self, id: &str) -> bool {
        let mut t = self.lock();
        let existed = t.map.remove(id).is_some();
        if existed {
            t.stats.resets += 1;
        }
        existed
    }

    /// Drops the session `id` because its connection ended (not counted as a reset).
    pub fn close(&self, id: &str) {
        self.lock().map.remove(id);
    }

    /// The counts now (expired sessions dropped first).
    pub fn stats(&self) -> SessionStats {
        let mut t = self.lock();
        self.expire(&mut t, Instant::now());
        SessionStats {
            active: t.map.len(),
            ..t.stats.clone()
        }
    }
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

    #[test]
    fn a_session_keeps_its_last_chunk_and_counts_steps() {
        let s = Sessions::default();
        let t0 = Instant::now();
        let v = s.begin("a", t0);
        assert_eq!(
            (v.step, v.last_chunk.is_none(), v.since_last),
            (0, true, None)
        );
        assert_eq!(
            s.record("a", v.epoch, v.frames, Some(chunk(1.0)), t0),
            Some(1)
        );
        let later = t0 + Duration::from_millis(250);
        let v = s.begin("a", later);
        assert_eq!(v.step, 1);
        assert_eq!(v.last_chunk, Some(chunk(1.0)));
        assert_eq!(v.since_last, Some(Duration::from_millis(250)));
        // Another session sees none of it.
        assert_eq!(s.begin("b", later).last_chunk, None);
        assert_eq!(s.stats().created, 2);
    }

    #[test]
    fn reset_clears_and_a_request_across_it_writes_nothing() {
        let s = Sessions::default();
        let now = Instant::now();
        let v = s.begin("a", now);
        assert!(s.reset("a"));
        assert!(!s.reset("a"));
        // The request that began before the reset finishes after it.
        assert_eq!(
            s.record("a", v.epoch, v.frames, Some(chunk(1.0)), now),
            None
        );
        let fresh = s.begin("a", now);
        assert_eq!((fresh.step, fresh.last_chunk.clone()), (0, None));
        let stale = FrameHistory::default();
        assert_eq!(s.record("a", v.epoch, stale, Some(chunk(2.0)), now), None);
        // A refused request hands its history back and counts no step.
        assert_eq!(s.record("a", fresh.epoch, fresh.frames, None, now), Some(0));
        assert_eq!(s.stats().resets, 1);
    }

    #[test]
    fn sessions_expire_and_the_least_recently_used_is_evicted() {
        let s = Sessions::new(SessionLimits {
            ttl: Duration::from_secs(10),
            max: 2,
        });
        let t0 = Instant::now();
        for (id, dt) in [("a", 0), ("b", 1), ("a", 2)] {
            let v = s.begin(id, t0 + Duration::from_secs(dt));
            let at = t0 + Duration::from_secs(dt);
            s.record(id, v.epoch, v.frames, Some(chunk(dt as f32)), at);
        }
        // Full: "b" was used least recently.
        s.begin("c", t0 + Duration::from_secs(3));
        assert_eq!(s.begin("a", t0 + Duration::from_secs(4)).step, 2);
        assert_eq!(s.begin("b", t0 + Duration::from_secs(4)).step, 0);
        let st = s.stats();
        assert_eq!((st.evicted, st.max, st.ttl_s), (2, 2, 10));
        // 11 s after its last use "a" is gone.
        let v = s.begin("x", t0 + Duration::from_secs(16));
        assert_eq!(v.step, 0);
        assert!(s.stats().expired >= 1);
        assert_eq!(s.begin("a", t0 + Duration::from_secs(16)).step, 0);
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
