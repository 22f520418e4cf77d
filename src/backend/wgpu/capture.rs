//! Batches on the wgpu backend: a scope in which freed buffers are reused by the batch's later
//! ops (the memory planner), every dispatch can be captured, and a captured batch becomes a
//! [`Replay`]: its pipelines and bind groups made once, its parameters in a buffer of its own,
//! run again by writing new inputs and encoding the same dispatches.
//!
//! Reusing a buffer inside one pass is safe: WebGPU orders the dispatches of a pass and wgpu
//! inserts the barriers. The scope belongs to the thread encoding the batch: other threads
//! using the device meanwhile allocate, free and record as usual, outside it. Buffers filled by `write_buffer` (inputs, token ids) are never reused
//! inside a batch, since those writes land before the whole submit.

use std::sync::Arc;

use super::pipelines::Kernel;
use super::{Shared, WgpuBackend, WgpuStorage};
use crate::error::{Error, Result};
use crate::future::oneshot;

/// A recorded command of a captured batch.
pub(crate) enum Command {
    Dispatch {
        kernel: Kernel,
        params: Vec<u8>,
        /// The storage bindings after the parameters: buffer, offset, size.
        binds: Vec<(wgpu::Buffer, u64, u64)>,
        grid: [u32; 3],
    },
    Clear(wgpu::Buffer),
}

/// The state of a batch being encoded.
pub(crate) struct BatchScope {
    /// Buffers the batch's ops freed, for its later ops.
    pub(super) free: Vec<wgpu::Buffer>,
    /// Buffers the batch must keep unchanged until it ends (uploads).
    pub(super) keep: Vec<wgpu::Buffer>,
    pub(super) capture: Option<Vec<Command>>,
    /// Bytes the batch took from the device pool: its memory footprint.
    pub(super) taken_bytes: u64,
    /// The thread encoding the batch.
    pub(super) owner: std::thread::ThreadId,
}

impl BatchScope {
    /// A freed buffer of exactly this size class.
    pub(super) fn take(&mut self, class: u64) -> Option<wgpu::Buffer> {
        let i = self.free.iter().position(|b| b.size() == class)?;
        Some(self.free.swap_remove(i))
    }
}

/// What a batch leaves behind when it ends.
pub(crate) struct BatchEnd {
    buffers: Vec<wgpu::Buffer>,
    commands: Option<Vec<Command>>,
    /// Bytes the batch took from the pool (its planner's footprint, outputs included).
    pub(crate) taken_bytes: u64,
}

enum Step {
    Dispatch {
        pipeline: wgpu::ComputePipeline,
        bind_group: wgpu::BindGroup,
        grid: [u32; 3],
    },
    Clear(wgpu::Buffer),
}

/// A captured batch, ready to run again.
pub(crate) struct Replay {
    steps: Vec<Step>,
    _params: wgpu::Buffer,
    /// Intermediate buffers the steps use; back to the pool when the replay is dropped.
    buffers: Vec<wgpu::Buffer>,
    shared: Arc<Shared>,
    pub(crate) dispatches: usize,
    /// Each dispatch's kernel, in order (for profiles; native only).
    #[cfg(native)]
    kernels: Vec<Kernel>,
}

impl Drop for Replay {
    fn drop(&mut self) {
        let mut st = self.shared.state();
        for b in self.buffers.drain(..) {
            st.retire(b);
        }
    }
}

impl WgpuBackend {
    /// Encodes a batch: `encode` runs inside a batch scope (`capture`: every command is
    /// recorded for a replay). Batches of several threads on one device take turns; a batch
    /// recorded from inside another on the same thread is an error.
    pub(crate) fn in_batch<T>(
        &self,
        capture: bool,
        encode: impl FnOnce() -> T,
    ) -> Result<(T, BatchEnd)> {
        let s = self.begin()?;
        if s.state().scope().is_some() {
            return Err(Error::InvalidArgument {
                op: "batch",
                reason: "a batch cannot run inside another batch's op".into(),
            });
        }
        let _turn = super::lock(&s.batch_turn);
        s.state().batch = Some(BatchScope {
            free: Vec::new(),
            keep: Vec::new(),
            capture: capture.then(Vec::new),
            taken_bytes: 0,
            owner: std::thread::current().id(),
        });
        let out = encode();
        let end = self.end_batch().ok_or(Error::InvalidArgument {
            op: "batch",
            reason: "the batch scope ended early".into(),
        })?;
        Ok((out, end))
    }

    /// Ends the batch scope. Without a capture its buffers go back to the pool now.
    fn end_batch(&self) -> Option<BatchEnd> {
        let s = &self.shared;
        let mut st = s.state();
        let scope = st.batch.take()?;
        let mut buffers = scope.free;
        buffers.extend(scope.keep);
        if scope.capture.is_none() {
            for b in buffers.drain(..) {
                st.retire(b);
            }
        }
        Some(BatchEnd {
            buffers,
            commands: scope.capture,
            taken_bytes: scope.taken_bytes,
        })
    }

    /// Makes the pipelines, parameter buffer and bind groups of a captured batch, once.
    pub(crate) fn compile_replay(&self, end: BatchEnd) -> Result<Replay> {
        let s = self.begin()?;
        let commands = end.commands.ok_or(Error::InvalidArgument {
            op: "batch compile",
            reason: "the batch was not captured".into(),
        })?;
        let align = u64::from(s.limits.min_uniform_buffer_offset_alignment).max(16);
        let mut bytes = Vec::new();
        let mut offsets = Vec::new();
        for c in &commands {
            if let Command::Dispatch { params, .. } = c {
                let off = (bytes.len() as u64).next_multiple_of(align);
                bytes.resize(off as usize, 0);
                bytes.extend_from_slice(params);
                offsets.push(off);
            }
        }
        bytes.resize(
            (bytes.len() as u64).next_multiple_of(16).max(16) as usize,
            0,
        );
        let params = s.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("gpukit graph parameters"),
            size: bytes.len() as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        s.queue.write_buffer(&params, 0, &bytes);
        let mut steps = Vec::with_capacity(commands.len());
        #[cfg(native)]
        let mut kernels = Vec::with_capacity(commands.len());
        let mut offsets = offsets.into_iter();
        let mut st = s.state();
        for c in commands {
            match c {
                Command::Clear(b) => steps.push(Step::Clear(b)),
                Command::Dispatch {
                    kernel,
                    params: p,
                    binds,
                    grid,
                } => {
                    let offset = offsets.next().unwrap_or(0);
                    #[cfg(native)]
                    kernels.push(kernel);
                    let pipeline = st
                        .pipelines
                        .get(&s.device, kernel, || {
                            super::lock(&s.error).take().map(|e| e.to_string())
                        })?
                        .clone();
                    let layout = st
                        .pipelines
                        .bind_group_layout(&s.device, kernel.layout())
                        .clone();
                    let size = (p.len() as u64).next_multiple_of(16);
                    let mut entries = vec![wgpu::BindGroupEntry {
                        binding: 0,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: &params,
                            offset,
                            size: wgpu::BufferSize::new(size),
                        }),
                    }];
                    entries.extend(binds.iter().enumerate().map(|(i, (b, off, size))| {
                        wgpu::BindGroupEntry {
                            binding: i as u32 + 1,
                            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                                buffer: b,
                                offset: *off,
                                size: wgpu::BufferSize::new(*size),
                            }),
                        }
                    }));
                    let bind_group = s.device.create_bind_group(&wgpu::BindGroupDescriptor {
                        label: Some("gpukit graph"),
                        layout: &layout,
                        entries: &entries,
                    });
                    steps.push(Step::Dispatch {
                        pipeline,
                        bind_group,
                        grid,
                    });
                }
            }
        }
        drop(st);
        s.check()?;
        let dispatches = steps
            .iter()
            .filter(|s| matches!(s, Step::Dispatch { .. }))
            .count();
        Ok(Replay {
            steps,
            _params: params,
            buffers: end.buffers,
            shared: s.clone(),
            dispatches,
            #[cfg(native)]
            kernels,
        })
    }

    /// Runs a replay with new data in its input buffers, then reads `outputs`: a submit per
    /// [`super::recorder::SUBMIT_EVERY`] steps, one mapping.
    pub(crate) async fn replay(
        &self,
        replay: &Replay,
        inputs: &[(&WgpuStorage, &[f32])],
        outputs: &[(&WgpuStorage, usize)],
    ) -> Result<Vec<Vec<f32>>> {
        let s = self.begin()?;
        #[cfg(native)]
        let started = std::time::Instant::now();
        #[cfg(native)]
        let profiling = match &s.profiler {
            Some(p) => u32::try_from(replay.kernels.len() + 1)
                .ok()
                .and_then(|count| super::lock(p).queries(&s.device, count)),
            None => None,
        };
        #[cfg(not(native))]
        let profiling: Option<(wgpu::QuerySet, wgpu::Buffer, wgpu::Buffer)> = None;
        {
            let mut st = s.state();
            // Earlier work first, so the input writes below cannot overtake it.
            s.submit(&mut st);
            for (t, data) in inputs {
                if !data.is_empty() {
                    s.queue
                        .write_buffer(t.buffer()?, 0, bytemuck::cast_slice(data));
                }
            }
            let mut stamp = 0;
            for (i, step) in replay.steps.iter().enumerate() {
                if i > 0 && (i as u64).is_multiple_of(super::recorder::SUBMIT_EVERY) {
                    // In parts, as eager dispatches go: the GPU starts on the first.
                    s.submit(&mut st);
                }
                match step {
                    Step::Dispatch {
                        pipeline,
                        bind_group,
                        grid,
                    } => {
                        let pass = st.recorder.pass(&s.device);
                        if let Some((set, ..)) = &profiling {
                            if stamp == 0 {
                                pass.write_timestamp(set, 0);
                            }
                        }
                        pass.set_pipeline(pipeline);
                        pass.set_bind_group(0, bind_group, &[]);
                        pass.dispatch_workgroups(grid[0], grid[1], grid[2]);
                        if let Some((set, ..)) = &profiling {
                            stamp += 1;
                            pass.write_timestamp(set, stamp);
                        }
                    }
                    Step::Clear(b) => st.recorder.encoder(&s.device).clear_buffer(b, 0, None),
                }
            }
            if let Some((set, resolve, read)) = &profiling {
                let bytes = (u64::from(stamp) + 1) * 8;
                let encoder = st.recorder.encoder(&s.device);
                encoder.resolve_query_set(set, 0..stamp + 1, resolve, 0);
                encoder.copy_buffer_to_buffer(resolve, 0, read, 0, bytes);
            }
        }
        #[cfg(native)]
        let encoded = started.elapsed();
        let out = s.read_many(outputs).await?;
        #[cfg(native)]
        if let (Some((_, _, read)), Some(p)) = (&profiling, &s.profiler) {
            let stamps = s.read_stamps(read, replay.kernels.len() + 1)?;
            super::lock(p).add(&replay.kernels, &stamps, started.elapsed(), encoded);
        }
        Ok(out)
    }

    /// Reads several tensors with one copy each into one staging buffer, one submit and one
    /// mapping.
    pub(crate) async fn read_many(
        &self,
        outputs: &[(&WgpuStorage, usize)],
    ) -> Result<Vec<Vec<f32>>> {
        self.begin()?.read_many(outputs).await
    }
}

impl Shared {
    /// Reads `count` timestamps that a replay resolved into `read` (native; blocks).
    #[cfg(native)]
    fn read_stamps(&self, read: &wgpu::Buffer, count: usize) -> Result<Vec<u64>> {
        {
            let mut st = self.state();
            self.submit(&mut st);
        }
        let bytes = count as u64 * 8;
        read.map_async(wgpu::MapMode::Read, 0..bytes, |_| {});
        self.wait()?;
        let stamps = {
            let view = read
                .get_mapped_range(0..bytes)
                .map_err(|e| Error::Backend {
                    backend: self.backend,
                    detail: e.to_string(),
                })?;
            bytemuck::pod_collect_to_vec::<u8, u64>(&view)
        };
        read.unmap();
        Ok(stamps)
    }

    pub(super) async fn read_many(
        self: &Arc<Self>,
        outputs: &[(&WgpuStorage, usize)],
    ) -> Result<Vec<Vec<f32>>> {
        self.check()?;
        let total: u64 = outputs.iter().map(|(_, n)| *n as u64 * 4).sum();
        if total == 0 {
            return Ok(outputs.iter().map(|_| Vec::new()).collect());
        }
        let staging = {
            let mut st = self.state();
            let staging = st.pool.take_staging(&self.device, total);
            let mut offset = 0;
            for (t, n) in outputs {
                let bytes = *n as u64 * 4;
                if bytes > 0 {
                    st.recorder.encoder(&self.device).copy_buffer_to_buffer(
                        t.buffer()?,
                        0,
                        &staging,
                        offset,
                        bytes,
                    );
                }
                offset += bytes;
            }
            self.submit(&mut st);
            staging
        };
        self.check()?;
        let (tx, rx) = oneshot();
        staging.map_async(wgpu::MapMode::Read, 0..total, move |r| tx.send(r));
        self.wait()?;
        match rx.await {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                self.check()?;
                return Err(Error::Backend {
                    backend: self.backend,
                    detail: format!("mapping the read-back buffer failed: {e}"),
                });
            }
            None => {
                return Err(Error::DeviceLost {
                    reason: "the read back was abandoned by the device".into(),
                })
            }
        }
        let data = {
            let view = staging
                .get_mapped_range(0..total)
                .map_err(|e| Error::Backend {
                    backend: self.backend,
                    detail: e.to_string(),
                })?;
            // One copy per output, straight from the mapping.
            let mut out = Vec::with_capacity(outputs.len());
            let mut start = 0;
            for (_, n) in outputs {
                let bytes = &view[start..start + n * 4];
                out.push(bytemuck::pod_collect_to_vec::<u8, f32>(bytes));
                start += n * 4;
            }
            out
        };
        staging.unmap();
        self.state().pool.return_staging(staging);
        self.tune_pending().await?;
        Ok(data)
    }
}
