//! The CPU backend's benchmark workloads, shared by `gpukit bench-cpu` (native) and the wasm
//! package's `benchCpu()` (Node and browsers), so both run exactly the same code.
//!
//! Each workload is timed beside a reference in the same run, alternating calls so that load
//! from elsewhere on the machine falls on both alike: a plain Rust loop for the elementwise
//! rows, and for matmul whatever the caller passes (natively the `gemm` crate called directly).

use serde::Serialize;
use web_time::Instant;

use crate::{Device, Result};

/// One benchmark row.
#[derive(Debug, Clone, Serialize)]
pub struct CpuBenchRow {
    /// Short id (`E1`..`E3`, `M1`, `M2`).
    pub id: &'static str,
    /// What runs.
    pub workload: String,
    /// gpukit's CPU backend, in `unit`.
    pub gpukit: f64,
    /// The reference, in `unit` (`None` when the caller gave none).
    pub reference: Option<f64>,
    /// What the reference is.
    pub reference_name: &'static str,
    /// GFLOP/s or Gelem/s.
    pub unit: &'static str,
    /// Timed calls of each.
    pub runs: usize,
}

/// A matmul to compare with: `(a, b, s)` returns the `s x s` product of row-major `a`, `b`.
pub type MatmulReference<'a> = &'a dyn Fn(&[f32], &[f32], usize) -> Vec<f32>;

/// Median seconds per call of `f` and of `g`, timed alternately after two untimed calls each.
fn seconds(
    runs: usize,
    mut f: impl FnMut() -> Result<()>,
    mut g: Option<&mut dyn FnMut()>,
) -> Result<(f64, Option<f64>)> {
    for _ in 0..2 {
        f()?;
        if let Some(g) = g.as_mut() {
            g();
        }
    }
    let (mut tf, mut tg) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for _ in 0..runs {
        let t0 = Instant::now();
        f()?;
        tf.push(t0.elapsed().as_secs_f64());
        if let Some(g) = g.as_mut() {
            let t0 = Instant::now();
            g();
            tg.push(t0.elapsed().as_secs_f64());
        }
    }
    let median = |mut t: Vec<f64>| {
        t.sort_by(f64::total_cmp);
        t.get(t.len() / 2).copied()
    };
    Ok((median(tf).unwrap_or(f64::NAN), median(tg)))
}

/// Random data in [-2, 2), never zero.
pub fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0 + 1e-3
        })
        .collect()
}

/// GELU as an application would write it, with the standard library's `exp` (gpukit's
/// formula: erf by Abramowitz-Stegun 7.1.26).
fn gelu_plain(x: f32) -> f32 {
    let z = x * std::f32::consts::FRAC_1_SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * z.abs());
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_72 + t * (1.421_413_8 + t * (-1.453_152_1 + t * 1.061_405_4))));
    let erf = (1.0 - poly * (-z * z).exp()).copysign(z);
    0.5 * x * (1.0 + erf)
}

/// Runs every workload on `Device::cpu()`. `quick` shrinks sizes 4x (matmul 2x) and runs.
/// The results are checked against the references (an error if they differ), so a broken
/// kernel cannot post a fast time.
pub async fn run(
    quick: bool,
    matmul_reference: Option<MatmulReference<'_>>,
) -> Result<Vec<CpuBenchRow>> {
    let device = Device::cpu();
    let runs = if quick { 5 } else { 21 };
    let mut rows = Vec::new();
    let mismatch = |what: &str, i: usize| crate::Error::Backend {
        backend: crate::Backend::Cpu,
        detail: format!("benchmark check: {what} differs from the reference at element {i}"),
    };

    for (id, n) in [("E1", 1usize << 16), ("E2", 1 << 20)] {
        let n = if quick { n / 4 } else { n };
        let (a, b) = (data(n, 1), data(n, 2));
        let (x, y) = (device.tensor(&a, &[n])?, device.tensor(&b, &[n])?);
        let got = x.add(&y)?.read().await?;
        if let Some(i) = (0..n).find(|&i| got[i] != a[i] + b[i]) {
            return Err(mismatch("add", i));
        }
        let mut plain = || {
            let v: Vec<f32> = a.iter().zip(&b).map(|(p, q)| p + q).collect();
            std::hint::black_box(v);
        };
        let (ours, theirs) = seconds(runs, || x.add(&y).map(drop), Some(&mut plain))?;
        let g = |s: f64| n as f64 / s / 1e9;
        rows.push(CpuBenchRow {
            id,
            workload: format!("add, {n} elements"),
            gpukit: g(ours),
            reference: theirs.map(g),
            reference_name: "Rust loop",
            unit: "GFLOP/s",
            runs,
        });
    }

    let n = if quick { 1 << 18 } else { 1 << 20 };
    let a = data(n, 3);
    let x = device.tensor(&a, &[n])?;
    let got = x.gelu()?.read().await?;
    if let Some(i) = (0..n).find(|&i| (got[i] - gelu_plain(a[i])).abs() > 1e-5) {
        return Err(mismatch("gelu", i));
    }
    let mut plain = || {
        let v: Vec<f32> = a.iter().map(|&v| gelu_plain(v)).collect();
        std::hint::black_box(v);
    };
    let (ours, theirs) = seconds(runs, || x.gelu().map(drop), Some(&mut plain))?;
    let g = |s: f64| n as f64 / s / 1e9;
    rows.push(CpuBenchRow {
        id: "E3",
        workload: format!("gelu (erf), {n} elements"),
        gpukit: g(ours),
        reference: theirs.map(g),
        reference_name: "Rust loop, std exp",
        unit: "Gelem/s",
        runs,
    });

    for (id, s) in [("M1", 256usize), ("M2", 1024)] {
        let s = if quick { s / 2 } else { s };
        let (a, b) = (data(s * s, 4), data(s * s, 5));
        let (x, y) = (device.tensor(&a, &[s, s])?, device.tensor(&b, &[s, s])?);
        let got = x.matmul(&y)?.read().await?;
        let tol = |w: f32| 1e-4 * (s as f32).sqrt() * w.abs().max(1.0);
        if let Some(r) = matmul_reference {
            let want = r(&a, &b, s);
            if let Some(i) = (0..s * s).find(|&i| (got[i] - want[i]).abs() > tol(want[i])) {
                return Err(mismatch("matmul", i));
            }
        } else {
            // No reference to time (wasm): check a spread of entries against f64 dot products.
            for i in (0..s * s).step_by(s * s / 97 + 1) {
                let (r, c) = (i / s, i % s);
                let want: f64 = (0..s)
                    .map(|p| a[r * s + p] as f64 * b[p * s + c] as f64)
                    .sum();
                if (got[i] - want as f32).abs() > tol(want as f32) {
                    return Err(mismatch("matmul", i));
                }
            }
        }
        let mut direct = || {
            if let Some(r) = matmul_reference {
                std::hint::black_box(r(&a, &b, s));
            }
        };
        let g2: Option<&mut dyn FnMut()> =
            matmul_reference.map(|_| &mut direct as &mut dyn FnMut());
        let (ours, theirs) = seconds(runs, || x.matmul(&y).map(drop), g2)?;
        let g = |t: f64| 2.0 * (s as f64).powi(3) / t / 1e9;
        rows.push(CpuBenchRow {
            id,
            workload: format!("matmul {s}x{s}x{s}"),
            gpukit: g(ours),
            reference: theirs.map(g),
            reference_name: if matmul_reference.is_some() {
                "gemm crate"
            } else {
                "-"
            },
            unit: "GFLOP/s",
            runs,
        });
    }
    Ok(rows)
}
