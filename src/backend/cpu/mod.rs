//! The CPU backend: every op on the host, always available. It is what `Device::new` falls back
//! to when no GPU adapter is usable. (It is a real backend with its own storage; the f64 test
//! oracle in `tests/common` is separate and stays simple.)

use crate::backend::{BackendOps, Operand};
use crate::error::Result;
use crate::info::{Backend, DeviceFeatures, DeviceInfo, DeviceLimits, DeviceType};
use crate::ops::attention::AttentionSpec;
use crate::ops::conv::{ConvSpec, PoolSpec};
use crate::ops::fused::Expr;
use crate::ops::layout::CopySpec;
use crate::ops::matmul::{MatmulSpec, Precision};
use crate::ops::norm::NormSpec;
use crate::ops::RopeLayout;
use crate::ops::{BinaryOp, ReduceOp, UnaryOp};
use crate::quant::{dequant, QuantParts};

/// Host memory holding a tensor.
pub(crate) struct CpuStorage(Vec<f32>);

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
            driver: format!("gpukit cpu backend ({} threads available)", threads()),
            limits: DeviceLimits {
                max_storage_binding: isize::MAX as u64,
                max_buffer: isize::MAX as u64,
                workgroup_storage: 0,
                invocations_per_workgroup: 1,
                workgroups_per_dimension: u32::MAX,
            },
            features: DeviceFeatures::default(),
            memory_bytes: system_memory(),
            selection,
        }
    }
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
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

/// Max and min that return NaN when either side is NaN.
fn nan_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        a.max(b)
    }
}

fn nan_min(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        a.min(b)
    }
}

fn reduce_row(op: ReduceOp, row: &[f32]) -> f32 {
    match op {
        ReduceOp::Sum => row.iter().map(|&x| x as f64).sum::<f64>() as f32,
        ReduceOp::Mean => (row.iter().map(|&x| x as f64).sum::<f64>() / row.len() as f64) as f32,
        ReduceOp::Max => row.iter().copied().fold(f32::NEG_INFINITY, nan_max),
        ReduceOp::Min => row.iter().copied().fold(f32::INFINITY, nan_min),
    }
}

impl BackendOps for CpuBackend {
    type Storage = CpuStorage;

    fn upload(&self, data: &[f32]) -> Result<CpuStorage> {
        Ok(CpuStorage(data.to_vec()))
    }

    fn unary(&self, op: UnaryOp, x: &CpuStorage, n: usize) -> Result<CpuStorage> {
        Ok(CpuStorage(x.0[..n].iter().map(|&v| op.apply(v)).collect()))
    }

    fn binary(
        &self,
        op: BinaryOp,
        a: Operand<'_, CpuStorage>,
        b: Operand<'_, CpuStorage>,
        n: usize,
    ) -> Result<CpuStorage> {
        let (sa, la) = (&a.0 .0, a.1);
        let (sb, lb) = (&b.0 .0, b.1);
        let out = if la == n && lb == n {
            sa[..n]
                .iter()
                .zip(&sb[..n])
                .map(|(&x, &y)| op.apply(x, y))
                .collect()
        } else {
            (0..n).map(|i| op.apply(sa[i % la], sb[i % lb])).collect()
        };
        Ok(CpuStorage(out))
    }

    fn reduce(&self, op: ReduceOp, x: &CpuStorage, rows: usize, cols: usize) -> Result<CpuStorage> {
        if cols == 0 {
            return Ok(CpuStorage(vec![0.0; rows]));
        }
        Ok(CpuStorage(
            x.0[..rows * cols]
                .chunks_exact(cols)
                .map(|r| reduce_row(op, r))
                .collect(),
        ))
    }

    fn dot(&self, a: &CpuStorage, b: &CpuStorage, n: usize) -> Result<CpuStorage> {
        let s: f64 = a.0[..n]
            .iter()
            .zip(&b.0[..n])
            .map(|(&x, &y)| x as f64 * y as f64)
            .sum();
        Ok(CpuStorage(vec![s as f32]))
    }

    fn softmax(&self, x: &CpuStorage, rows: usize, cols: usize, log: bool) -> Result<CpuStorage> {
        let mut out = Vec::with_capacity(rows * cols);
        if cols == 0 {
            return Ok(CpuStorage(out));
        }
        for row in x.0[..rows * cols].chunks_exact(cols) {
            let m = reduce_row(ReduceOp::Max, row);
            let s: f64 = row.iter().map(|&v| ((v - m).exp()) as f64).sum();
            let s = s as f32;
            if log {
                let ls = s.ln();
                out.extend(row.iter().map(|&v| v - m - ls));
            } else {
                out.extend(row.iter().map(|&v| (v - m).exp() / s));
            }
        }
        Ok(CpuStorage(out))
    }

    fn fused(
        &self,
        expr: &Expr,
        inputs: &[Operand<'_, CpuStorage>],
        n: usize,
    ) -> Result<CpuStorage> {
        let input = |j: usize, i: usize| {
            let (s, len) = inputs[j];
            s.0[i % len]
        };
        Ok(CpuStorage((0..n).map(|i| expr.eval(i, &input)).collect()))
    }

    fn matmul(
        &self,
        a: &CpuStorage,
        b: &CpuStorage,
        bias: Option<&CpuStorage>,
        spec: MatmulSpec,
    ) -> Result<CpuStorage> {
        let d = spec.dims;
        let mut out = vec![0.0f32; d.batch * d.m * d.n];
        // Element (i, p) of A and (p, j) of B, whatever their storage order.
        let (sa_i, sa_p) = if spec.transpose_a { (1, d.m) } else { (d.k, 1) };
        let (sb_p, sb_j) = if spec.transpose_b { (1, d.k) } else { (d.n, 1) };
        // Precision::F16 rounds the inputs as the GPU kernels do; the arithmetic stays f32.
        let f16 = spec.precision == Precision::F16;
        let round = |v: f32| {
            if f16 {
                half::f16::from_f32(v).to_f32()
            } else {
                v
            }
        };
        for (bt, o) in out
            .chunks_exact_mut((d.m * d.n).max(1))
            .enumerate()
            .take(d.batch)
        {
            let a = &a.0[bt * d.a_stride..];
            let b = &b.0[bt * d.b_stride..];
            for i in 0..d.m {
                let row = &mut o[i * d.n..(i + 1) * d.n];
                for p in 0..d.k {
                    let x = round(a[i * sa_i + p * sa_p]);
                    for (j, r) in row.iter_mut().enumerate() {
                        *r += x * round(b[p * sb_p + j * sb_j]);
                    }
                }
                if let Some(bias) = bias {
                    row.iter_mut().zip(&bias.0).for_each(|(r, c)| *r += c);
                }
                if let Some(act) = spec.activation {
                    let op = act.as_unary();
                    row.iter_mut().for_each(|r| *r = op.apply(*r));
                }
            }
        }
        Ok(CpuStorage(out))
    }

    fn norm(
        &self,
        x: &CpuStorage,
        weight: Option<&CpuStorage>,
        bias: Option<&CpuStorage>,
        spec: NormSpec,
    ) -> Result<CpuStorage> {
        let (rows, cols) = (spec.rows, spec.cols);
        let mut out = Vec::with_capacity(rows * cols);
        if cols == 0 {
            return Ok(CpuStorage(out));
        }
        for row in x.0[..rows * cols].chunks_exact(cols) {
            let n = cols as f64;
            let mean = if spec.rms {
                0.0
            } else {
                row.iter().map(|&v| v as f64).sum::<f64>() / n
            };
            let q: f64 = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
            let inv = 1.0 / (q + spec.eps as f64).sqrt();
            for (i, &v) in row.iter().enumerate() {
                let mut y = ((v as f64 - mean) * inv) as f32;
                if let Some(w) = weight {
                    y *= w.0[i];
                }
                if let Some(b) = bias {
                    y += b.0[i];
                }
                out.push(y);
            }
        }
        Ok(CpuStorage(out))
    }

    fn embedding(&self, table: &CpuStorage, ids: &[u32], dim: usize) -> Result<CpuStorage> {
        let mut out = Vec::with_capacity(ids.len() * dim);
        for &id in ids {
            out.extend_from_slice(&table.0[id as usize * dim..(id as usize + 1) * dim]);
        }
        Ok(CpuStorage(out))
    }

    fn rope(
        &self,
        x: &CpuStorage,
        cos: &CpuStorage,
        sin: &CpuStorage,
        [n, seq, dim]: [usize; 3],
        layout: RopeLayout,
    ) -> Result<CpuStorage> {
        let mut out = x.0[..n].to_vec();
        let half = dim / 2;
        for (row, v) in out.chunks_exact_mut(dim.max(1)).enumerate() {
            let t = (row % seq) * half;
            for j in 0..half {
                let (i0, i1) = match layout {
                    RopeLayout::Interleaved => (2 * j, 2 * j + 1),
                    RopeLayout::HalfSplit => (j, j + half),
                };
                let (c, s) = (cos.0[t + j], sin.0[t + j]);
                let (x0, x1) = (v[i0], v[i1]);
                v[i0] = x0 * c - x1 * s;
                v[i1] = x0 * s + x1 * c;
            }
        }
        Ok(CpuStorage(out))
    }

    fn attention(
        &self,
        q: &CpuStorage,
        k: &CpuStorage,
        v: &CpuStorage,
        lens: Option<&[u32]>,
        a: AttentionSpec,
    ) -> Result<CpuStorage> {
        let mut out = vec![0.0f32; a.batch * a.hq * a.sq * a.dv];
        let group = a.hq / a.hkv.max(1);
        let mut scores = vec![0.0f32; a.sk];
        for b in 0..a.batch {
            for h in 0..a.hq {
                let kvh = h / group.max(1);
                let kb = &k.0[(b * a.hkv + kvh) * a.sk * a.d..];
                let vb = &v.0[(b * a.hkv + kvh) * a.sk * a.dv..];
                for i in 0..a.sq {
                    let mut visible = a.sk;
                    if a.causal {
                        visible = visible.min(i + 1 + a.sk.saturating_sub(a.sq));
                    }
                    if let Some(l) = lens {
                        visible = visible.min(l[b] as usize);
                    }
                    let qi = &q.0[((b * a.hq + h) * a.sq + i) * a.d..][..a.d];
                    for (j, s) in scores[..visible].iter_mut().enumerate() {
                        *s = qi
                            .iter()
                            .zip(&kb[j * a.d..(j + 1) * a.d])
                            .map(|(x, y)| x * y)
                            .sum::<f32>()
                            * a.scale;
                    }
                    let o = &mut out[((b * a.hq + h) * a.sq + i) * a.dv..][..a.dv];
                    if visible == 0 {
                        continue;
                    }
                    let m = scores[..visible]
                        .iter()
                        .copied()
                        .fold(f32::NEG_INFINITY, f32::max);
                    let mut l = 0.0f32;
                    for (j, &s) in scores[..visible].iter().enumerate() {
                        let p = (s - m).exp();
                        l += p;
                        for (od, &vd) in o.iter_mut().zip(&vb[j * a.dv..(j + 1) * a.dv]) {
                            *od += p * vd;
                        }
                    }
                    o.iter_mut().for_each(|x| *x /= l);
                }
            }
        }
        Ok(CpuStorage(out))
    }

    fn topk(
        &self,
        x: &CpuStorage,
        rows: usize,
        cols: usize,
        k: usize,
    ) -> Result<(CpuStorage, CpuStorage)> {
        let (mut values, mut indices) =
            (Vec::with_capacity(rows * k), Vec::with_capacity(rows * k));
        let mut order: Vec<usize> = Vec::with_capacity(cols);
        for r in 0..rows {
            let row = &x.0[r * cols..(r + 1) * cols];
            order.clear();
            order.extend(0..cols);
            order.sort_by_key(|&i| (std::cmp::Reverse(crate::ops::select::order_key(row[i])), i));
            for &i in &order[..k] {
                values.push(row[i]);
                indices.push(i as f32);
            }
        }
        Ok((CpuStorage(values), CpuStorage(indices)))
    }

    fn matmul_quant(
        &self,
        x: &CpuStorage,
        w: QuantParts<'_, CpuStorage>,
        m: usize,
    ) -> Result<CpuStorage> {
        let (n, k) = (w.rows, w.cols);
        let deq = self.dequantize(w)?;
        let mut out = Vec::with_capacity(m * n);
        for r in 0..m {
            let xr = &x.0[r * k..(r + 1) * k];
            for c in 0..n {
                out.push(
                    xr.iter()
                        .zip(&deq.0[c * k..(c + 1) * k])
                        .map(|(a, b)| a * b)
                        .sum(),
                );
            }
        }
        Ok(CpuStorage(out))
    }

    fn dequantize(&self, w: QuantParts<'_, CpuStorage>) -> Result<CpuStorage> {
        let words: Vec<u32> = w.words.0.iter().map(|v| v.to_bits()).collect();
        let mins = w.mins.map(|m| m.0.as_slice());
        let blocks = w.cols / crate::quant::BLOCK;
        let wpb = blocks * w.format.words_per_block();
        let mut out = Vec::with_capacity(w.rows * w.cols);
        for r in 0..w.rows {
            let scales = &w.scales.0[r * blocks..(r + 1) * blocks];
            let mins = mins.map(|m| &m[r * blocks..(r + 1) * blocks]);
            let words = &words[r * wpb..(r + 1) * wpb];
            out.extend((0..w.cols).map(|e| dequant(w.format, scales, mins, words, e)));
        }
        Ok(CpuStorage(out))
    }

    fn conv2d(
        &self,
        x: &CpuStorage,
        w: &CpuStorage,
        bias: Option<&CpuStorage>,
        s: ConvSpec,
    ) -> Result<CpuStorage> {
        let o = &s.opts;
        let (cg, og) = (s.c / o.groups, s.o / o.groups);
        let mut out = vec![0.0f32; s.n * s.o * s.oh * s.ow];
        for n in 0..s.n {
            for oc in 0..s.o {
                let g = oc / og;
                for oy in 0..s.oh {
                    for ox in 0..s.ow {
                        let mut acc = bias.map_or(0.0, |b| b.0[oc]);
                        for c in 0..cg {
                            for ky in 0..s.kh {
                                for kx in 0..s.kw {
                                    let iy = (oy * o.stride[0] + ky * o.dilation[0]) as isize
                                        - o.padding[0] as isize;
                                    let ix = (ox * o.stride[1] + kx * o.dilation[1]) as isize
                                        - o.padding[1] as isize;
                                    if iy < 0 || ix < 0 || iy >= s.h as isize || ix >= s.w as isize
                                    {
                                        continue;
                                    }
                                    let xv = x.0[((n * s.c + g * cg + c) * s.h + iy as usize)
                                        * s.w
                                        + ix as usize];
                                    acc += xv * w.0[((oc * cg + c) * s.kh + ky) * s.kw + kx];
                                }
                            }
                        }
                        out[((n * s.o + oc) * s.oh + oy) * s.ow + ox] = acc;
                    }
                }
            }
        }
        Ok(CpuStorage(out))
    }

    fn pool2d(&self, x: &CpuStorage, s: PoolSpec) -> Result<CpuStorage> {
        let o = &s.opts;
        let mut out = Vec::with_capacity(s.planes * s.oh * s.ow);
        for p in 0..s.planes {
            for oy in 0..s.oh {
                for ox in 0..s.ow {
                    let (mut m, mut sum, mut nan) = (f32::NEG_INFINITY, 0.0f32, false);
                    for ky in 0..o.kernel[0] {
                        for kx in 0..o.kernel[1] {
                            let iy = (oy * o.stride[0] + ky) as isize - o.padding[0] as isize;
                            let ix = (ox * o.stride[1] + kx) as isize - o.padding[1] as isize;
                            if iy < 0 || ix < 0 || iy >= s.h as isize || ix >= s.w as isize {
                                continue;
                            }
                            let v = x.0[(p * s.h + iy as usize) * s.w + ix as usize];
                            nan |= v.is_nan();
                            m = m.max(v);
                            sum += v;
                        }
                    }
                    out.push(if s.max {
                        if nan {
                            f32::NAN
                        } else {
                            m
                        }
                    } else {
                        sum / (o.kernel[0] * o.kernel[1]) as f32
                    });
                }
            }
        }
        Ok(CpuStorage(out))
    }

    fn copy(&self, parts: &[(&CpuStorage, CopySpec)], n: usize) -> Result<CpuStorage> {
        let mut out = vec![0.0f32; n];
        for (src, spec) in parts {
            for i in 0..spec.len() {
                let (mut rem, mut from, mut to) = (i, spec.src_offset, spec.out_offset);
                for d in (0..spec.shape.len()).rev() {
                    let c = rem % spec.shape[d];
                    rem /= spec.shape[d];
                    from += c * spec.src_strides[d];
                    to += c * spec.out_strides[d];
                }
                out[to] = src.0[from];
            }
        }
        Ok(CpuStorage(out))
    }

    async fn read(&self, x: &CpuStorage, n: usize) -> Result<Vec<f32>> {
        Ok(x.0[..n].to_vec())
    }

    async fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}
