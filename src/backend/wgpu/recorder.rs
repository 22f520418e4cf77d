//! Work recorded but not yet submitted: one command encoder with one open compute pass, and the
//! parameters of every dispatch packed into one uniform buffer.
//!
//! Ops append dispatches to the open pass and return; nothing is submitted until something waits
//! (a read back, `synchronize`), the parameter buffer is full or [`SUBMIT_EVERY`] dispatches
//! are recorded. A chain of ops therefore costs one dispatch each, not a submit each.

/// Bytes of dispatch parameters one submit can carry.
pub(crate) const PARAMS_CAPACITY: u64 = 256 * 1024;

/// Dispatches recorded before a submit: the GPU works on them while later ones are recorded
/// (recording a dispatch costs the host a few microseconds, about what a small kernel takes).
pub(crate) const SUBMIT_EVERY: u64 = 48;

pub(crate) struct Recorder {
    encoder: Option<wgpu::CommandEncoder>,
    pass: Option<wgpu::ComputePass<'static>>,
    /// The uniform buffer that this submit's parameters are written to just before it.
    pub(crate) params_buffer: wgpu::Buffer,
    params: Vec<u8>,
    /// What the parameter buffer on the device holds now (from earlier submits).
    uploaded: Vec<u8>,
    align: u64,
    /// Dispatches recorded since the last submit.
    pub(crate) dispatches: u64,
}

impl Recorder {
    pub(crate) fn new(device: &wgpu::Device, align: u64) -> Recorder {
        Recorder {
            encoder: None,
            pass: None,
            params_buffer: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gpukit params"),
                size: PARAMS_CAPACITY,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            params: Vec::new(),
            uploaded: Vec::new(),
            align: align.max(16),
            dispatches: 0,
        }
    }

    /// Places one dispatch's parameters; `None` when this submit's buffer is full.
    pub(crate) fn push_params(&mut self, bytes: &[u8]) -> Option<u64> {
        let offset = (self.params.len() as u64).next_multiple_of(self.align);
        if offset + bytes.len() as u64 > PARAMS_CAPACITY {
            return None;
        }
        self.params.resize(offset as usize, 0);
        self.params.extend_from_slice(bytes);
        Some(offset)
    }

    fn encoder_mut(&mut self, device: &wgpu::Device) -> &mut wgpu::CommandEncoder {
        self.encoder.get_or_insert_with(|| {
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("gpukit"),
            })
        })
    }

    /// The open compute pass, begun if needed.
    pub(crate) fn pass(&mut self, device: &wgpu::Device) -> &mut wgpu::ComputePass<'static> {
        let pass = match self.pass.take() {
            Some(pass) => pass,
            None => self
                .encoder_mut(device)
                .begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("gpukit"),
                    timestamp_writes: None,
                })
                .forget_lifetime(),
        };
        self.pass.insert(pass)
    }

    /// The encoder with no pass open, for copies.
    pub(crate) fn encoder(&mut self, device: &wgpu::Device) -> &mut wgpu::CommandEncoder {
        self.pass = None;
        self.encoder_mut(device)
    }

    /// Whether anything is recorded and not yet submitted.
    pub(crate) fn pending(&self) -> bool {
        self.encoder.is_some()
    }

    /// Writes the parameters and submits everything recorded. Returns whether anything was.
    pub(crate) fn submit(&mut self, queue: &wgpu::Queue) -> bool {
        self.pass = None;
        let Some(encoder) = self.encoder.take() else {
            return false;
        };
        // Repeated work (a loop, an inference step) writes the same parameters at the same
        // offsets: upload only from the first byte that differs from what the buffer holds.
        let same = self
            .params
            .iter()
            .zip(&self.uploaded)
            .take_while(|(a, b)| a == b)
            .count();
        let start = same / 4 * 4; // write_buffer offsets and sizes are multiples of 4
        if start < self.params.len() {
            queue.write_buffer(&self.params_buffer, start as u64, &self.params[start..]);
            self.uploaded.truncate(start);
            self.uploaded.extend_from_slice(&self.params[start..]);
        }
        self.params.clear();
        queue.submit([encoder.finish()]);
        self.dispatches = 0;
        true
    }
}
