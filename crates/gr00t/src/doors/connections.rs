//! Every door's TCP connections (docs/HARDENING.md): a cap per door (at the cap an idle
//! connection is closed to make room, in classes: first those that never finished their
//! handshake, then established ones, last those that completed a request, each class
//! longest-idle first, so a flood of fresh connections cannot push a robot out between its
//! steps), a handshake deadline (HTTP: the first request's head; websocket: the upgrade; ZMQ: the
//! greeting and READY), an idle timeout for connections with nothing in progress, a write
//! timeout for replies that do not drain, a bounded lingering close after a refusal that left
//! input unread (its slot freed at once, the lingering sockets capped process-wide), and the
//! file-descriptor budget the caps are sized from, so that no door can starve another.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use axum::serve::{IncomingStream, Listener};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// Default `--max-connections` (HTTP).
pub const DEFAULT_HTTP_CONNECTIONS: usize = 1024;
/// Default `--ws-max-connections` and `--zmq-max-connections`.
pub const DEFAULT_PROTOCOL_CONNECTIONS: usize = 256;
/// File descriptors kept out of every door's share: the checkpoint's files, the runtime's
/// own, logs, the lingering closes' sockets.
pub const RESERVED_FILES: u64 = 128;

/// Flags of `gr00t serve` for the connections of every door (flattened into its command line).
#[derive(clap::Args, Debug, Clone)]
pub struct ConnectionOptions {
    /// Most HTTP connections open at once; at the cap the longest-idle one is closed to make
    /// room (when every one has a request in progress, new ones wait to be accepted).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_HTTP_CONNECTIONS)]
    pub max_connections: usize,
    /// Most websocket connections open at once (--ws-port), with the same rule.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_PROTOCOL_CONNECTIONS)]
    pub ws_max_connections: usize,
    /// Most ZMQ connections open at once (--zmq-port), with the same rule.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_PROTOCOL_CONNECTIONS)]
    pub zmq_max_connections: usize,
    /// Most LeRobot gRPC connections open at once (--lerobot-port), with the same rule.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_PROTOCOL_CONNECTIONS)]
    pub lerobot_max_connections: usize,
    /// Seconds a connection of any door may stay open with no request in progress and no
    /// traffic before the server closes it (frees its slot).
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    pub idle_timeout_s: f64,
    /// Seconds a new connection has to finish its handshake: the first HTTP request's head,
    /// the websocket upgrade, or the ZMQ greeting and READY; a slower one is closed.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    pub handshake_timeout_s: f64,
    /// Seconds a client has to send a whole HTTP request body or ZMQ message once it began;
    /// a slower HTTP one gets 408, a ZMQ one is disconnected.
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub body_timeout_s: f64,
    /// Bytes a second an HTTP body or ZMQ message must arrive at on average, counted after its
    /// first 2 s; a slower one is refused (HTTP 408) or disconnected (ZMQ) then, long before
    /// --body-timeout-s (0: no minimum).
    #[arg(long, value_name = "BYTES_PER_S", default_value_t = DEFAULT_MIN_BODY_RATE)]
    pub min_body_rate: u64,
    /// Seconds a reply (any door) may stall, and a ZMQ or websocket reply take in all, while
    /// the client does not read it; then the connection closes (and while it drains, the
    /// connection can be evicted).
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    pub write_timeout_s: f64,
    /// Pixels (width × height) a PNG or JPEG frame may declare; a larger one is refused from
    /// its header, before it is decoded (a decoded frame is 3 bytes a pixel, and a session keeps
    /// up to 15 per view).
    #[arg(long, value_name = "PIXELS",
          default_value_t = gr00t_embodiment::image::decode::DEFAULT_MAX_PIXELS)]
    pub max_image_pixels: u64,
}

impl Default for ConnectionOptions {
    fn default() -> ConnectionOptions {
        ConnectionOptions {
            max_connections: DEFAULT_HTTP_CONNECTIONS,
            ws_max_connections: DEFAULT_PROTOCOL_CONNECTIONS,
            zmq_max_connections: DEFAULT_PROTOCOL_CONNECTIONS,
            lerobot_max_connections: DEFAULT_PROTOCOL_CONNECTIONS,
            idle_timeout_s: 60.0,
            handshake_timeout_s: 10.0,
            body_timeout_s: 30.0,
            min_body_rate: DEFAULT_MIN_BODY_RATE,
            write_timeout_s: 10.0,
            max_image_pixels: gr00t_embodiment::image::decode::DEFAULT_MAX_PIXELS,
        }
    }
}

/// Default `--min-body-rate` (bytes a second): a DROID body (~0.5 MB) on a link this slow
/// would take 30 s; a robot's link is thousands of times faster.
pub const DEFAULT_MIN_BODY_RATE: u64 = 16 * 1024;
/// The start of a message that the minimum rate does not count (TCP's slow start, a client
/// that sends its head, then encodes the body).
pub const BODY_GRACE: Duration = Duration::from_secs(2);

/// How a message (HTTP body, ZMQ message) must arrive once begun: whole within `timeout`, and
/// from [`BODY_GRACE`] on at `min_rate` bytes a second at least, on average.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyPace {
    /// `--body-timeout-s`.
    pub timeout: Duration,
    /// `--min-body-rate` (0: none).
    pub min_rate: u64,
}

/// Which of [`BodyPace`]'s rules a late message broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Late {
    /// Not whole within the timeout.
    Timeout,
    /// Slower than the minimum rate.
    Slow,
}

impl BodyPace {
    /// From the flags.
    pub fn new(opts: &ConnectionOptions) -> BodyPace {
        BodyPace {
            timeout: seconds(opts.body_timeout_s),
            min_rate: opts.min_body_rate,
        }
    }

    /// When a message begun at `began` with `received` bytes so far is late unless more
    /// arrive, and which rule that is.
    pub fn due(&self, began: Instant, received: usize) -> (Instant, Late) {
        let whole = began + self.timeout;
        if self.min_rate == 0 {
            return (whole, Late::Timeout);
        }
        let earned = Duration::try_from_secs_f64(received as f64 / self.min_rate as f64)
            .unwrap_or(self.timeout);
        let paced = began + BODY_GRACE + earned;
        if paced < whole {
            (paced, Late::Slow)
        } else {
            (whole, Late::Timeout)
        }
    }

    /// The refusal's words for `late` (after "the request body" or "a message").
    pub fn explain(&self, late: Late) -> String {
        match late {
            Late::Timeout => format!(
                "did not arrive whole within {:.1} s (--body-timeout-s)",
                self.timeout.as_secs_f64()
            ),
            Late::Slow => format!(
                "arrived slower than {} bytes/s after its first {} s (--min-body-rate)",
                self.min_rate,
                BODY_GRACE.as_secs()
            ),
        }
    }
}

/// Longest a connection keeps reading (and discarding) after a refusal before closing.
pub const LINGER_TIME: Duration = Duration::from_secs(5);
/// Most bytes discarded by that lingering close, in messages of the size limit.
pub const LINGER_BODIES: usize = 4;
/// Lingering closes at once, all doors together (within [`RESERVED_FILES`]); a refusal beyond
/// them closes at once. A lingering socket holds no door slot, so a client that renews its
/// refusals cannot keep the door's slots.
pub const MAX_LINGERING: usize = 64;

/// Lingering closes now in progress ([`MAX_LINGERING`]).
static LINGERING: AtomicUsize = AtomicUsize::new(0);

/// One of the [`MAX_LINGERING`] lingering closes, given back when dropped.
struct LingerSlot;

impl LingerSlot {
    /// A slot, or `None` when every one is taken.
    fn take() -> Option<LingerSlot> {
        LINGERING
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_LINGERING).then_some(n + 1)
            })
            .ok()
            .map(|_| LingerSlot)
    }
}

impl Drop for LingerSlot {
    fn drop(&mut self) {
        LINGERING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A duration from a flag's seconds; non-finite or negative values mean "1 ms" rather than
/// a panic in `Duration::from_secs_f64`.
pub fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::from_millis(1))
}

/// The connection caps of the three doors, after the file-descriptor budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Caps {
    /// HTTP connections.
    pub http: usize,
    /// Websocket connections (0: the door is off).
    pub ws: usize,
    /// ZMQ connections (0: the door is off).
    pub zmq: usize,
    /// LeRobot gRPC connections (0: the door is off).
    pub lerobot: usize,
    /// The process's file limit the caps were sized from.
    pub open_files: u64,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (connections are files); returns the
/// limit now in force.
pub fn raise_open_files() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed by pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    Ok(lim.rlim_cur)
}

/// The caps of the enabled doors within `open_files`: each door keeps what it asked for when
/// the sum fits beside [`RESERVED_FILES`]; otherwise each gets its proportional share of what
/// remains (at least 1), so no door can exhaust the files another needs.
pub fn size_caps(
    opts: &ConnectionOptions,
    ws: bool,
    zmq: bool,
    lerobot: bool,
    open_files: u64,
) -> Caps {
    let asked = [
        opts.max_connections.max(1),
        if ws {
            opts.ws_max_connections.max(1)
        } else {
            0
        },
        if zmq {
            opts.zmq_max_connections.max(1)
        } else {
            0
        },
        if lerobot {
            opts.lerobot_max_connections.max(1)
        } else {
            0
        },
    ];
    let budget = open_files.saturating_sub(RESERVED_FILES).max(3) as usize;
    let total: usize = asked.iter().sum();
    let fit = |n: usize| {
        if total <= budget || n == 0 {
            n
        } else {
            (n * budget / total).max(1)
        }
    };
    Caps {
        http: fit(asked[0]),
        ws: fit(asked[1]),
        zmq: fit(asked[2]),
        lerobot: fit(asked[3]),
        open_files,
    }
}

/// Per-connection bookkeeping shared between the socket wrapper and the door's handlers.
#[derive(Debug)]
pub struct ConnState {
    /// Requests of this connection being handled right now (the idle timer waits while > 0).
    busy: AtomicUsize,
    /// Milliseconds since the listener started, at the last byte read or written.
    last_ms: AtomicU64,
    /// Set by the listener to close this (idle) connection and free its slot.
    evict: AtomicBool,
    /// The door's handshake is done: the handshake deadline no longer applies.
    greeted: AtomicBool,
    /// Set when the door refused something whose input may be unread: the close then
    /// lingers so that a client still sending reads the answer instead of a reset.
    linger: AtomicBool,
    /// A request on it was answered (authenticated where a token is set): evicted last.
    served: AtomicBool,
    /// Lingering in its close, its slot already given back: never an eviction victim.
    released: AtomicBool,
    /// To be closed without a byte more written (see [`ConnState::close_unanswered`]).
    unanswered: AtomicBool,
    /// Wakes the connection's pending read when it is evicted.
    waker: Mutex<Option<Waker>>,
    /// The listener's start, for `last_ms`.
    epoch: Instant,
}

impl ConnState {
    fn new(epoch: Instant) -> ConnState {
        ConnState {
            busy: AtomicUsize::new(0),
            last_ms: AtomicU64::new(epoch.elapsed().as_millis() as u64),
            evict: AtomicBool::new(false),
            greeted: AtomicBool::new(false),
            linger: AtomicBool::new(false),
            served: AtomicBool::new(false),
            released: AtomicBool::new(false),
            unanswered: AtomicBool::new(false),
            waker: Mutex::new(None),
            epoch,
        }
    }

    fn is_idle(&self) -> bool {
        self.busy.load(Ordering::SeqCst) == 0
    }

    /// Closes the connection before the answer of the request now handled is written: a
    /// proxy then sees a failed upstream and tries another (as with a closed port).
    pub fn close_unanswered(&self) {
        self.unanswered.store(true, Ordering::SeqCst);
    }

    /// Marks the connection busy (a request in progress) until the guard is dropped: the
    /// idle timer and eviction spare it meanwhile.
    pub fn busy(self: &Arc<Self>) -> BusyGuard {
        self.busy.fetch_add(1, Ordering::SeqCst);
        BusyGuard(self.clone())
    }

    /// The door's handshake is done.
    pub fn mark_greeted(&self) {
        self.greeted.store(true, Ordering::SeqCst);
    }

    /// A request was answered on it (authenticated, where the door has a token): at the cap it
    /// is evicted after every connection that has not.
    pub fn mark_served(&self) {
        self.served.store(true, Ordering::SeqCst);
    }

    /// Its eviction class at the cap, lowest first: 0 never through the handshake, 1
    /// established, 2 served a request.
    fn class(&self) -> u8 {
        if self.served.load(Ordering::SeqCst) {
            2
        } else if self.greeted.load(Ordering::SeqCst) {
            1
        } else {
            0
        }
    }

    /// Sets whether the close lingers (see [`ConnState::linger`]).
    pub fn set_linger(&self, on: bool) {
        self.linger.store(on, Ordering::SeqCst);
    }

    /// Keeps the connection task's waker, for [`ConnState::evict`].
    fn remember(&self, waker: &Waker) {
        if let Ok(mut w) = self.waker.lock() {
            if !w.as_ref().is_some_and(|w| w.will_wake(waker)) {
                *w = Some(waker.clone());
            }
        }
    }

    fn evict(&self) {
        self.evict.store(true, Ordering::SeqCst);
        let waker = self.waker.lock().ok().and_then(|mut w| w.take());
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// A request in progress on a connection ([`ConnState::busy`]).
pub struct BusyGuard(Arc<ConnState>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A door's timers and lingering budget, as its listener hands them to each connection.
#[derive(Debug, Clone, Copy)]
pub struct Timers {
    /// No traffic and nothing in progress this long closes the connection.
    pub idle: Duration,
    /// The handshake must be done this long after the accept.
    pub handshake: Duration,
    /// A reply must drain within this long.
    pub write: Duration,
    /// Bytes a lingering close discards at most.
    pub linger_bytes: usize,
}

impl Timers {
    /// The timers of `opts`; `max_message_bytes` sizes the lingering close.
    pub fn new(opts: &ConnectionOptions, max_message_bytes: usize) -> Timers {
        Timers {
            idle: seconds(opts.idle_timeout_s),
            handshake: seconds(opts.handshake_timeout_s),
            write: seconds(opts.write_timeout_s),
            linger_bytes: max_message_bytes.saturating_mul(LINGER_BODIES),
        }
    }
}

/// A TCP listener that holds one of `max` permits per open connection.
pub struct LimitedListener {
    inner: TcpListener,
    permits: Arc<Semaphore>,
    max: usize,
    timers: Timers,
    epoch: Instant,
    open: Vec<Weak<ConnState>>,
    /// The door, for the log.
    door: &'static str,
}

impl LimitedListener {
    /// Wraps a bound listener of `door` with a cap of `max` connections.
    pub fn new(inner: TcpListener, door: &'static str, max: usize, timers: Timers) -> Self {
        LimitedListener {
            inner,
            permits: Arc::new(Semaphore::new(max.max(1))),
            max: max.max(1),
            timers,
            epoch: Instant::now(),
            open: Vec::new(),
            door,
        }
    }

    /// At the cap: asks an idle connection to close (its slot frees when it does): the lowest
    /// [`ConnState::class`], longest-idle first within it.
    fn evict_one(&mut self) {
        self.open.retain(|w| w.strong_count() > 0);
        let victim = self
            .open
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|c| {
                c.is_idle() && !c.evict.load(Ordering::SeqCst) && !c.released.load(Ordering::SeqCst)
            })
            .min_by_key(|c| (c.class(), c.last_ms.load(Ordering::SeqCst)));
        if let Some(c) = victim {
            tracing::debug!(
                "{}: {} connections open (the cap): closing an idle one of class {}",
                self.door,
                self.max,
                c.class()
            );
            c.evict();
        }
    }

    /// The next connection, once it holds a slot.
    pub async fn accept_guarded(&mut self) -> (GuardedStream, SocketAddr) {
        let (tcp, addr) = Listener::accept(&mut self.inner).await;
        if self.permits.available_permits() == 0 {
            self.evict_one();
        }
        // The semaphore is never closed; should it be, stop accepting rather than spin.
        let permit = match self.permits.clone().acquire_owned().await {
            Ok(p) => p,
            Err(_) => std::future::pending().await,
        };
        // Answers are written whole: no reason to let Nagle hold their tail back.
        let _ = tcp.set_nodelay(true);
        let state = Arc::new(ConnState::new(self.epoch));
        // Closed connections' entries are dropped once they outnumber the open ones, so the
        // list stays under twice the cap however many connections come and go.
        if self.open.len() >= 2 * self.max {
            self.open.retain(|w| w.strong_count() > 0);
        }
        self.open.push(Arc::downgrade(&state));
        (
            GuardedStream::new(tcp, permit, state, self.timers, self.door),
            addr,
        )
    }
}

impl Listener for LimitedListener {
    type Io = GuardedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (GuardedStream, SocketAddr) {
        self.accept_guarded().await
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// One accepted connection: its slot under the cap, its handshake and idle timers.
pub struct GuardedStream {
    /// `None` only once dropped into a lingering close.
    inner: Option<TcpStream>,
    permit: Option<OwnedSemaphorePermit>,
    state: Arc<ConnState>,
    timers: Timers,
    deadline: Pin<Box<Sleep>>,
    handshake: Pin<Box<Sleep>>,
    /// Armed while a write is stalled; reset by every byte written ([`Timers::write`]).
    write_stall: Option<Pin<Box<Sleep>>>,
    closing: Closing,
    /// The door, for the log.
    door: &'static str,
}

/// Where a connection's close stands.
enum Closing {
    /// Not closing.
    Open,
    /// Write side shut (answer and FIN sent); discarding input until EOF, the deadline, or
    /// `left` more bytes, in one of the [`MAX_LINGERING`] slots (the door's slot given back).
    Lingering {
        deadline: Pin<Box<Sleep>>,
        left: usize,
        _slot: LingerSlot,
    },
    /// Done.
    Closed,
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "connection closed")
}

impl GuardedStream {
    fn new(
        inner: TcpStream,
        permit: OwnedSemaphorePermit,
        state: Arc<ConnState>,
        timers: Timers,
        door: &'static str,
    ) -> GuardedStream {
        GuardedStream {
            inner: Some(inner),
            permit: Some(permit),
            state,
            timers,
            deadline: Box::pin(tokio::time::sleep(timers.idle)),
            handshake: Box::pin(tokio::time::sleep(timers.handshake)),
            write_stall: None,
            closing: Closing::Open,
            door,
        }
    }

    /// Gives the door's slot back for a lingering close: a lingering socket is not an idle
    /// connection the cap could evict, and must not hold what a new client needs.
    fn release_slot(&mut self) {
        self.state.released.store(true, Ordering::SeqCst);
        self.permit = None;
    }

    /// The connection's bookkeeping (busy marking, handshake, lingering).
    pub fn state(&self) -> &Arc<ConnState> {
        &self.state
    }

    /// Reads and discards until the peer's EOF, an error, the linger deadline or byte budget,
    /// or an eviction; then the close may complete.
    fn poll_linger(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Closing::Lingering { deadline, left, .. } = &mut self.closing else {
            return Poll::Ready(());
        };
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(());
        };
        let mut scratch = [0u8; 16 * 1024];
        loop {
            if self.state.evict.load(Ordering::SeqCst) || deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
            let mut buf = ReadBuf::new(&mut scratch);
            // tokio's cooperative budget makes a long drain yield to other connections.
            match Pin::new(&mut *inner).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                    *left = left.saturating_sub(buf.filled().len());
                    if *left == 0 {
                        return Poll::Ready(());
                    }
                }
                Poll::Ready(_) => return Poll::Ready(()),
                Poll::Pending => {
                    self.state.remember(cx.waker());
                    // As in `poll_read`: an eviction just now is seen here.
                    if self.state.evict.load(Ordering::SeqCst) {
                        return Poll::Ready(());
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    fn touch(&mut self) {
        let now = Instant::now();
        self.deadline.as_mut().reset(now + self.timers.idle);
        let ms = now.duration_since(self.state.epoch).as_millis() as u64;
        self.state.last_ms.store(ms, Ordering::SeqCst);
    }

    /// The handshake deadline passed before the door's handshake was done.
    fn handshake_late(&mut self, cx: &mut Context<'_>) -> bool {
        !self.state.greeted.load(Ordering::SeqCst) && self.handshake.as_mut().poll(cx).is_ready()
    }
}

impl AsyncRead for GuardedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        // Trickled bytes do not stretch the handshake.
        if this.handshake_late(cx) {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "handshake not done in time (--handshake-timeout-s)",
            )));
        }
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(Err(closed()));
        };
        let before = buf.filled().len();
        match Pin::new(inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    this.touch();
                }
                Poll::Ready(r)
            }
            Poll::Pending => {
                // The waker first, then the flag: an eviction between the two still finds
                // the waker, or is seen here (a lost wake-up would hold its slot).
                this.state.remember(cx.waker());
                // A request being computed is never cut: only a connection with nothing in
                // progress times out or is evicted.
                if this.state.is_idle() {
                    if this.state.evict.load(Ordering::SeqCst) {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::ConnectionAborted,
                            "idle connection closed to make room (connection cap)",
                        )));
                    }
                    if this.deadline.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "idle connection closed (--idle-timeout-s)",
                        )));
                    }
                }
                Poll::Pending
            }
        }
    }
}

impl AsyncWrite for GuardedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(Err(closed()));
        };
        if this.state.unanswered.load(Ordering::SeqCst) {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed unanswered (the server is loading)",
            )));
        }
        let r = Pin::new(inner).poll_write(cx, buf);
        if r.is_pending() {
            this.state.remember(cx.waker());
        }
        match r {
            Poll::Ready(Ok(n)) if n > 0 => {
                this.write_stall = None;
                this.touch();
            }
            // A peer that stops reading its answer: no progress for the write timeout (or an
            // eviction) ends the connection, so it cannot hold a slot or the reply's memory.
            Poll::Pending => {
                let write = this.timers.write;
                let stall = this
                    .write_stall
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(write)));
                if stall.as_mut().poll(cx).is_ready() {
                    tracing::info!(
                        "{}: a reply was not read within {:.1} s (--write-timeout-s): closed",
                        this.door,
                        write.as_secs_f64()
                    );
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "peer stopped reading its answer (--write-timeout-s)",
                    )));
                }
                if this.state.evict.load(Ordering::SeqCst) {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "connection closed to make room (connection cap) while its answer \
                         stalled",
                    )));
                }
            }
            _ => {}
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.inner.as_mut() {
            Some(inner) => Pin::new(inner).poll_flush(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Closing::Open = this.closing {
            let Some(inner) = this.inner.as_mut() else {
                return Poll::Ready(Ok(()));
            };
            // The answer was flushed before this; shutting the write side sends the FIN.
            std::task::ready!(Pin::new(inner).poll_shutdown(cx))?;
            // Closing with unread input would reset the connection, and a client that writes
            // its whole message before reading would see the reset, not the answer.
            let slot = this
                .state
                .linger
                .load(Ordering::SeqCst)
                .then(LingerSlot::take)
                .flatten();
            this.closing = match slot {
                Some(slot) => {
                    this.release_slot();
                    Closing::Lingering {
                        deadline: Box::pin(tokio::time::sleep(LINGER_TIME)),
                        left: this.timers.linger_bytes,
                        _slot: slot,
                    }
                }
                None => Closing::Closed,
            };
        }
        std::task::ready!(this.poll_linger(cx));
        this.closing = Closing::Closed;
        Poll::Ready(Ok(()))
    }
}

impl Drop for GuardedStream {
    /// A connection dropped without a shutdown (a websocket after its close frame) while its
    /// close should linger: the socket lingers in a task of its own, in one of the
    /// [`MAX_LINGERING`] slots, its door slot given back (none free: it closes at once).
    fn drop(&mut self) {
        if !matches!(self.closing, Closing::Open) || !self.state.linger.load(Ordering::SeqCst) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some(slot) = LingerSlot::take() else {
            return;
        };
        let Some(tcp) = self.inner.take() else {
            return;
        };
        self.release_slot();
        let left = self.timers.linger_bytes;
        runtime.spawn(async move {
            let _slot = slot;
            let mut tcp = tcp;
            if tcp.shutdown().await.is_err() {
                return;
            }
            let drain = async {
                let mut scratch = vec![0u8; 16 * 1024];
                let mut left = left;
                while left > 0 {
                    match tokio::io::AsyncReadExt::read(&mut tcp, &mut scratch).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => left = left.saturating_sub(n),
                    }
                }
            };
            let _ = tokio::time::timeout(LINGER_TIME, drain).await;
        });
    }
}

/// The connection's state, as request extension (via `into_make_service_with_connect_info`).
#[derive(Clone, Debug)]
pub struct ConnInfo(pub Arc<ConnState>);

impl axum::extract::connect_info::Connected<IncomingStream<'_, LimitedListener>> for ConnInfo {
    fn connect_info(stream: IncomingStream<'_, LimitedListener>) -> ConnInfo {
        ConnInfo(stream.io().state.clone())
    }
}

/// The connection of a request served through a [`LimitedListener`], if any.
pub fn conn_of(req: &axum::extract::Request) -> Option<Arc<ConnState>> {
    req.extensions()
        .get::<axum::extract::ConnectInfo<ConnInfo>>()
        .map(|axum::extract::ConnectInfo(ConnInfo(state))| state.clone())
}

/// Waits for a future, at most `limit`, as `Err(())` when late: the doors' message deadlines.
pub async fn within<F: Future>(limit: Duration, f: F) -> Result<F::Output, ()> {
    tokio::time::timeout(limit, f).await.map_err(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_seconds_do_not_panic() {
        assert_eq!(seconds(1.5), Duration::from_millis(1500));
        assert_eq!(seconds(-1.0), Duration::from_millis(1));
        assert_eq!(seconds(f64::NAN), Duration::from_millis(1));
    }

    #[test]
    fn a_body_is_late_at_the_timeout_or_below_the_minimum_rate() {
        let pace = BodyPace {
            timeout: Duration::from_secs(30),
            min_rate: 1000,
        };
        let t0 = Instant::now();
        // Nothing yet: late when the grace ends.
        assert_eq!(pace.due(t0, 0), (t0 + BODY_GRACE, Late::Slow));
        // 5 000 bytes buy 5 s past the grace.
        assert_eq!(
            pace.due(t0, 5000),
            (t0 + BODY_GRACE + Duration::from_secs(5), Late::Slow)
        );
        // Enough for past the timeout: the timeout rules.
        assert_eq!(
            pace.due(t0, 100_000),
            (t0 + Duration::from_secs(30), Late::Timeout)
        );
        let none = BodyPace {
            min_rate: 0,
            ..pace
        };
        assert_eq!(
            none.due(t0, 0),
            (t0 + Duration::from_secs(30), Late::Timeout)
        );
        assert!(pace.explain(Late::Slow).contains("--min-body-rate"));
        assert!(pace.explain(Late::Timeout).contains("30.0 s"));
    }

    #[test]
    fn caps_fit_the_file_budget_with_a_share_for_each_door() {
        let opts = ConnectionOptions::default();
        // Plenty of files: what was asked for.
        let c = size_caps(&opts, true, true, false, 1 << 20);
        assert_eq!((c.http, c.ws, c.zmq), (1024, 256, 256));
        // A door that is off takes nothing.
        let c = size_caps(&opts, false, true, false, 1 << 20);
        assert_eq!((c.http, c.ws, c.zmq), (1024, 0, 256));
        // 1024 files: 896 shared in proportion, every door keeping a share.
        let c = size_caps(&opts, true, true, false, 1024);
        assert_eq!((c.http, c.ws, c.zmq), (597, 149, 149));
        assert!(c.http + c.ws + c.zmq <= 1024 - RESERVED_FILES as usize);
        // Next to nothing: still a connection per door.
        let c = size_caps(&opts, true, true, false, 10);
        assert_eq!((c.http, c.ws, c.zmq), (2, 1, 1));
    }

    #[test]
    fn the_soft_file_limit_is_raised_to_the_hard_one() {
        let now = raise_open_files().unwrap();
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        assert_eq!(lim.rlim_cur, lim.rlim_max);
        assert_eq!(now, lim.rlim_cur);
    }
}
