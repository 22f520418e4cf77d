//! A reader for GGUF files (llama.cpp's model format, version 2 and 3): the header, the
//! metadata, the tensor infos and the aligned data section, read from borrowed bytes.
//!
//! Every length and offset comes from the file, so every one is checked against the bytes
//! that are there before anything is allocated or sliced: a truncated or corrupt file is an
//! [`Error::InvalidArgument`] naming what is wrong, never a panic or a huge allocation.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::QuantFormat;

fn invalid(reason: impl Into<String>) -> Error {
    Error::InvalidArgument {
        op: "gguf",
        reason: reason.into(),
    }
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// An unsigned integer of any width (u8 to u64).
    Uint(u64),
    /// A signed integer of any width (i8 to i64).
    Int(i64),
    /// An f32 or f64.
    Float(f64),
    /// A bool.
    Bool(bool),
    /// A UTF-8 string (invalid sequences replaced).
    Str(String),
    /// An array of values of one type.
    Array(Vec<Value>),
}

impl Value {
    /// The value as an unsigned integer, when it is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Uint(v) => Some(v),
            Value::Int(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as an f64, when it is a number.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Float(v) => Some(v),
            Value::Uint(v) => Some(v as f64),
            Value::Int(v) => Some(v as f64),
            _ => None,
        }
    }

    /// The value as a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The value as an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(v) => Some(v),
            _ => None,
        }
    }
}

/// How a tensor's elements are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorType {
    /// 32-bit floats.
    F32,
    /// IEEE half floats.
    F16,
    /// Blocks of 32 quantized values (see [`QuantFormat`]).
    Quant(QuantFormat),
}

impl TensorType {
    fn from_ggml(t: u32) -> Option<TensorType> {
        Some(match t {
            0 => TensorType::F32,
            1 => TensorType::F16,
            2 => TensorType::Quant(QuantFormat::Q4_0),
            3 => TensorType::Quant(QuantFormat::Q4_1),
            8 => TensorType::Quant(QuantFormat::Q8_0),
            _ => return None,
        })
    }

    /// Bytes of `n` elements (`n` a multiple of the block for quantized types), checked.
    fn bytes(self, n: u64) -> Option<u64> {
        match self {
            TensorType::F32 => n.checked_mul(4),
            TensorType::F16 => n.checked_mul(2),
            TensorType::Quant(q) => {
                if !n.is_multiple_of(crate::ops::quant::BLOCK as u64) {
                    return None;
                }
                (n / crate::ops::quant::BLOCK as u64).checked_mul(q.block_bytes() as u64)
            }
        }
    }
}

/// A tensor's name, shape and where its bytes are.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// The tensor's name (`blk.0.attn_q.weight`).
    pub name: String,
    /// GGUF's dimensions, innermost first: a `[rows, cols]` matrix is `[cols, rows]` here.
    pub dims: Vec<usize>,
    /// The element type.
    pub kind: TensorType,
    /// Byte range in the file.
    range: std::ops::Range<usize>,
}

/// A parsed GGUF file over its bytes.
#[derive(Debug)]
pub struct Gguf<'a> {
    bytes: &'a [u8],
    /// The key-value metadata.
    pub metadata: HashMap<String, Value>,
    tensors: Vec<TensorInfo>,
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        let left = (self.b.len() - self.at) as u64;
        if n > left {
            return Err(invalid(format!(
                "truncated at byte {} reading {what} ({n} bytes needed, {left} left)",
                self.at
            )));
        }
        let s = &self.b[self.at..self.at + n as usize];
        self.at += n as usize;
        Ok(s)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        let s = self.take(4, what)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        let s = self.take(8, what)?;
        let mut w = [0; 8];
        w.copy_from_slice(s);
        Ok(u64::from_le_bytes(w))
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let n = self.u64(what)?;
        Ok(String::from_utf8_lossy(self.take(n, what)?).into_owned())
    }

    fn value(&mut self, ty: u32, key: &str, depth: u32) -> Result<Value> {
        let fixed = |r: &mut Reader<'a>, n: u64| r.take(n, key);
        Ok(match ty {
            0 => Value::Uint(fixed(self, 1)?[0] as u64),
            1 => Value::Int(fixed(self, 1)?[0] as i8 as i64),
            2 => {
                let s = fixed(self, 2)?;
                Value::Uint(u16::from_le_bytes([s[0], s[1]]) as u64)
            }
            3 => {
                let s = fixed(self, 2)?;
                Value::Int(i16::from_le_bytes([s[0], s[1]]) as i64)
            }
            4 => Value::Uint(self.u32(key)? as u64),
            5 => Value::Int(self.u32(key)? as i32 as i64),
            6 => Value::Float(f32::from_bits(self.u32(key)?) as f64),
            7 => Value::Bool(fixed(self, 1)?[0] != 0),
            8 => Value::Str(self.string(key)?),
            9 => {
                if depth > 0 {
                    return Err(invalid(format!("{key}: arrays of arrays are not read")));
                }
                let inner = self.u32(key)?;
                let count = self.u64(key)?;
                // Each element takes at least its fixed size (a string its 8-byte length): a
                // count past the bytes left is corrupt, and is refused before anything is
                // reserved for it.
                let least: u64 = match inner {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    _ => 8,
                };
                let left = (self.b.len() - self.at) as u64;
                if count > left / least {
                    return Err(invalid(format!(
                        "{key}: an array of {count} values in {left} bytes"
                    )));
                }
                // A value takes more memory than its bytes in the file (up to 32 times for a
                // u8): reserve a bounded amount and let a long real array grow.
                let mut v = Vec::with_capacity(count.min(1 << 16) as usize);
                for _ in 0..count {
                    v.push(self.value(inner, key, depth + 1)?);
                }
                Value::Array(v)
            }
            10 => Value::Uint(self.u64(key)?),
            11 => Value::Int(self.u64(key)? as i64),
            12 => Value::Float(f64::from_bits(self.u64(key)?)),
            _ => return Err(invalid(format!("{key}: unknown value type {ty}"))),
        })
    }
}

impl<'a> Gguf<'a> {
    /// Parses the header, metadata and tensor infos of a GGUF file, and checks that every
    /// tensor's bytes lie inside `bytes`.
    pub fn parse(bytes: &'a [u8]) -> Result<Gguf<'a>> {
        let mut r = Reader { b: bytes, at: 0 };
        if r.take(4, "the magic")? != b"GGUF" {
            return Err(invalid("not a GGUF file (the magic is not \"GGUF\")"));
        }
        let version = r.u32("the version")?;
        if !(2..=3).contains(&version) {
            return Err(invalid(format!(
                "GGUF version {version} is not read (2 and 3 are)"
            )));
        }
        let tensor_count = r.u64("the tensor count")?;
        let kv_count = r.u64("the metadata count")?;
        let mut metadata = HashMap::new();
        for _ in 0..kv_count {
            let key = r.string("a metadata key")?;
            let ty = r.u32(&key)?;
            let value = r.value(ty, &key, 0)?;
            metadata.insert(key, value);
        }
        let align = match metadata.get("general.alignment") {
            None => 32,
            Some(v) => v
                .as_u64()
                .filter(|a| a.is_power_of_two())
                .ok_or_else(|| invalid("general.alignment is not a power of two"))?,
        };
        // Each tensor info takes at least 24 bytes.
        if tensor_count > (bytes.len() - r.at) as u64 / 24 {
            return Err(invalid(format!(
                "{tensor_count} tensors cannot fit in {} bytes",
                bytes.len()
            )));
        }
        let mut raw = Vec::with_capacity(tensor_count as usize);
        for _ in 0..tensor_count {
            let name = r.string("a tensor name")?;
            let n_dims = r.u32(&name)?;
            if n_dims == 0 || n_dims > 4 {
                return Err(invalid(format!(
                    "{name}: {n_dims} dimensions (1 to 4 read)"
                )));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(r.u64(&name)?);
            }
            let ty = r.u32(&name)?;
            let offset = r.u64(&name)?;
            raw.push((name, dims, ty, offset));
        }
        let start = (r.at as u64).next_multiple_of(align);
        let mut tensors = Vec::with_capacity(raw.len());
        for (name, dims, ty, offset) in raw {
            let kind = TensorType::from_ggml(ty).ok_or_else(|| {
                invalid(format!(
                    "{name}: tensor type {ty} is not supported (F32, F16, Q4_0, Q4_1, Q8_0 are)"
                ))
            })?;
            let n = dims
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d))
                .ok_or_else(|| invalid(format!("{name}: dimensions {dims:?} overflow")))?;
            let len = kind.bytes(n).ok_or_else(|| {
                invalid(format!(
                    "{name}: {dims:?} is not a whole number of {kind:?} blocks"
                ))
            })?;
            let begin = start.checked_add(offset);
            let end = begin.and_then(|b| b.checked_add(len));
            let (Some(begin), Some(end)) = (begin, end) else {
                return Err(invalid(format!("{name}: offset {offset} overflows")));
            };
            if end > bytes.len() as u64 {
                return Err(invalid(format!(
                    "{name}: its bytes {begin}..{end} lie past the end of the file ({} bytes): \
                     truncated?",
                    bytes.len()
                )));
            }
            // Each dimension fits the bytes unless another is 0; on 32-bit targets a huge one
            // beside a 0 would not fit a usize.
            let dims = dims
                .iter()
                .map(|&d| usize::try_from(d).ok())
                .collect::<Option<Vec<usize>>>()
                .filter(|d| {
                    d.iter()
                        .try_fold(1usize, |a, &d| a.checked_mul(d))
                        .is_some()
                })
                .ok_or_else(|| invalid(format!("{name}: dimensions {dims:?} overflow")))?;
            tensors.push(TensorInfo {
                name,
                dims,
                kind,
                range: begin as usize..end as usize,
            });
        }
        Ok(Gguf {
            bytes,
            metadata,
            tensors,
        })
    }

    /// Every tensor's info, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor named `name` and its bytes.
    pub fn tensor(&self, name: &str) -> Result<(&TensorInfo, &'a [u8])> {
        let t = self
            .tensors
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| invalid(format!("no tensor named {name}")))?;
        Ok((t, &self.bytes[t.range.clone()]))
    }

    /// A metadata value, or an error naming the missing key.
    pub fn get(&self, key: &str) -> Result<&Value> {
        self.metadata
            .get(key)
            .ok_or_else(|| invalid(format!("no metadata {key}")))
    }

    /// A metadata value that must be a positive integer that fits a `usize`.
    pub fn count(&self, key: &str) -> Result<usize> {
        self.get(key)?
            .as_u64()
            .filter(|&v| v > 0)
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| invalid(format!("{key} is not a positive integer")))
    }

    /// A metadata value that must be a finite number.
    pub fn number(&self, key: &str) -> Result<f64> {
        self.get(key)?
            .as_f64()
            .filter(|v| v.is_finite())
            .ok_or_else(|| invalid(format!("{key} is not a finite number")))
    }

    /// A metadata value that must be a string.
    pub fn string(&self, key: &str) -> Result<&str> {
        self.get(key)?
            .as_str()
            .ok_or_else(|| invalid(format!("{key} is not a string")))
    }
}
