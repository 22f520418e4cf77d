//! The CPU backend: every op on the host, always available. It is what `Device::new` falls back
//! to when no GPU adapter is usable. It is a real backend with its own storage, SIMD kernels
//! and threads; the f64 test oracle in `tests/common` is separate and stays simple.
//!
//! One file per op family (`elementwise`, `fused`, `reduce`, `softmax`, `norm`, `matmul`,
//! `conv`, `pool`, `attention`, `embedding`, `rope`, `layout`, `topk`, `quant`), and helpers:
//! - `vmath`: exp, ln, tanh and erf written to vectorise;
//! - `par`: rayon natively, one thread in wasm.

mod attention;
mod conv;
mod elementwise;
mod embedding;
mod fused;
mod layout;
mod matmul;
mod norm;
pub(crate) mod par;
mod pool;
mod quant;
mod reduce;
mod rope;
mod softmax;
mod topk;
mod vmath;

use crate::backend::{BackendOps, Operand};
use crate::error::Result;
use crate::info::{Backend, DeviceFeatures, DeviceInfo, DeviceLimits, DeviceType};
use crate::ops::attention::AttentionSpec;
use crate::ops::conv::ConvSpec;
use crate::ops::fused::Expr;
use crate::ops::layout::CopySpec;
use crate::ops::matmul::MatmulSpec;
use crate::ops::norm::NormSpec;
use crate::ops::pool::PoolSpec;
use crate::ops::quant::QuantParts;
use crate::ops::RopeLayout;
use crate::ops::{BinaryOp, ReduceOp, UnaryOp};

/// Host memory holding a tensor.
pub(crate) struct CpuStorage(Vec<f32>);

impl CpuStorage {
    pub(crate) fn data(&self) -> &[f32] {
        &self.0
    }
}

/// The CPU backend.
pub(crate) struct CpuBackend;

impl CpuBackend {
    pub(crate) fn info(selection: String) -> DeviceInfo {
        DeviceInfo {
            backend: Backend::Cpu,
            adapter: processor_name(),
            vendor: "cpu".into(),
            device_type: DeviceType::Cpu,
            software: true,
            driver: format!(
                "gpukit cpu backend ({}, {} threads)",
                simd(),
                par::threads()
            ),
            limits: DeviceLimits {
                max_storage_binding: isize::MAX as u64,
                // The host limit: one tensor at most the machine's memory (isize::MAX where
                // that is unknown, 2 GiB on wasm32). Larger outputs are LimitExceeded before
                // anything is allocated, and every allocation is fallible (`zeros`).
                max_buffer: system_memory().map_or(isize::MAX as u64, |m| m.min(isize::MAX as u64)),
                workgroup_storage: 0,
                invocations_per_workgroup: 1,
                workgroups_per_dimension: u32::MAX,
            },
            features: DeviceFeatures::default(),
            memory_bytes: system_memory(),
            selection,
            policy: None,
            cuda: None,
        }
    }
}

/// The SIMD instructions the kernels use here.
pub(crate) fn simd() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            "AVX2+FMA"
        } else {
            "SSE2"
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        "NEON"
    }
    #[cfg(target_arch = "wasm32")]
    {
        if cfg!(target_feature = "simd128") {
            "SIMD128"
        } else {
            "scalar wasm (built without simd128)"
        }
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "wasm32"
    )))]
    {
        "scalar"
    }
}

#[cfg(target_os = "linux")]
fn proc_field(file: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    Some(line.split_once(':')?.1.trim().to_string())
}

fn processor_name() -> String {
    #[cfg(target_os = "linux")]
    if let Some(name) = proc_field("/proc/cpuinfo", "model name") {
        return name;
    }
    format!("{} CPU", std::env::consts::ARCH)
}

fn system_memory() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let kb = proc_field("/proc/meminfo", "MemTotal")?;
        kb.trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .ok()
            .map(|k| k * 1024)
    }
    #[cfg(not(target_os = "linux"))]
    None
}

impl BackendOps for CpuBackend {
    type Storage = CpuStorage;

    fn upload(&self, data: &[f32]) -> Result<CpuStorage> {
        Ok(CpuStorage(data.to_vec()))
    }

    fn unary(&self, op: UnaryOp, x: &CpuStorage, n: usize) -> Result<CpuStorage> {
        let e = Expr::Unary(op, Box::new(Expr::Input(0)));
        Ok(CpuStorage(fused::evaluate(&e, &[(x, n)], n)))
    }

    fn binary(
        &self,
        op: BinaryOp,
        a: Operand<'_, CpuStorage>,
        b: Operand<'_, CpuStorage>,
        n: usize,
    ) -> Result<CpuStorage> {
        let e = Expr::Binary(op, Box::new(Expr::Input(0)), Box::new(Expr::Input(1)));
        Ok(CpuStorage(fused::evaluate(&e, &[a, b], n)))
    }

    fn reduce(&self, op: ReduceOp, x: &CpuStorage, rows: usize, cols: usize) -> Result<CpuStorage> {
        Ok(CpuStorage(reduce::reduce(op, &x.0, rows, cols)))
    }

    fn dot(&self, a: &CpuStorage, b: &CpuStorage, n: usize) -> Result<CpuStorage> {
        Ok(CpuStorage(vec![reduce::dot(&a.0[..n], &b.0[..n]) as f32]))
    }

    fn softmax(&self, x: &CpuStorage, rows: usize, cols: usize, log: bool) -> Result<CpuStorage> {
        Ok(CpuStorage(softmax::softmax(&x.0, rows, cols, log)))
    }

    fn fused(
        &self,
        expr: &Expr,
        inputs: &[Operand<'_, CpuStorage>],
        n: usize,
    ) -> Result<CpuStorage> {
        Ok(CpuStorage(fused::evaluate(expr, inputs, n)))
    }

    fn matmul(
        &self,
        a: &CpuStorage,
        b: &CpuStorage,
        bias: Option<&CpuStorage>,
        spec: MatmulSpec,
    ) -> Result<CpuStorage> {
        matmul::matmul(&a.0, &b.0, bias.map(|b| &b.0[..]), spec).map(CpuStorage)
    }

    fn norm(
        &self,
        x: &CpuStorage,
        weight: Option<&CpuStorage>,
        bias: Option<&CpuStorage>,
        spec: NormSpec,
    ) -> Result<CpuStorage> {
        let (w, b) = (weight.map(|w| &w.0[..]), bias.map(|b| &b.0[..]));
        Ok(CpuStorage(norm::norm(&x.0, w, b, spec)))
    }

    fn embedding(&self, table: &CpuStorage, ids: &[u32], dim: usize) -> Result<CpuStorage> {
        Ok(CpuStorage(embedding::embedding(&table.0, ids, dim)))
    }

    fn rope(
        &self,
        x: &CpuStorage,
        cos: &CpuStorage,
        sin: &CpuStorage,
        dims: [usize; 3],
        layout: RopeLayout,
    ) -> Result<CpuStorage> {
        Ok(CpuStorage(rope::rope(&x.0, &cos.0, &sin.0, dims, layout)))
    }

    fn attention(
        &self,
        q: &CpuStorage,
        k: &CpuStorage,
        v: &CpuStorage,
        lens: Option<&[u32]>,
        a: AttentionSpec,
    ) -> Result<CpuStorage> {
        Ok(CpuStorage(attention::attention(&q.0, &k.0, &v.0, lens, a)))
    }

    fn topk(
        &self,
        x: &CpuStorage,
        rows: usize,
        cols: usize,
        k: usize,
    ) -> Result<(CpuStorage, CpuStorage)> {
        let (values, indices) = topk::topk(&x.0, rows, cols, k);
        Ok((CpuStorage(values), CpuStorage(indices)))
    }

    fn matmul_quant(
        &self,
        x: &CpuStorage,
        w: QuantParts<'_, CpuStorage>,
        m: usize,
    ) -> Result<CpuStorage> {
        quant::matmul_quant(&x.0, w, m).map(CpuStorage)
    }

    fn dequantize(&self, w: QuantParts<'_, CpuStorage>) -> Result<CpuStorage> {
        Ok(CpuStorage(quant::dequantize(w)))
    }

    fn conv2d(
        &self,
        x: &CpuStorage,
        w: &CpuStorage,
        bias: Option<&CpuStorage>,
        s: ConvSpec,
    ) -> Result<CpuStorage> {
        conv::conv2d(&x.0, &w.0, bias.map(|b| &b.0[..]), s).map(CpuStorage)
    }

    fn pool2d(&self, x: &CpuStorage, s: PoolSpec) -> Result<CpuStorage> {
        Ok(CpuStorage(pool::pool2d(&x.0, s)))
    }

    fn copy(&self, parts: &[(&CpuStorage, CopySpec)], n: usize) -> Result<CpuStorage> {
        Ok(CpuStorage(layout::copy(parts, n)))
    }

    async fn read(&self, x: &CpuStorage, n: usize) -> Result<Vec<f32>> {
        Ok(x.0[..n].to_vec())
    }

    async fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}
