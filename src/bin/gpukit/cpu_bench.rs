//! `gpukit bench-cpu`: the CPU backend's elementwise and matmul throughput (the workloads of
//! `gpukit::bench_cpu`) beside a plain Rust loop and the `gemm` crate called directly, with the
//! same threads. The same workloads run in Node for the wasm builds (`make bench-node`).

use gpukit::bench_cpu::{self, CpuBenchRow};
use gpukit::Device;

use crate::report::{print_info, table};

/// `s x s` row-major product by the gemm crate, called directly.
fn gemm_direct(a: &[f32], b: &[f32], s: usize) -> Vec<f32> {
    let mut c = vec![0.0f32; s * s];
    assert!(a.len() >= s * s && b.len() >= s * s);
    // SAFETY: a, b and c hold s x s row-major matrices (checked above) and c is exclusively
    // borrowed.
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
            gemm::Parallelism::Rayon(rayon::current_num_threads()),
        );
    }
    c
}

pub fn print(rows: &[CpuBenchRow]) {
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.id.into(),
                r.workload.clone(),
                format!("{:.2}", r.gpukit),
                r.reference.map_or("-".into(), |v| format!("{v:.2}")),
                r.reference_name.into(),
                r.reference
                    .map_or("-".into(), |v| format!("{:.2}x", r.gpukit / v)),
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
    let rows =
        pollster::block_on(bench_cpu::run(quick, Some(&gemm_direct))).map_err(|e| e.to_string())?;
    let info = Device::cpu().info().clone();
    if json {
        let out = serde_json::json!({ "device": info, "quick": quick, "rows": rows });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    print_info(&info);
    println!();
    print(&rows);
    Ok(())
}
