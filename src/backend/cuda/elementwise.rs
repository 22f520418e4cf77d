//! Elementwise launches that do not fit `ops.rs`'s one-call shape: operands read through
//! strides (views, and broadcasts along any axis as zero strides).

use bytemuck::{Pod, Zeroable};

use super::module::Entry;
use super::ops::p;
use super::{Arg, CudaBackend, CudaStorage};
use crate::error::Result;
use crate::ops::elementwise::{StridedOp, StridedSpec};
use crate::ops::layout::MAX_RANK;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct StridedParams {
    n: u64,
    rank: u64,
    a_offset: u64,
    b_offset: u64,
    shape: [u64; MAX_RANK],
    a_strides: [u64; MAX_RANK],
    b_strides: [u64; MAX_RANK],
}

impl CudaBackend {
    /// A unary or binary op over operands read through strides (`strided` in
    /// shaders/cuda/elementwise.cu): one launch, a thread an output element.
    pub(super) fn launch_strided(
        &self,
        a: &CudaStorage,
        b: Option<&CudaStorage>,
        spec: &StridedSpec,
    ) -> Result<CudaStorage> {
        let out = self.alloc(spec.n)?;
        if spec.n == 0 {
            return Ok(out);
        }
        let mut c = StridedParams::zeroed();
        c.n = spec.n as u64;
        c.rank = spec.shape.len().max(1) as u64;
        c.a_offset = spec.a.offset as u64;
        c.shape[0] = 1;
        for (d, &size) in spec.shape.iter().enumerate() {
            c.shape[d] = size as u64;
            c.a_strides[d] = spec.a.strides[d] as u64;
        }
        if let Some(sb) = &spec.b {
            c.b_offset = sb.offset as u64;
            for (d, &s) in sb.strides.iter().enumerate() {
                c.b_strides[d] = s as u64;
            }
        }
        // `gate`: the binary op takes unary(a) (SwiGLU).
        let (kind, binary, gate, [p0, p1]) = match spec.op {
            StridedOp::Unary(op) => (op.kind() as u32, u32::MAX, 0, op.params()),
            StridedOp::Binary(op) => (0, op as u32, 0, [0.0, 0.0]),
            StridedOp::Swiglu => {
                let (silu, mul) = (crate::ops::UnaryOp::Silu, crate::ops::BinaryOp::Mul);
                (silu.kind() as u32, mul as u32, 1, [0.0; 2])
            }
        };
        let args = [
            Arg::Raw(bytemuck::bytes_of(&c)),
            Arg::I(kind),
            Arg::I(binary),
            Arg::I(gate),
            Arg::F(p0),
            Arg::F(p1),
            p(a),
            p(b.unwrap_or(a)),
            p(&out),
        ];
        self.launch_1d(Entry::Strided, spec.n as u64, &args)?;
        Ok(out)
    }
}
