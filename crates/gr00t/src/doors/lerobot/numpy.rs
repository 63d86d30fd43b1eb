//! numpy values as a pickle records them ([`PyValue::Call`]s of whitelisted numpy names), read
//! into the wire layer's arrays ([`NdArray`]) and scalars. Nothing of numpy runs: the calls are
//! matched by shape. An array's bytes are checked against its declared shape and dtype before
//! it is built.

use super::error::PayloadError;
use super::pickle::{Global, PyValue};
use crate::doors::wire::ndarray::{byte_len, DType, NdArray};
use crate::doors::wire::npy::fortran_to_c;

/// What a numpy call records, if it is one.
pub enum Numpy {
    /// An array.
    Array(NdArray),
    /// A scalar (`numpy.float32(1.5)`), as f64.
    Scalar(f64),
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
        if b.len() != dtype.size {
            return Err(bad("scalar whose bytes do not fit its dtype"));
        }
        let scalar = NdArray {
            dtype,
            shape: Vec::new(),
            data: b,
        };
        return Ok(Numpy::Scalar(scalar.to_f64s()[0]));
    }
    Err(PayloadError::invalid(
        field,
        format!("{callable}(...) is not a value this server reads"),
    ))
}

/// An array of `data`, refused unless it holds exactly `shape` elements of `dtype` (the size
/// multiplied out with overflow checks before anything is built); Fortran order made C order.
pub fn array(
    dtype: DType,
    shape: Vec<usize>,
    data: Vec<u8>,
    fortran: bool,
    field: &str,
) -> Result<NdArray, PayloadError> {
    let want = byte_len(dtype, &shape)
        .map_err(|_| PayloadError::invalid(field, format!("shape {shape:?} overflows")))?;
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
    let data = if fortran && shape.len() > 1 {
        fortran_to_c(&data, &shape, dtype.size)
    } else {
        data
    };
    Ok(NdArray { dtype, shape, data })
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
fn dtype(v: PyValue, field: &str) -> Result<DType, PayloadError> {
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
    // The type string without its byte order (`u1`, `f4`), read as a little-endian one.
    let dtype = DType::parse(&format!("<{code}")).map_err(|_| {
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
