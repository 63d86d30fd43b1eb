//! numpy values as a pickle records them ([`PyValue::Call`]s of whitelisted numpy names), read
//! into plain arrays and scalars. Nothing of numpy runs: the calls are matched by shape. An
//! array's bytes are checked against its declared shape and dtype before it is built.

use super::error::PayloadError;
use super::pickle::{Global, PyValue};
use crate::doors::wire::npy::fortran_to_c;

/// An element type an array may hold (little-endian, as every robot's host writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    /// `bool`.
    Bool,
    /// `uint8`: camera frames.
    U8,
    /// `int8`.
    I8,
    /// `uint16`: depth frames.
    U16,
    /// `int16`.
    I16,
    /// `uint32`.
    U32,
    /// `int32`.
    I32,
    /// `uint64`.
    U64,
    /// `int64`.
    I64,
    /// `float16`.
    F16,
    /// `float32`.
    F32,
    /// `float64`.
    F64,
}

impl Dtype {
    /// The dtype of a numpy type string without its byte order (`u1`, `f4`, …).
    pub fn from_numpy(code: &str) -> Option<Dtype> {
        Some(match code {
            "b1" | "?" => Dtype::Bool,
            "u1" => Dtype::U8,
            "i1" => Dtype::I8,
            "u2" => Dtype::U16,
            "i2" => Dtype::I16,
            "u4" => Dtype::U32,
            "i4" => Dtype::I32,
            "u8" => Dtype::U64,
            "i8" => Dtype::I64,
            "f2" => Dtype::F16,
            "f4" => Dtype::F32,
            "f8" => Dtype::F64,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::Bool | Dtype::U8 | Dtype::I8 => 1,
            Dtype::U16 | Dtype::I16 | Dtype::F16 => 2,
            Dtype::U32 | Dtype::I32 | Dtype::F32 => 4,
            Dtype::U64 | Dtype::I64 | Dtype::F64 => 8,
        }
    }

    /// numpy's name for it (`uint8`).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Bool => "bool",
            Dtype::U8 => "uint8",
            Dtype::I8 => "int8",
            Dtype::U16 => "uint16",
            Dtype::I16 => "int16",
            Dtype::U32 => "uint32",
            Dtype::I32 => "int32",
            Dtype::U64 => "uint64",
            Dtype::I64 => "int64",
            Dtype::F16 => "float16",
            Dtype::F32 => "float32",
            Dtype::F64 => "float64",
        }
    }
}

/// An array: C-order little-endian bytes of `shape` elements of `dtype`.
#[derive(Debug, Clone, PartialEq)]
pub struct NdArray {
    /// Its element type.
    pub dtype: Dtype,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its elements, row-major.
    pub data: Vec<u8>,
}

impl NdArray {
    /// An array of `data`, refused unless it holds exactly `shape` elements of `dtype`.
    pub fn new(
        dtype: Dtype,
        shape: Vec<usize>,
        data: Vec<u8>,
        field: &str,
    ) -> Result<NdArray, PayloadError> {
        let want = shape
            .iter()
            .try_fold(dtype.size(), |n, &d| n.checked_mul(d))
            .ok_or_else(|| PayloadError::invalid(field, format!("shape {shape:?} overflows")))?;
        if want != data.len() {
            return Err(PayloadError::invalid(
                field,
                format!(
                    "an array declared {shape:?} {} ({want} bytes) holds {} bytes",
                    dtype.name(),
                    data.len()
                ),
            ));
        }
        Ok(NdArray { dtype, shape, data })
    }

    /// Its elements as f64 (a state vector), for any numeric dtype.
    pub fn to_f64(&self) -> Vec<f64> {
        let n = self.dtype.size();
        self.data
            .chunks_exact(n)
            .map(|b| scalar_f64(self.dtype, b))
            .collect()
    }
}

/// One little-endian element as f64.
fn scalar_f64(dtype: Dtype, b: &[u8]) -> f64 {
    let a = |i| -> [u8; 8] {
        let mut x = [0u8; 8];
        x[..i].copy_from_slice(&b[..i]);
        x
    };
    match dtype {
        Dtype::Bool => f64::from(u8::from(b[0] != 0)),
        Dtype::U8 => b[0].into(),
        Dtype::I8 => (b[0] as i8).into(),
        Dtype::U16 => u16::from_le_bytes([b[0], b[1]]).into(),
        Dtype::I16 => i16::from_le_bytes([b[0], b[1]]).into(),
        Dtype::U32 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]).into(),
        Dtype::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]).into(),
        Dtype::U64 => u64::from_le_bytes(a(8)) as f64,
        Dtype::I64 => i64::from_le_bytes(a(8)) as f64,
        Dtype::F16 => half_to_f64(u16::from_le_bytes([b[0], b[1]])),
        Dtype::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]).into(),
        Dtype::F64 => f64::from_le_bytes(a(8)),
    }
}

/// IEEE half to f64.
fn half_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let frac = f64::from(h & 0x3ff);
    sign * match exp {
        0 => frac * 2f64.powi(-24),
        31 if frac == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        _ => (1.0 + frac / 1024.0) * 2f64.powi(exp - 15),
    }
}

/// A numpy scalar (`numpy.float32(1.5)`): its value as f64.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scalar {
    /// Its dtype.
    pub dtype: Dtype,
    /// Its value.
    pub value: f64,
}

/// What a numpy call records, if it is one.
pub enum Numpy {
    /// An array.
    Array(NdArray),
    /// A scalar.
    Scalar(Scalar),
}

/// Whether `g` is numpy's `name` (the whitelist, [`super::objects::GLOBALS`], has already
/// limited the modules to numpy's own).
fn is(g: &Global, name: &str) -> bool {
    g.name == name && (g.module == "numpy" || g.module.starts_with("numpy."))
}

/// Reads `value`, a recorded call, as a numpy array or scalar.
pub fn read(value: PyValue, field: &str) -> Result<Numpy, PayloadError> {
    let PyValue::Call {
        callable,
        args,
        kwargs,
        state,
    } = value
    else {
        return Err(PayloadError::invalid(field, "is not a numpy value".into()));
    };
    let bad = |what: &str| PayloadError::invalid(field, format!("a numpy {what}"));
    if !kwargs.is_empty() {
        return Err(bad("call with keyword arguments"));
    }
    if is(&callable, "_reconstruct") {
        // _reconstruct(ndarray, (0,), b'b') then BUILD (1, shape, dtype, is_fortran, bytes).
        if !matches!(args.first(), Some(PyValue::Global(g)) if is(g, "ndarray")) {
            return Err(bad("_reconstruct of something other than ndarray"));
        }
        let Some(state) = state else {
            return Err(bad("array without its state"));
        };
        let PyValue::Tuple(mut s) = *state else {
            return Err(bad("array state that is not a tuple"));
        };
        if s.len() != 5 || s[0] != PyValue::Int(1) {
            return Err(bad("array state of an unknown version"));
        }
        let data = match std::mem::replace(&mut s[4], PyValue::None) {
            PyValue::Bytes(b) => b,
            _ => {
                return Err(bad(
                    "array of Python objects (only numeric dtypes are read)",
                ))
            }
        };
        let fortran = match s[3] {
            PyValue::Bool(f) => f,
            _ => return Err(bad("array state whose order is not a bool")),
        };
        let shape = shape(&s[1], field)?;
        let dtype = dtype(std::mem::replace(&mut s[2], PyValue::None), field)?;
        return array(dtype, shape, data, fortran, field).map(Numpy::Array);
    }
    if is(&callable, "_frombuffer") {
        // _frombuffer(buffer, dtype, shape, order): protocol 5's in-band form.
        let mut args = args.into_iter();
        let (Some(PyValue::Bytes(data)), Some(d), Some(s), Some(PyValue::Str(order)), None) = (
            args.next(),
            args.next(),
            args.next(),
            args.next(),
            args.next(),
        ) else {
            return Err(bad(
                "_frombuffer whose arguments are not (bytes, dtype, shape, order)",
            ));
        };
        let fortran = match order.as_str() {
            "C" => false,
            "F" => true,
            _ => return Err(bad("_frombuffer of an unknown order")),
        };
        let shape = shape(&s, field)?;
        let dtype = dtype(d, field)?;
        return array(dtype, shape, data, fortran, field).map(Numpy::Array);
    }
    if is(&callable, "scalar") {
        // scalar(dtype, bytes).
        let mut args = args.into_iter();
        let (Some(d), Some(PyValue::Bytes(b)), None) = (args.next(), args.next(), args.next())
        else {
            return Err(bad("scalar whose arguments are not (dtype, bytes)"));
        };
        let dtype = dtype(d, field)?;
        if b.len() != dtype.size() {
            return Err(bad("scalar whose bytes do not fit its dtype"));
        }
        let value = scalar_f64(dtype, &b);
        return Ok(Numpy::Scalar(Scalar { dtype, value }));
    }
    Err(PayloadError::invalid(
        field,
        format!("{callable}(...) is not a value this server reads"),
    ))
}

/// An array from its bytes, in C order.
fn array(
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
    fortran: bool,
    field: &str,
) -> Result<NdArray, PayloadError> {
    let a = NdArray::new(dtype, shape, data, field)?;
    if fortran && a.shape.len() > 1 {
        let data = fortran_to_c(&a.data, &a.shape, dtype.size());
        return Ok(NdArray { data, ..a });
    }
    Ok(a)
}

/// A shape tuple of non-negative ints.
fn shape(v: &PyValue, field: &str) -> Result<Vec<usize>, PayloadError> {
    let PyValue::Tuple(dims) = v else {
        return Err(PayloadError::invalid(
            field,
            "a numpy shape that is not a tuple".into(),
        ));
    };
    dims.iter()
        .map(|d| match d {
            PyValue::Int(n) => usize::try_from(*n).ok(),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| {
            PayloadError::invalid(field, format!("a numpy shape {v:?} that is not of sizes"))
        })
}

/// `numpy.dtype('u1', False, True)` with its BUILD state `(3, '|', None, None, None, -1, -1, 0)`.
fn dtype(v: PyValue, field: &str) -> Result<Dtype, PayloadError> {
    let bad = |what: String| PayloadError::invalid(field, what);
    let PyValue::Call {
        callable,
        args,
        state,
        ..
    } = v
    else {
        return Err(bad("a numpy dtype that is not numpy.dtype(...)".into()));
    };
    if !is(&callable, "dtype") {
        return Err(bad(format!("a numpy dtype made by {callable}")));
    }
    let Some(PyValue::Str(code)) = args.first() else {
        return Err(bad("a numpy dtype without its type string".into()));
    };
    let dtype = Dtype::from_numpy(code).ok_or_else(|| {
        bad(format!(
            "numpy dtype {code:?} is not read (numeric dtypes only)"
        ))
    })?;
    // The byte order: '|' (not applicable) or '<' (little); '>' would need swapping.
    if let Some(state) = state {
        let order = match &*state {
            PyValue::Tuple(s) => s.get(1),
            _ => None,
        };
        match order {
            Some(PyValue::Str(o)) if o == "<" || o == "|" || o == "=" => {}
            Some(PyValue::Str(o)) => {
                return Err(bad(format!(
                    "numpy dtype {code:?} of byte order {o:?} (only little-endian is read)"
                )))
            }
            _ => return Err(bad("a numpy dtype state without its byte order".into())),
        }
    }
    Ok(dtype)
}
