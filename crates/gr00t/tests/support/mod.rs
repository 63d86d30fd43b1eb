//! What the integration tests share (not part of the binary): each test binary declares
//! `mod support;` and uses the parts it needs, so the rest is dead code there.
#![allow(dead_code)]

pub mod cli;
pub mod openpi_ws;
pub mod test_server;
pub mod zmq_req;
pub mod zmtp_client;
