//! A numpy array as the wire protocols carry it: element type, C-order shape and raw bytes.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::error::WireError;
use std::borrow::Cow;

/// What kind of number an element is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `b`: bool, one byte.
    Bool,
    /// `i`: signed integer.
    Int,
    /// `u`: unsigned integer.
    UInt,
    /// `f`: IEEE float.
    Float,
}

/// An element type as numpy's `dtype.str` spells it (`"<f4"`, `"|u1"`, `">i8"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DType {
    /// Number kind.
    pub kind: Kind,
    /// Bytes per element.
    pub size: usize,
    /// Byte order of multi-byte elements.
    pub big_endian: bool,
}

impl DType {
    /// `uint8` (`|u1`).
    pub const U8: DType = DType {
        kind: Kind::UInt,
        size: 1,
        big_endian: false,
    };
    /// Little-endian `float32` (`<f4`).
    pub const F32: DType = DType {
        kind: Kind::Float,
        size: 4,
        big_endian: false,
    };

    /// Parses a numpy type string such as `<f4`; only plain numbers are accepted.
    pub fn parse(descr: &str) -> Result<DType, WireError> {
        let bad = || {
            format!("unsupported dtype {descr:?} (expected a number type such as '<f4' or '|u1')")
        };
        let mut chars = descr.chars();
        let order = chars.next().ok_or_else(bad)?;
        let kind = chars.next().ok_or_else(bad)?;
        let size: usize = chars.as_str().parse().map_err(|_| bad())?;
        let big_endian = match order {
            '<' | '|' => false,
            '>' => true,
            _ => return Err(bad().into()),
        };
        let kind = match (kind, size) {
            ('b', 1) => Kind::Bool,
            ('i', 1 | 2 | 4 | 8) => Kind::Int,
            ('u', 1 | 2 | 4 | 8) => Kind::UInt,
            ('f', 4 | 8) => Kind::Float,
            _ => return Err(bad().into()),
        };
        Ok(DType {
            kind,
            size,
            big_endian,
        })
    }

    /// The numpy type string: `|` for one-byte types, else `<` or `>`.
    pub fn descr(&self) -> String {
        let order = if self.size == 1 {
            '|'
        } else if self.big_endian {
            '>'
        } else {
            '<'
        };
        let kind = match self.kind {
            Kind::Bool => 'b',
            Kind::Int => 'i',
            Kind::UInt => 'u',
            Kind::Float => 'f',
        };
        format!("{order}{kind}{}", self.size)
    }

    /// The numpy name (`float32`, `uint8`, …) for messages.
    pub fn name(&self) -> String {
        match self.kind {
            Kind::Bool => "bool".into(),
            Kind::Int => format!("int{}", self.size * 8),
            Kind::UInt => format!("uint{}", self.size * 8),
            Kind::Float => format!("float{}", self.size * 8),
        }
    }
}

/// An array read in place from a message: its bytes borrowed from the message (owned only
/// where a Fortran-order `.npy` had to be reordered), so that a video's frames are copied once,
/// from the message into each frame.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayView<'a> {
    /// Element type.
    pub dtype: DType,
    /// Dimensions; empty for a scalar.
    pub shape: Vec<usize>,
    /// `product(shape) · dtype.size` bytes, C order.
    pub data: Cow<'a, [u8]>,
}

impl<'a> ArrayView<'a> {
    /// A view over `data`; refuses a byte count that does not match the shape.
    pub fn new(
        dtype: DType,
        shape: Vec<usize>,
        data: Cow<'a, [u8]>,
    ) -> Result<ArrayView<'a>, WireError> {
        check_len(dtype, &shape, data.len())?;
        Ok(ArrayView { dtype, shape, data })
    }

    /// The array with its own bytes.
    pub fn into_owned(self) -> NdArray {
        NdArray {
            dtype: self.dtype,
            shape: self.shape,
            data: self.data.into_owned(),
        }
    }

    /// The shape as Python prints a tuple: `(2, 180, 320, 3)`, `(7,)`, `()`.
    pub fn shape_text(&self) -> String {
        shape_text(&self.shape)
    }
}

/// Refuses `len` bytes for an array of `shape` and `dtype` that needs another count.
fn check_len(dtype: DType, shape: &[usize], len: usize) -> Result<(), WireError> {
    let want = byte_len(dtype, shape)?;
    if len != want {
        return Err(format!(
            "array of shape {shape:?} and dtype {} needs {want} bytes, got {len}",
            dtype.descr()
        )
        .into());
    }
    Ok(())
}

/// A C-order array.
#[derive(Debug, Clone, PartialEq)]
pub struct NdArray {
    /// Element type.
    pub dtype: DType,
    /// Dimensions; empty for a scalar.
    pub shape: Vec<usize>,
    /// `product(shape) · dtype.size` bytes, C order.
    pub data: Vec<u8>,
}

impl NdArray {
    /// An array over `data`; refuses a byte count that does not match the shape.
    pub fn new(dtype: DType, shape: Vec<usize>, data: Vec<u8>) -> Result<NdArray, WireError> {
        check_len(dtype, &shape, data.len())?;
        Ok(NdArray { dtype, shape, data })
    }

    /// A little-endian float32 array.
    pub fn from_f32(shape: Vec<usize>, values: &[f32]) -> NdArray {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        NdArray {
            dtype: DType::F32,
            shape,
            data,
        }
    }

    /// The shape as numpy prints it, e.g. `(1, 2, 180, 320, 3)`.
    pub fn shape_text(&self) -> String {
        shape_text(&self.shape)
    }

    /// Each element's bytes in native order as a zero-extended u64.
    fn element_bits(&self) -> impl Iterator<Item = u64> + '_ {
        let size = self.dtype.size;
        self.data.chunks_exact(size).map(move |c| {
            let mut b = [0u8; 8];
            b[..size].copy_from_slice(c);
            if self.dtype.big_endian {
                b[..size].reverse();
            }
            u64::from_le_bytes(b)
        })
    }

    /// Every element as f64 (exact for every accepted type but 64-bit integers beyond 2^53).
    pub fn to_f64s(&self) -> Vec<f64> {
        let size = self.dtype.size;
        self.element_bits()
            .map(|bits| match (self.dtype.kind, size) {
                (Kind::Float, 4) => f32::from_bits(bits as u32) as f64,
                (Kind::Float, _) => f64::from_bits(bits),
                (Kind::Int, _) => {
                    // Sign-extend from `size` bytes.
                    let shift = 64 - 8 * size as u32;
                    (((bits << shift) as i64) >> shift) as f64
                }
                (Kind::UInt | Kind::Bool, _) => bits as f64,
            })
            .collect()
    }

    /// Every element exactly, for integer (and bool) arrays; `None` for float arrays.
    pub fn int_values(&self) -> Option<Vec<i128>> {
        let size = self.dtype.size;
        let signed = match self.dtype.kind {
            Kind::Int => true,
            Kind::UInt | Kind::Bool => false,
            Kind::Float => return None,
        };
        Some(
            self.element_bits()
                .map(|bits| {
                    if signed {
                        let shift = 64 - 8 * size as u32;
                        (((bits << shift) as i64) >> shift) as i128
                    } else {
                        bits as i128
                    }
                })
                .collect(),
        )
    }

    /// Every element as f32, the way numpy's `astype(np.float32)` rounds.
    pub fn to_f32s(&self) -> Vec<f32> {
        if self.dtype == DType::F32 {
            return self
                .data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
        }
        self.to_f64s().into_iter().map(|v| v as f32).collect()
    }
}

/// `product(shape) · size`, refusing overflow.
pub fn byte_len(dtype: DType, shape: &[usize]) -> Result<usize, WireError> {
    shape
        .iter()
        .try_fold(dtype.size, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| WireError::bytes(format!("array shape {shape:?} is too large")))
}

/// A shape as numpy prints it: `()`, `(7,)`, `(1, 40, 9)`.
pub fn shape_text(shape: &[usize]) -> String {
    match shape {
        [] => "()".into(),
        [d] => format!("({d},)"),
        dims => {
            let parts: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
            format!("({})", parts.join(", "))
        }
    }
}
