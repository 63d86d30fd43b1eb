//! Limits against hostile or broken HTTP clients (docs/HARDENING.md): a cap on open
//! connections (at the cap the longest-idle connection is closed to make room, so a health
//! check still gets in), an idle timeout for connections with no request in progress, a
//! deadline for reading a request body, the optional bearer token (`--api-token`), and a
//! bounded lingering close after a refusal that left the body unread.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::errors::ApiError;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::{IncomingStream, Listener};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// Flags of `gr00t serve` for the HTTP limits (flattened into its command line).
#[derive(clap::Args, Debug, Clone)]
pub struct HardeningOptions {
    /// Most HTTP connections open at once; at the cap the longest-idle one is closed to make
    /// room (when every one has a request in progress, new ones wait to be accepted).
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub max_connections: usize,
    /// Seconds an HTTP connection may stay open with no request in progress and no traffic
    /// before the server closes it (frees its slot under --max-connections).
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    pub idle_timeout_s: f64,
    /// Seconds a client has to send a whole request body; a slower one gets 408 and its
    /// connection is closed.
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub body_timeout_s: f64,
}

impl Default for HardeningOptions {
    fn default() -> HardeningOptions {
        HardeningOptions {
            max_connections: 1024,
            idle_timeout_s: 60.0,
            body_timeout_s: 30.0,
        }
    }
}

/// Longest a connection keeps reading (and discarding) after a refused body before closing.
pub const LINGER_TIME: Duration = Duration::from_secs(5);
/// Most bytes discarded by that lingering close, in bodies of the size limit.
pub const LINGER_BODIES: usize = 4;

/// A duration from a flag's seconds; non-finite or negative values mean "1 ms" rather than
/// a panic in `Duration::from_secs_f64`.
pub fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::from_millis(1))
}

/// Per-connection bookkeeping shared between the socket wrapper and the request middleware.
#[derive(Debug)]
pub struct ConnState {
    /// Requests of this connection being handled right now (the idle timer waits while > 0).
    busy: AtomicUsize,
    /// Milliseconds since the listener started, at the last byte read or written.
    last_ms: AtomicU64,
    /// Set by the listener to close this (idle) connection and free its slot.
    evict: AtomicBool,
    /// Set by the guard when it refused a request whose body may be unread: the close then
    /// lingers so that a client still sending reads the answer instead of a reset.
    linger: AtomicBool,
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
            linger: AtomicBool::new(false),
            waker: Mutex::new(None),
            epoch,
        }
    }

    fn is_idle(&self) -> bool {
        self.busy.load(Ordering::SeqCst) == 0
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

/// A TCP listener that holds one of `max_connections` permits per open connection.
pub struct LimitedListener {
    inner: TcpListener,
    permits: Arc<Semaphore>,
    max: usize,
    idle: Duration,
    linger_bytes: usize,
    epoch: Instant,
    open: Vec<Weak<ConnState>>,
}

impl LimitedListener {
    /// Wraps a bound listener; `max_body_bytes` sizes the lingering close.
    pub fn new(
        inner: TcpListener,
        opts: &HardeningOptions,
        max_body_bytes: usize,
    ) -> LimitedListener {
        LimitedListener {
            inner,
            permits: Arc::new(Semaphore::new(opts.max_connections.max(1))),
            max: opts.max_connections.max(1),
            idle: seconds(opts.idle_timeout_s),
            linger_bytes: max_body_bytes.saturating_mul(LINGER_BODIES),
            epoch: Instant::now(),
            open: Vec::new(),
        }
    }

    /// At the cap: asks the longest-idle connection to close (its slot frees when it does).
    fn evict_one(&mut self) {
        self.open.retain(|w| w.strong_count() > 0);
        let victim = self
            .open
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|c| c.is_idle() && !c.evict.load(Ordering::SeqCst))
            .min_by_key(|c| c.last_ms.load(Ordering::SeqCst));
        if let Some(c) = victim {
            c.evict();
        }
    }
}

impl Listener for LimitedListener {
    type Io = GuardedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (GuardedStream, SocketAddr) {
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
        let stream = GuardedStream::new(tcp, permit, state, self.idle, self.linger_bytes);
        (stream, addr)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// One accepted connection: its slot under the connection cap and its idle timer.
pub struct GuardedStream {
    inner: TcpStream,
    _permit: OwnedSemaphorePermit,
    state: Arc<ConnState>,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
    linger_bytes: usize,
    closing: Closing,
}

/// Where a connection's close stands.
enum Closing {
    /// Not closing.
    Open,
    /// Write side shut (answer and FIN sent); discarding input until EOF, the deadline, or
    /// `left` more bytes.
    Lingering {
        deadline: Pin<Box<Sleep>>,
        left: usize,
    },
    /// Done.
    Closed,
}

impl GuardedStream {
    fn new(
        inner: TcpStream,
        permit: OwnedSemaphorePermit,
        state: Arc<ConnState>,
        idle: Duration,
        linger_bytes: usize,
    ) -> GuardedStream {
        GuardedStream {
            inner,
            _permit: permit,
            state,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
            linger_bytes,
            closing: Closing::Open,
        }
    }

    /// Reads and discards until the peer's EOF, an error, the linger deadline or byte budget,
    /// or an eviction; then the close may complete.
    fn poll_linger(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Closing::Lingering { deadline, left } = &mut self.closing else {
            return Poll::Ready(());
        };
        let mut scratch = [0u8; 16 * 1024];
        loop {
            if self.state.evict.load(Ordering::SeqCst) || deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
            let mut buf = ReadBuf::new(&mut scratch);
            // tokio's cooperative budget makes a long drain yield to other connections.
            match Pin::new(&mut self.inner).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                    *left = left.saturating_sub(buf.filled().len());
                    if *left == 0 {
                        return Poll::Ready(());
                    }
                }
                Poll::Ready(_) => return Poll::Ready(()),
                Poll::Pending => {
                    self.state.remember(cx.waker());
                    return Poll::Pending;
                }
            }
        }
    }

    fn touch(&mut self) {
        let now = Instant::now();
        self.deadline.as_mut().reset(now + self.idle);
        let ms = now.duration_since(self.state.epoch).as_millis() as u64;
        self.state.last_ms.store(ms, Ordering::SeqCst);
    }
}

impl AsyncRead for GuardedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    this.touch();
                }
                Poll::Ready(r)
            }
            Poll::Pending => {
                // A request being computed is never cut: only a connection with nothing in
                // progress times out or is evicted.
                if this.state.is_idle() {
                    if this.state.evict.load(Ordering::SeqCst) {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::ConnectionAborted,
                            "idle connection closed to make room (--max-connections)",
                        )));
                    }
                    if this.deadline.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "idle connection closed (--idle-timeout-s)",
                        )));
                    }
                }
                this.state.remember(cx.waker());
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
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        match r {
            Poll::Ready(Ok(n)) if n > 0 => this.touch(),
            // A peer that stops reading its answer: no progress for the idle timeout (or an
            // eviction) ends the connection, so it cannot hold a slot forever.
            Poll::Pending
                if this.state.evict.load(Ordering::SeqCst)
                    || this.deadline.as_mut().poll(cx).is_ready() =>
            {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "peer stopped reading its answer",
                )));
            }
            Poll::Pending => this.state.remember(cx.waker()),
            _ => {}
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Closing::Open = this.closing {
            // hyper flushed the answer before this; shutting the write side sends the FIN.
            std::task::ready!(Pin::new(&mut this.inner).poll_shutdown(cx))?;
            // Closing with unread input would reset the connection, and a client that writes
            // its whole body before reading would see the reset, not the answer.
            this.closing = if this.state.linger.load(Ordering::SeqCst) {
                Closing::Lingering {
                    deadline: Box::pin(tokio::time::sleep(LINGER_TIME)),
                    left: this.linger_bytes,
                }
            } else {
                Closing::Closed
            };
        }
        std::task::ready!(this.poll_linger(cx));
        this.closing = Closing::Closed;
        Poll::Ready(Ok(()))
    }
}

/// The connection's state, as request extension (via `into_make_service_with_connect_info`).
#[derive(Clone, Debug)]
pub struct ConnInfo(Arc<ConnState>);

impl axum::extract::connect_info::Connected<IncomingStream<'_, LimitedListener>> for ConnInfo {
    fn connect_info(stream: IncomingStream<'_, LimitedListener>) -> ConnInfo {
        ConnInfo(stream.io().state.clone())
    }
}

/// Marks the connection busy for the request's lifetime, so the idle timer spares it.
struct BusyGuard(Arc<ConnState>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What the outer middleware needs.
#[derive(Clone, Debug)]
pub struct Guard {
    /// `--api-token`: required as `Authorization: Bearer <token>` on every path but `/health`.
    pub api_token: Option<Arc<str>>,
    /// Deadline for reading a request body.
    pub body_timeout: Duration,
    /// Largest accepted body (the `/predict` limit).
    pub max_body_bytes: usize,
}

/// Busy marking, token check and body deadline, in that order, before the router.
pub async fn guard(State(g): State<Guard>, req: Request, next: Next) -> Response {
    let conn = req
        .extensions()
        .get::<ConnectInfo<ConnInfo>>()
        .map(|ConnectInfo(ConnInfo(state))| state.clone());
    let _busy = conn.clone().map(|state| {
        state.busy.fetch_add(1, Ordering::SeqCst);
        state.linger.store(false, Ordering::SeqCst);
        BusyGuard(state)
    });
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let refuse = |e: ApiError| {
        // These never reach the router's request log, so they are logged here.
        tracing::info!(
            "{method} {path} {} refused: {}",
            e.status.as_u16(),
            e.message
        );
        // The body may be partly unread: should hyper close, it closes lingering.
        if let Some(state) = &conn {
            state.linger.store(true, Ordering::SeqCst);
        }
        let status = e.status;
        let mut r = e.into_response();
        let extra = match status {
            StatusCode::UNAUTHORIZED => Some((header::WWW_AUTHENTICATE, "Bearer")),
            StatusCode::REQUEST_TIMEOUT | StatusCode::PAYLOAD_TOO_LARGE => {
                Some((header::CONNECTION, "close"))
            }
            _ => None,
        };
        if let Some((k, v)) = extra {
            r.headers_mut()
                .insert(k, header::HeaderValue::from_static(v));
        }
        r
    };
    if let Some(token) = &g.api_token {
        if path != "/health" && !bearer_matches(req.headers(), token) {
            return refuse(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "missing or wrong API token: send `Authorization: Bearer <token>` (--api-token)",
            ));
        }
    }
    if req.method() == Method::GET || req.method() == Method::HEAD {
        return next.run(req).await;
    }
    // A declared oversize body is refused before any of it is read.
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > g.max_body_bytes as u64) {
        return refuse(ApiError::too_large(g.max_body_bytes));
    }
    let (parts, body) = req.into_parts();
    // Read the whole body under the deadline, at most the limit + 1 byte (exactly one byte
    // over is left to the route's own 413 check).
    let limit = g.max_body_bytes.saturating_add(1);
    match tokio::time::timeout(g.body_timeout, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Ok(Err(e)) if is_length_limit(&e) => refuse(ApiError::too_large(g.max_body_bytes)),
        Ok(Err(e)) => refuse(ApiError::bad_field(
            "body",
            format!("cannot read the request body: {e}"),
        )),
        Err(_) => refuse(ApiError {
            field: Some("body".into()),
            ..ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "body: the request body did not arrive within {:.1} s (--body-timeout-s)",
                    g.body_timeout.as_secs_f64()
                ),
            )
        }),
    }
}

/// `to_bytes` over its limit (http-body-util's `LengthLimitError`, known by its message, so
/// that crate need not be a direct dependency).
fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.to_string().contains("length limit exceeded") {
            return true;
        }
        source = s.source();
    }
    false
}

/// `Authorization: Bearer <token>`, compared in constant time.
fn bearer_matches(headers: &axum::http::HeaderMap, token: &str) -> bool {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .unwrap_or("");
    gr00t_core::auth::token_matches(given.as_bytes(), token.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_rules() {
        let mut h = axum::http::HeaderMap::new();
        assert!(!bearer_matches(&h, "s3cret"));
        h.insert(header::AUTHORIZATION, "Bearer s3cret".parse().unwrap());
        assert!(bearer_matches(&h, "s3cret"));
        assert!(!bearer_matches(&h, "s3cre"));
        h.insert(header::AUTHORIZATION, "Api-Key s3cret".parse().unwrap());
        assert!(!bearer_matches(&h, "s3cret"));
    }

    #[test]
    fn bad_seconds_do_not_panic() {
        assert_eq!(seconds(1.5), Duration::from_millis(1500));
        assert_eq!(seconds(-1.0), Duration::from_millis(1));
        assert_eq!(seconds(f64::NAN), Duration::from_millis(1));
    }
}
