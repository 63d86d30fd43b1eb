//! Bytes ⇄ arrays and GR00T observations, shared by the ZMQ and websocket doors: `.npy`
//! (`npy`), the array model (`ndarray`), msgpack-numpy's three array forms (`msgpack_numpy`)
//! and Isaac-GR00T's observation/action dicts against a served layout (`observation`).

pub mod msgpack_numpy;
pub mod ndarray;
pub mod npy;
pub mod observation;
