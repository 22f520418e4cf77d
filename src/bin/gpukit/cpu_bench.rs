//! `gpukit bench-cpu`: the CPU backend's elementwise and matmul throughput beside a reference
//! in the same run: a plain Rust loop for the elementwise ops (what an application would write
//! without gpukit), and for matmul the `gemm` crate called directly, with the same threads.
//! The same workloads run in Node from `www/bench/node-cpu.mjs` for the wasm builds.

use std::time::Instant;

use gpukit::{Device, Tensor};
use serde::Serialize;

use crate::report::{print_info, table};

#[derive(Serialize)]
struct Row {
    id: &'static str,
    workload: String,
    /// gpukit's CPU backend.
    gpukit: f64,
    /// The reference, in the same unit.
    reference: f64,
    reference_name: &'static str,
    unit: &'static str,
    /// gpukit / reference (throughputs: above 1 means gpukit is faster).
    ratio: f64,
    runs: usize,
}

/// Median seconds per call of `f` and of `g`, timed alternately (`runs` calls each, after two
/// untimed ones), so that load from elsewhere on the machine falls on both alike.
fn seconds(
    runs: usize,
    mut f: impl FnMut() -> Result<(), String>,
    mut g: impl FnMut() -> Result<(), String>,
) -> Result<(f64, f64), String> {
    for _ in 0..2 {
        f()?;
        g()?;
    }
    let (mut tf, mut tg) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for _ in 0..runs {
        let t0 = Instant::now();
        f()?;
        tf.push(t0.elapsed().as_secs_f64());
        let t0 = Instant::now();
        g()?;
        tg.push(t0.elapsed().as_secs_f64());
    }
    let median = |mut t: Vec<f64>| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    Ok((median(tf), median(tg)))
}

fn data(n: usize, seed: u64) -> Vec<f32> {
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

/// GELU as an application would write it, with the standard library's `exp` (as in
/// gpukit's formula: erf by Abramowitz-Stegun 7.1.26).
fn gelu_scalar(x: f32) -> f32 {
    let z = x * std::f32::consts::FRAC_1_SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * z.abs());
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_72 + t * (1.421_413_8 + t * (-1.453_152_1 + t * 1.061_405_4))));
    let erf = (1.0 - poly * (-z * z).exp()).copysign(z);
    0.5 * x * (1.0 + erf)
}

fn err(e: gpukit::Error) -> String {
    e.to_string()
}

pub fn run(args: &[String]) -> Result<(), String> {
    let json = args.iter().any(|a| a == "--json");
    let quick = args.iter().any(|a| a == "--quick");
    if let Some(bad) = args
        .iter()
        .find(|a| !matches!(a.as_str(), "--json" | "--quick"))
    {
        return Err(format!("unknown bench-cpu option {bad:?}"));
    }
    let device = Device::cpu();
    let runs = if quick { 5 } else { 21 };
    let mut rows = Vec::new();
    let threads = rayon::current_num_threads();

    for (id, n) in [("E1", 1 << 16), ("E2", 1 << 20)] {
        let n = if quick { n / 4 } else { n };
        let (a, b) = (data(n, 1), data(n, 2));
        let (x, y) = (
            device.tensor(&a, &[n]).map_err(err)?,
            device.tensor(&b, &[n]).map_err(err)?,
        );
        let (ours, plain) = seconds(
            runs,
            || x.add(&y).map(drop).map_err(err),
            || {
                let v: Vec<f32> = a.iter().zip(&b).map(|(p, q)| p + q).collect();
                std::hint::black_box(v);
                Ok(())
            },
        )?;
        let gflops = |s: f64| n as f64 / s / 1e9;
        rows.push(Row {
            id,
            workload: format!("add, {n} elements"),
            gpukit: gflops(ours),
            reference: gflops(plain),
            reference_name: "Rust loop",
            unit: "GFLOP/s",
            ratio: plain / ours,
            runs,
        });
    }

    let n = if quick { 1 << 16 } else { 1 << 20 };
    let a = data(n, 3);
    let x = device.tensor(&a, &[n]).map_err(err)?;
    let check = x.gelu().and_then(|t| t.read_blocking()).map_err(err)?;
    if let Some(i) = (0..n).find(|&i| (check[i] - gelu_scalar(a[i])).abs() > 1e-5) {
        return Err(format!("gelu differs from the reference at {i}"));
    }
    let (ours, plain) = seconds(
        runs,
        || x.gelu().map(drop).map_err(err),
        || {
            let v: Vec<f32> = a.iter().map(|&v| gelu_scalar(v)).collect();
            std::hint::black_box(v);
            Ok(())
        },
    )?;
    rows.push(Row {
        id: "E3",
        workload: format!("gelu (erf), {n} elements"),
        gpukit: n as f64 / ours / 1e9,
        reference: n as f64 / plain / 1e9,
        reference_name: "Rust loop, std exp",
        unit: "Gelem/s",
        ratio: plain / ours,
        runs,
    });

    for (id, s) in [("M1", 256usize), ("M2", 1024)] {
        let s = if quick { s / 2 } else { s };
        let (a, b) = (data(s * s, 4), data(s * s, 5));
        let (x, y): (Tensor, Tensor) = (
            device.tensor(&a, &[s, s]).map_err(err)?,
            device.tensor(&b, &[s, s]).map_err(err)?,
        );
        let (ours, direct) = seconds(
            runs,
            || x.matmul(&y).map(drop).map_err(err),
            || {
                let mut c = vec![0.0f32; s * s];
                // SAFETY: a, b and c are s x s row-major matrices and c is exclusively borrowed.
                unsafe {
                    gemm::gemm(
                        s,
                        s,
                        s,
                        c.as_mut_ptr(),
                        1,
                        s as isize,
                        false,
                        a.as_ptr(),
                        1,
                        s as isize,
                        b.as_ptr(),
                        1,
                        s as isize,
                        0.0f32,
                        1.0f32,
                        false,
                        false,
                        false,
                        gemm::Parallelism::Rayon(threads),
                    );
                }
                std::hint::black_box(c);
                Ok(())
            },
        )?;
        let gflops = |t: f64| 2.0 * (s as f64).powi(3) / t / 1e9;
        rows.push(Row {
            id,
            workload: format!("matmul {s}x{s}x{s}"),
            gpukit: gflops(ours),
            reference: gflops(direct),
            reference_name: "gemm 0.19 crate",
            unit: "GFLOP/s",
            ratio: direct / ours,
            runs,
        });
    }

    if json {
        let out = serde_json::json!({ "device": device.info(), "quick": quick, "rows": rows });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    print_info(device.info());
    println!();
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.id.into(),
                r.workload.clone(),
                format!("{:.2}", r.gpukit),
                format!("{:.2}", r.reference),
                r.reference_name.into(),
                format!("{:.2}x", r.ratio),
                r.unit.into(),
            ]
        })
        .collect();
    table(
        &[
            "id",
            "workload",
            "gpukit cpu",
            "reference",
            "reference is",
            "gpukit/ref",
            "unit",
        ],
        &body,
    );
    Ok(())
}
