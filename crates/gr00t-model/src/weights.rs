//! Safetensors weights read tensor by tensor with positioned reads, as a candle `VarBuilder`
//! backend. Nothing stays mapped, so the resident set holds only the tensors the network keeps
//! (a memory map would add every touched page of the files to it while loading).
//!
//! Asking for [`COMPACT`] returns a tensor in its stored dtype when that is bf16 and in f32
//! otherwise: layers that widen bf16 weights on the fly use it to keep them at 2 bytes without
//! ever rounding an f16/f32 checkpoint.

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use half::bf16;
use serde::Deserialize;
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

/// The dtype to request for weights kept compact: bf16 as stored, anything else as f32.
pub const COMPACT: DType = DType::BF16;

/// Where one tensor lives.
#[derive(Debug, Clone)]
struct Entry {
    file: usize,
    dtype: DType,
    shape: Vec<usize>,
    /// Absolute byte offset of the data in the file.
    offset: u64,
}

/// The tensors of one or more safetensors files, read on demand.
pub struct SafetensorsReader {
    files: Vec<(PathBuf, File)>,
    entries: HashMap<String, Entry>,
    /// Dtype of the layers' activations; [`COMPACT`] requests that are not kept bf16 get it.
    compute: DType,
    /// Whether [`COMPACT`] requests keep bf16 tensors bf16 (the CPU widens them per product;
    /// other devices get them in `compute` once, at load).
    keep_bf16: bool,
}

#[derive(Deserialize)]
struct HeaderEntry {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: [u64; 2],
}

impl SafetensorsReader {
    /// Opens the files and indexes their headers (no tensor data is read).
    pub fn open(paths: &[PathBuf]) -> crate::Result<SafetensorsReader> {
        let mut files = Vec::with_capacity(paths.len());
        let mut entries = HashMap::new();
        for (i, path) in paths.iter().enumerate() {
            let (file, header) = read_header(path)?;
            for (name, e) in header {
                if entries.contains_key(&name) {
                    return Err(crate::Error::file(
                        path,
                        format!("tensor {name} is also in an earlier weight file"),
                    ));
                }
                entries.insert(name, Entry { file: i, ..e });
            }
            files.push((path.clone(), file));
        }
        Ok(SafetensorsReader {
            files,
            entries,
            compute: DType::F32,
            keep_bf16: true,
        })
    }

    /// Resolves [`COMPACT`] requests for layers computing in `compute`: bf16 stays bf16 when
    /// `keep_bf16`, everything else becomes `compute`. The default is f32 keeping bf16.
    pub fn for_compute(mut self, compute: DType, keep_bf16: bool) -> SafetensorsReader {
        self.compute = compute;
        self.keep_bf16 = keep_bf16;
        self
    }

    /// The stored dtype of `name`, if the files hold it.
    pub fn stored_dtype(&self, name: &str) -> Option<DType> {
        self.entries.get(name).map(|e| e.dtype)
    }

    /// Reads `name` in its stored dtype.
    pub fn read(&self, name: &str, device: &Device) -> candle_core::Result<Tensor> {
        let e = self.entry(name)?;
        let (path, file) = &self.files[e.file];
        let n: usize = e.shape.iter().product();
        let io = |err: std::io::Error| {
            candle_core::Error::Msg(format!(
                "{}: cannot read tensor {name}: {err}",
                path.display()
            ))
        };
        let shape = Shape::from(e.shape.clone());
        match e.dtype {
            DType::BF16 => {
                let mut v = zeroed_halves::<bf16>(n);
                read_exact_at(file, bytes_of_mut(&mut v), e.offset).map_err(io)?;
                if cfg!(target_endian = "big") {
                    v.iter_mut()
                        .for_each(|x| *x = bf16::from_bits(u16::from_le(x.to_bits())));
                }
                Tensor::from_vec(v, shape, device)
            }
            DType::F16 => {
                let mut v = zeroed_halves::<half::f16>(n);
                read_exact_at(file, bytes_of_mut(&mut v), e.offset).map_err(io)?;
                if cfg!(target_endian = "big") {
                    v.iter_mut()
                        .for_each(|x| *x = half::f16::from_bits(u16::from_le(x.to_bits())));
                }
                Tensor::from_vec(v, shape, device)
            }
            DType::F32 => {
                let mut v = vec![0f32; n];
                read_exact_at(file, bytes_of_mut(&mut v), e.offset).map_err(io)?;
                if cfg!(target_endian = "big") {
                    v.iter_mut()
                        .for_each(|x| *x = f32::from_bits(u32::from_le(x.to_bits())));
                }
                Tensor::from_vec(v, shape, device)
            }
            other => candle_core::bail!("tensor {name} has unsupported dtype {other:?}"),
        }
    }

    /// Reads `name` converted to `dtype` ([`COMPACT`]: bf16 as stored when kept, else the
    /// compute dtype; see [`SafetensorsReader::for_compute`]).
    pub fn read_as(
        &self,
        name: &str,
        dtype: DType,
        device: &Device,
    ) -> candle_core::Result<Tensor> {
        let t = self.read(name, device)?;
        let target = if dtype == COMPACT && !(self.keep_bf16 && t.dtype() == DType::BF16) {
            self.compute
        } else {
            dtype
        };
        if t.dtype() == target {
            Ok(t)
        } else {
            t.to_dtype(target)
        }
    }

    fn entry(&self, name: &str) -> candle_core::Result<&Entry> {
        self.entries.get(name).ok_or_else(|| {
            candle_core::Error::CannotFindTensor {
                path: name.to_string(),
            }
            .bt()
        })
    }
}

impl SimpleBackend for SafetensorsReader {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _hints: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let e = self.entry(name)?;
        if e.shape.as_slice() != s.dims() {
            return Err(candle_core::Error::UnexpectedShape {
                msg: format!("shape mismatch for {name}"),
                expected: s,
                got: e.shape.clone().into(),
            }
            .bt());
        }
        self.read_as(name, dtype, dev)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        self.read_as(name, dtype, dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }
}

/// Every tensor of the safetensors file `path` with its dtype (bf16, f16 or f32), from its
/// header alone, each byte range checked.
pub(crate) fn tensor_dtypes(path: &Path) -> crate::Result<Vec<(String, DType)>> {
    let (_, entries) = read_header(path)?;
    Ok(entries.into_iter().map(|(n, e)| (n, e.dtype)).collect())
}

/// Opens `path` and parses its safetensors header, checking every tensor's byte range.
fn read_header(path: &Path) -> crate::Result<(File, HashMap<String, Entry>)> {
    let bad = |msg: String| crate::Error::file(path, msg);
    let file = File::open(path).map_err(|e| crate::Error::io(path, "open", e))?;
    let file_len = file
        .metadata()
        .map_err(|e| crate::Error::io(path, "stat", e))?
        .len();
    let mut len = [0u8; 8];
    read_exact_at(&file, &mut len, 0)
        .map_err(|_| bad("not a safetensors file (shorter than 8 bytes)".into()))?;
    let n = u64::from_le_bytes(len);
    if n > 100_000_000 || n + 8 > file_len {
        return Err(bad(format!("not a safetensors file (header length {n})")));
    }
    let mut buf = vec![0u8; n as usize];
    read_exact_at(&file, &mut buf, 8)
        .map_err(|e| crate::Error::header(path, "truncated safetensors header", e))?;
    let raw: HashMap<String, serde_json::Value> = serde_json::from_slice(&buf)
        .map_err(|e| crate::Error::header(path, "malformed safetensors header", e))?;
    let data_start = 8 + n;
    let mut out = HashMap::new();
    for (name, v) in raw {
        if name == "__metadata__" {
            continue;
        }
        let h: HeaderEntry = serde_json::from_value(v)
            .map_err(|e| crate::Error::header(path, format!("malformed header entry {name}"), e))?;
        let (dtype, size) = match h.dtype.as_str() {
            "BF16" => (DType::BF16, 2),
            "F16" => (DType::F16, 2),
            "F32" => (DType::F32, 4),
            other => {
                return Err(bad(format!(
                    "tensor {name} has dtype {other}; only BF16, F16 and F32 are accepted"
                )))
            }
        };
        let [start, end] = h.data_offsets;
        let numel = h
            .shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
        let expected = numel.and_then(|x| x.checked_mul(size));
        if end < start || Some(end - start) != expected || data_start + end > file_len {
            return Err(bad(format!(
                "tensor {name}: data_offsets [{start}, {end}] do not fit shape {:?} ({}) in a \
                 file of {file_len} bytes",
                h.shape, h.dtype
            )));
        }
        out.insert(
            name,
            Entry {
                file: 0,
                dtype,
                shape: h.shape,
                offset: data_start + start,
            },
        );
    }
    Ok((file, out))
}

/// `n` zero halves from a zeroed allocation: large ones come straight from fresh, already zero
/// pages, so no pass touches them before the read fills them (a `vec![T::ZERO; n]` of a
/// non-primitive `T` would write every page twice).
fn zeroed_halves<T: Plain>(n: usize) -> Vec<T> {
    const { assert!(std::mem::size_of::<T>() == 2 && std::mem::align_of::<T>() == 2) };
    let mut v = std::mem::ManuallyDrop::new(vec![0u16; n]);
    // SAFETY: `T` is a 2-byte, 2-aligned plain number (checked above) for which every bit
    // pattern is valid, so the buffer, length and capacity of a `Vec<u16>` form a valid
    // `Vec<T>` with the same allocation layout; the `Vec<u16>` is never dropped.
    unsafe { Vec::from_raw_parts(v.as_mut_ptr().cast::<T>(), v.len(), v.capacity()) }
}

/// The bytes of a slice of plain numbers (every bit pattern of `T` is a valid value).
fn bytes_of_mut<T: Plain>(v: &mut [T]) -> &mut [u8] {
    // SAFETY: `T` is a plain number type without padding or invalid bit patterns, so any byte
    // written through the view leaves a valid `T`; the length covers exactly the slice.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// Number types whose every bit pattern is valid.
trait Plain: Copy {}
impl Plain for bf16 {}
impl Plain for half::f16 {}
impl Plain for f32 {}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(windows)]
fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        match file.seek_read(buf, offset) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
