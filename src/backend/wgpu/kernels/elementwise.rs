//! Elementwise encodings: unary ops and binary ops, same-shape (vec4) or broadcasting.

use bytemuck::{Pod, Zeroable};

use super::super::{WgpuBackend, WgpuStorage};
use super::{range, repeat_len, repeated, u32_of, Kernel};
use crate::backend::Operand;
use crate::error::Result;
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
