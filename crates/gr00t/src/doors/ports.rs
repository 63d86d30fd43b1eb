//! Every door's port, bound before the model loads, so that a port clash fails in a second, not
//! after a full load and warm-up. HTTP listens at once (503 `loading` until the model is ready,
//! so probes and balancers can tell); the other doors listen once the model is ready, so their
//! clients are refused at once rather than left waiting.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use tokio::net::{TcpListener, TcpSocket};

/// How many ports above the requested HTTP port are tried when it is taken.
pub const HTTP_PORT_SPAN: u16 = 99;

/// Connections the kernel holds for each listener before it accepts them (tokio's default).
const BACKLOG: u32 = 1024;

/// The doors' sockets: bound, not yet listening.
#[derive(Debug)]
pub struct BoundPorts {
    /// The HTTP door's.
    pub http: BoundPort,
    /// `--zmq-port`'s, when asked for.
    pub zmq: Option<BoundPort>,
    /// `--ws-port`'s, when asked for.
    pub ws: Option<BoundPort>,
    /// `--lerobot-port`'s, when asked for.
    pub lerobot: Option<BoundPort>,
}

/// One bound socket.
#[derive(Debug)]
pub struct BoundPort(TcpSocket);

impl BoundPort {
    /// The address it is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }

    /// Starts listening (inside the tokio runtime).
    pub fn listen(self) -> io::Result<TcpListener> {
        self.0.listen(BACKLOG)
    }
}

/// Binds the HTTP port (or the next free one up to `HTTP_PORT_SPAN` above it) and the ZMQ and
/// websocket ports asked for (exactly those: their clients are configured with them).
pub fn bind_all(
    host: &str,
    http: u16,
    zmq: Option<u16>,
    ws: Option<u16>,
    lerobot: Option<u16>,
) -> io::Result<BoundPorts> {
    let http = bind_http(host, http)?;
    let zmq = zmq.map(|p| bind_exact(host, p, "ZMQ")).transpose()?;
    let ws = ws.map(|p| bind_exact(host, p, "websockets")).transpose()?;
    let lerobot = lerobot
        .map(|p| bind_exact(host, p, "LeRobot gRPC"))
        .transpose()?;
    Ok(BoundPorts {
        http,
        zmq,
        ws,
        lerobot,
    })
}

fn bind_http(host: &str, port: u16) -> io::Result<BoundPort> {
    let last = port.saturating_add(HTTP_PORT_SPAN);
    for p in port..=last {
        match bind(host, p) {
            Ok(socket) => return Ok(socket),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(named(e, format!("cannot listen on {host}:{p}"))),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("ports {port}-{last} on {host} are all taken"),
    ))
}

fn bind_exact(host: &str, port: u16, what: &str) -> io::Result<BoundPort> {
    bind(host, port).map_err(|e| named(e, format!("cannot listen for {what} on {host}:{port}")))
}

/// Binds the first of `host`'s addresses that binds, as `TcpListener::bind` does.
fn bind(host: &str, port: u16) -> io::Result<BoundPort> {
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, "the host resolves to nothing");
    for addr in (host, port).to_socket_addrs()? {
        let socket = match addr {
            SocketAddr::V4(_) => TcpSocket::new_v4()?,
            SocketAddr::V6(_) => TcpSocket::new_v6()?,
        };
        // A restarted server rebinds while its old connections sit in TIME_WAIT.
        socket.set_reuseaddr(true)?;
        match socket.bind(addr) {
            Ok(()) => return Ok(BoundPort(socket)),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn named(e: io::Error, what: String) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_door_port_is_an_error_naming_it_and_http_moves_up() {
        let taken = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = taken.local_addr().unwrap().port();
        let e = bind_all("127.0.0.1", 0, Some(port), None, None).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(
            e.to_string()
                .starts_with(&format!("cannot listen for ZMQ on 127.0.0.1:{port}: ")),
            "{e}"
        );
        let e = bind_all("127.0.0.1", 0, None, Some(port), None).unwrap_err();
        assert!(e.to_string().contains("websockets"), "{e}");
        // HTTP takes the next free port instead.
        let bound = bind_all("127.0.0.1", port, None, None, None).unwrap();
        assert!(bound.http.local_addr().unwrap().port() > port);
    }

    #[test]
    fn a_bound_port_refuses_connections_until_it_listens() {
        let bound = bind_all("127.0.0.1", 0, None, None, None).unwrap();
        let addr = bound.http.local_addr().unwrap();
        let refused = std::net::TcpStream::connect(addr).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _listener = runtime.block_on(async { bound.http.listen() }).unwrap();
        std::net::TcpStream::connect(addr).unwrap();
    }
}
