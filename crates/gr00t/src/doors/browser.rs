//! Rules against web pages in the operator's browser, for the doors a browser can reach (HTTP
//! and the websocket upgrade): a page on another site must not drive the robot through a
//! server on loopback, nor read it through DNS rebinding.
//!
//! - `Origin`: a request a page sends carries its origin; one that is neither the server's own
//!   (the `Host` the request names) nor a `--cors-origin` is refused (403). Allowed origins get
//!   CORS headers and their preflights are answered.
//! - `Host`: without `--api-token`, the host a request names must be an IP address, `localhost`
//!   (or `*.localhost`), the `--host` address or an `--allowed-host` (421 otherwise): a
//!   rebinding page names its own domain. With a token a page cannot authenticate anyway.
//! - `Content-Type`: a POST must be JSON (415 otherwise): a page can send a cross-site POST
//!   without asking first only as a form or `text/plain`.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use crate::doors::excerpt::excerpt;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use std::net::IpAddr;

/// Flags of `gr00t serve` for browsers (flattened into its command line).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct BrowserOptions {
    /// A web origin (`scheme://host[:port]`) whose pages may call the server (CORS); repeat
    /// for several, `*` for any. Other origins are refused (403).
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub cors_origins: Vec<String>,
    /// A host name clients use to reach the server, accepted in the `Host` header besides IP
    /// addresses, localhost and --host; repeat for several, `*` for any. Checked only without
    /// --api-token (against DNS rebinding).
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
}

/// Why a browser rule refused a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// 403, 415 or 421.
    pub status: StatusCode,
    /// The header at fault.
    pub field: &'static str,
    /// What is wrong and what to do.
    pub message: String,
}

/// What to do with a request that passed.
#[derive(Debug)]
pub enum Verdict {
    /// Serve it; with an allowed cross-site origin, answer it with CORS headers for it.
    Pass(Option<HeaderValue>),
    /// A CORS preflight of an allowed origin, answered here.
    Preflight(Response),
}

/// The rules of one server.
#[derive(Debug, Clone)]
pub struct BrowserRules {
    cors: Vec<String>,
    hosts: Vec<String>,
    bound: String,
}

impl BrowserRules {
    /// Rules for a server listening on `bound` (`--host`).
    pub fn new(opts: &BrowserOptions, bound: &str) -> BrowserRules {
        let norm = |s: &String| s.trim().trim_end_matches('/').to_ascii_lowercase();
        BrowserRules {
            cors: opts.cors_origins.iter().map(norm).collect(),
            hosts: opts.allowed_hosts.iter().map(norm).collect(),
            bound: unbracket(&bound.to_ascii_lowercase()).to_string(),
        }
    }

    /// Checks one request's Host, Origin and content type; `token`: `--api-token` is set.
    pub fn check(
        &self,
        method: &Method,
        headers: &HeaderMap,
        token: bool,
    ) -> Result<Verdict, Refusal> {
        let host = text(headers, header::HOST);
        if !token {
            if let Some(h) = host {
                self.check_host(h)?;
            }
        }
        let mut cors = None;
        if let Some(origin) = headers.get(header::ORIGIN) {
            let o = origin.to_str().unwrap_or("").trim().to_ascii_lowercase();
            let own = host.is_some_and(|h| {
                let h = h.trim().to_ascii_lowercase();
                o == format!("http://{h}") || o == format!("https://{h}")
            });
            if !own {
                if !self.cors.iter().any(|c| c == "*" || *c == o) {
                    return Err(Refusal {
                        status: StatusCode::FORBIDDEN,
                        field: "origin",
                        message: format!(
                            "origin: {o:?} is not this server's origin: pages of other sites may \
                             not call it (start the server with --cors-origin {o} to allow them)"
                        ),
                    });
                }
                cors = Some(origin.clone());
            }
        }
        if let (Some(origin), true) = (&cors, method == Method::OPTIONS) {
            if headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD) {
                return Ok(Verdict::Preflight(preflight(origin.clone())));
            }
        }
        if method == Method::POST {
            check_content_type(headers)?;
        }
        Ok(Verdict::Pass(cors))
    }

    /// A `Host` naming an IP address, localhost, `--host` or an `--allowed-host`.
    fn check_host(&self, host: &str) -> Result<(), Refusal> {
        let name = host_name(host);
        let ok = name.parse::<IpAddr>().is_ok()
            || name == "localhost"
            || name.ends_with(".localhost")
            || name == self.bound
            || self.hosts.iter().any(|h| h == "*" || *h == name);
        if ok {
            return Ok(());
        }
        Err(Refusal {
            status: StatusCode::MISDIRECTED_REQUEST,
            field: "host",
            message: format!(
                "host: {quoted:?} is not a name of this server (a page of another site may have \
                 pointed its name here: DNS rebinding); start the server with --allowed-host \
                 {quoted} if clients reach it by that name, or use --api-token",
                quoted = excerpt(&name),
            ),
        })
    }
}

/// A header's text, if it is text.
fn text(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `[::1]` → `::1`.
fn unbracket(h: &str) -> &str {
    h.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(h)
}

/// The host part of a `Host` header (lower case, without the port or IPv6 brackets, without a
/// final dot).
fn host_name(host: &str) -> String {
    let h = host.trim().to_ascii_lowercase();
    let name = if let Some(rest) = h.strip_prefix('[') {
        rest.split(']').next().unwrap_or("").to_string()
    } else if h.matches(':').count() == 1 {
        h.split(':').next().unwrap_or("").to_string()
    } else {
        h
    };
    name.trim_end_matches('.').to_string()
}

/// JSON, or a refusal naming `content-type`.
fn check_content_type(headers: &HeaderMap) -> Result<(), Refusal> {
    let given = text(headers, header::CONTENT_TYPE);
    let mime = given
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json")) {
        return Ok(());
    }
    let got = match given {
        Some(t) => format!("got {t:?}"),
        None => "got none".to_string(),
    };
    Err(Refusal {
        status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
        field: "content-type",
        message: format!("content-type: expected application/json, {got}"),
    })
}

/// The answer to an allowed origin's preflight.
fn preflight(origin: HeaderValue) -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    allow_origin(&mut r, origin);
    let h = r.headers_mut();
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("authorization, content-type, x-session-id, x-request-id"),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    r
}

/// Lets an allowed origin's page read the answer.
pub fn allow_origin(r: &mut Response, origin: HeaderValue) {
    let h = r.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    h.insert(header::VARY, HeaderValue::from_static("origin"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn rules(cors: &[&str], hosts: &[&str]) -> BrowserRules {
        let opts = BrowserOptions {
            cors_origins: cors.iter().map(|s| s.to_string()).collect(),
            allowed_hosts: hosts.iter().map(|s| s.to_string()).collect(),
        };
        BrowserRules::new(&opts, "127.0.0.1")
    }

    fn status(r: Result<Verdict, Refusal>) -> u16 {
        match r {
            Ok(Verdict::Pass(_)) => 200,
            Ok(Verdict::Preflight(r)) => r.status().as_u16(),
            Err(e) => e.status.as_u16(),
        }
    }

    const JSON: (&str, &str) = ("content-type", "application/json");

    #[test]
    fn hosts_must_be_addresses_localhost_or_allowed_without_a_token() {
        let r = rules(&[], &["robot-pc.local"]);
        for ok in [
            "127.0.0.1:20000",
            "[::1]:20000",
            "::1",
            "LOCALHOST",
            "a.localhost:1",
            "192.168.1.5",
            "Robot-PC.local.:20000",
        ] {
            assert_eq!(
                status(r.check(&Method::GET, &headers(&[("host", ok)]), false)),
                200,
                "{ok}"
            );
        }
        for bad in [
            "evil.example:20000",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
        ] {
            let e = r.check(&Method::GET, &headers(&[("host", bad)]), false);
            assert_eq!(status(e), 421, "{bad}");
            // A token makes the host irrelevant: a page cannot send it.
            assert_eq!(
                status(r.check(&Method::GET, &headers(&[("host", bad)]), true)),
                200
            );
        }
        let any = rules(&[], &["*"]);
        assert_eq!(
            status(any.check(&Method::GET, &headers(&[("host", "x.example")]), false)),
            200
        );
    }

    #[test]
    fn only_the_own_or_an_allowed_origin_passes_and_gets_cors() {
        let r = rules(&["https://lab.example/"], &[]);
        let host = ("host", "127.0.0.1:20000");
        let own = headers(&[host, ("origin", "http://127.0.0.1:20000"), JSON]);
        assert!(matches!(
            r.check(&Method::POST, &own, false),
            Ok(Verdict::Pass(None))
        ));
        let evil = headers(&[host, ("origin", "http://evil.example"), JSON]);
        let e = r.check(&Method::POST, &evil, true).unwrap_err();
        assert_eq!((e.status.as_u16(), e.field), (403, "origin"));
        assert!(
            e.message.contains("--cors-origin http://evil.example"),
            "{}",
            e.message
        );
        assert_eq!(
            status(r.check(
                &Method::POST,
                &headers(&[host, ("origin", "null"), JSON]),
                false
            )),
            403
        );
        let lab = headers(&[host, ("origin", "https://lab.example"), JSON]);
        match r.check(&Method::POST, &lab, false) {
            Ok(Verdict::Pass(Some(o))) => assert_eq!(o, "https://lab.example"),
            other => panic!("{other:?}"),
        }
        let pre = headers(&[
            host,
            ("origin", "https://lab.example"),
            ("access-control-request-method", "POST"),
        ]);
        match r.check(&Method::OPTIONS, &pre, false) {
            Ok(Verdict::Preflight(resp)) => {
                assert_eq!(resp.status(), StatusCode::NO_CONTENT);
                let h = resp.headers();
                assert_eq!(
                    h[header::ACCESS_CONTROL_ALLOW_ORIGIN],
                    "https://lab.example"
                );
                assert!(h[header::ACCESS_CONTROL_ALLOW_HEADERS]
                    .to_str()
                    .unwrap()
                    .contains("content-type"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn posts_must_be_json() {
        let r = rules(&[], &[]);
        let post = |ct: Option<&str>| {
            let mut h = vec![("host", "127.0.0.1")];
            if let Some(ct) = ct {
                h.push(("content-type", ct));
            }
            r.check(&Method::POST, &headers(&h), false)
        };
        for ok in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/vnd.api+json",
        ] {
            assert_eq!(status(post(Some(ok))), 200, "{ok}");
        }
        for bad in [
            None,
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
        ] {
            let e = post(bad).unwrap_err();
            assert_eq!(
                (e.status.as_u16(), e.field),
                (415, "content-type"),
                "{bad:?}"
            );
        }
        // GETs carry no body to type.
        assert_eq!(
            status(r.check(&Method::GET, &headers(&[("host", "127.0.0.1")]), false)),
            200
        );
    }
}
