//! A blocking ZMQ REQ client on the `zeromq` crate (an implementation independent of the
//! server's): one request, one reply, like Isaac-GR00T's `PolicyClient.call_endpoint`. For
//! `tests/{zmq,rtc,traces}.rs`, through `tests/support/mod.rs`; not part of the binary.
#![allow(dead_code)]

use gr00t::doors::wire::msgpack_numpy::{pack, str_map, unpack};
use rmpv::Value;
use std::time::Duration;
use zeromq::{ReqSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

/// How long a reply may take.
pub const TIMEOUT: Duration = Duration::from_secs(120);

/// A connected REQ socket with its own single-threaded runtime.
pub struct ZmqClient {
    rt: tokio::runtime::Runtime,
    socket: ReqSocket,
}

impl ZmqClient {
    /// Connects to `host:port`.
    pub fn connect(addr: &str) -> ZmqClient {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut socket = ReqSocket::new();
        rt.block_on(socket.connect(&format!("tcp://{addr}")))
            .expect("connect");
        ZmqClient { rt, socket }
    }

    /// Sends raw bytes, returns the raw reply (one frame, within [`TIMEOUT`]).
    pub fn exchange(&mut self, bytes: Vec<u8>) -> Vec<u8> {
        let socket = &mut self.socket;
        self.rt.block_on(async {
            let fut = async {
                socket.send(ZmqMessage::from(bytes)).await.expect("send");
                socket.recv().await.expect("recv")
            };
            let reply = tokio::time::timeout(TIMEOUT, fut)
                .await
                .expect("reply in time");
            assert_eq!(reply.len(), 1, "one frame per reply");
            reply.get(0).unwrap().to_vec()
        })
    }

    /// `{"endpoint": endpoint, "data": data, "api_token": token}` (the last two when given),
    /// packed; the reply unpacked.
    pub fn call(&mut self, endpoint: &str, data: Option<Value>, token: Option<&str>) -> Value {
        let mut req = vec![("endpoint", Value::from(endpoint))];
        if let Some(d) = data {
            req.push(("data", d));
        }
        if let Some(t) = token {
            req.push(("api_token", Value::from(t)));
        }
        unpack(&self.exchange(pack(&str_map(req)))).expect("msgpack reply")
    }
}
