//! A REQ client written from RFC 23/ZMTP over a blocking socket, independent of the server's
//! codec: for the tests that time answers, send hostile frames, or hold many connections
//! (`tests/attacks.rs`). Through `tests/support/mod.rs`; not part of the binary.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A ZMTP 3.1 NULL greeting, libzmq-style (a ZMTP 1.0 length in the padding).
pub fn greeting() -> Vec<u8> {
    let mut g = vec![0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 1];
    g.extend_from_slice(b"NULL");
    g.resize(64, 0);
    g
}

/// A frame with its header.
pub fn frame(data: &[u8], more: bool, command: bool) -> Vec<u8> {
    let flags = u8::from(more) | if command { 4 } else { 0 };
    let mut out = if data.len() > 255 {
        let mut h = vec![flags | 2];
        h.extend_from_slice(&(data.len() as u64).to_be_bytes());
        h
    } else {
        vec![flags, data.len() as u8]
    };
    out.extend_from_slice(data);
    out
}

/// A REQ socket's READY.
pub fn ready() -> Vec<u8> {
    let mut body = vec![5];
    body.extend_from_slice(b"READY");
    body.push(11);
    body.extend_from_slice(b"Socket-Type");
    body.extend_from_slice(&3u32.to_be_bytes());
    body.extend_from_slice(b"REQ");
    frame(&body, false, true)
}

/// A long-frame header declaring `len` bytes.
pub fn long_header(len: u64) -> Vec<u8> {
    let mut h = vec![0x02];
    h.extend_from_slice(&len.to_be_bytes());
    h
}

/// One REQ connection.
pub struct Req {
    /// The socket.
    pub tcp: TcpStream,
}

impl Req {
    /// Connects and completes the handshake, every read bounded by `timeout`.
    pub fn connect(addr: &str, timeout: Duration) -> std::io::Result<Req> {
        let mut tcp = TcpStream::connect(addr)?;
        tcp.set_read_timeout(Some(timeout))?;
        tcp.set_write_timeout(Some(timeout))?;
        tcp.write_all(&[greeting(), ready()].concat())?;
        let mut g = [0u8; 64];
        tcp.read_exact(&mut g)?;
        assert_eq!((g[0], g[10]), (0xff, 3), "server greeting {g:?}");
        let mut req = Req { tcp };
        let (command, body) = req.read_frame()?;
        assert!(command && body.starts_with(b"\x05READY"), "{body:?}");
        Ok(req)
    }

    /// Sends one message (delimiter, `body`) and reads the reply's body.
    pub fn call(&mut self, body: &[u8]) -> std::io::Result<Vec<u8>> {
        self.tcp
            .write_all(&[frame(b"", true, false), frame(body, false, false)].concat())?;
        let (_, delimiter) = self.read_frame()?;
        assert!(delimiter.is_empty(), "no delimiter: {delimiter:?}");
        Ok(self.read_frame()?.1)
    }

    /// One frame: whether it is a command, and its body.
    pub fn read_frame(&mut self) -> std::io::Result<(bool, Vec<u8>)> {
        let mut flags = [0u8; 1];
        self.tcp.read_exact(&mut flags)?;
        let len = if flags[0] & 2 != 0 {
            let mut n = [0u8; 8];
            self.tcp.read_exact(&mut n)?;
            u64::from_be_bytes(n) as usize
        } else {
            let mut n = [0u8; 1];
            self.tcp.read_exact(&mut n)?;
            n[0] as usize
        };
        let mut body = vec![0u8; len];
        self.tcp.read_exact(&mut body)?;
        Ok((flags[0] & 4 != 0, body))
    }
}

/// The msgpack of `{"endpoint": "ping"}`.
pub const PING: &[u8] = b"\x81\xa8endpoint\xa4ping";

/// Whether the server closed `tcp` (EOF or reset) before `timeout`, discarding what it sent.
pub fn closed_within(tcp: &mut TcpStream, timeout: Duration) -> bool {
    tcp.set_read_timeout(Some(timeout)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match tcp.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return false,
            Err(_) => return true,
        }
    }
}
