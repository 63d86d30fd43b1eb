//! Bytes ⇄ arrays and GR00T observations, shared by the ZMQ and websocket doors: `.npy`
//! (`npy`), the array model (`ndarray`), msgpack-numpy's three array forms (`msgpack_numpy`)
//! Isaac-GR00T's observation/action dicts against a served layout (`observation`) and the
//! `session_id` both doors read (`session`).

pub mod msgpack_numpy;
pub mod ndarray;
pub mod npy;
pub mod observation;
pub mod session;

#[cfg(test)]
mod tests;
