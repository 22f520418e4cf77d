//! Elementwise encodings: unary ops and binary ops, same-shape (vec4) or broadcasting.

use bytemuck::{Pod, Zeroable};

use super::super::{WgpuBackend, WgpuStorage};
use super::{range, repeat_len, repeated, u32_of, whole, Kernel, WG};
use crate::backend::Operand;
use crate::error::Result;
use crate::ops::elementwise::{StridedOp, StridedSpec};
use crate::ops::layout::MAX_RANK;
use crate::ops::{BinaryOp, UnaryOp};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct UnaryParams {
    n4: u32,
    _pad: u32,
    p0: f32,
    p1: f32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BinaryParams {
    n: u32,
    base: u32,
    la: u32,
    lb: u32,
}

impl WgpuBackend {
    pub(super) fn encode_unary(
        &self,
        op: UnaryOp,
        x: &WgpuStorage,
        n: usize,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let mut st = s.state();
        let out = s.alloc(&mut st, n as u64 * 4)?;
        let [p0, p1] = op.params();
        let xb = x.buffer()?;
        s.elementwise(
            &mut st,
            Kernel::Unary(op.kind()),
            n as u64,
            true,
            |_, len| {
                Ok(bytemuck::bytes_of(&UnaryParams {
                    n4: len.div_ceil(4) as u32,
                    _pad: 0,
                    p0,
                    p1,
                })
                .to_vec())
            },
            |start, len| vec![range(xb, start, len), range(&out, start, len)],
        )?;
        Ok(s.storage(out))
    }

    pub(super) fn encode_binary(
        &self,
        op: BinaryOp,
        a: Operand<'_, WgpuStorage>,
        b: Operand<'_, WgpuStorage>,
        n: usize,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let mut st = s.state();
        let n = n as u64;
        let out = s.alloc(&mut st, n * 4)?;
        let (ab, bb) = (a.0.buffer()?, b.0.buffer()?);
        let (la, lb) = (a.1 as u64, b.1 as u64);
        if la == n && lb == n {
            s.elementwise(
                &mut st,
                Kernel::Binary(op),
                n,
                true,
                |_, len| {
                    Ok(bytemuck::bytes_of(&BinaryParams {
                        n: len.div_ceil(4) as u32,
                        base: 0,
                        la: 0,
                        lb: 0,
                    })
                    .to_vec())
                },
                |start, len| {
                    vec![
                        range(ab, start, len),
                        range(bb, start, len),
                        range(&out, start, len),
                    ]
                },
            )?;
        } else {
            for (l, name) in [
                (la, "the broadcast left operand"),
                (lb, "the broadcast right operand"),
            ] {
                if l != n {
                    s.check_binding(name, l)?;
                }
            }
            u32_of(n, "a broadcasting op's element count")?;
            s.elementwise(
                &mut st,
                Kernel::BinaryBroadcast(op),
                n,
                false,
                |start, len| {
                    let p = BinaryParams {
                        n: len as u32,
                        base: start as u32,
                        la: repeat_len(la, n),
                        lb: repeat_len(lb, n),
                    };
                    Ok(bytemuck::bytes_of(&p).to_vec())
                },
                |start, len| {
                    vec![
                        repeated(ab, la, n, start, len),
                        repeated(bb, lb, n, start, len),
                        range(&out, start, len),
                    ]
                },
            )?;
        }
        Ok(s.storage(out))
    }
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct WhereParams {
    n: u32,
    base: u32,
    lc: u32,
    la: u32,
    lb: u32,
    _pad: [u32; 3],
}

impl WgpuBackend {
    /// `where(cond, a, b)` over `n` elements, each operand read at `i % len` (see
    /// elementwise_where.wgsl), in binding-sized chunks.
    pub(super) fn encode_where(
        &self,
        c: Operand<'_, WgpuStorage>,
        a: Operand<'_, WgpuStorage>,
        b: Operand<'_, WgpuStorage>,
        n: usize,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let mut st = s.state();
        let n = n as u64;
        let out = s.alloc(&mut st, n * 4)?;
        let ops = [c, a, b].map(|(x, l)| (x, l as u64));
        let bufs = [ops[0].0.buffer()?, ops[1].0.buffer()?, ops[2].0.buffer()?];
        for (_, l) in ops {
            if l != n {
                s.check_binding("a where operand", l)?;
            }
        }
        u32_of(n, "a where's element count")?;
        s.elementwise(
            &mut st,
            Kernel::Where,
            n,
            false,
            |start, len| {
                let p = WhereParams {
                    n: len as u32,
                    base: start as u32,
                    lc: repeat_len(ops[0].1, n),
                    la: repeat_len(ops[1].1, n),
                    lb: repeat_len(ops[2].1, n),
                    _pad: [0; 3],
                };
                Ok(bytemuck::bytes_of(&p).to_vec())
            },
            |start, len| {
                vec![
                    repeated(bufs[0], ops[0].1, n, start, len),
                    repeated(bufs[1], ops[1].1, n, start, len),
                    repeated(bufs[2], ops[2].1, n, start, len),
                    range(&out, start, len),
                ]
            },
        )?;
        Ok(s.storage(out))
    }
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct StridedParams {
    n: u32,
    rank: u32,
    a_offset: u32,
    b_offset: u32,
    p0: f32,
    p1: f32,
    _pad: [u32; 2],
    shape: [u32; MAX_RANK],
    a_strides: [u32; MAX_RANK],
    b_strides: [u32; MAX_RANK],
}

impl WgpuBackend {
    /// A unary or binary op over operands read through strides (elementwise_strided.wgsl):
    /// one dispatch, each operand bound whole up to the furthest element it reads.
    pub(super) fn encode_strided(
        &self,
        a: &WgpuStorage,
        b: Option<&WgpuStorage>,
        spec: &StridedSpec,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let mut st = s.state();
        let n = spec.n as u64;
        let out = s.alloc(&mut st, n * 4)?;
        if n == 0 {
            return Ok(s.storage(out));
        }
        s.check_binding("a strided op's output", n)?;
        let mut p = StridedParams {
            n: u32_of(n, "a strided op's elements")?,
            rank: spec.shape.len() as u32,
            a_offset: u32_of(spec.a.offset as u64, "a strided operand's offset")?,
            ..StridedParams::zeroed()
        };
        for (d, &size) in spec.shape.iter().enumerate() {
            p.shape[d] = size as u32;
            p.a_strides[d] = u32_of(spec.a.strides[d] as u64, "a strided operand's stride")?;
        }
        let a_len = spec.a.extent as u64;
        s.check_binding("a strided op's left operand", a_len)?;
        let (b_buf, b_len) = match (b, &spec.b) {
            (Some(b), Some(sb)) => {
                p.b_offset = u32_of(sb.offset as u64, "a strided operand's offset")?;
                for (d, &st) in sb.strides.iter().enumerate() {
                    p.b_strides[d] = u32_of(st as u64, "a strided operand's stride")?;
                }
                s.check_binding("a strided op's right operand", sb.extent as u64)?;
                (b.buffer()?, sb.extent as u64)
            }
            _ => (a.buffer()?, a_len),
        };
        let kernel = match spec.op {
            StridedOp::Unary(op) => {
                [p.p0, p.p1] = op.params();
                Kernel::StridedUnary(op.kind())
            }
            StridedOp::Binary(op) => Kernel::StridedBinary(op),
            StridedOp::Swiglu => Kernel::StridedGated(UnaryOp::Silu.kind(), BinaryOp::Mul),
        };
        let binds = [
            whole(a.buffer()?, a_len),
            whole(b_buf, b_len),
            whole(&out, n),
        ];
        s.dispatch(
            &mut st,
            kernel,
            bytemuck::bytes_of(&p),
            &binds,
            n.div_ceil(WG),
        )?;
        Ok(s.storage(out))
    }
}
