//! `gpukit verify`: every op family on the chosen device, in verification mode, at odd sizes
//! with random data and NaN/±Inf sprinkled in, each result compared with the CPU backend. A
//! user checks their own GPU and driver with it; it exits non-zero on the first family that
//! diverges (and still tries the others).

use gpukit::{
    Activation, AttentionOptions, BinaryOp, Conv2dOptions, Device, MatmulOptions, Pool2dOptions,
    Precision, ReduceOp, RopeLayout, Tensor, UnaryOp,
};

struct Options {
    backend: Option<gpukit::Backend>,
    json: bool,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        backend: None,
        json: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => o.json = true,
            "--backend" => {
                let name = it.next().ok_or("--backend needs a name")?;
                o.backend = Some(name.parse().map_err(|e: gpukit::Error| e.to_string())?);
            }
            other => return Err(format!("unknown option {other:?} for verify")),
        }
    }
    Ok(o)
}

/// Seeded data in [-2, 2) with one NaN, +inf and -inf each per 97 elements when `edges`.
fn data(seed: u64, n: usize, edges: bool) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            match (edges, i % 97) {
                (true, 11) => f32::NAN,
                (true, 37) => f32::INFINITY,
                (true, 71) => f32::NEG_INFINITY,
                _ => ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0,
            }
        })
        .collect()
}

type Family = (&'static str, fn(&Device) -> gpukit::Result<Vec<Tensor>>);

fn t(dev: &Device, seed: u64, shape: &[usize], edges: bool) -> gpukit::Result<Tensor> {
    dev.tensor(&data(seed, shape.iter().product(), edges), shape)
}

fn elementwise(dev: &Device) -> gpukit::Result<Vec<Tensor>> {
    let mut out = Vec::new();
    for n in [1usize, 3, 257, 4097, 65537] {
        let x = t(dev, n as u64, &[n], true)?;
        let y = t(dev, n as u64 + 1, &[n], false)?;
        for op in UnaryOp::ALL {
            out.push(x.unary(op)?);
        }
        for op in BinaryOp::ALL {
            out.push(x.binary(op, &y)?);
        }
    }
    let m = t(dev, 5, &[37, 129], true)?;
    let row = t(dev, 6, &[129], false)?;
    out.push(m.add(&row)?);
    out.push(m.mul(&dev.scalar(0.5)?)?);
    Ok(out)
}

fn reduce(dev: &Device) -> gpukit::Result<Vec<Tensor>> {
    let mut out = Vec::new();
    for shape in [[1usize, 1], [37, 129], [3, 65537]] {
        let x = t(dev, 7, &shape, false)?;
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min] {
            out.push(x.reduce(op)?);
            out.push(x.reduce_last(op)?);
        }
        out.push(x.dot(&t(dev, 8, &shape, false)?)?);
        out.push(x.softmax()?);
        out.push(x.log_softmax()?);
        out.push(x.layer_norm(None, None, 1e-5)?);
        out.push(x.rms_norm(None, None, 1e-5)?);
    }
    Ok(out)
}

fn matmul(dev: &Device) -> gpukit::Result<Vec<Tensor>> {
    let mut out = Vec::new();
    for (m, k, n) in [
        (1, 1, 1),
        (5, 33, 7),
        (8, 300, 65),
        (67, 129, 131),
        (256, 256, 256),
    ] {
        let a = t(dev, 9, &[m, k], false)?;
        let b = t(dev, 10, &[k, n], false)?;
        let bt = t(dev, 11, &[n, k], false)?;
        let bias = t(dev, 12, &[n], false)?;
        out.push(a.matmul(&b)?);
        out.push(a.linear(&bt, Some(&bias), Some(Activation::Gelu))?);
        for precision in [Precision::F16, Precision::Bf16] {
            let o = MatmulOptions {
                precision,
                ..Default::default()
            };
            out.push(a.matmul_with(&b, o)?);
        }
    }
    let a = t(dev, 13, &[3, 17, 40], false)?;
    let b = t(dev, 14, &[40, 9], false)?;
    out.push(a.matmul(&b)?);
    Ok(out)
}

fn layout(dev: &Device) -> gpukit::Result<Vec<Tensor>> {
    let x = t(dev, 15, &[3, 5, 7, 2], true)?;
    let y = t(dev, 16, &[3, 4, 7, 2], true)?;
    let table = t(dev, 17, &[50, 24], false)?;
    let (cos, sin) = dev.rope_tables(7, 24, 1e4, 3)?;
    let r = t(dev, 18, &[2, 7, 24], false)?;
    let (values, indices) = t(dev, 19, &[9, 301], true)?.topk_last(5)?;
    Ok(vec![
        x.permute(&[3, 1, 0, 2])?,
        x.slice(1, 1..4)?,
        Tensor::concat(&[&x, &y], 1)?,
        table.embedding(&[0, 49, 7, 7, 3])?,
        r.rope(&cos, &sin, RopeLayout::Interleaved)?,
        r.rope(&cos, &sin, RopeLayout::HalfSplit)?,
        values,
        indices,
        t(dev, 20, &[4, 1000], true)?.argmax_last()?,
    ])
}

fn attention(dev: &Device) -> gpukit::Result<Vec<Tensor>> {
    let mut out = Vec::new();
    for (b, hq, hkv, sq, sk, d, dv) in [
        (1, 2, 1, 5, 9, 16, 16),
        (2, 4, 2, 37, 53, 64, 64),
        (1, 2, 2, 9, 19, 128, 96),
        (1, 1, 1, 7, 12, 160, 130),
    ] {
        let q = t(dev, 21, &[b, hq, sq, d], false)?;
        let k = t(dev, 22, &[b, hkv, sk, d], false)?;
        let v = t(dev, 23, &[b, hkv, sk, dv], false)?;
        let lens: Vec<u32> = (0..b as u32).map(|i| sk as u32 - i).collect();
        for causal in [false, true] {
            let o = AttentionOptions {
                causal,
                key_lengths: Some(&lens),
                scale: None,
                lengths: None,
                layout: Default::default(),
                ..Default::default()
            };
            out.push(q.attention(&k, &v, o)?);
        }
    }
    Ok(out)
}

fn conv(dev: &Device) -> gpukit::Result<Vec<Tensor>> {
    let x = t(dev, 24, &[2, 4, 13, 11], false)?;
    let w = t(dev, 25, &[6, 2, 3, 3], false)?;
    let bias = t(dev, 26, &[6], false)?;
    let o = Conv2dOptions {
        stride: [2, 1],
        padding: [1, 2],
        dilation: [1, 2],
        groups: 2,
    };
    let p = Pool2dOptions {
        kernel: [3, 2],
        stride: [2, 2],
        padding: [1, 0],
    };
    Ok(vec![
        x.conv2d(&w, Some(&bias), o)?,
        x.max_pool2d(p)?,
        x.avg_pool2d(p)?,
    ])
}

fn batch(dev: &Device) -> gpukit::Result<Vec<Tensor>> {
    // A fused chain: verification checks the fused kernel itself.
    let mut b = dev.batch();
    let x = b.upload(&data(27, 4099, true), &[4099])?;
    let y = b.relu(x)?;
    let y = b.scale(y, 2.0)?;
    let y = b.sub(y, x)?;
    let y = b.sigmoid(y)?;
    b.output(y)?;
    b.run_blocking()?;
    Ok(Vec::new())
}

const FAMILIES: [Family; 7] = [
    ("elementwise", elementwise),
    ("reduce, softmax, norm", reduce),
    ("matmul", matmul),
    ("layout, embedding, rope, topk", layout),
    ("attention", attention),
    ("conv, pool", conv),
    ("batch (fused)", batch),
];

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    let device = match o.backend {
        Some(b) => Device::with_backend_blocking(b),
        None => Device::new_blocking(),
    }
    .map_err(|e| e.to_string())?
    .with_verification();
    let info = device.info().clone();
    let mut failures = Vec::new();
    let started = std::time::Instant::now();
    for (name, family) in FAMILIES {
        let outcome = family(&device).and_then(|outs| {
            for t in outs {
                t.read_blocking()?;
            }
            device.synchronize_blocking()
        });
        if let Err(e) = outcome {
            failures.push(serde_json::json!({ "family": name, "error": e.to_string() }));
            if !o.json {
                eprintln!("FAIL {name}: {e}");
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let report = device.verification_report().unwrap_or_default();
    if o.json {
        let out = serde_json::json!({
            "device": info,
            "report": report,
            "failures": failures,
            "seconds": seconds,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "gpukit verify: {} ({}) against the CPU backend, {seconds:.1} s",
            info.adapter, info.backend
        );
        println!(
            "{:<14} {:>8} {:>12} {:>12} {:>10}",
            "op", "checked", "elements", "max error", "tolerance"
        );
        for op in &report.ops {
            println!(
                "{:<14} {:>8} {:>12} {:>11.3}x {:>10.0e}",
                op.op, op.checked, op.elements, op.max_error, op.tolerance
            );
        }
        println!(
            "{} results checked; max error is a multiple of each op's tolerance (1 = at it)",
            report.checked()
        );
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} op families diverged from the CPU backend",
            failures.len()
        ))
    }
}
