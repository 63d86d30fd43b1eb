//! numpy arrays inside msgpack values, in the three conventions the peers use:
//!
//! - openpi (`openpi_client/msgpack_numpy.py`): `{b"__ndarray__": True, b"data": <raw C-order
//!   bytes>, b"dtype": "<f4", b"shape": [..]}` with **bin** keys, and numpy scalars as
//!   `{b"__npgeneric__": True, b"data": <item>, b"dtype": "<f8"}`.
//! - Isaac-GR00T before N1.7 (`MsgSerializer`): `{"__ndarray_class__": True, "as_npy": <np.save
//!   bytes>}` with **str** keys.
//! - Isaac-GR00T N1.7 (`MsgSerializer` on lebedov's `msgpack-numpy` 0.4.8): `{b"nd": True,
//!   b"type": "<f4", b"kind": b"", b"shape": [..], b"data": <raw bytes>}` with **bin** keys, and
//!   numpy scalars as `{b"nd": False, b"type": "<f8", b"data": <raw bytes>}`. Object arrays
//!   (`kind b"O"`) carry a pickle: they are refused, never loaded.
//!
//! Plus the small map/number helpers both front doors need to read msgpack.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::error::WireError;
use super::msg::{Msg, View};
use super::ndarray::{ArrayView, DType, NdArray};
use super::npy;
use rmpv::{Value, ValueRef};
use std::borrow::Cow;

/// Encodes a msgpack value the way `msgpack.packb` does (smallest int/str/bin/map headers).
pub fn pack(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = rmpv::encode::write_value(&mut out, v);
    out
}

/// Most values one message may hold (the top value, every array item, every map key and
/// value). case0's N1.7 `get_action` (frames, state and noise as bin-blob arrays) holds 106;
/// with the 40×132 noise as nested lists, 5,422; each further batch item adds 2.
pub const MAX_MSGPACK_ELEMENTS: u64 = 1 << 16;

/// Deepest nesting of arrays and maps one message may have (a valid observation: 6).
pub const MAX_MSGPACK_DEPTH: usize = 32;

/// Decodes one msgpack value that must span the whole buffer, after [`check_size`] has
/// bounded what decoding it can build (an owned copy of [`unpack_ref`]'s).
pub fn unpack(bytes: &[u8]) -> Result<Value, WireError> {
    unpack_ref(bytes).map(|v| v.to_owned())
}

/// [`unpack`] borrowing from `bytes`: its str and bin values point into the message, so a
/// frame's bytes are copied once, by the frame. What the doors read.
pub fn unpack_ref(bytes: &[u8]) -> Result<ValueRef<'_>, WireError> {
    check_size(bytes)?;
    let mut rd = bytes;
    let v = rmpv::decode::read_value_ref(&mut rd).map_err(|e| format!("invalid msgpack: {e}"))?;
    if !rd.is_empty() {
        return Err(format!("invalid msgpack: {} bytes after the first value", rd.len()).into());
    }
    Ok(v)
}

/// Walks the headers of the first msgpack value in `bytes` without allocating and refuses it
/// when it declares more than [`MAX_MSGPACK_ELEMENTS`] values, nests deeper than
/// [`MAX_MSGPACK_DEPTH`], or is cut short. `rmpv` builds a `Value` (~40 bytes) per element, so
/// 16 MiB of `nil`s would otherwise cost ~670 MB before any field is read.
pub fn check_size(bytes: &[u8]) -> Result<(), WireError> {
    // Values still to read in each open array or map.
    let mut pending = [0u64; MAX_MSGPACK_DEPTH];
    let mut depth = 0;
    let mut total: u64 = 1;
    let mut pos = 0usize;
    loop {
        let (header, children, payload) = value_header(bytes, pos)?;
        pos = pos
            .checked_add(header)
            .and_then(|p| p.checked_add(payload))
            .filter(|&end| end <= bytes.len())
            .ok_or("invalid msgpack: the message ends inside a value")?;
        if children > 0 {
            // Counted on the declared length, so a header claiming 2^32 items stops here.
            total = total.saturating_add(children);
            if total > MAX_MSGPACK_ELEMENTS {
                return Err(format!(
                    "msgpack message refused: it declares more than {MAX_MSGPACK_ELEMENTS} \
                     elements (a valid observation holds under 6,000)"
                )
                .into());
            }
            if depth == MAX_MSGPACK_DEPTH {
                return Err(format!(
                    "msgpack message refused: arrays and maps nested deeper than \
                     {MAX_MSGPACK_DEPTH} levels"
                )
                .into());
            }
            pending[depth] = children;
            depth += 1;
            continue;
        }
        // A value is complete: close every container it completes.
        loop {
            if depth == 0 {
                return Ok(());
            }
            pending[depth - 1] -= 1;
            if pending[depth - 1] > 0 {
                break;
            }
            depth -= 1;
        }
    }
}

/// The value starting at `pos`: its header length, how many values it contains (arrays and
/// maps) and its payload length (everything else).
fn value_header(bytes: &[u8], pos: usize) -> Result<(usize, u64, usize), WireError> {
    let truncated = || "invalid msgpack: the message ends inside a value".to_string();
    let marker = *bytes.get(pos).ok_or_else(truncated)?;
    // The big-endian length of `n` bytes after the marker.
    let len = |n: usize| -> Result<u64, WireError> {
        let field = bytes.get(pos + 1..pos + 1 + n).ok_or_else(truncated)?;
        Ok(field.iter().fold(0u64, |acc, &b| acc << 8 | b as u64))
    };
    let size = |n: u64| usize::try_from(n).map_err(|_| truncated());
    Ok(match marker {
        0x00..=0x7f | 0xc0 | 0xc2 | 0xc3 | 0xe0..=0xff => (1, 0, 0),
        0x80..=0x8f => (1, 2 * (marker & 0x0f) as u64, 0),
        0x90..=0x9f => (1, (marker & 0x0f) as u64, 0),
        0xa0..=0xbf => (1, 0, (marker & 0x1f) as usize),
        0xc1 => return Err("invalid msgpack: reserved marker 0xc1".into()),
        // bin / str 8, 16, 32
        0xc4 | 0xd9 => (2, 0, size(len(1)?)?),
        0xc5 | 0xda => (3, 0, size(len(2)?)?),
        0xc6 | 0xdb => (5, 0, size(len(4)?)?),
        // ext 8, 16, 32: length, then the type byte
        0xc7 => (3, 0, size(len(1)?)?),
        0xc8 => (4, 0, size(len(2)?)?),
        0xc9 => (6, 0, size(len(4)?)?),
        0xca | 0xce | 0xd2 => (1, 0, 4),
        0xcb | 0xcf | 0xd3 => (1, 0, 8),
        0xcc | 0xd0 => (1, 0, 1),
        0xcd | 0xd1 => (1, 0, 2),
        // fixext 1, 2, 4, 8, 16: the type byte, then the data
        0xd4 => (2, 0, 1),
        0xd5 => (2, 0, 2),
        0xd6 => (2, 0, 4),
        0xd7 => (2, 0, 8),
        0xd8 => (2, 0, 16),
        0xdc => (3, len(2)?, 0),
        0xdd => (5, len(4)?, 0),
        0xde => (3, 2 * len(2)?, 0),
        0xdf => (5, 2 * len(4)?, 0),
    })
}

/// A str-keyed msgpack map from `(key, value)` pairs, in order.
pub fn str_map<'a>(pairs: impl IntoIterator<Item = (&'a str, Value)>) -> Value {
    Value::Map(
        pairs
            .into_iter()
            .map(|(k, v)| (Value::from(k), v))
            .collect(),
    )
}

/// The value under a key that is either msgpack str or bin with these bytes.
pub fn get<'a, M: Msg>(map: &'a [(M, M)], key: &str) -> Option<&'a M> {
    map.iter()
        .find(|(k, _)| key_bytes(k) == Some(key.as_bytes()))
        .map(|(_, v)| v)
}

/// A map key's bytes (str or bin keys; others have none).
pub fn key_bytes<M: Msg>(k: &M) -> Option<&[u8]> {
    match k.view() {
        View::String(bytes, _) | View::Binary(bytes) => Some(bytes),
        _ => None,
    }
}

/// A `shape` list as sizes; `None` when an entry is not a non-negative integer.
fn dims_of<M: Msg>(dims: &[M]) -> Option<Vec<usize>> {
    dims.iter()
        .map(|d| match d.view() {
            View::Integer(i) => i.as_u64().and_then(|d| usize::try_from(d).ok()),
            _ => None,
        })
        .collect()
}

/// What a value is, in Python's words, for messages.
pub fn type_name<M: Msg>(v: &M) -> &'static str {
    match v.view() {
        View::Nil => "None",
        View::Boolean(_) => "bool",
        View::Integer(_) => "int",
        View::F32(_) | View::F64(_) => "float",
        View::String(..) => "str",
        View::Binary(_) => "bytes",
        View::Array(_) => "list",
        View::Map(m) if is_gr00t_array(m) || is_openpi_array(m) || is_nd_array(m) => {
            "numpy.ndarray"
        }
        View::Map(_) => "dict",
        View::Ext => "msgpack ext",
    }
}

/// openpi's encoding of an array: bin keys, raw bytes.
pub fn openpi_array(a: &NdArray) -> Value {
    Value::Map(vec![
        (Value::Binary(b"__ndarray__".to_vec()), Value::Boolean(true)),
        (
            Value::Binary(b"data".to_vec()),
            Value::Binary(a.data.clone()),
        ),
        (
            Value::Binary(b"dtype".to_vec()),
            Value::from(a.dtype.descr()),
        ),
        (
            Value::Binary(b"shape".to_vec()),
            Value::Array(a.shape.iter().map(|&d| Value::from(d as u64)).collect()),
        ),
    ])
}

fn is_openpi_array<M: Msg>(m: &[(M, M)]) -> bool {
    get(m, "__ndarray__").is_some()
}

fn is_gr00t_array<M: Msg>(m: &[(M, M)]) -> bool {
    get(m, "__ndarray_class__").is_some()
}

/// Decodes an openpi array map; `None` when the value is not one.
pub fn from_openpi_array<M: Msg>(v: &M) -> Option<Result<NdArray, WireError>> {
    owned(openpi_view(v))
}

/// [`from_openpi_array`] in place, its bytes borrowed from `v`.
pub fn openpi_view<M: Msg>(v: &M) -> Option<Result<ArrayView<'_>, WireError>> {
    let m = v.as_map()?;
    if !is_openpi_array(m) {
        return None;
    }
    Some((|| {
        let data = match get(m, "data").map(Msg::view) {
            Some(View::Binary(b)) => Cow::Borrowed(b),
            _ => return Err("ndarray without bytes under 'data'".into()),
        };
        let dtype = match get(m, "dtype").map(Msg::view) {
            Some(View::String(_, s)) => DType::parse(s.unwrap_or(""))?,
            Some(View::Binary(b)) => DType::parse(&String::from_utf8_lossy(b))?,
            _ => return Err("ndarray without a 'dtype' string".into()),
        };
        let shape = match get(m, "shape").map(Msg::view) {
            Some(View::Array(dims)) => {
                dims_of(dims).ok_or("ndarray 'shape' must hold non-negative integers")?
            }
            _ => return Err("ndarray without a 'shape' list".into()),
        };
        ArrayView::new(dtype, shape, data)
    })())
}

/// A view's result with the array's own bytes.
fn owned(view: Option<Result<ArrayView<'_>, WireError>>) -> Option<Result<NdArray, WireError>> {
    view.map(|r| r.map(ArrayView::into_owned))
}

/// GR00T's encoding of an array: str keys, `.npy` bytes.
pub fn gr00t_array(a: &NdArray) -> Value {
    str_map([
        ("__ndarray_class__", Value::Boolean(true)),
        ("as_npy", Value::Binary(npy::encode(a))),
    ])
}

/// Decodes a GR00T array map; `None` when the value is not one.
pub fn from_gr00t_array<M: Msg>(v: &M) -> Option<Result<NdArray, WireError>> {
    owned(gr00t_view(v))
}

/// [`from_gr00t_array`] in place, its bytes borrowed from `v`.
fn gr00t_view<M: Msg>(v: &M) -> Option<Result<ArrayView<'_>, WireError>> {
    let m = v.as_map()?;
    if !is_gr00t_array(m) {
        return None;
    }
    Some(match get(m, "as_npy").map(Msg::view) {
        Some(View::Binary(b)) => npy::view(b),
        _ => Err("ndarray without .npy bytes under 'as_npy'".into()),
    })
}

/// A plain msgpack number, or an openpi / msgpack-numpy numpy scalar, as f64.
pub fn scalar<M: Msg>(v: &M) -> Option<f64> {
    match v.view() {
        View::Integer(i) => i.as_f64(),
        View::F32(x) => Some(x as f64),
        View::F64(x) => Some(x),
        View::Boolean(b) => Some(if b { 1.0 } else { 0.0 }),
        View::Map(m) if get(m, "__npgeneric__").is_some() => get(m, "data").and_then(scalar),
        View::Map(m) if is_nd_array(m) => match nd_view(m).map(ArrayView::into_owned) {
            Ok(a) if a.shape.is_empty() => a.to_f64s().first().copied(),
            _ => None,
        },
        _ => None,
    }
}

/// A non-negative integer: a msgpack int, or a numpy integer scalar in either library's form.
pub fn uint<M: Msg>(v: &M) -> Option<u64> {
    match v.view() {
        View::Integer(i) => i.as_u64(),
        View::Map(m) if get(m, "__npgeneric__").is_some() => get(m, "data").and_then(uint),
        View::Map(m) if is_nd_array(m) => match nd_view(m).map(ArrayView::into_owned) {
            Ok(a) if a.shape.is_empty() => a
                .int_values()
                .and_then(|v| v.first().copied())
                .and_then(|i| u64::try_from(i).ok()),
            _ => None,
        },
        _ => None,
    }
}

/// The array encodings the peers use (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrayForm {
    /// `{"__ndarray_class__": True, "as_npy": ..}`: Isaac-GR00T before N1.7.
    Npy,
    /// `{b"nd": True, b"type", b"kind", b"shape", b"data"}`: Isaac-GR00T N1.7 (msgpack-numpy).
    Nd,
    /// `{b"__ndarray__": True, b"data", b"dtype", b"shape"}`: openpi-client.
    Openpi,
}

/// Which array forms one message used, so that the reply can use the same one.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FormsSeen {
    npy: bool,
    nd: bool,
    openpi: bool,
}

impl FormsSeen {
    /// Records one decoded array's form.
    pub fn note(&mut self, form: ArrayForm) {
        match form {
            ArrayForm::Npy => self.npy = true,
            ArrayForm::Nd => self.nd = true,
            ArrayForm::Openpi => self.openpi = true,
        }
    }

    /// The single form the message used; `.npy` when it used none or several (every
    /// Isaac-GR00T client, old or N1.7, decodes that one).
    pub fn reply_form(&self) -> ArrayForm {
        match (self.npy, self.nd, self.openpi) {
            (false, true, false) => ArrayForm::Nd,
            (false, false, true) => ArrayForm::Openpi,
            _ => ArrayForm::Npy,
        }
    }
}

fn is_nd_array<M: Msg>(m: &[(M, M)]) -> bool {
    get(m, "nd").is_some()
}

/// Decodes an array in any of the three forms, with the form it used; `None` when `v` is not
/// an array map.
pub fn decode_array<M: Msg>(v: &M) -> Option<(ArrayForm, Result<NdArray, WireError>)> {
    array_view(v).map(|(form, r)| (form, r.map(ArrayView::into_owned)))
}

/// [`decode_array`] in place: the array's bytes borrowed from `v`, not copied.
pub fn array_view<M: Msg>(v: &M) -> Option<(ArrayForm, Result<ArrayView<'_>, WireError>)> {
    let m = v.as_map()?;
    if is_gr00t_array(m) {
        return gr00t_view(v).map(|r| (ArrayForm::Npy, r));
    }
    if is_nd_array(m) {
        return Some((ArrayForm::Nd, nd_view(m)));
    }
    openpi_view(v).map(|r| (ArrayForm::Openpi, r))
}

/// Encodes an array in `form`, byte for byte as that library writes it.
pub fn encode_array(a: &NdArray, form: ArrayForm) -> Value {
    match form {
        ArrayForm::Npy => gr00t_array(a),
        ArrayForm::Nd => nd_array(a),
        ArrayForm::Openpi => openpi_array(a),
    }
}

/// msgpack-numpy's `encode` of a C-order array: bin keys in its order, `type` as str, `kind`
/// as empty bin.
pub fn nd_array(a: &NdArray) -> Value {
    let key = |k: &[u8]| Value::Binary(k.to_vec());
    Value::Map(vec![
        (key(b"nd"), Value::Boolean(true)),
        (key(b"type"), Value::from(a.dtype.descr())),
        (key(b"kind"), Value::Binary(vec![])),
        (
            key(b"shape"),
            Value::Array(a.shape.iter().map(|&d| Value::from(d as u64)).collect()),
        ),
        (key(b"data"), Value::Binary(a.data.clone())),
    ])
}

/// Text under a str or bin value.
fn text<M: Msg>(v: &M) -> Option<String> {
    match v.view() {
        View::String(_, s) => s.map(str::to_string),
        View::Binary(b) => String::from_utf8(b.to_vec()).ok(),
        _ => None,
    }
}

/// Decodes a msgpack-numpy map (`nd` true: array, false: scalar, shape `()`) in place, its
/// bytes borrowed. Object and structured payloads are refused before anything else is read.
fn nd_view<M: Msg>(m: &[(M, M)]) -> Result<ArrayView<'_>, WireError> {
    let kind = get(m, "kind").and_then(text).unwrap_or_default();
    match kind.as_str() {
        "O" => {
            return Err(
                "object arrays (msgpack-numpy kind 'O') are refused: their data is a \
                        pickle, which this server never loads; send a numeric dtype"
                    .into(),
            )
        }
        "V" => return Err("structured arrays (msgpack-numpy kind 'V') are not supported".into()),
        _ => {}
    }
    let is_array = match get(m, "nd").map(Msg::view) {
        Some(View::Boolean(b)) => b,
        Some(View::Integer(i)) => i.as_u64() != Some(0),
        _ => return Err("msgpack-numpy 'nd' must be True or False".into()),
    };
    let dtype = match get(m, "type") {
        Some(v) if matches!(v.view(), View::Array(_)) => {
            return Err("structured dtypes are not supported".into())
        }
        Some(v) => DType::parse(&text(v).ok_or("msgpack-numpy 'type' must be a dtype string")?)?,
        None => return Err("msgpack-numpy array without a 'type'".into()),
    };
    let data = match get(m, "data").map(Msg::view) {
        Some(View::Binary(b)) => Cow::Borrowed(b),
        _ => return Err("msgpack-numpy array without bytes under 'data'".into()),
    };
    let shape = if is_array {
        match get(m, "shape").map(Msg::view) {
            Some(View::Array(dims)) => {
                dims_of(dims).ok_or("msgpack-numpy 'shape' must hold non-negative integers")?
            }
            _ => return Err("msgpack-numpy array without a 'shape' list".into()),
        }
    } else {
        vec![]
    };
    ArrayView::new(dtype, shape, data)
}

/// The first map on the way down `v` that is an object or structured msgpack-numpy payload,
/// as its key path (`data.observation.video.cam`), for a refusal that names it.
pub fn find_refused_payload<M: Msg>(v: &M, path: &str) -> Option<(String, String)> {
    match v.view() {
        View::Map(m) => {
            if is_nd_array(m) {
                let kind = get(m, "kind").and_then(text).unwrap_or_default();
                if kind == "O" || kind == "V" {
                    let err = nd_view(m).err().map(|e| e.to_string()).unwrap_or_default();
                    return Some((path.to_string(), err));
                }
                return None;
            }
            m.iter().find_map(|(k, v)| {
                let name = key_bytes(k)
                    .map(String::from_utf8_lossy)
                    .unwrap_or_default();
                let sub = if path.is_empty() {
                    name.into_owned()
                } else {
                    format!("{path}.{name}")
                };
                find_refused_payload(v, &sub)
            })
        }
        View::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| find_refused_payload(v, &format!("{path}[{i}]"))),
        _ => None,
    }
}
