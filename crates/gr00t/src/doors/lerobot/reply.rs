//! The `GetActions` reply as a pickle the stock robot client's `pickle.loads` reads: a
//! `list[TimedAction]` whose `action` is `torch.tensor([floats])`, a float32 tensor on the CPU.
//!
//! Written at protocol 4 (Python ≥ 3.8 reads it). Each `TimedAction` is `NEWOBJ` of the
//! dataclass with an empty tuple and `BUILD` with its field dict, as Python pickles a dataclass;
//! each action is `REDUCE(torch.tensor, ([…],))` rather than torch's own tensor pickle, which
//! nests a legacy `torch.save` archive per storage (`clients.md` §1.5).

use super::objects::{TimedAction, HELPERS};

/// The pickle of `actions` as a Python `list[TimedAction]`.
pub fn actions_to_pickle(actions: &[TimedAction]) -> Vec<u8> {
    let values: usize = actions.iter().map(|a| a.action.len()).sum();
    let mut w = Writer(Vec::with_capacity(64 + 80 * actions.len() + 9 * values));
    w.0.extend_from_slice(&[0x80, 4]); // PROTO 4
    w.0.push(b']'); // EMPTY_LIST
    if !actions.is_empty() {
        w.0.push(b'('); // MARK
        for (i, a) in actions.iter().enumerate() {
            // The class and torch.tensor are memoised at the first action (memo 0 and 1).
            if i == 0 {
                w.global(HELPERS, "TimedAction");
                w.memoize();
            } else {
                w.get(0);
            }
            w.0.extend_from_slice(b")\x81"); // EMPTY_TUPLE NEWOBJ
            w.0.extend_from_slice(b"}("); // EMPTY_DICT MARK
            w.str("timestamp");
            w.float(a.timestamp);
            w.str("timestep");
            w.int(a.timestep);
            w.str("action");
            if i == 0 {
                w.global("torch", "tensor");
                w.memoize();
            } else {
                w.get(1);
            }
            w.0.push(b']'); // EMPTY_LIST
            if !a.action.is_empty() {
                w.0.push(b'(');
                for &x in &a.action {
                    w.float(f64::from(x));
                }
                w.0.push(b'e'); // APPENDS
            }
            w.0.push(0x85); // TUPLE1
            w.0.push(b'R'); // REDUCE
            w.0.push(b'u'); // SETITEMS
            w.0.push(b'b'); // BUILD
        }
        w.0.push(b'e'); // APPENDS
    }
    w.0.push(b'.'); // STOP
    w.0
}

/// Opcode writers.
struct Writer(Vec<u8>);

impl Writer {
    fn str(&mut self, s: &str) {
        if s.len() < 256 {
            self.0.push(0x8c); // SHORT_BINUNICODE
            self.0.push(s.len() as u8);
        } else {
            self.0.push(b'X'); // BINUNICODE
            self.0.extend_from_slice(&(s.len() as u32).to_le_bytes());
        }
        self.0.extend_from_slice(s.as_bytes());
    }

    fn global(&mut self, module: &str, name: &str) {
        self.str(module);
        self.str(name);
        self.0.push(0x93); // STACK_GLOBAL
    }

    fn memoize(&mut self) {
        self.0.push(0x94); // MEMOIZE
    }

    fn get(&mut self, i: u8) {
        self.0.extend_from_slice(&[b'h', i]); // BINGET
    }

    fn float(&mut self, x: f64) {
        self.0.push(b'G'); // BINFLOAT, big-endian
        self.0.extend_from_slice(&x.to_be_bytes());
    }

    fn int(&mut self, i: i64) {
        match i32::try_from(i) {
            Ok(v) => {
                self.0.push(b'J'); // BININT
                self.0.extend_from_slice(&v.to_le_bytes());
            }
            Err(_) => {
                self.0.extend_from_slice(&[0x8a, 8]); // LONG1, 8 bytes two's complement
                self.0.extend_from_slice(&i.to_le_bytes());
            }
        }
    }
}
