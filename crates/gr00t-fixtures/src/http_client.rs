//! A minimal blocking HTTP/1.1 client over `std::net::TcpStream` for the server's tests (its
//! unit tests and every integration test that starts a server). One request per connection.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// A parsed response.
#[derive(Debug)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Header names (lower-case) and values.
    pub headers: Vec<(String, String)>,
    /// Body, de-chunked.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// A header's value by (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (panics with the body text if it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: body is not JSON ({e}): {}",
                self.status,
                self.text()
            )
        })
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `GET path`.
pub fn get(addr: &str, path: &str) -> std::io::Result<HttpResponse> {
    request(addr, "GET", path, &[], b"")
}

/// `POST path` with a JSON body.
pub fn post_json(addr: &str, path: &str, body: &[u8]) -> std::io::Result<HttpResponse> {
    request(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body,
    )
}

/// Any request with a full body and a matching `Content-Length`.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<HttpResponse> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if method != "GET" || !body.is_empty() {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    exchange(addr, head.as_bytes(), body)
}

/// Sends `head` then `body` as given (lying headers and chunked bodies included), then reads
/// the response. A server may answer early and close: write errors are then ignored.
pub fn exchange(addr: &str, head: &[u8], body: &[u8]) -> std::io::Result<HttpResponse> {
    let sock = addr
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other(format!("cannot resolve {addr}")))?;
    let mut stream = TcpStream::connect_timeout(&sock, Duration::from_secs(10))?;
    stream.set_read_timeout(Some(Duration::from_secs(300)))?;
    stream.set_write_timeout(Some(Duration::from_secs(60)))?;
    let sent = stream.write_all(head).and_then(|_| stream.write_all(body));
    let mut raw = Vec::new();
    let read = stream.read_to_end(&mut raw);
    match parse(&raw) {
        Some(r) => Ok(r),
        None => Err(read.err().or(sent.err()).unwrap_or_else(|| {
            std::io::Error::other(format!(
                "incomplete response: {:?}",
                String::from_utf8_lossy(&raw)
            ))
        })),
    }
}

/// Parses one whole response (head and body); `None` when it is incomplete.
pub fn parse(raw: &[u8]) -> Option<HttpResponse> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = &raw[end + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(rest)?
    } else {
        match headers.iter().find(|(k, _)| k == "content-length") {
            Some((_, n)) => rest.get(..n.parse::<usize>().ok()?)?.to_vec(),
            None => rest.to_vec(),
        }
    };
    Some(HttpResponse {
        status,
        headers,
        body,
    })
}

fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&rest[..eol]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}
