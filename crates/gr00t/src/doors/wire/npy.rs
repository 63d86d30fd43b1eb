//! The `.npy` file format (`np.save` / `np.load(allow_pickle=False)`), which GR00T's ZMQ
//! protocol carries inside msgpack. Writing follows numpy's `_write_array_header` byte for byte:
//! version 1.0, keys sorted, 21 − len(first dim) spare spaces, then space padding and `\n` so
//! that the data starts on a 64-byte boundary.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::error::WireError;
use super::ndarray::{byte_len, shape_text, ArrayView, DType, NdArray};
use std::borrow::Cow;

const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// numpy's `ARRAY_ALIGN`.
const ALIGN: usize = 64;
/// numpy's `GROWTH_AXIS_MAX_DIGITS`: room left to grow the first axis in place.
const GROWTH_AXIS_MAX_DIGITS: usize = 21;

/// The bytes `np.save` writes for a C-order array.
pub fn encode(a: &NdArray) -> Vec<u8> {
    let shape = shape_text(&a.shape);
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        a.dtype.descr()
    );
    if let Some(first) = a.shape.first() {
        let digits = first.to_string().len();
        header.push_str(&" ".repeat(GROWTH_AXIS_MAX_DIGITS.saturating_sub(digits)));
    }
    // magic (6) + version (2) + u16 length (2) + header + '\n', padded to ALIGN.
    let unpadded = MAGIC.len() + 2 + 2 + header.len() + 1;
    let pad = (ALIGN - unpadded % ALIGN) % ALIGN;
    header.push_str(&" ".repeat(pad));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + a.data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&a.data);
    out
}

/// Reads an `.npy` file (format versions 1–3); Fortran-order data is returned in C order.
pub fn decode(bytes: &[u8]) -> Result<NdArray, WireError> {
    view(bytes).map(ArrayView::into_owned)
}

/// [`decode`] in place: the data borrowed from `bytes` (reordered into a buffer of its own
/// only when in Fortran order).
pub fn view(bytes: &[u8]) -> Result<ArrayView<'_>, WireError> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("not an .npy file (bad magic)".into());
    }
    let (header_len, start): (usize, usize) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(format!("unsupported .npy format version {v}").into()),
    };
    let end = start
        .checked_add(header_len)
        .filter(|&e| e <= bytes.len())
        .ok_or("truncated .npy header")?;
    let header = std::str::from_utf8(&bytes[start..end])
        .map_err(|_| WireError::bytes("the .npy header is not text"))?;
    let h = parse_header(header)?;
    let dtype = DType::parse(&h.descr)?;
    let want = byte_len(dtype, &h.shape)?;
    let data = &bytes[end..];
    if data.len() != want {
        return Err(format!(
            ".npy data of shape {} and dtype {} needs {want} bytes, got {}",
            shape_text(&h.shape),
            h.descr,
            data.len()
        )
        .into());
    }
    let data = if h.fortran_order {
        Cow::Owned(fortran_to_c(data, &h.shape, dtype.size))
    } else {
        Cow::Borrowed(data)
    };
    ArrayView::new(dtype, h.shape, data)
}

struct Header {
    descr: String,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// One token of the header's Python dict literal.
#[derive(Debug, PartialEq)]
enum Tok {
    Str(String),
    Word(String),
    Punct(char),
}

fn tokens(text: &str) -> Result<Vec<Tok>, WireError> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '\'' || c == '"' {
            chars.next();
            let mut s = String::new();
            loop {
                match chars.next() {
                    Some(q) if q == c => break,
                    Some(ch) => s.push(ch),
                    None => return Err("unterminated string in the .npy header".into()),
                }
            }
            out.push(Tok::Str(s));
        } else if c.is_ascii_alphanumeric() || c == '_' {
            let mut w = String::new();
            while let Some(&ch) = chars.peek() {
                if ch.is_ascii_alphanumeric() || ch == '_' {
                    w.push(ch);
                    chars.next();
                } else {
                    break;
                }
            }
            out.push(Tok::Word(w));
        } else if "{}():,[]".contains(c) {
            out.push(Tok::Punct(c));
            chars.next();
        } else {
            return Err(format!("unexpected {c:?} in the .npy header").into());
        }
    }
    Ok(out)
}

/// Parses `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`.
fn parse_header(text: &str) -> Result<Header, WireError> {
    let toks = tokens(text)?;
    let bad = |what: &str| format!("malformed .npy header ({what}): {}", text.trim_end());
    let mut i = 0;
    let expect = |i: &mut usize, p: char| -> Result<(), WireError> {
        if toks.get(*i) == Some(&Tok::Punct(p)) {
            *i += 1;
            Ok(())
        } else {
            Err(WireError::bytes(bad(&format!("expected '{p}'"))))
        }
    };
    expect(&mut i, '{')?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    while toks.get(i) != Some(&Tok::Punct('}')) {
        let key = match toks.get(i) {
            Some(Tok::Str(k)) => k.clone(),
            _ => return Err(WireError::bytes(bad("expected a key"))),
        };
        i += 1;
        expect(&mut i, ':')?;
        match key.as_str() {
            "descr" => match toks.get(i) {
                Some(Tok::Str(s)) => {
                    descr = Some(s.clone());
                    i += 1;
                }
                _ => return Err("structured dtypes are not supported".into()),
            },
            "fortran_order" => {
                fortran = match toks.get(i) {
                    Some(Tok::Word(w)) if w == "True" => Some(true),
                    Some(Tok::Word(w)) if w == "False" => Some(false),
                    _ => return Err(WireError::bytes(bad("fortran_order"))),
                };
                i += 1;
            }
            "shape" => {
                expect(&mut i, '(')?;
                let mut dims = Vec::new();
                while let Some(Tok::Word(w)) = toks.get(i) {
                    // Python 2 wrote longs as `3L`.
                    let n = w.trim_end_matches('L');
                    dims.push(n.parse::<usize>().map_err(|_| bad("shape"))?);
                    i += 1;
                    if toks.get(i) == Some(&Tok::Punct(',')) {
                        i += 1;
                    }
                }
                expect(&mut i, ')')?;
                shape = Some(dims);
            }
            _ => return Err(WireError::bytes(bad(&format!("unknown key {key:?}")))),
        }
        if toks.get(i) == Some(&Tok::Punct(',')) {
            i += 1;
        }
    }
    match (descr, fortran, shape) {
        (Some(descr), Some(fortran_order), Some(shape)) => Ok(Header {
            descr,
            fortran_order,
            shape,
        }),
        _ => Err(WireError::bytes(bad(
            "descr, fortran_order and shape are required",
        ))),
    }
}

/// Reorders column-major elements into row-major order.
pub(crate) fn fortran_to_c(data: &[u8], shape: &[usize], size: usize) -> Vec<u8> {
    let n = data.len() / size.max(1);
    let mut out = vec![0u8; data.len()];
    let mut index = vec![0usize; shape.len()];
    for c in 0..n {
        // Fortran offset of the C-order multi-index `index`.
        let mut f = 0;
        let mut stride = 1;
        for (d, &i) in index.iter().enumerate() {
            f += i * stride;
            stride *= shape[d];
        }
        out[c * size..(c + 1) * size].copy_from_slice(&data[f * size..(f + 1) * size]);
        // Advance the C-order multi-index (last axis fastest).
        for d in (0..shape.len()).rev() {
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
    out
}
