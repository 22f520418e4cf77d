//! Checked sizes. Every element count, byte size, span and sum that gpukit computes from input
//! goes through these helpers, so a shape whose product does not fit `usize` (from
//! `[65536, 65536]` on wasm32, from `[2^32, 2^32]` natively) is an [`Error::LimitExceeded`]
//! instead of a wrapped number that reaches a kernel or an allocation.
//!
//! The rule the rest of the crate relies on: every [`Tensor`](crate::Tensor) that exists has a
//! shape whose element count, and whose size in bytes, fit `usize` and its device's
//! `max_buffer` ([`Device::check_output`](crate::Device) enforces it for every op's output,
//! [`Device::tensor`](crate::Device::tensor) and `reshape` for the rest). Arithmetic over the
//! sizes of existing tensors therefore cannot overflow; arithmetic mixing them with other
//! numbers from the caller (padding, offsets, counts) uses [`mul`] and [`add`].

use crate::error::{Error, Result};

/// The limit named when a size does not fit the machine's address range.
const ADDRESS_RANGE: &str = "address range (usize)";

#[cold]
#[inline(never)]
fn overflow(op: &'static str, what: String) -> Error {
    Error::LimitExceeded {
        what: format!("{op}: {what}"),
        limit: ADDRESS_RANGE,
        needed: u64::MAX,
        max: usize::MAX as u64,
    }
}

/// `a * b`, or an error naming `op` when it overflows.
#[inline(never)]
pub(crate) fn mul(op: &'static str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b)
        .ok_or_else(|| overflow(op, format!("{a} x {b} overflows")))
}

/// `a + b`, or an error naming `op` when it overflows.
#[inline(never)]
pub(crate) fn add(op: &'static str, a: usize, b: usize) -> Result<usize> {
    a.checked_add(b)
        .ok_or_else(|| overflow(op, format!("{a} + {b} overflows")))
}

/// The number of elements of `shape`, or an error when the product of its non-zero axes
/// overflows. Zero axes are left out of the check on purpose: a valid shape then has no
/// sub-product (rows before a last axis, a plane, a batch) that overflows, even when it holds
/// no elements.
#[inline(never)]
pub(crate) fn numel(op: &'static str, shape: &[usize]) -> Result<usize> {
    let nonzero = shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1usize, |n, &d| n.checked_mul(d));
    match nonzero {
        Some(_) if shape.contains(&0) => Ok(0),
        Some(n) => Ok(n),
        None => Err(overflow(
            op,
            format!("the shape {shape:?} has more elements than fit"),
        )),
    }
}

/// The sum of `parts`, or an error when it overflows.
#[inline(never)]
pub(crate) fn sum(op: &'static str, parts: impl IntoIterator<Item = usize>) -> Result<usize> {
    parts
        .into_iter()
        .try_fold(0usize, |s, p| s.checked_add(p))
        .ok_or_else(|| overflow(op, "the sizes add up to more than fits".into()))
}

/// Checks that a tensor of `elements` elements of `elem_bytes` bytes fits `max_bytes` (the
/// device's largest buffer) and returns its size in bytes.
#[inline(never)]
pub(crate) fn bytes(
    op: &'static str,
    shape: &[usize],
    elements: usize,
    elem_bytes: usize,
    max_bytes: u64,
) -> Result<u64> {
    let needed = (elements as u64)
        .checked_mul(elem_bytes as u64)
        .filter(|&b| b <= isize::MAX as u64)
        .ok_or_else(|| overflow(op, format!("the shape {shape:?} has more bytes than fit")))?;
    if needed > max_bytes {
        return Err(Error::LimitExceeded {
            what: format!("{op}: a tensor of shape {shape:?}"),
            limit: "max_buffer_size",
            needed,
            max: max_bytes,
        });
    }
    Ok(needed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_and_sums_that_overflow_are_errors() {
        assert_eq!(numel("t", &[2, 3, 4]).unwrap(), 24);
        assert_eq!(numel("t", &[]).unwrap(), 1);
        assert_eq!(numel("t", &[usize::MAX, 0]).unwrap(), 0);
        assert!(numel("t", &[1 << 40, 1 << 40, 0]).is_err());
        assert!(numel("t", &[usize::MAX, usize::MAX])
            .unwrap_err()
            .is_resource());
        assert!(numel("t", &[1 << 40, 1 << 40]).is_err());
        assert!(mul("t", usize::MAX, 2).is_err());
        assert!(add("t", usize::MAX, 1).is_err());
        assert_eq!(sum("t", [1, 2, 3]).unwrap(), 6);
        assert!(sum("t", [usize::MAX, 1]).is_err());
    }

    #[test]
    fn byte_sizes_are_checked_against_the_limit() {
        assert_eq!(bytes("t", &[4], 4, 4, 16).unwrap(), 16);
        let e = bytes("t", &[5], 5, 4, 16).unwrap_err();
        assert!(matches!(
            e,
            Error::LimitExceeded {
                needed: 20,
                max: 16,
                ..
            }
        ));
        assert!(bytes("t", &[usize::MAX], usize::MAX, 4, u64::MAX).is_err());
    }
}

/// How two shapes combine (NumPy's rules): the output shape, how many elements of each operand
/// repeat (`out[i] = op(a[i % a_len], b[i % b_len])`), and whether an operand must first be
/// expanded to the output shape because no such repeat describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Broadcast {
    pub shape: Vec<usize>,
    pub a_len: usize,
    pub b_len: usize,
    /// `a` is materialised to `shape` first (then `a_len` is the output's length).
    pub expand_a: bool,
    pub expand_b: bool,
}

/// NumPy broadcasting: shapes are aligned at their last axis, and each pair of sizes must be
/// equal or contain a 1 (a missing axis counts as 1). An operand whose shape, without its
/// leading 1s, is the tail of the output shape (a scalar, a row, `[12, 384]` against
/// `[3, 12, 384]`) is read by repetition; any other (`[3, 1]` against `[3, 384]`) is expanded
/// by a strided copy first.
pub(crate) fn broadcast(op: &'static str, a: &[usize], b: &[usize]) -> Result<Broadcast> {
    let rank = a.len().max(b.len());
    let size = |s: &[usize], i: usize| {
        // Axis i of the output, aligned at the last axis; a missing axis is 1.
        (i + s.len()).checked_sub(rank).map_or(1, |j| s[j])
    };
    let mut shape = Vec::with_capacity(rank);
    for i in 0..rank {
        let (x, y) = (size(a, i), size(b, i));
        shape.push(match (x, y) {
            _ if x == y => x,
            (1, _) => y,
            (_, 1) => x,
            _ => {
                return Err(Error::shape(
                    op,
                    a,
                    b,
                    "(shapes broadcast when, from the last axis, each pair of sizes is equal or one is 1)",
                ))
            }
        });
    }
    let repeats = |s: &[usize]| {
        let lead = s.iter().take_while(|&&d| d == 1).count();
        shape.ends_with(&s[lead..])
    };
    let (expand_a, expand_b) = (!repeats(a), !repeats(b));
    let len = |s: &[usize], expand: bool| -> Result<usize> {
        crate::shape::numel(op, if expand { &shape } else { s })
    };
    Ok(Broadcast {
        a_len: len(a, expand_a)?,
        b_len: len(b, expand_b)?,
        expand_a,
        expand_b,
        shape,
    })
}
