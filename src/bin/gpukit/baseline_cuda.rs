//! The raw-CUDA floor for `gpukit bench` on CUDA devices: the same workloads written directly
//! against cudarc (its safe API, NVRTC and cuBLAS), in the same process on the same GPU, so
//! the table's ratios show what gpukit's layers cost.

use std::sync::Arc;
use std::time::Instant;

use cudarc::cublas::{sys::cublasOperation_t as Op, CudaBlas};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};

const KERNELS: &str = r#"
extern "C" __global__ void add1(const float* a, const float* b, float* c, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
extern "C" __global__ void add4(const float4* a, const float4* b, float4* c, unsigned n4) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 x = a[i], y = b[i];
        c[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
}
"#;

pub struct RawCuda {
    stream: Arc<CudaStream>,
    add1: CudaFunction,
    add4: CudaFunction,
    blas: CudaBlas,
}

fn err(e: impl std::fmt::Debug) -> String {
    format!("raw CUDA: {e:?}")
}

impl RawCuda {
    pub fn new(ordinal: usize) -> Result<RawCuda, String> {
        let ctx = CudaContext::new(ordinal).map_err(err)?;
        let stream = ctx.new_stream().map_err(err)?;
        let ptx = cudarc::nvrtc::compile_ptx(KERNELS).map_err(err)?;
        let module = ctx.load_module(ptx).map_err(err)?;
        let add1 = module.load_function("add1").map_err(err)?;
        let add4 = module.load_function("add4").map_err(err)?;
        let blas = CudaBlas::new(stream.clone()).map_err(err)?;
        Ok(RawCuda {
            stream,
            add1,
            add4,
            blas,
        })
    }

    /// W6: upload two 1024-element vectors, add, read back; seconds per run.
    pub fn w6(&self, a: &[f32], b: &[f32], runs: usize) -> Result<Vec<f64>, String> {
        let n = a.len();
        let mut times = Vec::with_capacity(runs);
        for i in 0..runs + 20 {
            let t0 = Instant::now();
            let da = self.stream.clone_htod(a).map_err(err)?;
            let db = self.stream.clone_htod(b).map_err(err)?;
            let mut dc = self.stream.alloc_zeros::<f32>(n).map_err(err)?;
            let mut l = self.stream.launch_builder(&self.add1);
            let n32 = n as u32;
            l.arg(&da).arg(&db).arg(&mut dc).arg(&n32);
            // SAFETY: three buffers of n floats and n, as add1 declares.
            unsafe { l.launch(LaunchConfig::for_num_elems(n32)) }.map_err(err)?;
            let out = self.stream.clone_dtoh(&dc).map_err(err)?;
            if i >= 20 {
                times.push(t0.elapsed().as_secs_f64());
            }
            std::hint::black_box(out);
        }
        Ok(times)
    }

    /// D1: `reps` float4 adds of device-resident `n`-element vectors then a wait; seconds per
    /// add.
    pub fn d1(&self, x: &[f32], y: &[f32], reps: usize, runs: usize) -> Result<Vec<f64>, String> {
        let n = x.len().min(y.len());
        let a = self.stream.clone_htod(&x[..n]).map_err(err)?;
        let b = self.stream.clone_htod(&y[..n]).map_err(err)?;
        let mut c = self.stream.alloc_zeros::<f32>(n).map_err(err)?;
        let n4 = (n / 4) as u32;
        let cfg = LaunchConfig {
            grid_dim: (n4.div_ceil(256), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut times = Vec::with_capacity(runs);
        for i in 0..runs + 1 {
            let t0 = Instant::now();
            for _ in 0..reps {
                let mut l = self.stream.launch_builder(&self.add4);
                l.arg(&a).arg(&b).arg(&mut c).arg(&n4);
                // SAFETY: three buffers of n floats (n a multiple of 4) and n / 4.
                unsafe { l.launch(cfg) }.map_err(err)?;
            }
            self.stream.synchronize().map_err(err)?;
            if i > 0 {
                times.push(t0.elapsed().as_secs_f64() / reps as f64);
            }
        }
        Ok(times)
    }

    /// D2: cuBLAS SGEMM of two device-resident `size` x `size` matrices; seconds per product.
    pub fn sgemm(
        &self,
        x: &[f32],
        y: &[f32],
        size: usize,
        reps: usize,
        runs: usize,
    ) -> Result<Vec<f64>, String> {
        let a = self.stream.clone_htod(&x[..size * size]).map_err(err)?;
        let b = self.stream.clone_htod(&y[..size * size]).map_err(err)?;
        let mut c = self.stream.alloc_zeros::<f32>(size * size).map_err(err)?;
        let s = size as i32;
        let mut times = Vec::with_capacity(runs);
        for i in 0..runs + 1 {
            let t0 = Instant::now();
            for _ in 0..reps {
                use cudarc::cublas::{Gemm, GemmConfig};
                let cfg = GemmConfig {
                    transa: Op::CUBLAS_OP_N,
                    transb: Op::CUBLAS_OP_N,
                    m: s,
                    n: s,
                    k: s,
                    alpha: 1.0f32,
                    lda: s,
                    ldb: s,
                    beta: 0.0,
                    ldc: s,
                };
                // SAFETY: three size x size matrices, as the configuration says.
                unsafe { self.blas.gemm(cfg, &a, &b, &mut c) }.map_err(err)?;
            }
            self.stream.synchronize().map_err(err)?;
            if i > 0 {
                times.push(t0.elapsed().as_secs_f64() / reps as f64);
            }
        }
        Ok(times)
    }
}
