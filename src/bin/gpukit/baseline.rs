//! The raw-wgpu floor that `gpukit bench` measures beside gpukit, on the same adapter in the same
//! run: the plainest code that does the work, with its pipeline, buffers and bind group made
//! once up front. What gpukit adds on top of this is its overhead.

use std::time::Instant;

use gpukit::Backend;

pub struct RawWgpu {
    device: wgpu::Device,
    queue: wgpu::Queue,
    pipeline: wgpu::ComputePipeline,
    max_binding: u64,
    max_groups: u32,
}

struct Problem {
    a: wgpu::Buffer,
    b: wgpu::Buffer,
    out: wgpu::Buffer,
    bind_group: wgpu::BindGroup,
    groups: (u32, u32),
}

impl RawWgpu {
    /// Opens the adapter called `adapter` on `backend` directly through wgpu.
    pub fn new(backend: Backend, adapter: &str) -> Result<RawWgpu, String> {
        let bits = match backend {
            Backend::Vulkan => wgpu::Backends::VULKAN,
            Backend::Metal => wgpu::Backends::METAL,
            Backend::Dx12 => wgpu::Backends::DX12,
            Backend::Gl => wgpu::Backends::GL,
            other => return Err(format!("no raw wgpu baseline for {other}")),
        };
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: bits,
            ..wgpu::InstanceDescriptor::new_without_display_handle_from_env()
        });
        let found = pollster::block_on(instance.enumerate_adapters(bits))
            .into_iter()
            .find(|a| a.get_info().name == adapter)
            .ok_or_else(|| format!("adapter {adapter} not found for the baseline"))?;
        let limits = found.limits();
        let (device, queue) = pollster::block_on(found.request_device(&wgpu::DeviceDescriptor {
            label: Some("raw baseline"),
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| e.to_string())?;
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("raw_add.wgsl"),
            source: wgpu::ShaderSource::Wgsl(
                include_str!("../../../shaders/bench/raw_add.wgsl").into(),
            ),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("raw add"),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        Ok(RawWgpu {
            device,
            queue,
            pipeline,
            max_binding: limits.max_storage_buffer_binding_size,
            max_groups: limits.max_compute_workgroups_per_dimension,
        })
    }

    fn problem(&self, n: usize) -> Result<Problem, String> {
        let bytes = (n * 4).next_multiple_of(16) as u64;
        if bytes > self.max_binding {
            return Err(format!("{bytes} bytes exceed the adapter's binding limit"));
        }
        let storage = |label| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_DST
                    | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            })
        };
        let (a, b, out) = (storage("a"), storage("b"), storage("out"));
        let n4 = n.div_ceil(4) as u32;
        let params = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("params"),
            size: 16,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.queue
            .write_buffer(&params, 0, bytemuck::cast_slice(&[n4, 0, 0, 0]));
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &self.pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: params.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: a.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: b.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 3,
                    resource: out.as_entire_binding(),
                },
            ],
        });
        let groups = u64::from(n4.div_ceil(256));
        let max = u64::from(self.max_groups);
        let y = groups.div_ceil(max);
        Ok(Problem {
            a,
            b,
            out,
            bind_group,
            groups: (groups.div_ceil(y) as u32, y as u32),
        })
    }

    fn record_adds(&self, p: &Problem, encoder: &mut wgpu::CommandEncoder, count: usize) {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &p.bind_group, &[]);
        for _ in 0..count {
            pass.dispatch_workgroups(p.groups.0, p.groups.1, 1);
        }
    }

    fn wait(&self) -> Result<(), String> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Seconds per device-resident add of `n` elements: `reps` dispatches in one pass, then wait.
    pub fn d1(&self, n: usize, reps: usize, runs: usize) -> Result<Vec<f64>, String> {
        let p = self.problem(n)?;
        let mut times = Vec::new();
        for run in 0..runs + 1 {
            let t0 = Instant::now();
            let mut encoder = self.device.create_command_encoder(&Default::default());
            self.record_adds(&p, &mut encoder, reps);
            self.queue.submit([encoder.finish()]);
            self.wait()?;
            if run > 0 {
                times.push(t0.elapsed().as_secs_f64() / reps as f64);
            }
        }
        Ok(times)
    }

    /// Seconds per round trip of an `n`-element add: upload both, add, copy out, map, read.
    pub fn w6(&self, a: &[f32], b: &[f32], runs: usize) -> Result<Vec<f64>, String> {
        let n = a.len();
        let p = self.problem(n)?;
        let bytes = (n * 4) as u64;
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("staging"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut times = Vec::new();
        let mut check = 0.0f32;
        for run in 0..runs + 5 {
            let t0 = Instant::now();
            self.queue.write_buffer(&p.a, 0, bytemuck::cast_slice(a));
            self.queue.write_buffer(&p.b, 0, bytemuck::cast_slice(b));
            let mut encoder = self.device.create_command_encoder(&Default::default());
            self.record_adds(&p, &mut encoder, 1);
            encoder.copy_buffer_to_buffer(&p.out, 0, &staging, 0, bytes);
            self.queue.submit([encoder.finish()]);
            staging.map_async(wgpu::MapMode::Read, .., |_| {});
            self.wait()?;
            let out: Vec<f32> = bytemuck::pod_collect_to_vec(
                &staging.get_mapped_range(..).map_err(|e| e.to_string())?,
            );
            staging.unmap();
            check = out[n - 1];
            if run >= 5 {
                times.push(t0.elapsed().as_secs_f64());
            }
        }
        if check != a[n - 1] + b[n - 1] {
            return Err(format!("the raw baseline computed a wrong sum: {check}"));
        }
        Ok(times)
    }
}
