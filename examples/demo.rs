//! `make demo`: lists the backends gpukit finds, picks the best device, runs a few ops on it and
//! checks each result against the CPU backend. Exits non-zero if any result is off.

use gpukit::{Device, Tensor};

/// Random values in [-4, 4): twice gpukit's benchmark data, never zeros.
fn random(n: usize, seed: u64) -> Vec<f32> {
    gpukit::bench_cpu::data(n, seed)
        .iter()
        .map(|v| v * 2.0)
        .collect()
}

type Op = (&'static str, fn(&Tensor, &Tensor) -> gpukit::Result<Tensor>);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("backends:");
    for r in gpukit::blocking::discover_blocking() {
        let devices: Vec<String> = r.devices.iter().map(|d| d.info.adapter.clone()).collect();
        match &r.reason {
            None => println!(
                "  {:<7} available: {}",
                r.backend.to_string(),
                devices.join(", ")
            ),
            Some(why) => println!("  {:<7} unavailable: {why}", r.backend.to_string()),
        }
    }

    let device = Device::new_blocking()?;
    let info = device.info();
    println!(
        "\nrunning on {} ({}, {}{})\n  chosen because: {}\n",
        info.adapter,
        info.backend,
        info.device_type,
        if info.software {
            ", software adapter: slower than a GPU"
        } else {
            ""
        },
        info.selection
    );

    let cpu = Device::cpu();
    let (rows, cols) = (64, 1000);
    let x = random(rows * cols, 1);
    let bias = random(cols, 2);
    let ops: [Op; 6] = [
        ("relu", |x, _| x.relu()),
        ("gelu", |x, _| x.gelu()),
        ("x + bias (row broadcast)", |x, b| x.add(b)),
        ("softmax (rows)", |x, _| x.softmax()),
        ("sum (last axis)", |x, _| x.sum_last()),
        ("max (all)", |x, _| x.max()),
    ];
    let mut failed = 0;
    println!("{:<26} {:>8} {:>12}  check", "op", "elements", "max error");
    for (name, op) in ops {
        let run = |d: &Device| -> gpukit::Result<Vec<f32>> {
            let t = d.tensor(&x, &[rows, cols])?;
            let b = d.tensor(&bias, &[cols])?;
            op(&t, &b)?.read_blocking()
        };
        let (got, want) = (run(&device)?, run(&cpu)?);
        let err = got
            .iter()
            .zip(&want)
            .map(|(g, w)| ((g - w) / w.abs().max(1.0)).abs())
            .fold(0.0f32, f32::max);
        let ok = got.len() == want.len() && err <= 1e-4;
        failed += usize::from(!ok);
        println!(
            "{name:<26} {:>8} {err:>12.2e}  {}",
            got.len(),
            if ok { "ok" } else { "MISMATCH" }
        );
    }
    if failed > 0 {
        return Err(format!("{failed} op(s) disagree with the CPU backend").into());
    }
    println!("\nall results agree with the CPU backend");
    Ok(())
}
