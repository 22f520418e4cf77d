//! The CPU backend: every op on the host, always available. It is what `Device::new` falls back
//! to when no GPU adapter is usable. It is a real backend with its own storage, SIMD kernels
//! and threads; the f64 test oracle in `tests/common` is separate and stays simple.
//!
//! One file per op family (`cast`, `compare`, `elementwise`, `fused`, `reduce`, `softmax`, `norm`, `matmul`,
//! `conv`, `pool`, `attention`, `embedding`, `rope`, `layout`, `topk`, `quant`), and helpers:
//! - `vmath`: exp, ln, tanh and erf written to vectorise;
//! - `par`: rayon natively, one thread in wasm.

mod attention;
mod cast;
mod compare;
mod conv;
mod elementwise;
mod embedding;
mod fused;
mod layout;
mod matmul;
#[cfg(target_arch = "x86_64")]
mod matmul_kn;
mod matmul_rows;
#[cfg(target_arch = "x86_64")]
mod matmul_rows_avx2;
#[cfg(target_arch = "x86_64")]
mod matmul_rows_avx512;
mod norm;
pub(crate) mod par;
mod pool;
mod quant;
#[cfg(target_arch = "x86_64")]
mod quant_avx2;
#[cfg(target_arch = "x86_64")]
mod quant_avx512;
mod quant_rows;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod quant_simd128;
mod reduce;
mod rope;
mod softmax;
mod topk;
mod vmath;

use crate::backend::BackendOps;
use crate::error::Result;
use crate::info::{Backend, DeviceFeatures, DeviceInfo, DeviceLimits, DeviceType};
use crate::ops::attention::AttentionSpec;
use crate::ops::cast::CastSpec;
use crate::ops::compare::CompareSpec;
use crate::ops::conv::ConvSpec;
use crate::ops::elementwise::{BinarySpec, StridedSpec, UnarySpec, WhereSpec};
use crate::ops::embedding::EmbeddingSpec;
use crate::ops::fused::{Expr, FusedSpec};
use crate::ops::layout::LayoutSpec;
use crate::ops::matmul::MatmulSpec;
use crate::ops::norm::NormSpec;
use crate::ops::pool::PoolSpec;
use crate::ops::quant::{QuantAround, QuantMatmulSpec, QuantSpec};
use crate::ops::reduce::{DotSpec, ReduceSpec};
use crate::ops::rope::RopeSpec;
use crate::ops::softmax::SoftmaxSpec;
use crate::ops::topk::TopkSpec;

/// Host memory holding a tensor.
pub(crate) struct CpuStorage(Vec<f32>);

impl CpuStorage {
    pub(crate) fn data(&self) -> &[f32] {
        &self.0
    }

    /// Appends values (a buffer nothing else shares: see `Tensor::append_rows`).
    #[cfg_attr(not(feature = "models"), allow(dead_code))]
    pub(crate) fn extend(&mut self, data: &[f32]) {
        self.0.extend_from_slice(data);
    }
}

/// The CPU backend.
pub(crate) struct CpuBackend;

/// Whether `GPUKIT_CPU_AVX2=1` asks for the AVX2 kernels on a CPU with AVX-512 (to test and
/// time the path most x86-64 CPUs without AVX-512 take): the quantized rows and the few-row
/// product, f32 and half-precision weights. Read once.
#[cfg(target_arch = "x86_64")]
fn forced_avx2() -> bool {
    static FORCED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| std::env::var("GPUKIT_CPU_AVX2").is_ok_and(|v| v == "1"))
}

impl CpuBackend {
    /// Rows up to which a product by a weight stored `[n, k]` (read transposed) runs unpacked
    /// (`matmul_rows`); past it gemm packs that weight on every call, which a weight stored
    /// `[k, n]` makes a contiguous copy instead of a strided gather. Read by the models.
    #[cfg_attr(not(feature = "models"), allow(dead_code))]
    pub(crate) const FEW_ROWS: usize = matmul_rows::MAX_ROWS;

    /// Whether a product of a few rows by a weight stored `[k, n]` runs from the weight as
    /// stored (`matmul_kn`, AVX-512 or AVX2), faster than by the same weight stored `[n, k]`;
    /// elsewhere gemm would pack it on every call. Read by the models.
    #[cfg_attr(not(feature = "models"), allow(dead_code))]
    pub(crate) fn few_rows_by_kn() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            matmul_kn::available()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Whether an `m x k` product by a half-precision weight runs with the weight as stored:
    /// stored `[n, k]` and read transposed (`transpose_b`) on every CPU
    /// (`matmul_rows::product_half`), stored `[k, n]` where AVX-512 or AVX2 runs
    /// `matmul_kn::product_half`.
    pub(crate) fn takes_half_weights(m: usize, k: usize, transpose_b: bool) -> bool {
        if transpose_b {
            return m <= matmul_rows::MAX_ROWS && k >= matmul_rows::MIN_K;
        }
        #[cfg(target_arch = "x86_64")]
        {
            m <= matmul_rows::MAX_ROWS && matmul_kn::available()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

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
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f") && has!("avx512bw") && has!("avx512dq") && has!("avx512vl") {
            "AVX-512"
        } else if has!("avx2") && has!("fma") {
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

    fn cast(&self, x: &CpuStorage, s: CastSpec) -> Result<CpuStorage> {
        Ok(CpuStorage(cast::cast(&x.0, s)))
    }

    fn compare(&self, a: &CpuStorage, b: &CpuStorage, s: CompareSpec) -> Result<CpuStorage> {
        Ok(CpuStorage(compare::compare(&a.0, &b.0, s)))
    }

    fn unary(&self, x: &CpuStorage, s: UnarySpec) -> Result<CpuStorage> {
        let e = Expr::Unary(s.op, Box::new(Expr::Input(0)));
        Ok(CpuStorage(fused::evaluate(&e, &[(x, s.n)], s.n)))
    }

    fn binary(&self, a: &CpuStorage, b: &CpuStorage, s: BinarySpec) -> Result<CpuStorage> {
        let e = Expr::Binary(s.op, Box::new(Expr::Input(0)), Box::new(Expr::Input(1)));
        let inputs = [(a, s.a_len), (b, s.b_len)];
        Ok(CpuStorage(fused::evaluate(&e, &inputs, s.n)))
    }

    fn strided(
        &self,
        a: &CpuStorage,
        b: Option<&CpuStorage>,
        s: StridedSpec,
    ) -> Result<CpuStorage> {
        Ok(CpuStorage(elementwise::strided(
            &a.0,
            b.map(|b| b.0.as_slice()),
            &s,
        )))
    }

    fn where_select(
        &self,
        c: &CpuStorage,
        a: &CpuStorage,
        b: &CpuStorage,
        s: WhereSpec,
    ) -> Result<CpuStorage> {
        Ok(CpuStorage(elementwise::where_select(
            [&c.0, &a.0, &b.0],
            s.lens,
            s.n,
        )))
    }

    fn reduce(&self, x: &CpuStorage, s: ReduceSpec) -> Result<CpuStorage> {
        Ok(CpuStorage(reduce::reduce(s.op, &x.0, s.rows, s.cols)))
    }

    fn dot(&self, a: &CpuStorage, b: &CpuStorage, s: DotSpec) -> Result<CpuStorage> {
        Ok(CpuStorage(vec![
            reduce::dot(&a.0[..s.n], &b.0[..s.n]) as f32
        ]))
    }

    fn softmax(&self, x: &CpuStorage, s: SoftmaxSpec) -> Result<CpuStorage> {
        Ok(CpuStorage(softmax::softmax(&x.0, s.rows, s.cols, s.log)))
    }

    fn fused(&self, inputs: &[&CpuStorage], s: &FusedSpec<'_>) -> Result<CpuStorage> {
        let inputs: Vec<_> = inputs.iter().copied().zip(s.lens.iter().copied()).collect();
        Ok(CpuStorage(fused::evaluate(s.expr, &inputs, s.n)))
    }

    fn matmul(
        &self,
        a: &CpuStorage,
        b: &CpuStorage,
        bias: Option<&CpuStorage>,
        spec: MatmulSpec,
    ) -> Result<CpuStorage> {
        let bias = bias.map(|b| &b.0[..]);
        if spec.weight != spec.storage {
            return matmul::matmul_half_weight(&a.0, &b.0, bias, spec).map(CpuStorage);
        }
        matmul::matmul(&a.0, &b.0, bias, spec).map(CpuStorage)
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

    fn copy(&self, parts: &[&CpuStorage], s: &LayoutSpec) -> Result<CpuStorage> {
        Ok(CpuStorage(layout::copy(parts, &s.parts, s.n)))
    }

    fn embedding(
        &self,
        table: &CpuStorage,
        ids: &CpuStorage,
        s: EmbeddingSpec,
    ) -> Result<CpuStorage> {
        Ok(CpuStorage(embedding::embedding(&table.0, &ids.0, s)))
    }

    fn rope(
        &self,
        x: &CpuStorage,
        cos: &CpuStorage,
        sin: &CpuStorage,
        s: RopeSpec,
    ) -> Result<CpuStorage> {
        let dims = [s.n, s.seq, s.dim];
        Ok(CpuStorage(rope::rope(&x.0, &cos.0, &sin.0, dims, s.layout)))
    }

    fn attention(
        &self,
        q: &CpuStorage,
        k: &CpuStorage,
        v: &CpuStorage,
        lens: Option<&CpuStorage>,
        a: AttentionSpec,
    ) -> Result<CpuStorage> {
        let lens: Option<Vec<u32>> = lens.map(|l| l.0.iter().map(|w| w.to_bits()).collect());
        Ok(CpuStorage(attention::attention(
            &q.0,
            &k.0,
            &v.0,
            lens.as_deref(),
            a,
        )))
    }

    fn topk(&self, x: &CpuStorage, s: TopkSpec) -> Result<(CpuStorage, CpuStorage)> {
        let (values, indices) = topk::topk(&x.0, s.rows, s.cols, s.k);
        Ok((CpuStorage(values), CpuStorage(indices)))
    }

    fn matmul_quant(
        &self,
        x: &CpuStorage,
        w: &[&CpuStorage],
        around: &QuantAround<'_, CpuStorage>,
        s: QuantMatmulSpec,
    ) -> Result<CpuStorage> {
        let (normed, gated);
        let x = if s.swiglu {
            let spec = crate::ops::elementwise::swiglu_spec(s.m, s.weight.cols);
            gated = self.strided(x, Some(x), spec)?;
            &gated
        } else {
            x
        };
        let x = match (around.norm, s.rms_norm) {
            (Some(nw), Some(eps)) => {
                let spec = NormSpec {
                    rms: true,
                    rows: s.m,
                    cols: s.weight.cols,
                    eps,
                };
                normed = self.norm(x, Some(nw), None, spec)?;
                &normed
            }
            _ => x,
        };
        let out = CpuStorage(quant::matmul_quant(
            &x.0,
            s.weight.parts(w)?,
            s.m,
            s.precision,
        )?);
        // The CPU runs ops as they come: the rotation and the add are passes over the small
        // result.
        self.quant_rope_and_add(out, around, s)
    }

    fn dequantize(&self, w: &[&CpuStorage], s: QuantSpec) -> Result<CpuStorage> {
        Ok(CpuStorage(quant::dequantize(s.parts(w)?)))
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

    async fn read(&self, x: &CpuStorage, n: usize) -> Result<Vec<f32>> {
        Ok(x.0[..n].to_vec())
    }

    async fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}
