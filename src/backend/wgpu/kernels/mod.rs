//! How each op is encoded: which kernels, with which parameters, over which buffer ranges.
//!
//! Elementwise ops larger than the device's storage-binding limit run in chunks, each bound at
//! an aligned offset. Reductions and softmax read their input in one binding and return
//! [`Error::LimitExceeded`] naming the limit when it does not fit.

mod attention;
mod cast;
mod compare;
mod conv;
mod elementwise;
mod embedding;
pub(crate) mod fused;
mod layout;
mod matmul;
mod norm;
mod pool;
pub(crate) mod quant;
mod reduce;
mod rope;
mod softmax;
mod topk;

use std::sync::Arc;

use super::pipelines::Kernel;
use super::{Shared, State, WgpuBackend, WgpuStorage};
use crate::backend::BackendOps;
use crate::error::{Error, Result};
use crate::ops::attention::AttentionSpec;
use crate::ops::cast::CastSpec;
use crate::ops::compare::CompareSpec;
use crate::ops::conv::ConvSpec;
use crate::ops::elementwise::{BinarySpec, StridedSpec, UnarySpec, WhereSpec};
use crate::ops::embedding::EmbeddingSpec;
use crate::ops::fused::FusedSpec;
use crate::ops::layout::LayoutSpec;
use crate::ops::matmul::MatmulSpec;
use crate::ops::norm::NormSpec;
use crate::ops::pool::PoolSpec;
use crate::ops::quant::{QuantAround, QuantMatmulSpec, QuantSpec};
use crate::ops::reduce::{DotSpec, ReduceSpec};
use crate::ops::rope::RopeSpec;
use crate::ops::softmax::SoftmaxSpec;
use crate::ops::topk::TopkSpec;

/// Invocations per workgroup of every kernel (WebGPU guarantees 256).
const WG: u64 = 256;

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

    /// Whether `elements` f32s fit one storage binding.
    fn fits_binding(&self, elements: u64) -> bool {
        (elements * 4).next_multiple_of(16) <= self.limits.max_storage_buffer_binding_size
    }

    fn check_binding(&self, what: &str, elements: u64) -> Result<()> {
        let needed = (elements * 4).next_multiple_of(16);
        if !self.fits_binding(elements) {
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
        if st.recorder.dispatches >= super::recorder::SUBMIT_EVERY {
            // A long chain of ops (a prompt through a model) goes to the GPU in parts, so it
            // starts on the first while the rest is recorded.
            self.submit(st);
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
        if let Some(capture) = st.scope().and_then(|b| b.capture.as_mut()) {
            capture.push(super::capture::Command::Dispatch {
                kernel,
                params: params.to_vec(),
                binds: binds
                    .iter()
                    .map(|b| (b.buffer.clone(), b.offset, b.size))
                    .collect(),
                grid: [gx, gy, gz],
            });
        }
        let pass = st.recorder.pass(&self.device);
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(gx, gy, gz);
        st.recorder.dispatches += 1;
        Ok(())
    }

    /// Zeroes a buffer (recorded, and captured inside a batch).
    fn clear(&self, st: &mut State, buffer: &wgpu::Buffer) {
        if let Some(capture) = st.scope().and_then(|b| b.capture.as_mut()) {
            capture.push(super::capture::Command::Clear(buffer.clone()));
        }
        st.recorder
            .encoder(&self.device)
            .clear_buffer(buffer, 0, None);
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
/// An operand read by repetition (`i % l`) in a chunk of an `n`-element op: a full operand
/// (`l == n`) is bound at the chunk's range, a repeated one whole.
fn repeated(buffer: &wgpu::Buffer, l: u64, n: u64, start: u64, len: u64) -> Bind<'_> {
    if l == n {
        range(buffer, start, len)
    } else {
        whole(buffer, l)
    }
}

/// The length a repeating shader reads an operand with: 0 for a full operand.
fn repeat_len(l: u64, n: u64) -> u32 {
    if l == n {
        0
    } else {
        l as u32
    }
}

fn range(buffer: &wgpu::Buffer, start: u64, len: u64) -> Bind<'_> {
    Bind {
        buffer,
        offset: start * 4,
        size: (len * 4).next_multiple_of(16),
    }
}

impl WgpuBackend {
    pub(super) fn begin(&self) -> Result<&Arc<Shared>> {
        self.shared.check()?;
        Ok(&self.shared)
    }
}

impl BackendOps for WgpuBackend {
    type Storage = WgpuStorage;

    fn upload(&self, data: &[f32]) -> Result<WgpuStorage> {
        self.shared.upload(data)
    }

    fn cast(&self, x: &WgpuStorage, s: CastSpec) -> Result<WgpuStorage> {
        self.encode_cast(x, s)
    }

    fn compare(&self, a: &WgpuStorage, b: &WgpuStorage, s: CompareSpec) -> Result<WgpuStorage> {
        self.encode_compare(a, b, s)
    }

    fn unary(&self, x: &WgpuStorage, s: UnarySpec) -> Result<WgpuStorage> {
        self.encode_unary(s.op, x, s.n)
    }

    fn binary(&self, a: &WgpuStorage, b: &WgpuStorage, s: BinarySpec) -> Result<WgpuStorage> {
        self.encode_binary(s.op, (a, s.a_len), (b, s.b_len), s.n)
    }

    fn strided(
        &self,
        a: &WgpuStorage,
        b: Option<&WgpuStorage>,
        s: StridedSpec,
    ) -> Result<WgpuStorage> {
        self.encode_strided(a, b, &s)
    }

    fn where_select(
        &self,
        c: &WgpuStorage,
        a: &WgpuStorage,
        b: &WgpuStorage,
        s: WhereSpec,
    ) -> Result<WgpuStorage> {
        let [lc, la, lb] = s.lens;
        self.encode_where((c, lc), (a, la), (b, lb), s.n)
    }

    fn reduce(&self, x: &WgpuStorage, s: ReduceSpec) -> Result<WgpuStorage> {
        self.encode_reduce(s.op, x, s.rows, s.cols)
    }

    fn dot(&self, a: &WgpuStorage, b: &WgpuStorage, s: DotSpec) -> Result<WgpuStorage> {
        self.encode_dot(a, b, s.n)
    }

    fn softmax(&self, x: &WgpuStorage, s: SoftmaxSpec) -> Result<WgpuStorage> {
        self.encode_softmax(x, s.rows, s.cols, s.log)
    }

    fn fused(&self, inputs: &[&WgpuStorage], s: &FusedSpec<'_>) -> Result<WgpuStorage> {
        let inputs: Vec<_> = inputs.iter().copied().zip(s.lens.iter().copied()).collect();
        self.encode_fused(s.expr, &inputs, s.n)
    }

    fn matmul(
        &self,
        a: &WgpuStorage,
        b: &WgpuStorage,
        bias: Option<&WgpuStorage>,
        spec: MatmulSpec,
    ) -> Result<WgpuStorage> {
        self.encode_matmul(a, b, bias, spec)
    }

    fn norm(
        &self,
        x: &WgpuStorage,
        weight: Option<&WgpuStorage>,
        bias: Option<&WgpuStorage>,
        spec: NormSpec,
    ) -> Result<WgpuStorage> {
        self.encode_norm(x, weight, bias, spec)
    }

    fn copy(&self, parts: &[&WgpuStorage], s: &LayoutSpec) -> Result<WgpuStorage> {
        self.encode_copy(parts, s)
    }

    fn embedding(
        &self,
        table: &WgpuStorage,
        ids: &WgpuStorage,
        s: EmbeddingSpec,
    ) -> Result<WgpuStorage> {
        self.encode_embedding(table, ids, s)
    }

    fn rope(
        &self,
        x: &WgpuStorage,
        cos: &WgpuStorage,
        sin: &WgpuStorage,
        s: RopeSpec,
    ) -> Result<WgpuStorage> {
        self.encode_rope(x, cos, sin, [s.n, s.seq, s.dim], s.layout)
    }

    fn attention(
        &self,
        q: &WgpuStorage,
        k: &WgpuStorage,
        v: &WgpuStorage,
        lens: Option<&WgpuStorage>,
        a: AttentionSpec,
    ) -> Result<WgpuStorage> {
        self.encode_attention(q, k, v, lens, a)
    }

    fn topk(&self, x: &WgpuStorage, s: TopkSpec) -> Result<(WgpuStorage, WgpuStorage)> {
        self.encode_topk(x, s.rows, s.cols, s.k)
    }

    fn matmul_quant(
        &self,
        x: &WgpuStorage,
        w: &[&WgpuStorage],
        a: &QuantAround<'_, WgpuStorage>,
        s: QuantMatmulSpec,
    ) -> Result<WgpuStorage> {
        self.encode_matmul_quant(x, s.weight.parts(w)?, a, s)
    }

    fn dequantize(&self, w: &[&WgpuStorage], s: QuantSpec) -> Result<WgpuStorage> {
        self.encode_dequantize(s.parts(w)?)
    }

    fn conv2d(
        &self,
        x: &WgpuStorage,
        w: &WgpuStorage,
        bias: Option<&WgpuStorage>,
        c: ConvSpec,
    ) -> Result<WgpuStorage> {
        self.encode_conv2d(x, w, bias, c)
    }

    fn pool2d(&self, x: &WgpuStorage, c: PoolSpec) -> Result<WgpuStorage> {
        self.encode_pool2d(x, c)
    }

    async fn read(&self, x: &WgpuStorage, n: usize) -> Result<Vec<f32>> {
        self.shared.read(x, n).await
    }

    async fn synchronize(&self) -> Result<()> {
        self.shared.synchronize().await
    }
}
