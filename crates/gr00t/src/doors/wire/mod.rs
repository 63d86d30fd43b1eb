//! Bytes ⇄ arrays and GR00T observations, shared by the ZMQ and websocket doors: `.npy`
//! (`npy`), the array model (`ndarray`), a msgpack value read alike owned or borrowed from the
//! message (`msg`), msgpack-numpy's three array forms (`msgpack_numpy`), each embodiment's
//! served layout (`schema`), Isaac-GR00T's observation dicts decoded against it
//! (`observation`), the action reply (`reply`) and the `session_id` both doors read
//! (`session`); one error type for all of them (`error`).

pub mod error;
pub mod msg;
pub mod msgpack_numpy;
pub mod ndarray;
pub mod npy;
pub mod observation;
pub mod reply;
pub mod schema;
pub mod session;

#[cfg(test)]
mod tests;
