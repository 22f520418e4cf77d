//! Slice in, slice out: one op on host data for people who do not need tensors. Each call
//! uploads, runs the op on the device and reads back (built on the tensor path).
//!
//! ```no_run
//! # async fn demo() -> gpukit::Result<()> {
//! let device = gpukit::Device::new().await?;
//! let mut out = vec![0.0; 3];
//! device.relu_slice(&[1.0, -2.0, 3.0], &mut out).await?;
//! assert_eq!(out, [1.0, 0.0, 3.0]);
//! # Ok(()) }
//! ```

use crate::error::{Error, Result};
use crate::ops::{BinaryOp, UnaryOp};
use crate::Device;

fn check_out(op: &'static str, input: usize, out: usize) -> Result<()> {
    if input != out {
        return Err(Error::shape(
            op,
            &[input],
            &[out],
            "(the output slice must be as long as the input)",
        ));
    }
    Ok(())
}

impl Device {
    /// `out[i] = op(input[i])`.
    pub async fn unary_slice(&self, op: UnaryOp, input: &[f32], out: &mut [f32]) -> Result<()> {
        check_out(op.name(), input.len(), out.len())?;
        let y = self
            .tensor(input, &[input.len()])?
            .unary(op)?
            .read()
            .await?;
        out.copy_from_slice(&y);
        Ok(())
    }

    /// `out[i] = relu(input[i])`.
    pub async fn relu_slice(&self, input: &[f32], out: &mut [f32]) -> Result<()> {
        self.unary_slice(UnaryOp::Relu, input, out).await
    }

    /// `out[i] = op(a[i], b[i])`; `a` and `b` must have the same length as `out`.
    pub async fn binary_slice(
        &self,
        op: BinaryOp,
        a: &[f32],
        b: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        if a.len() != b.len() {
            return Err(Error::shape(
                op.name(),
                &[a.len()],
                &[b.len()],
                "(slices must have the same length)",
            ));
        }
        check_out(op.name(), a.len(), out.len())?;
        let ta = self.tensor(a, &[a.len()])?;
        let tb = self.tensor(b, &[b.len()])?;
        out.copy_from_slice(&ta.binary(op, &tb)?.read().await?);
        Ok(())
    }

    /// `out = a + b`.
    pub async fn add_slice(&self, a: &[f32], b: &[f32], out: &mut [f32]) -> Result<()> {
        self.binary_slice(BinaryOp::Add, a, b, out).await
    }

    /// softmax of one row.
    pub async fn softmax_slice(&self, input: &[f32], out: &mut [f32]) -> Result<()> {
        check_out("softmax", input.len(), out.len())?;
        out.copy_from_slice(
            &self
                .tensor(input, &[input.len()])?
                .softmax()?
                .read()
                .await?,
        );
        Ok(())
    }

    /// The sum of a slice.
    pub async fn sum_slice(&self, input: &[f32]) -> Result<f32> {
        self.tensor(input, &[input.len()])?
            .sum()?
            .read_scalar()
            .await
    }
}
