//! The HTTP door's guard in front of the routes (docs/HARDENING.md): busy marking for the
//! connection's timers (`doors::connections`), the browser rules (`doors::browser`), the
//! optional bearer token (`--api-token`), a deadline for reading a request body, and a
//! lingering close after a refusal that left the body unread.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::errors::ApiError;
use crate::doors::browser::{self, BrowserRules, Verdict};
use crate::doors::connections::{conn_of, BodyPace, ConnState, Late};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// What the outer middleware needs.
#[derive(Clone, Debug)]
pub struct Guard {
    /// `--api-token`: required as `Authorization: Bearer <token>` on every path but `/health`.
    pub api_token: Option<Arc<str>>,
    /// How a request body must arrive once its head has.
    pub body: BodyPace,
    /// Largest accepted body (the `/predict` limit).
    pub max_body_bytes: usize,
    /// Origin, Host and content-type rules against web pages in the operator's browser.
    pub browser: Arc<BrowserRules>,
}

/// The browser rules, the token check, the body deadline and busy marking, in that order,
/// before the router.
pub async fn guard(State(g): State<Guard>, req: Request, next: Next) -> Response {
    let conn = conn_of(&req);
    if let Some(state) = &conn {
        state.mark_greeted();
        state.set_linger(false);
    }
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
            state.set_linger(true);
        }
        let status = e.status;
        let mut r = e.into_response();
        let extra = match status {
            StatusCode::UNAUTHORIZED => Some((header::WWW_AUTHENTICATE, "Bearer")),
            StatusCode::MISDIRECTED_REQUEST => Some((header::CONNECTION, "close")),
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
    // HTTP/2 (which the server links for the LeRobot gRPC door) is not this door's: its limits
    // are per HTTP/1.1 connection, one request at a time.
    if req.version() == axum::http::Version::HTTP_2 {
        return refuse(ApiError::new(
            StatusCode::HTTP_VERSION_NOT_SUPPORTED,
            "HTTP/2 is not served on this port: use HTTP/1.1 (gRPC is --lerobot-port's)",
        ));
    }
    // A preflight from an allowed origin is answered here; every other cross-site or
    // rebinding request is refused before the token is even looked at.
    let cors = match g
        .browser
        .check(req.method(), req.headers(), g.api_token.is_some())
    {
        Err(e) => return refuse(e.into()),
        Ok(Verdict::Preflight(r)) => return r,
        Ok(Verdict::Pass(cors)) => cors,
    };
    let mut r = guarded(&g, conn.as_ref(), req, next, &refuse).await;
    if let Some(origin) = cors {
        browser::allow_origin(&mut r, origin);
    }
    r
}

/// The token check and the body deadline; the connection is busy (spared by the idle timer and
/// eviction) only once its request is whole: a body that never comes does not pin a slot.
async fn guarded(
    g: &Guard,
    conn: Option<&Arc<ConnState>>,
    req: Request,
    next: Next,
    refuse: &impl Fn(ApiError) -> Response,
) -> Response {
    let busy = || conn.map(|state| state.busy());
    let path = req.uri().path().to_string();
    let authenticated = g
        .api_token
        .as_ref()
        .is_none_or(|token| bearer_matches(req.headers(), token));
    if !authenticated && path != "/health" {
        return refuse(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing or wrong API token: send `Authorization: Bearer <token>` (--api-token)",
        ));
    }
    // An answered request (with the token, where one is set) makes its connection one the cap
    // evicts last.
    let served = |r: Response| {
        if authenticated && r.status().is_success() {
            if let Some(state) = conn {
                state.mark_served();
            }
        }
        r
    };
    if req.method() == Method::GET || req.method() == Method::HEAD {
        let _busy = busy();
        return served(next.run(req).await);
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
    // Read the whole body at its pace, at most the limit + 1 byte (exactly one byte over is
    // left to the route's own 413 check).
    let limit = g.max_body_bytes.saturating_add(1);
    match read_body(body, limit, g.body).await {
        Ok(Ok(bytes)) => {
            let _busy = busy();
            served(
                next.run(Request::from_parts(parts, Body::from(bytes)))
                    .await,
            )
        }
        Ok(Err(e)) if is_length_limit(&e) => refuse(ApiError::too_large(g.max_body_bytes)),
        Ok(Err(e)) => refuse(ApiError::bad_field(
            "body",
            format!("cannot read the request body: {e}"),
        )),
        Err(late) => refuse(ApiError {
            field: Some("body".into()),
            ..ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!("body: the request body {}", g.body.explain(late)),
            )
        }),
    }
}

/// The whole body, at most `limit` bytes (more: the length-limit error, as `to_bytes`), or
/// which of `pace`'s rules it broke. Memory grows with the bytes that arrive, never with the
/// length a head declares.
async fn read_body(
    mut body: Body,
    limit: usize,
    pace: BodyPace,
) -> Result<Result<axum::body::Bytes, axum::Error>, Late> {
    use axum::body::HttpBody;
    let began = tokio::time::Instant::now();
    let mut bytes = Vec::new();
    loop {
        let (due, late) = pace.due(began, bytes.len());
        let next = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx));
        let frame = match tokio::time::timeout_at(due, next).await {
            Err(_) => return Err(late),
            Ok(None) => return Ok(Ok(bytes.into())),
            Ok(Some(Err(e))) => return Ok(Err(e)),
            Ok(Some(Ok(frame))) => frame,
        };
        // Trailers carry nothing a route reads.
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if bytes.len() + data.len() > limit {
            return Ok(Err(axum::Error::new("length limit exceeded")));
        }
        bytes.extend_from_slice(&data);
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

/// `Authorization: Bearer <token>` (the scheme in any case, RFC 9110 §11.1), compared in
/// constant time.
fn bearer_matches(headers: &axum::http::HeaderMap, token: &str) -> bool {
    let given = crate::doors::authorization(headers, "Bearer").unwrap_or("");
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
        for scheme in ["bearer", "BEARER", "bEaReR"] {
            let v = format!("{scheme} s3cret");
            h.insert(header::AUTHORIZATION, v.parse().unwrap());
            assert!(bearer_matches(&h, "s3cret"), "{v}");
        }
        for v in [
            "Api-Key s3cret",
            "Bearers3cret",
            "Bearer",
            "s3cret",
            "Bearer s3cret x",
        ] {
            h.insert(header::AUTHORIZATION, v.parse().unwrap());
            assert!(!bearer_matches(&h, "s3cret"), "{v}");
        }
    }
}
