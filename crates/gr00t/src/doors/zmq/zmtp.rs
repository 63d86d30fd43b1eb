//! ZMTP 3.x (rfc.zeromq.org 23/ZMTP and 37/ZMTP), as the REP end of a NULL-mechanism
//! connection speaks it: the greeting, the READY handshake, PING/PONG heartbeats and message
//! frames. A decoder without I/O: bytes in, events out. Every length a frame header declares
//! is checked against the [`Limits`] as soon as the header is read, before a byte of the frame
//! is kept (libzmq's `ZMQ_MAXMSGSIZE`), and a frame's buffer grows only with the bytes that
//! actually arrive, so a header that lies costs nothing.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use std::fmt;

/// Bytes of a ZMTP 3 greeting.
pub const GREETING_LEN: usize = 64;
/// The mechanism this server speaks (no CURVE or PLAIN: the API token is in the message).
const NULL: &[u8] = b"NULL";
/// Socket types whose peers a REP socket talks to (23/ZMTP, "Socket type compatibility").
const PEERS: [&str; 2] = ["REQ", "DEALER"];
/// Bytes a frame's buffer reserves up front at most; the rest grows as it arrives.
const FIRST_RESERVE: usize = 64 * 1024;

/// What one connection may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of one message, all its frames together (`--max-body-mb`).
    pub max_message: usize,
    /// Frames of one message (a REQ sends two: the empty delimiter and the body).
    pub max_frames: usize,
    /// Bytes of one command's body (READY's properties, a PING's context).
    pub max_command: usize,
}

impl Limits {
    /// Limits for messages of at most `max_message` bytes.
    pub fn new(max_message: usize) -> Limits {
        Limits {
            max_message,
            max_frames: 16,
            max_command: 4096,
        }
    }
}

/// Why a connection is refused; every one closes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The first bytes are not a ZMTP signature (another protocol, or ZMTP 1.0).
    NotZmtp,
    /// A ZMTP version before 3.0 (libzmq before 4.0).
    Version(u8),
    /// A security mechanism other than NULL.
    Mechanism(String),
    /// A frame header with reserved flag bits set, or a command flagged as multipart.
    Flags(u8),
    /// A command longer than [`Limits::max_command`].
    CommandTooLarge(u64),
    /// A message whose frames declare more than [`Limits::max_message`] bytes.
    MessageTooLarge {
        /// Bytes declared so far, this frame's included.
        declared: u64,
        /// The limit.
        limit: usize,
    },
    /// More frames in one message than [`Limits::max_frames`].
    TooManyFrames(usize),
    /// A command that does not parse.
    BadCommand(&'static str),
    /// A command or message where the handshake does not allow it.
    Unexpected(String),
    /// A peer socket type a REP socket does not talk to.
    SocketType(String),
    /// The peer sent ERROR (it is closing).
    Peer(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotZmtp => write!(f, "not a ZMTP greeting"),
            Error::Version(v) => write!(f, "ZMTP {v}.x is not served (3.0 or later)"),
            Error::Mechanism(m) => write!(f, "security mechanism {m:?} is not served (NULL)"),
            Error::Flags(b) => write!(f, "bad frame flags {b:#04x}"),
            Error::CommandTooLarge(n) => write!(f, "a command of {n} bytes"),
            Error::MessageTooLarge { declared, limit } => write!(
                f,
                "a message of at least {declared} bytes, over the limit of {limit} (--max-body-mb)"
            ),
            Error::TooManyFrames(n) => write!(f, "a message of more than {n} frames"),
            Error::BadCommand(why) => write!(f, "malformed command: {why}"),
            Error::Unexpected(what) => write!(f, "unexpected {what}"),
            Error::SocketType(t) => write!(f, "socket type {t:?} cannot talk to REP"),
            Error::Peer(reason) => write!(f, "the peer sent ERROR {reason:?}"),
        }
    }
}

impl std::error::Error for Error {}

/// What the decoder found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The peer's greeting, with its ZMTP minor version (the server answers with READY).
    Greeting {
        /// 0 for ZMTP 3.0, 1 for 3.1.
        minor: u8,
    },
    /// The peer's READY: the handshake is done.
    Ready {
        /// Its `Socket-Type`.
        socket_type: String,
    },
    /// A PING: answer [`pong`] with this context.
    Ping(Vec<u8>),
    /// A whole message, its frames in order.
    Message(Vec<Vec<u8>>),
}

/// Where the connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Greeting,
    Handshake,
    Traffic,
}

/// A frame whose header was read and whose body is arriving.
#[derive(Debug)]
struct Frame {
    command: bool,
    more: bool,
    len: usize,
    data: Vec<u8>,
}

/// One connection's incoming bytes.
#[derive(Debug)]
pub struct Decoder {
    limits: Limits,
    stage: Stage,
    /// Bytes of the greeting or of a frame header not complete yet.
    head: Vec<u8>,
    frame: Option<Frame>,
    /// The frames of the message in progress.
    parts: Vec<Vec<u8>>,
    /// Their declared bytes.
    declared: u64,
}

impl Decoder {
    /// A decoder expecting the peer's greeting.
    pub fn new(limits: Limits) -> Decoder {
        Decoder {
            limits,
            stage: Stage::Greeting,
            head: Vec::with_capacity(GREETING_LEN),
            frame: None,
            parts: Vec::new(),
            declared: 0,
        }
    }

    /// Whether part of a message (or a frame of any kind) has arrived but not all of it.
    pub fn in_message(&self) -> bool {
        self.stage == Stage::Traffic
            && (!self.head.is_empty() || self.frame.is_some() || !self.parts.is_empty())
    }

    /// Decodes `input`, appending what it completes to `out`; after an error the connection
    /// must be closed (the decoder's state is then meaningless).
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<Event>) -> Result<(), Error> {
        while !input.is_empty() {
            if self.stage == Stage::Greeting {
                let take = (GREETING_LEN - self.head.len()).min(input.len());
                self.head.extend_from_slice(&input[..take]);
                input = &input[take..];
                check_signature(&self.head)?;
                if self.head.len() == GREETING_LEN {
                    let minor = check_greeting(&self.head)?;
                    self.head.clear();
                    self.stage = Stage::Handshake;
                    out.push(Event::Greeting { minor });
                }
                continue;
            }
            if let Some(frame) = self.frame.as_mut() {
                let take = (frame.len - frame.data.len()).min(input.len());
                frame.data.extend_from_slice(&input[..take]);
                input = &input[take..];
                if frame.data.len() == frame.len {
                    self.finish_frame(out)?;
                }
                continue;
            }
            // A frame header: flags, then a 1- or 8-byte length.
            if self.head.is_empty() {
                let flags = input[0];
                if flags & 0xf8 != 0 || (flags & 0x04 != 0 && flags & 0x01 != 0) {
                    return Err(Error::Flags(flags));
                }
            }
            let need = if self.head[..].first().unwrap_or(&input[0]) & 0x02 != 0 {
                9
            } else {
                2
            };
            let take = (need - self.head.len()).min(input.len());
            self.head.extend_from_slice(&input[..take]);
            input = &input[take..];
            if self.head.len() == need {
                self.start_frame(out)?;
            }
        }
        Ok(())
    }

    /// Checks a complete frame header's length against the limits and starts its frame.
    fn start_frame(&mut self, out: &mut Vec<Event>) -> Result<(), Error> {
        let flags = self.head[0];
        let len = match self.head[1..] {
            [n] => u64::from(n),
            [a, b, c, d, e, f, g, h] => u64::from_be_bytes([a, b, c, d, e, f, g, h]),
            _ => return Err(Error::Flags(flags)),
        };
        self.head.clear();
        let command = flags & 0x04 != 0;
        if command {
            if !self.parts.is_empty() {
                return Err(Error::Unexpected("a command inside a message".into()));
            }
            if len > self.limits.max_command as u64 {
                return Err(Error::CommandTooLarge(len));
            }
        } else {
            if self.stage != Stage::Traffic {
                return Err(Error::Unexpected("a message before READY".into()));
            }
            let declared = self.declared.saturating_add(len);
            if declared > self.limits.max_message as u64 {
                return Err(Error::MessageTooLarge {
                    declared,
                    limit: self.limits.max_message,
                });
            }
            if self.parts.len() >= self.limits.max_frames {
                return Err(Error::TooManyFrames(self.limits.max_frames));
            }
            self.declared = declared;
        }
        // Within the limits, so it fits in memory; still reserve only a first piece.
        let len = len as usize;
        self.frame = Some(Frame {
            command,
            more: flags & 0x01 != 0,
            len,
            data: Vec::with_capacity(len.min(FIRST_RESERVE)),
        });
        if len == 0 {
            self.finish_frame(out)?;
        }
        Ok(())
    }

    fn finish_frame(&mut self, out: &mut Vec<Event>) -> Result<(), Error> {
        let Some(frame) = self.frame.take() else {
            return Ok(());
        };
        if !frame.command {
            self.parts.push(frame.data);
            if !frame.more {
                self.declared = 0;
                out.push(Event::Message(std::mem::take(&mut self.parts)));
            }
            return Ok(());
        }
        let (name, body) = command(&frame.data)?;
        match (self.stage, name) {
            (Stage::Handshake, b"READY") => {
                let socket_type = property(body, "Socket-Type")?
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default();
                if !PEERS.contains(&socket_type.as_str()) {
                    return Err(Error::SocketType(socket_type));
                }
                self.stage = Stage::Traffic;
                out.push(Event::Ready { socket_type });
            }
            (_, b"ERROR") => {
                let reason = body.get(1..).unwrap_or_default();
                return Err(Error::Peer(String::from_utf8_lossy(reason).into_owned()));
            }
            (Stage::Handshake, other) => {
                return Err(Error::Unexpected(format!(
                    "command {:?} before READY",
                    String::from_utf8_lossy(other)
                )))
            }
            (_, b"READY") => return Err(Error::Unexpected("a second READY".into())),
            // TTL (2 bytes), then up to 16 bytes of context to send back.
            (_, b"PING") => {
                let context = body.get(2..).ok_or(Error::BadCommand("PING without TTL"))?;
                out.push(Event::Ping(context[..context.len().min(16)].to_vec()));
            }
            // PONG, SUBSCRIBE, …: nothing a REP socket acts on.
            _ => {}
        }
        Ok(())
    }
}

/// Refuses at the first byte that is not a ZMTP 3 signature: `0xFF`, 8 bytes of padding,
/// `0x7F`-ish, then the major version.
fn check_signature(head: &[u8]) -> Result<(), Error> {
    if head.first().is_some_and(|&b| b != 0xff) || head.get(9).is_some_and(|&b| b & 0x01 == 0) {
        return Err(Error::NotZmtp);
    }
    match head.get(10) {
        Some(&major) if major < 3 => Err(Error::Version(major)),
        _ => Ok(()),
    }
}

/// The whole greeting's mechanism; its minor version.
fn check_greeting(g: &[u8]) -> Result<u8, Error> {
    let mechanism = &g[12..32];
    let name_len = mechanism.iter().position(|&b| b == 0).unwrap_or(20);
    let (name, rest) = mechanism.split_at(name_len);
    if name != NULL || rest.iter().any(|&b| b != 0) {
        return Err(Error::Mechanism(String::from_utf8_lossy(name).into_owned()));
    }
    Ok(g[11])
}

/// A command's name and body.
fn command(data: &[u8]) -> Result<(&[u8], &[u8]), Error> {
    let (&n, rest) = data
        .split_first()
        .ok_or(Error::BadCommand("empty command"))?;
    let n = usize::from(n);
    if n == 0 || rest.len() < n {
        return Err(Error::BadCommand("bad name length"));
    }
    Ok(rest.split_at(n))
}

/// The value of property `name` (case-insensitive) in a READY body.
fn property<'a>(mut body: &'a [u8], name: &str) -> Result<Option<&'a [u8]>, Error> {
    let mut found = None;
    while !body.is_empty() {
        let n = usize::from(body[0]);
        let key = body
            .get(1..1 + n)
            .ok_or(Error::BadCommand("property name"))?;
        let size = body
            .get(1 + n..5 + n)
            .ok_or(Error::BadCommand("property size"))?;
        let size = u32::from_be_bytes([size[0], size[1], size[2], size[3]]) as usize;
        let value = body
            .get(5 + n..5 + n + size)
            .ok_or(Error::BadCommand("property value"))?;
        if key.eq_ignore_ascii_case(name.as_bytes()) {
            found = Some(value);
        }
        body = &body[5 + n + size..];
    }
    Ok(found)
}

/// This server's greeting: ZMTP 3.1, NULL, not as-server.
pub fn greeting() -> [u8; GREETING_LEN] {
    let mut g = [0u8; GREETING_LEN];
    g[0] = 0xff;
    g[9] = 0x7f;
    g[10] = 3;
    g[11] = 1;
    g[12..12 + NULL.len()].copy_from_slice(NULL);
    g
}

/// A command frame: name and body.
fn command_frame(name: &[u8], body: &[u8]) -> Vec<u8> {
    let mut data = Vec::with_capacity(1 + name.len() + body.len());
    data.push(name.len() as u8);
    data.extend_from_slice(name);
    data.extend_from_slice(body);
    let mut out = Vec::with_capacity(data.len() + 9);
    push_header(&mut out, 0x04, data.len());
    out.extend_from_slice(&data);
    out
}

fn push_header(out: &mut Vec<u8>, flags: u8, len: usize) {
    if len > 255 {
        out.push(flags | 0x02);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    } else {
        out.push(flags);
        out.push(len as u8);
    }
}

/// This server's READY: `Socket-Type` REP.
pub fn ready() -> Vec<u8> {
    let (key, value) = (b"Socket-Type", b"REP");
    let mut body = vec![key.len() as u8];
    body.extend_from_slice(key);
    body.extend_from_slice(&(value.len() as u32).to_be_bytes());
    body.extend_from_slice(value);
    command_frame(b"READY", &body)
}

/// The PONG that answers a PING's `context`.
pub fn pong(context: &[u8]) -> Vec<u8> {
    command_frame(b"PONG", context)
}

/// A message of these frames, in order.
pub fn message(frames: &[&[u8]]) -> Vec<u8> {
    let total: usize = frames.iter().map(|f| f.len() + 9).sum();
    let mut out = Vec::with_capacity(total);
    for (i, f) in frames.iter().enumerate() {
        let more = if i + 1 < frames.len() { 0x01 } else { 0x00 };
        push_header(&mut out, more, f.len());
        out.extend_from_slice(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer's greeting: libzmq puts a ZMTP 1.0 length in the padding.
    fn peer_greeting(major: u8, mechanism: &[u8]) -> Vec<u8> {
        let mut g = greeting().to_vec();
        g[1..9].copy_from_slice(&1u64.to_be_bytes());
        g[10] = major;
        g[12..32].fill(0);
        g[12..12 + mechanism.len()].copy_from_slice(mechanism);
        g
    }

    fn peer_ready(socket_type: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        for (k, v) in [(&b"Identity"[..], &b""[..]), (b"Socket-Type", socket_type)] {
            body.push(k.len() as u8);
            body.extend_from_slice(k);
            body.extend_from_slice(&(v.len() as u32).to_be_bytes());
            body.extend_from_slice(v);
        }
        command_frame(b"READY", &body)
    }

    fn handshaken() -> Decoder {
        let mut d = Decoder::new(Limits::new(1 << 20));
        let mut out = Vec::new();
        d.feed(&peer_greeting(3, b"NULL"), &mut out).unwrap();
        d.feed(&peer_ready(b"REQ"), &mut out).unwrap();
        assert_eq!(
            out,
            [
                Event::Greeting { minor: 1 },
                Event::Ready {
                    socket_type: "REQ".into()
                }
            ]
        );
        d
    }

    fn feed(d: &mut Decoder, bytes: &[u8]) -> Result<Vec<Event>, Error> {
        let mut out = Vec::new();
        d.feed(bytes, &mut out).map(|()| out)
    }

    #[test]
    fn a_req_handshake_then_messages_byte_by_byte() {
        let mut d = handshaken();
        let body = vec![7u8; 300];
        let wire = message(&[b"", &body]);
        // A long frame (300 > 255) after the empty delimiter.
        assert_eq!(&wire[..3], &[0x01, 0x00, 0x02]);
        let mut out = Vec::new();
        for (i, b) in wire.iter().enumerate() {
            d.feed(std::slice::from_ref(b), &mut out).unwrap();
            assert_eq!(d.in_message(), i + 1 < wire.len(), "byte {i}");
        }
        assert_eq!(out, [Event::Message(vec![vec![], body])]);
        // Two messages in one read.
        let two = [message(&[b"", b"a"]), message(&[b"", b"b"])].concat();
        assert_eq!(feed(&mut d, &two).unwrap().len(), 2);
    }

    /// What pyzmq 27.3 (libzmq 4.3) writes on a REQ socket that sends one msgpack `ping`,
    /// captured by fuzz/seed_corpus.py.
    const PYZMQ_REQ_PING: &str =
        "ff00000000000000017f03014e554c4c0000000000000000000000000000000000000000000000000000\
        0000000000000000000000000000000000000000000004260552454144590b536f636b65742d54797065\
        00000003524551084964656e74697479000000000100000f81a8656e64706f696e74a470696e67";

    #[test]
    fn libzmq_req_bytes_decode_as_its_handshake_and_message() {
        let hex = PYZMQ_REQ_PING;
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let mut d = Decoder::new(Limits::new(1 << 20));
        let ping = b"\x81\xa8endpoint\xa4ping".to_vec();
        assert_eq!(
            feed(&mut d, &bytes).unwrap(),
            [
                Event::Greeting { minor: 1 },
                Event::Ready {
                    socket_type: "REQ".into()
                },
                Event::Message(vec![vec![], ping])
            ]
        );
    }

    #[test]
    fn a_declared_terabyte_is_refused_at_its_header() {
        let mut d = handshaken();
        // The 73-byte attack: greeting, then one long-frame header of 1 TB.
        let mut header = vec![0x02];
        header.extend_from_slice(&(1u64 << 40).to_be_bytes());
        assert_eq!(
            feed(&mut d, &header).unwrap_err(),
            Error::MessageTooLarge {
                declared: 1 << 40,
                limit: 1 << 20
            }
        );
        // Before READY, a message frame is refused whatever its size.
        let mut d = Decoder::new(Limits::new(1 << 20));
        let mut bytes = peer_greeting(3, b"NULL");
        bytes.extend_from_slice(&header);
        assert_eq!(bytes.len(), 73);
        assert!(matches!(feed(&mut d, &bytes), Err(Error::Unexpected(_))));
        // Frames add up: two of 600 KiB are over 1 MiB together.
        let mut d = handshaken();
        let mut two = vec![0x03];
        two.extend_from_slice(&(600u64 << 10).to_be_bytes());
        two.extend(std::iter::repeat_n(0u8, 600 << 10));
        two.push(0x02);
        two.extend_from_slice(&(600u64 << 10).to_be_bytes());
        assert!(matches!(
            feed(&mut d, &two),
            Err(Error::MessageTooLarge { .. })
        ));
    }

    #[test]
    fn a_lying_header_costs_only_what_arrives() {
        let mut d = handshaken();
        let mut header = vec![0x02];
        header.extend_from_slice(&((1u64 << 20) - 1).to_be_bytes());
        feed(&mut d, &header).unwrap();
        feed(&mut d, &[1, 2, 3]).unwrap();
        let frame = d.frame.as_ref().unwrap();
        assert!(
            frame.data.capacity() <= FIRST_RESERVE,
            "{}",
            frame.data.capacity()
        );
        assert!(d.in_message());
    }

    #[test]
    fn refusals() {
        let mut out = Vec::new();
        let fresh = || Decoder::new(Limits::new(1 << 20));
        // HTTP to the ZMQ port: refused at the first byte.
        assert_eq!(
            fresh().feed(b"GET / HTTP/1.1\r\n", &mut out),
            Err(Error::NotZmtp)
        );
        assert_eq!(
            fresh().feed(&peer_greeting(2, b"NULL")[..11], &mut out),
            Err(Error::Version(2))
        );
        assert_eq!(
            fresh().feed(&peer_greeting(3, b"CURVE"), &mut out),
            Err(Error::Mechanism("CURVE".into()))
        );
        let mut d = fresh();
        d.feed(&peer_greeting(3, b"NULL"), &mut out).unwrap();
        assert_eq!(
            d.feed(&peer_ready(b"PUB"), &mut out),
            Err(Error::SocketType("PUB".into()))
        );
        let mut d = handshaken();
        assert_eq!(d.feed(&[0x08, 0], &mut out), Err(Error::Flags(0x08)));
        let mut d = handshaken();
        assert_eq!(d.feed(&[0x05, 0], &mut out), Err(Error::Flags(0x05)));
        let mut d = handshaken();
        assert!(matches!(
            d.feed(&peer_ready(b"REQ"), &mut out),
            Err(Error::Unexpected(_))
        ));
        let mut d = handshaken();
        let mut big = vec![0x06];
        big.extend_from_slice(&5000u64.to_be_bytes());
        assert_eq!(d.feed(&big, &mut out), Err(Error::CommandTooLarge(5000)));
        let mut d = handshaken();
        let many = message(&[&b""[..]; 17]);
        assert_eq!(d.feed(&many, &mut out), Err(Error::TooManyFrames(16)));
        let mut d = handshaken();
        let error = command_frame(b"ERROR", b"\x03bye");
        assert_eq!(d.feed(&error, &mut out), Err(Error::Peer("bye".into())));
        // Malformed READY properties.
        let mut d = fresh();
        d.feed(&peer_greeting(3, b"NULL"), &mut out).unwrap();
        let bad = command_frame(b"READY", &[11, b'S', b'o']);
        assert!(matches!(d.feed(&bad, &mut out), Err(Error::BadCommand(_))));
    }

    #[test]
    fn pings_are_answered_with_their_context() {
        let mut d = handshaken();
        let ping = command_frame(b"PING", b"\x00\x0actx");
        assert_eq!(feed(&mut d, &ping).unwrap(), [Event::Ping(b"ctx".to_vec())]);
        assert_eq!(
            pong(b"ctx"),
            [0x04, 8, 4, b'P', b'O', b'N', b'G', b'c', b't', b'x']
        );
        // Our own frames decode as what we meant.
        assert_eq!(
            &ready()[..8],
            &[0x04, 0x19, 5, b'R', b'E', b'A', b'D', b'Y']
        );
        let g = greeting();
        assert_eq!(
            (g[0], g[9], g[10], &g[12..16]),
            (0xff, 0x7f, 3, &b"NULL"[..])
        );
    }
}
