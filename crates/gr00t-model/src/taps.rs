//! Optional recording of intermediate tensors under the fixtures' tap names, for parity tests
//! and debugging. Disabled recorders cost one branch per tap.

use candle_core::Tensor;
use std::cell::RefCell;
use std::collections::BTreeMap;

/// Collects named intermediate tensors when enabled.
#[derive(Debug, Default)]
pub struct Recorder {
    enabled: bool,
    tensors: RefCell<BTreeMap<String, Tensor>>,
}

impl Recorder {
    /// A recorder that keeps nothing.
    pub fn disabled() -> Recorder {
        Recorder::default()
    }

    /// A recorder that keeps every tap.
    pub fn enabled() -> Recorder {
        Recorder {
            enabled: true,
            tensors: RefCell::new(BTreeMap::new()),
        }
    }

    /// Whether taps are kept.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Keeps `t` under `name` (fixture naming, e.g. `vision.block_out.3`).
    pub fn record(&self, name: impl Into<String>, t: &Tensor) {
        if self.enabled {
            self.tensors.borrow_mut().insert(name.into(), t.clone());
        }
    }

    /// A recorded tap.
    pub fn get(&self, name: &str) -> Option<Tensor> {
        self.tensors.borrow().get(name).cloned()
    }

    /// Names of all recorded taps.
    pub fn names(&self) -> Vec<String> {
        self.tensors.borrow().keys().cloned().collect()
    }
}
