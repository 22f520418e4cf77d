//! Conversions between dtypes, element by element, with the `half` crate's IEEE roundings.

use super::par;
use crate::dtype::DType;
use crate::ops::cast::CastSpec;

/// One element of `from` in `words`, as a value to convert: a float, or an integer's bits.
enum Value {
    Float(f32),
    Int(i32),
    Uint(u32),
}

fn load(from: DType, words: &[f32], i: usize) -> Value {
    let half = || (words[i / 2].to_bits() >> (16 * (i % 2))) as u16;
    match from {
        DType::F32 => Value::Float(words[i]),
        DType::F16 => Value::Float(half::f16::from_bits(half()).to_f32()),
        DType::BF16 => Value::Float(half::bf16::from_bits(half()).to_f32()),
        DType::I32 => Value::Int(words[i].to_bits() as i32),
        DType::U32 => Value::Uint(words[i].to_bits()),
    }
}

/// The element's bits in `to` (16 bits for halves).
fn store(to: DType, v: Value) -> u32 {
    let float = |v: &Value| match *v {
        Value::Float(f) => f,
        Value::Int(i) => i as f32,
        Value::Uint(u) => u as f32,
    };
    match to {
        DType::F32 => float(&v).to_bits(),
        DType::F16 => u32::from(half::f16::from_f32(float(&v)).to_bits()),
        DType::BF16 => u32::from(half::bf16::from_f32(float(&v)).to_bits()),
        // Rust's `as`: truncation, saturation, NaN to 0; integers keep their bits.
        DType::I32 => match v {
            Value::Float(f) => f as i32 as u32,
            Value::Int(i) => i as u32,
            Value::Uint(u) => u,
        },
        DType::U32 => match v {
            Value::Float(f) => f as u32,
            Value::Int(i) => i as u32,
            Value::Uint(u) => u,
        },
    }
}

/// Halves to f32 and f32 to halves, the conversions of half-precision weights and
/// activations, a slice at a time (the `half` crate converts f16 with F16C where the CPU has
/// it; bf16 widens by a shift): `None` for any other pair, or a short input. Native only: in
/// wasm it would cost the npm package more bytes than it saves time.
#[cfg(native)]
fn cast_floats(x: &[f32], s: CastSpec, out: &mut [f32]) -> Option<()> {
    use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
    match (s.from, s.to) {
        (DType::F16 | DType::BF16, DType::F32) => {
            let src = bytemuck::cast_slice::<f32, u16>(x).get(..s.n)?;
            par::chunks_mut(&mut out[..s.n], par::GRAIN, |start, chunk| {
                let from = &src[start..start + chunk.len()];
                if s.from == DType::F16 {
                    from.reinterpret_cast::<half::f16>()
                        .convert_to_f32_slice(chunk);
                } else {
                    from.reinterpret_cast::<half::bf16>()
                        .convert_to_f32_slice(chunk);
                }
            });
            Some(())
        }
        (DType::F32, DType::F16 | DType::BF16) => {
            let src = x.get(..s.n)?;
            let dst: &mut [u16] = bytemuck::cast_slice_mut(out);
            par::chunks_mut(&mut dst[..s.n], par::GRAIN, |start, chunk| {
                let from = &src[start..start + chunk.len()];
                if s.to == DType::F16 {
                    chunk
                        .reinterpret_cast_mut::<half::f16>()
                        .convert_from_f32_slice(from);
                } else {
                    chunk
                        .reinterpret_cast_mut::<half::bf16>()
                        .convert_from_f32_slice(from);
                }
            });
            Some(())
        }
        _ => None,
    }
}

/// The converted words of `s.n` elements.
pub(super) fn cast(x: &[f32], s: CastSpec) -> Vec<f32> {
    let words = (s.n * s.to.size()).div_ceil(4);
    let per = 4 / s.to.size();
    let mut out = vec![0f32; words];
    #[cfg(native)]
    if let Some(()) = cast_floats(x, s, &mut out) {
        return out;
    }
    par::chunks_mut(&mut out, par::GRAIN / 2, |start, chunk| {
        for (j, w) in chunk.iter_mut().enumerate() {
            let first = (start + j) * per;
            let mut bits = 0u32;
            for k in 0..per.min(s.n - first) {
                let b = store(s.to, load(s.from, x, first + k));
                bits |= b << (16 * k);
            }
            *w = f32::from_bits(bits);
        }
    });
    out
}
