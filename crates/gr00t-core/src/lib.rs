//! The core of gr00t-rs that every door (HTTP, ZMQ, websocket) shares: one [`Engine`] (the
//! model and the processors of the served embodiments), one inference [`queue`] whose single
//! thread owns it, the typed [`Request`] each door builds from its wire format, and one
//! [`InferError`]. No HTTP, ZMQ or JSON wire code lives here; dependencies run
//! doors → core → embodiment → model.

pub mod auth;
pub mod device;
pub mod dtype_check;
pub mod engine;
pub mod error;
pub mod info;
pub mod layouts;
pub mod precision;
pub mod queue;
pub mod request;
pub mod response;
pub mod rtc;
pub mod session;

pub use device::DeviceError;
pub use engine::{Engine, EngineOptions};
pub use error::{InferError, LoadError};
pub use info::EngineInfo;
pub use layouts::Layouts;
pub use queue::Queue;
pub use request::Request;
pub use response::{PredictResponse, TimingMs};
pub use session::SessionIdError;
