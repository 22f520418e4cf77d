//! Element types: [`DType`], the host types that carry them ([`Element`]), and how tensors of
//! each are held in device memory.
//!
//! Every backend stores a tensor in 32-bit words: an f32, i32 or u32 element per word, two f16
//! or bf16 elements per word (the element at the even index in the low half, as little-endian
//! memory lays them out). Half-precision tensors therefore take half the memory of f32 ones on
//! every backend, WebGPU adapters without `shader-f16` included: kernels unpack the halves with
//! bit operations.
//!
//! Conversions ([`Tensor::cast`](crate::Tensor::cast)) follow IEEE and Rust's `as`:
//! - to f16 and bf16: round to nearest, ties to even; beyond the largest finite value the
//!   result is ±inf (f16 saturates to inf as IEEE does); NaN stays NaN;
//! - float to i32/u32: truncation toward zero, saturating at the type's bounds; NaN becomes 0;
//! - i32 to u32 and back: the same bits (two's complement wraps);
//! - integers to floats: through f32, rounded to nearest.

use crate::error::{Error, Result};

/// An element type: every backend stores and computes on each of them (see the module docs
/// for how they are held).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float (half).
    F16,
    /// bfloat16: the upper 16 bits of an f32.
    BF16,
    /// 32-bit signed integer.
    I32,
    /// 32-bit unsigned integer.
    U32,
}

impl DType {
    /// Every dtype.
    pub const ALL: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U32];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// The code kernels receive: 0 f32, 1 f16, 2 bf16, 3 i32, 4 u32.
    pub(crate) fn code(self) -> u32 {
        self as u32
    }

    /// Whether it is a floating-point type (f32, f16, bf16).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// The lowercase name (`"f32"`, `"bf16"`, ...), as JS and JSON spell it.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::U32 => "u32",
        }
    }
}

impl std::str::FromStr for DType {
    type Err = Error;

    /// Parses a name of [`DType::name`].
    fn from_str(s: &str) -> Result<DType> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| Error::InvalidArgument {
                op: "dtype",
                reason: format!("unknown dtype {s:?} (known: f32, f16, bf16, i32, u32)"),
            })
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A host type that is the element of one [`DType`]: what typed uploads take
/// ([`Device::tensor_of`](crate::Device::tensor_of)) and typed reads return
/// ([`Tensor::read_as`](crate::Tensor::read_as)).
pub trait Element: Copy + Send + Sync + 'static + private::Sealed {
    /// The dtype this type carries.
    const DTYPE: DType;
    /// Appends the element's little-endian bytes.
    fn put(self, out: &mut Vec<u8>);
    /// The element from its little-endian bytes (`DTYPE.size()` of them).
    fn take(bytes: &[u8]) -> Self;
}

mod private {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
    impl Sealed for i32 {}
    impl Sealed for u32 {}
}

macro_rules! element {
    ($ty:ty, $dtype:ident, $n:literal) => {
        impl Element for $ty {
            const DTYPE: DType = DType::$dtype;
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn take(bytes: &[u8]) -> Self {
                let mut b = [0u8; $n];
                b.copy_from_slice(&bytes[..$n]);
                <$ty>::from_le_bytes(b)
            }
        }
    };
}
element!(f32, F32, 4);
element!(half::f16, F16, 2);
element!(half::bf16, BF16, 2);
element!(i32, I32, 4);
element!(u32, U32, 4);

/// The 32-bit words that hold `n` elements of `dtype` (checked: `n` comes from input).
pub(crate) fn words(op: &'static str, dtype: DType, n: usize) -> Result<usize> {
    Ok(crate::shape::mul(op, n, dtype.size())?.div_ceil(4))
}

/// Little-endian bytes (any alignment, any length) as the words a backend stores, the last
/// one padded with zeros. The words are bit patterns: f32 is only their carrier.
pub(crate) fn pack(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks(4)
        .map(|c| {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            f32::from_bits(u32::from_le_bytes(w))
        })
        .collect()
}

/// The first `len` bytes of stored words.
pub(crate) fn unpack(words: &[f32], len: usize) -> Vec<u8> {
    let mut out: Vec<u8> = words
        .iter()
        .flat_map(|w| w.to_bits().to_le_bytes())
        .collect();
    out.truncate(len);
    out
}

/// The elements of `dtype` that `words` hold, as f32 values (exact for f16, bf16 and
/// integers within ±2^24; larger integers round to nearest).
pub(crate) fn to_f32(dtype: DType, words: &[f32], n: usize) -> Vec<f32> {
    let bits = |i: usize| words[i].to_bits();
    let half = |i: usize| (bits(i / 2) >> (16 * (i % 2))) as u16;
    (0..n)
        .map(|i| match dtype {
            DType::F32 => words[i],
            DType::F16 => half::f16::from_bits(half(i)).to_f32(),
            DType::BF16 => half::bf16::from_bits(half(i)).to_f32(),
            DType::I32 => bits(i) as i32 as f32,
            DType::U32 => bits(i) as f32,
        })
        .collect()
}

/// The elements of `T` that `words` hold (their dtype must be `T`'s).
pub(crate) fn to_elements<T: Element>(words: &[f32], n: usize) -> Vec<T> {
    let size = T::DTYPE.size();
    let bytes = unpack(words, n * size);
    bytes.chunks_exact(size).map(T::take).collect()
}

/// `data` as stored words.
pub(crate) fn from_elements<T: Element>(data: &[T]) -> Vec<f32> {
    let mut bytes = Vec::with_capacity(std::mem::size_of_val(data));
    for &v in data {
        v.put(&mut bytes);
    }
    pack(&bytes)
}

/// The error of an op that does not take tensors of `dtype`.
pub(crate) fn unsupported(op: &'static str, dtype: DType, takes: &str) -> Error {
    Error::InvalidArgument {
        op,
        reason: format!("{op} takes {takes} tensors, not {dtype} (convert with `cast`)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_hold_halves_in_little_endian_order() {
        let v = [
            half::f16::from_f32(1.5),
            half::f16::from_f32(-2.0),
            half::f16::from_f32(3.0),
        ];
        let w = from_elements(&v);
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].to_bits(), 0xc000_3e00);
        assert_eq!(to_f32(DType::F16, &w, 3), vec![1.5, -2.0, 3.0]);
        assert_eq!(to_elements::<half::f16>(&w, 3), v.to_vec());
        let ints = from_elements(&[-1i32, 7]);
        assert_eq!(to_f32(DType::I32, &ints, 2), vec![-1.0, 7.0]);
        assert_eq!(to_f32(DType::U32, &ints, 1), vec![4294967295.0]);
        assert_eq!(words("t", DType::BF16, 5).unwrap(), 3);
        assert!(words("t", DType::F16, usize::MAX).is_err());
    }
}
