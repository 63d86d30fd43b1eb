//! Python pickles read without running them: a pickle VM (protocols 2–5) that builds a value
//! tree and never imports or calls anything. `GLOBAL`/`STACK_GLOBAL` resolve only names on the
//! caller's whitelist, to a [`Global`] *name*; `REDUCE`, `NEWOBJ(_EX)` and `BUILD` record the
//! call and its state ([`PyValue::Call`]) for a typed layer above to interpret. Opcodes that
//! load code or outside objects (`INST`, `OBJ`, `PERSID`, `BINPERSID`, the `EXT` registry,
//! out-of-band buffers) are refused, as is any opcode not listed in [`read`]. Every size is
//! capped ([`Limits`]) before anything is allocated for it. LeRobot's async inference sends
//! every payload as a pickle (`shared/docs/model/clients.md` §1.2–1.5).

use std::collections::HashMap;

/// A global a pickle names: `module.name`, never imported.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Global {
    /// The module (`numpy.core.multiarray`).
    pub module: String,
    /// The name in it (`_reconstruct`).
    pub name: String,
}

impl std::fmt::Display for Global {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.module, self.name)
    }
}

/// A value a pickle builds.
#[derive(Debug, Clone, PartialEq)]
pub enum PyValue {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An int that fits 64 bits.
    Int(i64),
    /// An int that does not: its little-endian two's-complement bytes (`LONG1`/`LONG4`).
    BigInt(Vec<u8>),
    /// A float.
    Float(f64),
    /// A str.
    Str(String),
    /// A bytes or bytearray.
    Bytes(Vec<u8>),
    /// A tuple.
    Tuple(Vec<PyValue>),
    /// A list.
    List(Vec<PyValue>),
    /// A dict, its pairs in order.
    Dict(Vec<(PyValue, PyValue)>),
    /// A whitelisted global, as a name.
    Global(Global),
    /// `callable(*args, **kwargs)` as `REDUCE` / `NEWOBJ(_EX)` record it, with the state
    /// `BUILD` gave the result, if any. Nothing is called.
    Call {
        /// The whitelisted callable (for `NEWOBJ`, the class).
        callable: Global,
        /// Its positional arguments.
        args: Vec<PyValue>,
        /// Its keyword arguments (`NEWOBJ_EX`).
        kwargs: Vec<(PyValue, PyValue)>,
        /// The state of a `BUILD` on the result.
        state: Option<Box<PyValue>>,
    },
}

/// What one pickle may cost; each is checked before anything is allocated for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes in the whole pickle.
    pub max_bytes: usize,
    /// Nesting depth of the value built.
    pub max_depth: usize,
    /// Memo entries.
    pub max_memo: usize,
    /// Values the result holds once shared references are expanded (a memo bomb refers to one
    /// list from many places, doubling at each level).
    pub max_values: usize,
    /// Values on the VM's stack at once.
    pub max_stack: usize,
}

impl Default for Limits {
    /// Room for a LeRobot observation of a few camera frames (the gRPC door's 4 MB message).
    fn default() -> Limits {
        Limits {
            max_bytes: 4 << 20,
            max_depth: 32,
            max_memo: 4096,
            max_values: 1 << 16,
            max_stack: 4096,
        }
    }
}

/// Why a pickle was refused. Nothing in it was executed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PickleError {
    /// The pickle ends inside an opcode or before `STOP`.
    #[error("pickle truncated at byte {at}")]
    Truncated {
        /// Where the bytes ran out.
        at: usize,
    },
    /// An opcode this reader does not run (it could load code or outside objects).
    #[error("pickle opcode {name} (0x{op:02x}) at byte {at} is refused")]
    Opcode {
        /// The opcode byte.
        op: u8,
        /// Its name, as `pickletools` gives it.
        name: &'static str,
        /// Where it is.
        at: usize,
    },
    /// A global that is not on the whitelist.
    #[error("pickle global {0} is refused: only known LeRobot, numpy and torch names are read")]
    Global(Global),
    /// A cap of [`Limits`] would be exceeded.
    #[error("pickle refused: {what} exceeds {limit}")]
    Limit {
        /// What grew too large.
        what: &'static str,
        /// The cap.
        limit: usize,
    },
    /// The opcodes do not build a value (stack underflow, a call on a non-global, a bad key).
    #[error("malformed pickle at byte {at}: {what}")]
    Malformed {
        /// Where.
        at: usize,
        /// What is wrong.
        what: String,
    },
}

/// One node of the VM's arena: containers refer to their items by index, so a memoised list
/// that is appended to later is the same list everywhere it is referred to.
#[derive(Debug, Clone)]
enum Node {
    Leaf(PyValue),
    Tuple(Vec<usize>),
    List(Vec<usize>),
    Dict(Vec<(usize, usize)>),
    Global(Global),
    Call {
        callable: Global,
        args: usize,
        kwargs: Option<usize>,
        state: Option<usize>,
    },
}

/// A stack entry: a node, or the `MARK` a later opcode collects back to.
#[derive(Debug, Clone, Copy)]
enum Item {
    Node(usize),
    Mark,
}

/// What expanding the result may still build: values, and bytes of str / bytes / big ints (a
/// large bytes object referred to from many places would otherwise be copied each time).
struct Budget {
    values: usize,
    bytes: usize,
}

/// The VM's state while reading one pickle.
struct Vm<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// The opcode being run, for errors.
    at: usize,
    nodes: Vec<Node>,
    stack: Vec<Item>,
    memo: HashMap<u32, usize>,
    allowed: &'a [(&'a str, &'a str)],
    limits: Limits,
}

/// Reads one pickle into a value, resolving only the `allowed` globals (`(module, name)`).
///
/// Opcodes run: `PROTO`, `FRAME`, `STOP`, `MARK`, `POP`, `POP_MARK`, `DUP`, `NONE`,
/// `NEWTRUE`, `NEWFALSE`, `INT`/`BININT`/`BININT1`/`BININT2`, `LONG1`/`LONG4`, `BINFLOAT`,
/// `SHORT_BINUNICODE`/`BINUNICODE`/`BINUNICODE8`, `SHORT_BINBYTES`/`BINBYTES`/`BINBYTES8`,
/// `BYTEARRAY8`, `SHORT_BINSTRING`/`BINSTRING` (read as bytes), `EMPTY_TUPLE`, `TUPLE`,
/// `TUPLE1`–`TUPLE3`, `EMPTY_LIST`, `LIST`, `APPEND`, `APPENDS`, `EMPTY_DICT`, `DICT`,
/// `SETITEM`, `SETITEMS`, `GLOBAL`, `STACK_GLOBAL`, `REDUCE`, `NEWOBJ`, `NEWOBJ_EX`, `BUILD`,
/// `PUT`/`BINPUT`/`LONG_BINPUT`, `MEMOIZE`, `GET`/`BINGET`/`LONG_BINGET`. Everything else
/// is refused.
pub fn read(
    bytes: &[u8],
    allowed: &[(&str, &str)],
    limits: &Limits,
) -> Result<PyValue, PickleError> {
    if bytes.len() > limits.max_bytes {
        return Err(PickleError::Limit {
            what: "its size in bytes",
            limit: limits.max_bytes,
        });
    }
    let mut vm = Vm {
        bytes,
        pos: 0,
        at: 0,
        nodes: Vec::new(),
        stack: Vec::new(),
        memo: HashMap::new(),
        allowed,
        limits: *limits,
    };
    let root = vm.run()?;
    let mut budget = Budget {
        values: limits.max_values,
        bytes: limits.max_bytes,
    };
    vm.value(root, 0, &mut budget)
}

impl<'a> Vm<'a> {
    /// Runs the opcodes up to `STOP`; the node left on the stack.
    fn run(&mut self) -> Result<usize, PickleError> {
        loop {
            self.at = self.pos;
            let op = self.byte()?;
            match op {
                0x80 => {
                    // PROTO: any protocol up to 5 reads the same.
                    let v = self.byte()?;
                    if v > 5 {
                        return Err(self.malformed(format!("protocol {v}")));
                    }
                }
                0x95 => {
                    // FRAME: a length hint; the frame's opcodes follow inline.
                    self.take(8)?;
                }
                b'.' => {
                    let root = self.pop_node()?;
                    return Ok(root);
                }
                b'(' => self.push(Item::Mark)?,
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let top = *self.stack.last().ok_or_else(|| self.underflow())?;
                    self.push(top)?;
                }
                b'N' => self.leaf(PyValue::None)?,
                0x88 => self.leaf(PyValue::Bool(true))?,
                0x89 => self.leaf(PyValue::Bool(false))?,
                b'J' => {
                    let b = self.take(4)?;
                    let v = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    self.leaf(PyValue::Int(v.into()))?
                }
                b'K' => {
                    let v = self.byte()?;
                    self.leaf(PyValue::Int(v.into()))?
                }
                b'M' => {
                    let b = self.take(2)?;
                    self.leaf(PyValue::Int(u16::from_le_bytes([b[0], b[1]]).into()))?
                }
                b'I' => {
                    let line = self.line()?;
                    let v = match line {
                        b"00" => PyValue::Bool(false),
                        b"01" => PyValue::Bool(true),
                        _ => PyValue::Int(
                            std::str::from_utf8(line)
                                .ok()
                                .and_then(|s| s.parse().ok())
                                .ok_or_else(|| self.malformed("INT is not a number".into()))?,
                        ),
                    };
                    self.leaf(v)?
                }
                0x8a => {
                    let n = self.byte()? as usize;
                    let b = self.take(n)?;
                    self.leaf(long(b))?
                }
                0x8b => {
                    let n = self.len32()?;
                    let b = self.take(n)?;
                    self.leaf(long(b))?
                }
                b'G' => {
                    let b = self.take(8)?;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    self.leaf(PyValue::Float(f64::from_be_bytes(a)))?
                }
                0x8c => {
                    let n = self.byte()? as usize;
                    self.text(n)?
                }
                b'X' => {
                    let n = self.len32()?;
                    self.text(n)?
                }
                0x8d => {
                    let n = self.len64()?;
                    self.text(n)?
                }
                b'C' | b'U' => {
                    let n = self.byte()? as usize;
                    self.blob(n)?
                }
                b'B' | b'T' => {
                    let n = self.len32()?;
                    self.blob(n)?
                }
                0x8e | 0x96 => {
                    let n = self.len64()?;
                    self.blob(n)?
                }
                b')' => self.node(Node::Tuple(Vec::new()))?,
                b't' => {
                    let items = self.pop_mark()?;
                    self.node(Node::Tuple(items))?
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop_node()?);
                    }
                    items.reverse();
                    self.node(Node::Tuple(items))?
                }
                b']' => self.node(Node::List(Vec::new()))?,
                b'l' => {
                    let items = self.pop_mark()?;
                    self.node(Node::List(items))?
                }
                b'a' => {
                    let item = self.pop_node()?;
                    self.extend_list(vec![item])?
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    self.extend_list(items)?
                }
                b'}' => self.node(Node::Dict(Vec::new()))?,
                b'd' => {
                    let items = self.pop_mark()?;
                    let pairs = self.pairs(items)?;
                    self.node(Node::Dict(pairs))?
                }
                b's' => {
                    let value = self.pop_node()?;
                    let key = self.pop_node()?;
                    self.extend_dict(vec![(key, value)])?
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    let pairs = self.pairs(items)?;
                    self.extend_dict(pairs)?
                }
                b'c' => {
                    let module = self.line_text()?;
                    let name = self.line_text()?;
                    self.global(module, name)?
                }
                0x93 => {
                    let name = self.pop_node()?;
                    let module = self.pop_node()?;
                    let (module, name) = (self.str_of(module)?, self.str_of(name)?);
                    self.global(module, name)?
                }
                b'R' => {
                    let args = self.pop_node()?;
                    let callable = self.pop_node()?;
                    self.call(callable, args, None)?
                }
                0x81 => {
                    let args = self.pop_node()?;
                    let class = self.pop_node()?;
                    self.call(class, args, None)?
                }
                0x92 => {
                    let kwargs = self.pop_node()?;
                    let args = self.pop_node()?;
                    let class = self.pop_node()?;
                    self.call(class, args, Some(kwargs))?
                }
                b'b' => {
                    let state = self.pop_node()?;
                    let target = self.top_node()?;
                    match &mut self.nodes[target] {
                        Node::Call { state: s, .. } if s.is_none() => *s = Some(state),
                        _ => {
                            return Err(self.malformed(
                                "BUILD on something that is not a fresh recorded call".into(),
                            ))
                        }
                    }
                }
                b'p' | b'q' | b'r' => {
                    let key = self.memo_key(op)?;
                    self.put(key)?
                }
                0x94 => {
                    let key = u32::try_from(self.memo.len()).unwrap_or(u32::MAX);
                    self.put(key)?
                }
                b'g' | b'h' | b'j' => {
                    let key = self.memo_key(op)?;
                    self.get(key)?
                }
                other => {
                    return Err(PickleError::Opcode {
                        op: other,
                        name: opcode_name(other),
                        at: self.at,
                    })
                }
            }
        }
    }

    fn byte(&mut self) -> Result<u8, PickleError> {
        Ok(self.take(1)?[0])
    }

    /// The next `n` bytes, checked against what is left before anything is made of them.
    fn take(&mut self, n: usize) -> Result<&'a [u8], PickleError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or(PickleError::Truncated {
                at: self.bytes.len(),
            })?;
        let bytes: &'a [u8] = self.bytes;
        let out = &bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn len32(&mut self) -> Result<usize, PickleError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    fn len64(&mut self) -> Result<usize, PickleError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        // A length past the input is caught by `take`, whatever its size.
        Ok(usize::try_from(u64::from_le_bytes(a)).unwrap_or(usize::MAX))
    }

    /// A protocol-0 argument: the bytes up to the next `\n`.
    fn line(&mut self) -> Result<&'a [u8], PickleError> {
        let bytes: &'a [u8] = self.bytes;
        let rest = &bytes[self.pos..];
        let n = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or(PickleError::Truncated {
                at: self.bytes.len(),
            })?;
        self.pos += n + 1;
        Ok(&rest[..n])
    }

    fn line_text(&mut self) -> Result<String, PickleError> {
        let line = self.line()?;
        String::from_utf8(line.to_vec()).map_err(|_| self.malformed("a name is not UTF-8".into()))
    }

    fn malformed(&self, what: String) -> PickleError {
        PickleError::Malformed { at: self.at, what }
    }

    fn underflow(&self) -> PickleError {
        self.malformed("the stack is empty".into())
    }

    fn push(&mut self, item: Item) -> Result<(), PickleError> {
        if self.stack.len() >= self.limits.max_stack {
            return Err(PickleError::Limit {
                what: "the stack",
                limit: self.limits.max_stack,
            });
        }
        self.stack.push(item);
        Ok(())
    }

    /// Adds a node to the arena and pushes it.
    fn node(&mut self, node: Node) -> Result<(), PickleError> {
        // Every node is a value of the result at least once.
        if self.nodes.len() >= self.limits.max_values {
            return Err(PickleError::Limit {
                what: "the values built",
                limit: self.limits.max_values,
            });
        }
        self.nodes.push(node);
        self.push(Item::Node(self.nodes.len() - 1))
    }

    fn leaf(&mut self, v: PyValue) -> Result<(), PickleError> {
        self.node(Node::Leaf(v))
    }

    fn text(&mut self, n: usize) -> Result<(), PickleError> {
        let b = self.take(n)?;
        let s = String::from_utf8(b.to_vec())
            .map_err(|_| self.malformed("a str is not UTF-8".into()))?;
        self.leaf(PyValue::Str(s))
    }

    fn blob(&mut self, n: usize) -> Result<(), PickleError> {
        let b = self.take(n)?.to_vec();
        self.leaf(PyValue::Bytes(b))
    }

    fn pop(&mut self) -> Result<Item, PickleError> {
        self.stack.pop().ok_or_else(|| self.underflow())
    }

    fn pop_node(&mut self) -> Result<usize, PickleError> {
        match self.pop()? {
            Item::Node(n) => Ok(n),
            Item::Mark => Err(self.malformed("a MARK where a value was expected".into())),
        }
    }

    fn top_node(&self) -> Result<usize, PickleError> {
        match self.stack.last() {
            Some(Item::Node(n)) => Ok(*n),
            Some(Item::Mark) => Err(self.malformed("a MARK where a value was expected".into())),
            None => Err(self.underflow()),
        }
    }

    /// The nodes above the topmost `MARK`, in order; the mark is removed.
    fn pop_mark(&mut self) -> Result<Vec<usize>, PickleError> {
        let mark = self
            .stack
            .iter()
            .rposition(|i| matches!(i, Item::Mark))
            .ok_or_else(|| self.malformed("no MARK".into()))?;
        let items = self.stack.split_off(mark + 1);
        self.stack.pop();
        Ok(items
            .into_iter()
            .filter_map(|i| match i {
                Item::Node(n) => Some(n),
                Item::Mark => None,
            })
            .collect())
    }

    fn pairs(&self, items: Vec<usize>) -> Result<Vec<(usize, usize)>, PickleError> {
        if !items.len().is_multiple_of(2) {
            return Err(self.malformed("a dict's items are not in pairs".into()));
        }
        Ok(items.chunks_exact(2).map(|p| (p[0], p[1])).collect())
    }

    fn extend_list(&mut self, items: Vec<usize>) -> Result<(), PickleError> {
        let target = self.top_node()?;
        match &mut self.nodes[target] {
            Node::List(list) => {
                list.extend(items);
                Ok(())
            }
            _ => Err(self.malformed("APPEND to something that is not a list".into())),
        }
    }

    fn extend_dict(&mut self, pairs: Vec<(usize, usize)>) -> Result<(), PickleError> {
        let target = self.top_node()?;
        match &mut self.nodes[target] {
            Node::Dict(dict) => {
                dict.extend(pairs);
                Ok(())
            }
            _ => Err(self.malformed("SETITEM on something that is not a dict".into())),
        }
    }

    fn str_of(&self, node: usize) -> Result<String, PickleError> {
        match &self.nodes[node] {
            Node::Leaf(PyValue::Str(s)) => Ok(s.clone()),
            _ => Err(self.malformed("STACK_GLOBAL needs two strs".into())),
        }
    }

    /// A global, if it is on the whitelist; nothing is imported.
    fn global(&mut self, module: String, name: String) -> Result<(), PickleError> {
        let g = Global { module, name };
        if !self
            .allowed
            .iter()
            .any(|(m, n)| *m == g.module && *n == g.name)
        {
            return Err(PickleError::Global(g));
        }
        self.node(Node::Global(g))
    }

    /// Records `callable(*args, **kwargs)`; the callable must be a whitelisted global.
    fn call(
        &mut self,
        callable: usize,
        args: usize,
        kwargs: Option<usize>,
    ) -> Result<(), PickleError> {
        let Node::Global(g) = &self.nodes[callable] else {
            return Err(self.malformed("a call on something that is not a global".into()));
        };
        if !matches!(self.nodes[args], Node::Tuple(_)) {
            return Err(self.malformed("a call's arguments are not a tuple".into()));
        }
        if let Some(k) = kwargs {
            if !matches!(self.nodes[k], Node::Dict(_)) {
                return Err(self.malformed("a call's keyword arguments are not a dict".into()));
            }
        }
        let callable = g.clone();
        self.node(Node::Call {
            callable,
            args,
            kwargs,
            state: None,
        })
    }

    /// The memo key of a `PUT`/`GET`-family opcode: a text line (`PUT`, `GET`), one byte
    /// (`BINPUT`, `BINGET`) or four (`LONG_BINPUT`, `LONG_BINGET`).
    fn memo_key(&mut self, op: u8) -> Result<u32, PickleError> {
        match op {
            b'p' | b'g' => {
                let line = self.line()?;
                std::str::from_utf8(line)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| self.malformed("a memo key is not a number".into()))
            }
            b'q' | b'h' => Ok(self.byte()?.into()),
            _ => Ok(self.len32()? as u32),
        }
    }

    fn put(&mut self, key: u32) -> Result<(), PickleError> {
        let top = self.top_node()?;
        if self.memo.len() >= self.limits.max_memo && !self.memo.contains_key(&key) {
            return Err(PickleError::Limit {
                what: "the memo",
                limit: self.limits.max_memo,
            });
        }
        self.memo.insert(key, top);
        Ok(())
    }

    fn get(&mut self, key: u32) -> Result<(), PickleError> {
        let node = *self
            .memo
            .get(&key)
            .ok_or_else(|| self.malformed(format!("memo {key} was never put")))?;
        self.push(Item::Node(node))
    }

    /// The value of a node, shared nodes expanded (each expansion counted against `budget`:
    /// values, and the bytes of each str and bytes copied), no deeper than the cap (a list that
    /// holds itself is refused here).
    fn value(
        &self,
        node: usize,
        depth: usize,
        budget: &mut Budget,
    ) -> Result<PyValue, PickleError> {
        if depth > self.limits.max_depth {
            return Err(PickleError::Limit {
                what: "the nesting depth",
                limit: self.limits.max_depth,
            });
        }
        budget.values = budget.values.checked_sub(1).ok_or(PickleError::Limit {
            what: "the values built",
            limit: self.limits.max_values,
        })?;
        let all = |ids: &[usize], budget: &mut Budget| -> Result<Vec<PyValue>, PickleError> {
            ids.iter()
                .map(|&i| self.value(i, depth + 1, budget))
                .collect()
        };
        Ok(match &self.nodes[node] {
            Node::Leaf(v) => {
                let len = match v {
                    PyValue::Str(s) => s.len(),
                    PyValue::Bytes(b) | PyValue::BigInt(b) => b.len(),
                    _ => 0,
                };
                budget.bytes = budget.bytes.checked_sub(len).ok_or(PickleError::Limit {
                    what: "the bytes built",
                    limit: self.limits.max_bytes,
                })?;
                v.clone()
            }
            Node::Tuple(ids) => PyValue::Tuple(all(ids, budget)?),
            Node::List(ids) => PyValue::List(all(ids, budget)?),
            Node::Dict(pairs) => PyValue::Dict(
                pairs
                    .iter()
                    .map(|&(k, v)| {
                        Ok((
                            self.value(k, depth + 1, budget)?,
                            self.value(v, depth + 1, budget)?,
                        ))
                    })
                    .collect::<Result<_, PickleError>>()?,
            ),
            Node::Global(g) => PyValue::Global(g.clone()),
            Node::Call {
                callable,
                args,
                kwargs,
                state,
            } => {
                let PyValue::Tuple(args) = self.value(*args, depth + 1, budget)? else {
                    return Err(self.malformed("a call's arguments are not a tuple".into()));
                };
                let kwargs = match kwargs {
                    Some(k) => match self.value(*k, depth + 1, budget)? {
                        PyValue::Dict(pairs) => pairs,
                        _ => Vec::new(),
                    },
                    None => Vec::new(),
                };
                let state = state
                    .map(|s| self.value(s, depth + 1, budget).map(Box::new))
                    .transpose()?;
                PyValue::Call {
                    callable: callable.clone(),
                    args,
                    kwargs,
                    state,
                }
            }
        })
    }
}

/// A `LONG1`/`LONG4` int: little-endian two's complement.
fn long(b: &[u8]) -> PyValue {
    if b.len() <= 8 {
        let fill = if b.last().is_some_and(|&x| x & 0x80 != 0) {
            0xff
        } else {
            0
        };
        let mut a = [fill; 8];
        a[..b.len()].copy_from_slice(b);
        PyValue::Int(i64::from_le_bytes(a))
    } else {
        PyValue::BigInt(b.to_vec())
    }
}

/// `pickletools`' name of an opcode this reader refuses.
fn opcode_name(op: u8) -> &'static str {
    match op {
        b'i' => "INST",
        b'o' => "OBJ",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        0x8f => "EMPTY_SET",
        0x90 => "ADDITEMS",
        0x91 => "FROZENSET",
        b'S' => "STRING",
        b'V' => "UNICODE",
        b'F' => "FLOAT",
        b'L' => "LONG",
        _ => "unknown",
    }
}
