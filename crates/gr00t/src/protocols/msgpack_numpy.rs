//! numpy arrays inside msgpack values, in the two conventions the peers use:
//!
//! - openpi (`openpi_client/msgpack_numpy.py`): `{b"__ndarray__": True, b"data": <raw C-order
//!   bytes>, b"dtype": "<f4", b"shape": [..]}` with **bin** keys, and numpy scalars as
//!   `{b"__npgeneric__": True, b"data": <item>, b"dtype": "<f8"}`.
//! - Isaac-GR00T (`gr00t/policy/server_client.py` `MsgSerializer`):
//!   `{"__ndarray_class__": True, "as_npy": <np.save bytes>}` with **str** keys.
//!
//! Plus the small map/number helpers both front doors need to read msgpack.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::ndarray::{DType, NdArray};
use super::npy;
use rmpv::Value;

/// Encodes a msgpack value the way `msgpack.packb` does (smallest int/str/bin/map headers).
pub fn pack(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = rmpv::encode::write_value(&mut out, v);
    out
}

/// Decodes one msgpack value that must span the whole buffer.
pub fn unpack(bytes: &[u8]) -> Result<Value, String> {
    let mut rd = bytes;
    let v = rmpv::decode::read_value(&mut rd).map_err(|e| format!("invalid msgpack: {e}"))?;
    if !rd.is_empty() {
        return Err(format!(
            "invalid msgpack: {} bytes after the first value",
            rd.len()
        ));
    }
    Ok(v)
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
pub fn get<'a>(map: &'a [(Value, Value)], key: &str) -> Option<&'a Value> {
    map.iter()
        .find(|(k, _)| key_bytes(k) == Some(key.as_bytes()))
        .map(|(_, v)| v)
}

/// A map key's bytes (str or bin keys; others have none).
pub fn key_bytes(k: &Value) -> Option<&[u8]> {
    match k {
        Value::String(s) => Some(s.as_bytes()),
        Value::Binary(b) => Some(b),
        _ => None,
    }
}

/// What a value is, in Python's words, for messages.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Nil => "None",
        Value::Boolean(_) => "bool",
        Value::Integer(_) => "int",
        Value::F32(_) | Value::F64(_) => "float",
        Value::String(_) => "str",
        Value::Binary(_) => "bytes",
        Value::Array(_) => "list",
        Value::Map(m) if is_gr00t_array(m) || is_openpi_array(m) => "numpy.ndarray",
        Value::Map(_) => "dict",
        Value::Ext(..) => "msgpack ext",
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

fn is_openpi_array(m: &[(Value, Value)]) -> bool {
    get(m, "__ndarray__").is_some()
}

fn is_gr00t_array(m: &[(Value, Value)]) -> bool {
    get(m, "__ndarray_class__").is_some()
}

/// Decodes an openpi array map; `None` when the value is not one.
pub fn from_openpi_array(v: &Value) -> Option<Result<NdArray, String>> {
    let Value::Map(m) = v else { return None };
    if !is_openpi_array(m) {
        return None;
    }
    Some((|| {
        let data = match get(m, "data") {
            Some(Value::Binary(b)) => b.clone(),
            _ => return Err("ndarray without bytes under 'data'".to_string()),
        };
        let dtype = match get(m, "dtype") {
            Some(Value::String(s)) => DType::parse(s.as_str().unwrap_or(""))?,
            Some(Value::Binary(b)) => DType::parse(&String::from_utf8_lossy(b))?,
            _ => return Err("ndarray without a 'dtype' string".to_string()),
        };
        let shape = match get(m, "shape") {
            Some(Value::Array(dims)) => dims
                .iter()
                .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
                .collect::<Option<Vec<usize>>>()
                .ok_or("ndarray 'shape' must hold non-negative integers")?,
            _ => return Err("ndarray without a 'shape' list".to_string()),
        };
        NdArray::new(dtype, shape, data)
    })())
}

/// GR00T's encoding of an array: str keys, `.npy` bytes.
pub fn gr00t_array(a: &NdArray) -> Value {
    str_map([
        ("__ndarray_class__", Value::Boolean(true)),
        ("as_npy", Value::Binary(npy::encode(a))),
    ])
}

/// Decodes a GR00T array map; `None` when the value is not one.
pub fn from_gr00t_array(v: &Value) -> Option<Result<NdArray, String>> {
    let Value::Map(m) = v else { return None };
    if !is_gr00t_array(m) {
        return None;
    }
    Some(match get(m, "as_npy") {
        Some(Value::Binary(b)) => npy::decode(b),
        _ => Err("ndarray without .npy bytes under 'as_npy'".to_string()),
    })
}

/// A plain msgpack number, or an openpi numpy scalar, as f64.
pub fn scalar(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(i) => i.as_f64(),
        Value::F32(x) => Some(*x as f64),
        Value::F64(x) => Some(*x),
        Value::Boolean(b) => Some(if *b { 1.0 } else { 0.0 }),
        Value::Map(m) if get(m, "__npgeneric__").is_some() => get(m, "data").and_then(scalar),
        _ => None,
    }
}
