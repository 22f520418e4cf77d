//! How each op is encoded: which kernels, with which parameters, over which buffer ranges.
//!
//! Elementwise ops larger than the device's storage-binding limit run in chunks, each bound at
//! an aligned offset. Reductions and softmax read their input in one binding and return
//! [`Error::LimitExceeded`] naming the limit when it does not fit.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use super::pipelines::Kernel;
use super::{Shared, State, WgpuBackend, WgpuStorage};
use crate::backend::{BackendOps, Operand};
use crate::error::{Error, Result};
use crate::ops::attention::AttentionSpec;
use crate::ops::conv::{ConvSpec, PoolSpec};
use crate::ops::layout::{CopySpec, MAX_RANK};
use crate::ops::matmul::MatmulSpec;
use crate::ops::norm::NormSpec;
use crate::ops::RopeLayout;
use crate::ops::{BinaryOp, ReduceOp, UnaryOp};
use crate::quant::{QuantParts, BLOCK};

/// Invocations per workgroup of every kernel (WebGPU guarantees 256).
const WG: u64 = 256;
/// Columns one reduction or softmax workgroup covers before the row is split into chunks.
const CHUNK: u64 = 4096;

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

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct RowParams {
    rows: u32,
    cols: u32,
    chunks: u32,
    chunk_len: u32,
    /// `scale` (f32 bits) for reductions, element count for softmax.
    extra: u32,
    _pad: [u32; 3],
}

/// Rows and columns of the output tile one matmul workgroup computes (shaders/matmul.wgsl).
const MATMUL_TILE: u64 = 64;
/// Up to this many rows against a `[n, k]` weight use shaders/gemv.wgsl.
const GEMV_MAX_ROWS: u64 = 8;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct MatmulParams {
    m: u32,
    n: u32,
    k: u32,
    a_stride: u32,
    b_stride: u32,
    _pad: [u32; 3],
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct NormParams {
    rows: u32,
    cols: u32,
    eps: f32,
    _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct CopyParams {
    n: u32,
    rank: u32,
    in_offset: u32,
    out_offset: u32,
    shape: [u32; MAX_RANK],
    in_strides: [u32; MAX_RANK],
    out_strides: [u32; MAX_RANK],
}

/// Elements of the source a strided copy can reach (one past the furthest).
fn src_extent(spec: &CopySpec) -> u64 {
    let far: usize = spec
        .shape
        .iter()
        .zip(&spec.src_strides)
        .map(|(&d, &s)| d.saturating_sub(1) * s)
        .sum();
    (spec.src_offset + far + 1) as u64
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct AttentionParams {
    hq: u32,
    hkv: u32,
    sq: u32,
    sk: u32,
    d: u32,
    dv: u32,
    scale: f32,
    _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct TopKParams {
    rows: u32,
    cols: u32,
    k: u32,
    r0: u32,
    r1: u32,
    _pad: [u32; 3],
}

/// Elements one topk workgroup visits per dispatch, at most: rounds are split across dispatches
/// so that no workgroup runs long.
const TOPK_VISITS_PER_DISPATCH: u64 = 1 << 20;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct MnkParams {
    m: u32,
    n: u32,
    k: u32,
    _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct ConvParams {
    n: u32,
    c: u32,
    h: u32,
    w: u32,
    o: u32,
    kh: u32,
    kw: u32,
    oh: u32,
    ow: u32,
    sh: u32,
    sw: u32,
    ph: u32,
    pw: u32,
    dh: u32,
    dw: u32,
    cg: u32,
    og: u32,
    _pad: [u32; 3],
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct PoolParams {
    planes: u32,
    h: u32,
    w: u32,
    oh: u32,
    ow: u32,
    kh: u32,
    kw: u32,
    sh: u32,
    sw: u32,
    ph: u32,
    pw: u32,
    _pad: u32,
}

/// A buffer range bound to a kernel.
#[derive(Clone, Copy)]
struct Bind<'a> {
    buffer: &'a wgpu::Buffer,
    offset: u64,
    size: u64,
}

fn whole(buffer: &wgpu::Buffer, elements: u64) -> Bind<'_> {
    Bind {
        buffer,
        offset: 0,
        size: (elements * 4).next_multiple_of(16).max(16),
    }
}

fn u32_of(v: u64, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::LimitExceeded {
        what: what.to_string(),
        limit: "u32 index range of the shaders",
        needed: v,
        max: u64::from(u32::MAX),
    })
}

impl Shared {
    /// Elements per chunk of an elementwise op: the largest count whose bytes fit one storage
    /// binding and start at an aligned offset.
    fn chunk_elems(&self) -> u64 {
        let align = u64::from(self.limits.min_storage_buffer_offset_alignment).max(16);
        (self.limits.max_storage_buffer_binding_size / align * align / 4).max(4)
    }

    fn check_binding(&self, what: &str, elements: u64) -> Result<()> {
        let needed = (elements * 4).next_multiple_of(16);
        if needed > self.limits.max_storage_buffer_binding_size {
            return Err(Error::LimitExceeded {
                what: what.to_string(),
                limit: "max_storage_buffer_binding_size",
                needed,
                max: self.limits.max_storage_buffer_binding_size,
            });
        }
        Ok(())
    }

    /// Splits `groups` workgroups into a 2-D grid within the per-dimension limit.
    fn grid(&self, groups: u64) -> Result<(u32, u32)> {
        let max = u64::from(self.limits.max_compute_workgroups_per_dimension);
        if groups <= max {
            return Ok((groups as u32, 1));
        }
        let y = groups.div_ceil(max);
        if y > max {
            return Err(Error::LimitExceeded {
                what: format!("a dispatch of {groups} workgroups"),
                limit: "max_compute_workgroups_per_dimension squared",
                needed: groups,
                max: max * max,
            });
        }
        Ok((groups.div_ceil(y) as u32, y as u32))
    }

    /// Records one dispatch into the open compute pass.
    fn dispatch(
        &self,
        st: &mut State,
        kernel: Kernel,
        params: &[u8],
        binds: &[Bind<'_>],
        groups: u64,
    ) -> Result<()> {
        if groups == 0 {
            return Ok(());
        }
        let (gx, gy) = self.grid(groups)?;
        self.dispatch_grid(st, kernel, params, binds, [gx, gy, 1])
    }

    /// Records one dispatch of an explicit grid of workgroups.
    fn dispatch_grid(
        &self,
        st: &mut State,
        kernel: Kernel,
        params: &[u8],
        binds: &[Bind<'_>],
        [gx, gy, gz]: [u32; 3],
    ) -> Result<()> {
        if gx == 0 || gy == 0 || gz == 0 {
            return Ok(());
        }
        let offset = match st.recorder.push_params(params) {
            Some(o) => o,
            None => {
                self.submit(st);
                st.recorder.push_params(params).ok_or(Error::Backend {
                    backend: self.backend,
                    detail: "dispatch parameters larger than the parameter buffer".into(),
                })?
            }
        };
        let pipeline = st
            .pipelines
            .get(&self.device, kernel, || lock_take(&self.error))?
            .clone();
        let layout = st
            .pipelines
            .bind_group_layout(&self.device, kernel.layout())
            .clone();
        let params_size = (params.len() as u64).next_multiple_of(16);
        let mut ranges = vec![(st.recorder.params_buffer.clone(), offset, params_size)];
        ranges.extend(binds.iter().map(|b| (b.buffer.clone(), b.offset, b.size)));
        let bind_group = st
            .bind_groups
            .get(&self.device, kernel.layout(), &layout, ranges);
        let pass = st.recorder.pass(&self.device);
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(gx, gy, gz);
        st.recorder.dispatches += 1;
        Ok(())
    }

    /// Runs an elementwise kernel over `n` elements in binding-sized chunks. `binds` gives the
    /// bindings of one chunk (from its first element and length); `params` its parameters.
    #[allow(clippy::too_many_arguments)]
    fn elementwise<'b>(
        &self,
        st: &mut State,
        kernel: Kernel,
        n: u64,
        vec4: bool,
        params: impl Fn(u64, u64) -> Result<Vec<u8>>,
        binds: impl Fn(u64, u64) -> Vec<Bind<'b>>,
    ) -> Result<()> {
        let chunk = self.chunk_elems();
        let mut start = 0;
        while start < n {
            let len = chunk.min(n - start);
            let threads = if vec4 { len.div_ceil(4) } else { len };
            let p = params(start, len)?;
            self.dispatch(st, kernel, &p, &binds(start, len), threads.div_ceil(WG))?;
            start += len;
        }
        Ok(())
    }
}

fn lock_take(m: &std::sync::Mutex<Option<Error>>) -> Option<String> {
    super::lock(m).take().map(|e| e.to_string())
}

/// The range of a full operand that one chunk reads.
fn range(buffer: &wgpu::Buffer, start: u64, len: u64) -> Bind<'_> {
    Bind {
        buffer,
        offset: start * 4,
        size: (len * 4).next_multiple_of(16),
    }
}

impl WgpuBackend {
    fn begin(&self) -> Result<&Arc<Shared>> {
        self.shared.check()?;
        Ok(&self.shared)
    }
}

impl BackendOps for WgpuBackend {
    type Storage = WgpuStorage;

    fn upload(&self, data: &[f32]) -> Result<WgpuStorage> {
        self.shared.upload(data)
    }

    fn unary(&self, op: UnaryOp, x: &WgpuStorage, n: usize) -> Result<WgpuStorage> {
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

    fn binary(
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
            let operand = |buf, l: u64, start, len| {
                if l == n {
                    range(buf, start, len)
                } else {
                    whole(buf, l)
                }
            };
            let len_param = |l: u64| if l == n { 0 } else { l as u32 };
            s.elementwise(
                &mut st,
                Kernel::BinaryBroadcast(op),
                n,
                false,
                |start, len| {
                    let p = BinaryParams {
                        n: len as u32,
                        base: start as u32,
                        la: len_param(la),
                        lb: len_param(lb),
                    };
                    Ok(bytemuck::bytes_of(&p).to_vec())
                },
                |start, len| {
                    vec![
                        operand(ab, la, start, len),
                        operand(bb, lb, start, len),
                        range(&out, start, len),
                    ]
                },
            )?;
        }
        Ok(s.storage(out))
    }

    fn reduce(
        &self,
        op: ReduceOp,
        x: &WgpuStorage,
        rows: usize,
        cols: usize,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let xb = x.buffer()?;
        let mut st = s.state();
        let out = s.alloc(&mut st, rows as u64 * 4)?;
        if rows > 0 && cols == 0 {
            st.recorder.encoder(&s.device).clear_buffer(&out, 0, None);
        } else if rows > 0 {
            let scale = if op == ReduceOp::Mean {
                1.0 / cols as f32
            } else {
                1.0
            };
            s.reduce_rows(
                &mut st,
                Kernel::ReducePartial { op, dot: false },
                op,
                (xb, xb),
                rows as u64,
                cols as u64,
                scale,
                &out,
            )?;
        }
        Ok(s.storage(out))
    }

    fn dot(&self, a: &WgpuStorage, b: &WgpuStorage, n: usize) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let (ab, bb) = (a.buffer()?, b.buffer()?);
        let mut st = s.state();
        let out = s.alloc(&mut st, 4)?;
        if n == 0 {
            st.recorder.encoder(&s.device).clear_buffer(&out, 0, None);
        } else {
            let kernel = Kernel::ReducePartial {
                op: ReduceOp::Sum,
                dot: true,
            };
            s.reduce_rows(
                &mut st,
                kernel,
                ReduceOp::Sum,
                (ab, bb),
                1,
                n as u64,
                1.0,
                &out,
            )?;
        }
        Ok(s.storage(out))
    }

    fn softmax(&self, x: &WgpuStorage, rows: usize, cols: usize, log: bool) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let xb = x.buffer()?;
        let (rows, cols) = (rows as u64, cols as u64);
        let n = rows * cols;
        let mut st = s.state();
        let out = s.alloc(&mut st, n * 4)?;
        if n == 0 {
            return Ok(s.storage(out));
        }
        s.check_binding("softmax's input", n)?;
        let chunks = cols.div_ceil(CHUNK);
        let params = bytemuck::bytes_of(&RowParams {
            rows: u32_of(rows, "softmax rows")?,
            cols: cols as u32,
            chunks: chunks as u32,
            chunk_len: CHUNK as u32,
            extra: n as u32,
            _pad: [0; 3],
        })
        .to_vec();
        let stats = s.alloc(&mut st, rows * chunks * 8)?;
        let stats_bind = || whole(&stats, rows * chunks * 2);
        s.dispatch(
            &mut st,
            Kernel::SoftmaxStats,
            &params,
            &[whole(xb, n), whole(xb, n), stats_bind()],
            rows * chunks,
        )?;
        let row_stats = if chunks > 1 {
            let combined = s.alloc(&mut st, rows * 8)?;
            s.dispatch(
                &mut st,
                Kernel::SoftmaxCombine,
                &params,
                &[stats_bind(), stats_bind(), whole(&combined, rows * 2)],
                rows,
            )?;
            st.retire(stats);
            combined
        } else {
            stats
        };
        let binds = [whole(xb, n), whole(&row_stats, rows * 2), whole(&out, n)];
        s.dispatch(
            &mut st,
            Kernel::SoftmaxApply { log },
            &params,
            &binds,
            n.div_ceil(WG),
        )?;
        st.retire(row_stats);
        Ok(s.storage(out))
    }

    fn matmul(
        &self,
        a: &WgpuStorage,
        b: &WgpuStorage,
        bias: Option<&WgpuStorage>,
        spec: MatmulSpec,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let d = spec.dims;
        let (ab, bb) = (a.buffer()?, b.buffer()?);
        let cb = match bias {
            Some(c) => Some(c.buffer()?),
            None => None,
        };
        let [batch, m, k, n] = [d.batch, d.m, d.k, d.n].map(|v| v as u64);
        let mut st = s.state();
        let out = s.alloc(&mut st, batch * m * n * 4)?;
        if batch * m * n == 0 {
            return Ok(s.storage(out));
        }
        let a_len = if d.a_stride == 0 {
            m * k
        } else {
            batch * m * k
        };
        let b_len = if d.b_stride == 0 {
            k * n
        } else {
            batch * k * n
        };
        s.check_binding("matmul's left operand", a_len)?;
        s.check_binding("matmul's right operand", b_len)?;
        s.check_binding("matmul's output", batch * m * n)?;
        // A few rows against a weight stored [n, k] (token-by-token inference): the row-dot
        // kernel, 8 outputs per workgroup, instead of 64 x 64 tiles that would be mostly empty.
        let rows = batch * m;
        let rows_contiguous = batch == 1 || (d.b_stride == 0 && d.a_stride != 0);
        if spec.transpose_b && !spec.transpose_a && rows_contiguous && rows <= GEMV_MAX_ROWS {
            let p = MnkParams {
                m: rows as u32,
                n: n as u32,
                k: k as u32,
                _pad: 0,
            };
            let binds = [
                whole(ab, a_len.max(1)),
                whole(bb, b_len.max(1)),
                cb.map_or(whole(ab, a_len.max(1)), |c| whole(c, n)),
                whole(&out, rows * n),
            ];
            let kernel = Kernel::Gemv {
                bias: cb.is_some(),
                activation: spec.activation,
            };
            s.dispatch(
                &mut st,
                kernel,
                bytemuck::bytes_of(&p),
                &binds,
                rows * n.div_ceil(8),
            )?;
            return Ok(s.storage(out));
        }
        let max = u64::from(s.limits.max_compute_workgroups_per_dimension);
        let grid = [n.div_ceil(MATMUL_TILE), m.div_ceil(MATMUL_TILE), batch];
        if let Some(&over) = grid.iter().find(|&&g| g > max) {
            return Err(Error::LimitExceeded {
                what: format!("a matmul grid of {grid:?} workgroups"),
                limit: "max_compute_workgroups_per_dimension",
                needed: over,
                max,
            });
        }
        let p = MatmulParams {
            m: m as u32,
            n: n as u32,
            k: k as u32,
            a_stride: d.a_stride as u32,
            b_stride: d.b_stride as u32,
            _pad: [0; 3],
        };
        // A K-empty product is zero: nothing to load, the kernel stores its zero accumulators.
        let binds = [
            whole(ab, a_len.max(1)),
            whole(bb, b_len.max(1)),
            // Without a bias the shader never reads binding 3; A stands in for it.
            cb.map_or(whole(ab, a_len.max(1)), |c| whole(c, n)),
            whole(&out, batch * m * n),
        ];
        let kernel = Kernel::Matmul {
            transpose_a: spec.transpose_a,
            transpose_b: spec.transpose_b,
            bias: cb.is_some(),
            activation: spec.activation,
        };
        s.dispatch_grid(
            &mut st,
            kernel,
            bytemuck::bytes_of(&p),
            &binds,
            grid.map(|g| g as u32),
        )?;
        Ok(s.storage(out))
    }

    fn norm(
        &self,
        x: &WgpuStorage,
        weight: Option<&WgpuStorage>,
        bias: Option<&WgpuStorage>,
        spec: NormSpec,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let xb = x.buffer()?;
        let w = weight.map(WgpuStorage::buffer).transpose()?;
        let b = bias.map(WgpuStorage::buffer).transpose()?;
        let (rows, cols) = (spec.rows as u64, spec.cols as u64);
        let n = rows * cols;
        let mut st = s.state();
        let out = s.alloc(&mut st, n * 4)?;
        if n == 0 {
            return Ok(s.storage(out));
        }
        s.check_binding("a normalisation's input", n)?;
        let p = NormParams {
            rows: u32_of(rows, "normalised rows")?,
            cols: cols as u32,
            eps: spec.eps,
            _pad: 0,
        };
        // Absent weight or bias: the shader never reads them; x stands in.
        let binds = [
            whole(xb, n),
            w.map_or(whole(xb, n), |w| whole(w, cols)),
            b.map_or(whole(xb, n), |b| whole(b, cols)),
            whole(&out, n),
        ];
        let kernel = Kernel::Norm {
            rms: spec.rms,
            weight: w.is_some(),
            bias: b.is_some(),
        };
        s.dispatch(&mut st, kernel, bytemuck::bytes_of(&p), &binds, rows)?;
        Ok(s.storage(out))
    }

    fn embedding(&self, table: &WgpuStorage, ids: &[u32], dim: usize) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let tb = table.buffer()?;
        let (rows, dim) = (ids.len() as u64, dim as u64);
        let n = rows * dim;
        // Rows up to the largest id are all the gather can touch (ids are checked on the host).
        let vocab_len = ids.iter().max().map_or(1, |&m| (u64::from(m) + 1) * dim);
        if n > 0 {
            s.check_binding("the embedding table", vocab_len)?;
            s.check_binding("the embedding output", n)?;
        }
        let p = BinaryParams {
            n: u32_of(n, "embedding elements")?,
            base: dim as u32,
            la: 0,
            lb: 0,
        };
        let ids_buf = s.upload_bytes(bytemuck::cast_slice(ids))?;
        let mut st = s.state();
        let out = match s.alloc(&mut st, n * 4) {
            Ok(out) => out,
            Err(e) => {
                st.retire(ids_buf);
                return Err(e);
            }
        };
        let binds = [whole(tb, vocab_len), whole(&ids_buf, rows), whole(&out, n)];
        let recorded = s.dispatch(
            &mut st,
            Kernel::Embedding,
            bytemuck::bytes_of(&p),
            &binds,
            n.div_ceil(WG),
        );
        st.retire(ids_buf);
        recorded?;
        Ok(s.storage(out))
    }

    fn rope(
        &self,
        x: &WgpuStorage,
        cos: &WgpuStorage,
        sin: &WgpuStorage,
        [n, seq, dim]: [usize; 3],
        layout: RopeLayout,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let (xb, cb, sb) = (x.buffer()?, cos.buffer()?, sin.buffer()?);
        let (n, seq, dim) = (n as u64, seq as u64, dim as u64);
        let mut st = s.state();
        let out = s.alloc(&mut st, n * 4)?;
        if n > 0 {
            s.check_binding("rope's input", n)?;
            let table = seq * dim / 2;
            let p = BinaryParams {
                n: u32_of(n / 2, "rope pairs")?,
                base: dim as u32,
                la: seq as u32,
                lb: 0,
            };
            let binds = [
                whole(xb, n),
                whole(cb, table),
                whole(sb, table),
                whole(&out, n),
            ];
            let kernel = Kernel::Rope {
                interleaved: layout == RopeLayout::Interleaved,
            };
            s.dispatch(
                &mut st,
                kernel,
                bytemuck::bytes_of(&p),
                &binds,
                (n / 2).div_ceil(WG),
            )?;
        }
        Ok(s.storage(out))
    }

    fn attention(
        &self,
        q: &WgpuStorage,
        k: &WgpuStorage,
        v: &WgpuStorage,
        lens: Option<&[u32]>,
        a: AttentionSpec,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let qkv = [q.buffer()?, k.buffer()?, v.buffer()?];
        let lens_buf = lens
            .map(|l| s.upload_bytes(bytemuck::cast_slice(l)))
            .transpose()?;
        let mut st = s.state();
        let out = s.alloc(&mut st, (a.batch * a.hq * a.sq * a.dv) as u64 * 4);
        let recorded = out
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|out| s.record_attention(&mut st, qkv, lens_buf.as_ref(), out, a));
        if let Some(l) = lens_buf {
            st.retire(l);
        }
        recorded?;
        Ok(s.storage(out?))
    }

    fn topk(
        &self,
        x: &WgpuStorage,
        rows: usize,
        cols: usize,
        k: usize,
    ) -> Result<(WgpuStorage, WgpuStorage)> {
        let s = self.begin()?;
        let xb = x.buffer()?;
        let (rows, cols, k) = (rows as u64, cols as u64, k as u64);
        let mut st = s.state();
        let values = s.alloc(&mut st, rows * k * 4)?;
        let indices = s.alloc(&mut st, rows * k * 4)?;
        let (values, indices) = (s.storage(values), s.storage(indices));
        if rows * k > 0 {
            s.check_binding("topk's input", rows * cols)?;
            let rows32 = u32_of(rows, "topk rows")?;
            let per_dispatch = (TOPK_VISITS_PER_DISPATCH / cols.max(1)).max(1);
            let binds = [
                whole(xb, rows * cols),
                whole(values.buffer()?, rows * k),
                whole(indices.buffer()?, rows * k),
            ];
            let mut r0 = 0;
            while r0 < k {
                let r1 = (r0 + per_dispatch).min(k);
                let p = TopKParams {
                    rows: rows32,
                    cols: cols as u32,
                    k: k as u32,
                    r0: r0 as u32,
                    r1: r1 as u32,
                    _pad: [0; 3],
                };
                s.dispatch(&mut st, Kernel::TopK, bytemuck::bytes_of(&p), &binds, rows)?;
                r0 = r1;
            }
        }
        Ok((values, indices))
    }

    fn matmul_quant(
        &self,
        x: &WgpuStorage,
        w: QuantParts<'_, WgpuStorage>,
        m: usize,
    ) -> Result<WgpuStorage> {
        let (m, n) = (m as u64, w.rows as u64);
        self.quant_kernel(Some(x), w, m * n, m)
    }

    fn dequantize(&self, w: QuantParts<'_, WgpuStorage>) -> Result<WgpuStorage> {
        let n = (w.rows * w.cols) as u64;
        self.quant_kernel(None, w, n, 0)
    }

    fn conv2d(
        &self,
        x: &WgpuStorage,
        w: &WgpuStorage,
        bias: Option<&WgpuStorage>,
        c: ConvSpec,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let (xb, wb) = (x.buffer()?, w.buffer()?);
        let bb = bias.map(WgpuStorage::buffer).transpose()?;
        let o = c.opts;
        let g = o.groups as u64;
        let [n, ch, h, wd, oc, kh, kw, oh, ow] =
            [c.n, c.c, c.h, c.w, c.o, c.kh, c.kw, c.oh, c.ow].map(|v| v as u64);
        let out_len = n * oc * oh * ow;
        let mut st = s.state();
        let out = s.alloc(&mut st, out_len * 4)?;
        let (x_len, w_len) = (n * ch * h * wd, oc * (ch / g) * kh * kw);
        // The ops layer rejects empty kernels and channels, so only an empty output is left.
        if out_len == 0 {
            return Ok(s.storage(out));
        }
        for (what, len) in [
            ("conv2d's input", x_len),
            ("conv2d's weight", w_len),
            ("conv2d's output", out_len),
        ] {
            s.check_binding(what, len)?;
        }
        let v = |x: usize| u32_of(x as u64, "a conv2d size");
        let p = ConvParams {
            n: v(c.n)?,
            c: v(c.c)?,
            h: v(c.h)?,
            w: v(c.w)?,
            o: v(c.o)?,
            kh: v(c.kh)?,
            kw: v(c.kw)?,
            oh: v(c.oh)?,
            ow: v(c.ow)?,
            sh: v(o.stride[0])?,
            sw: v(o.stride[1])?,
            ph: v(o.padding[0])?,
            pw: v(o.padding[1])?,
            dh: v(o.dilation[0])?,
            dw: v(o.dilation[1])?,
            cg: v(c.c / o.groups)?,
            og: v(c.o / o.groups)?,
            _pad: [0; 3],
        };
        let binds = [
            whole(xb, x_len),
            whole(wb, w_len),
            bb.map_or(whole(wb, w_len), |b| whole(b, oc)),
            whole(&out, out_len),
        ];
        let grid = [
            (n * oh * ow).div_ceil(MATMUL_TILE),
            (oc / g).div_ceil(MATMUL_TILE),
            g,
        ];
        let max = u64::from(s.limits.max_compute_workgroups_per_dimension);
        if let Some(&over) = grid.iter().find(|&&x| x > max) {
            return Err(Error::LimitExceeded {
                what: format!("a conv2d grid of {grid:?} workgroups"),
                limit: "max_compute_workgroups_per_dimension",
                needed: over,
                max,
            });
        }
        let kernel = Kernel::Conv2d { bias: bb.is_some() };
        s.dispatch_grid(
            &mut st,
            kernel,
            bytemuck::bytes_of(&p),
            &binds,
            grid.map(|x| x as u32),
        )?;
        Ok(s.storage(out))
    }

    fn pool2d(&self, x: &WgpuStorage, c: PoolSpec) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let xb = x.buffer()?;
        let o = c.opts;
        let (in_len, out_len) = (
            (c.planes * c.h * c.w) as u64,
            (c.planes * c.oh * c.ow) as u64,
        );
        let mut st = s.state();
        let out = s.alloc(&mut st, out_len * 4)?;
        if out_len > 0 {
            s.check_binding("a pooling input", in_len)?;
            let v = |x: usize| u32_of(x as u64, "a pooling size");
            let p = PoolParams {
                planes: v(c.planes)?,
                h: v(c.h)?,
                w: v(c.w)?,
                oh: v(c.oh)?,
                ow: v(c.ow)?,
                kh: v(o.kernel[0])?,
                kw: v(o.kernel[1])?,
                sh: v(o.stride[0])?,
                sw: v(o.stride[1])?,
                ph: v(o.padding[0])?,
                pw: v(o.padding[1])?,
                _pad: 0,
            };
            let binds = [whole(xb, in_len.max(1)), whole(&out, out_len)];
            s.dispatch(
                &mut st,
                Kernel::Pool2d { max: c.max },
                bytemuck::bytes_of(&p),
                &binds,
                out_len.div_ceil(WG),
            )?;
        }
        Ok(s.storage(out))
    }

    fn copy(&self, parts: &[(&WgpuStorage, CopySpec)], n: usize) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let n = n as u64;
        let mut st = s.state();
        let out = s.alloc(&mut st, n * 4)?;
        s.check_binding("a layout op's output", n)?;
        for (src, spec) in parts {
            let len = spec.len() as u64;
            if len == 0 {
                continue;
            }
            let src_len = src_extent(spec);
            s.check_binding("a layout op's input", src_len)?;
            let mut p = CopyParams {
                n: u32_of(len, "a layout op's elements")?,
                rank: spec.shape.len() as u32,
                in_offset: spec.src_offset as u32,
                out_offset: spec.out_offset as u32,
                shape: [0; MAX_RANK],
                in_strides: [0; MAX_RANK],
                out_strides: [0; MAX_RANK],
            };
            for d in 0..spec.shape.len() {
                p.shape[d] = spec.shape[d] as u32;
                p.in_strides[d] = spec.src_strides[d] as u32;
                p.out_strides[d] = spec.out_strides[d] as u32;
            }
            let binds = [whole(src.buffer()?, src_len), whole(&out, n)];
            s.dispatch(
                &mut st,
                Kernel::Copy,
                bytemuck::bytes_of(&p),
                &binds,
                len.div_ceil(WG),
            )?;
        }
        Ok(s.storage(out))
    }

    async fn read(&self, x: &WgpuStorage, n: usize) -> Result<Vec<f32>> {
        self.shared.read(x, n).await
    }

    async fn synchronize(&self) -> Result<()> {
        self.shared.synchronize().await
    }
}

impl Shared {
    /// Reduces `rows` rows of `cols` elements (two passes when a row spans several chunks).
    #[allow(clippy::too_many_arguments)]
    fn reduce_rows(
        &self,
        st: &mut State,
        partial: Kernel,
        op: ReduceOp,
        (a, b): (&wgpu::Buffer, &wgpu::Buffer),
        rows: u64,
        cols: u64,
        scale: f32,
        out: &wgpu::Buffer,
    ) -> Result<()> {
        let n = rows * cols;
        self.check_binding("a reduction's input", n)?;
        let chunks = cols.div_ceil(CHUNK);
        let params = |rows: u64, cols: u64, chunks: u64, scale: f32| {
            bytemuck::bytes_of(&RowParams {
                rows: rows as u32,
                cols: cols as u32,
                chunks: chunks as u32,
                chunk_len: CHUNK as u32,
                extra: scale.to_bits(),
                _pad: [0; 3],
            })
            .to_vec()
        };
        u32_of(rows * chunks, "reduction workgroups")?;
        let inputs = [whole(a, n), whole(b, n)];
        if chunks == 1 {
            let binds = [inputs[0], inputs[1], whole(out, rows)];
            return self.dispatch(st, partial, &params(rows, cols, 1, scale), &binds, rows);
        }
        let partials = self.alloc(st, rows * chunks * 4)?;
        let binds = [inputs[0], inputs[1], whole(&partials, rows * chunks)];
        self.dispatch(
            st,
            partial,
            &params(rows, cols, chunks, 1.0),
            &binds,
            rows * chunks,
        )?;
        let p = whole(&partials, rows * chunks);
        let binds = [p, p, whole(out, rows)];
        self.dispatch(
            st,
            Kernel::ReduceFinish(op),
            &params(rows, cols, chunks, scale),
            &binds,
            rows,
        )?;
        st.retire(partials);
        Ok(())
    }
}

impl Shared {
    /// Checks attention's limits and records its dispatch (one workgroup per query row, head
    /// and batch entry).
    fn record_attention(
        &self,
        st: &mut State,
        [qb, kb, vb]: [&wgpu::Buffer; 3],
        lens: Option<&wgpu::Buffer>,
        out: &wgpu::Buffer,
        a: AttentionSpec,
    ) -> Result<()> {
        let [b, hq, hkv, sq, sk, d, dv] =
            [a.batch, a.hq, a.hkv, a.sq, a.sk, a.d, a.dv].map(|x| x as u64);
        let n = b * hq * sq * dv;
        if n == 0 {
            return Ok(());
        }
        let (q_len, k_len, v_len) = (b * hq * sq * d, b * hkv * sk * d, b * hkv * sk * dv);
        for (what, len) in [
            ("attention's q", q_len),
            ("attention's k", k_len),
            ("attention's v", v_len),
            ("attention's output", n),
        ] {
            self.check_binding(what, len)?;
        }
        let max = u64::from(self.limits.max_compute_workgroups_per_dimension);
        if let Some(&over) = [sq, hq, b].iter().find(|&&g| g > max) {
            return Err(Error::LimitExceeded {
                what: "attention's query rows, heads or batch".into(),
                limit: "max_compute_workgroups_per_dimension",
                needed: over,
                max,
            });
        }
        let p = AttentionParams {
            hq: hq as u32,
            hkv: hkv as u32,
            sq: sq as u32,
            sk: sk as u32,
            d: d as u32,
            dv: dv as u32,
            scale: a.scale,
            _pad: 0,
        };
        // q, k, v can be empty along d or sk: bind at least one element. Without lengths the
        // shader never reads binding 4, and q stands in for it.
        let binds = [
            whole(qb, q_len.max(1)),
            whole(kb, k_len.max(1)),
            whole(vb, v_len.max(1)),
            lens.map_or(whole(qb, q_len.max(1)), |l| whole(l, b)),
            whole(out, n),
        ];
        let kernel = Kernel::Attention {
            causal: a.causal,
            lens: lens.is_some(),
        };
        self.dispatch_grid(
            st,
            kernel,
            bytemuck::bytes_of(&p),
            &binds,
            [sq as u32, hq as u32, b as u32],
        )
    }
}

impl WgpuBackend {
    /// Runs qmatmul.wgsl: the matmul when `x` is given (`m` rows), else the dequantisation.
    fn quant_kernel(
        &self,
        x: Option<&WgpuStorage>,
        w: QuantParts<'_, WgpuStorage>,
        out_len: u64,
        m: u64,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let (n, k) = (w.rows as u64, w.cols as u64);
        let blocks = n * k / BLOCK as u64;
        let (scales, words) = (w.scales.buffer()?, w.words.buffer()?);
        let mins = w.mins.map(WgpuStorage::buffer).transpose()?;
        let xb = x.map(WgpuStorage::buffer).transpose()?;
        let mut st = s.state();
        let out = s.alloc(&mut st, out_len * 4)?;
        if out_len == 0 {
            return Ok(s.storage(out));
        }
        let words_len = blocks * w.format.words_per_block() as u64;
        for (what, len) in [
            ("quantized scales", blocks),
            ("quantized words", words_len),
            ("the output", out_len),
            ("the input", m * k),
        ] {
            s.check_binding(what, len)?;
        }
        let p = MnkParams {
            m: u32_of(m, "rows")?,
            n: u32_of(n, "weight rows")?,
            k: u32_of(k, "weight cols")?,
            _pad: 0,
        };
        // Absent x (dequantise) or mins (Q4_0, Q8_0): the shader never reads them; scales stand in.
        let binds = [
            xb.map_or(whole(scales, blocks), |x| whole(x, (m * k).max(1))),
            whole(scales, blocks),
            mins.map_or(whole(scales, blocks), |b| whole(b, blocks)),
            whole(words, words_len),
            whole(&out, out_len),
        ];
        let kernel = Kernel::QMatmul {
            format: w.format,
            dequant: x.is_none(),
        };
        let groups = if x.is_some() {
            m * n.div_ceil(8)
        } else {
            out_len.div_ceil(WG)
        };
        s.dispatch(&mut st, kernel, bytemuck::bytes_of(&p), &binds, groups)?;
        Ok(s.storage(out))
    }
}
