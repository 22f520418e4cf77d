//! Elementwise rows: W1 and W2 (round trips), W6 (the latency of a small round trip, beside
//! the raw floor), D1 (an add on device-resident tensors) and D3 (a chain of eager ops).

use gpukit::Tensor;

use super::{data, median, time, Ctx, Id, Row};

/// The round trips' data, shared with the softmax, fused and peer rows.
pub(crate) struct Inputs {
    pub(crate) m: usize,
    pub(crate) a: Vec<f32>,
    pub(crate) b: Vec<f32>,
    pub(crate) a6: Vec<f32>,
    pub(crate) b6: Vec<f32>,
    pub(crate) w6_runs: usize,
}

impl Inputs {
    pub(crate) fn new(cx: &Ctx) -> Inputs {
        let m = (1 << 20) / cx.div;
        Inputs {
            m,
            a: data(m, 1),
            b: data(m, 2),
            a6: data(1024, 3),
            b6: data(1024, 4),
            w6_runs: if cx.quick { 50 } else { 500 },
        }
    }
}

/// W1 (upload two, add, read) and W2 (upload, relu, read).
pub(crate) fn round_trips(cx: &Ctx, w: &Inputs) -> Result<Vec<Row>, String> {
    let (device, m) = (&cx.device, w.m);
    let t = time(2, cx.runs, || {
        let x = device.tensor(&w.a, &[m])?;
        let y = device.tensor(&w.b, &[m])?;
        x.add(&y)?.read_blocking().map(drop)
    })?;
    let w1 = Ctx::round_trip(Id::W1, format!("vec_add {m} round trip"), t, "");
    let t = time(2, cx.runs, || {
        device.tensor(&w.a, &[m])?.relu()?.read_blocking().map(drop)
    })?;
    let w2 = Ctx::round_trip(Id::W2, format!("relu {m} round trip"), t, "");
    Ok(vec![w1, w2])
}

/// W6: a 1024-element add round trip, beside the raw floor.
pub(crate) fn latency(cx: &Ctx, w: &Inputs) -> Result<Row, String> {
    let device = &cx.device;
    let t = time(20, w.w6_runs, || {
        let x = device.tensor(&w.a6, &[1024])?;
        let y = device.tensor(&w.b6, &[1024])?;
        x.add(&y)?.read_blocking().map(drop)
    })?;
    let mut w6 = Ctx::round_trip(Id::W6, "vec_add 1024 round trip (latency)".into(), t, "");
    if let Some(r) = &cx.raw {
        let raw_t = median(r.w6(&w.a6, &w.b6, w.w6_runs)?) * 1e6;
        w6.raw = Some(raw_t);
        w6.slowdown_vs_raw = w6.value.map(|v| v / raw_t);
    }
    #[cfg(cuda)]
    if let Some(r) = &cx.raw_cuda {
        let raw_t = median(r.w6(&w.a6, &w.b6, w.w6_runs)?) * 1e6;
        w6.raw = Some(raw_t);
        w6.slowdown_vs_raw = w6.value.map(|v| v / raw_t);
    }
    Ok(w6)
}

/// D1: adds on device-resident tensors of 64 Mi elements, in GB/s, beside the raw floor.
pub(crate) fn device_add(cx: &Ctx) -> Result<Row, String> {
    let device = &cx.device;
    let n1 = (64 << 20) / cx.div;
    let reps = 10;
    let (h1, g1) = (data(n1, 5), data(n1, 6));
    let (x1, y1) = (
        device.tensor(&h1, &[n1]).map_err(|e| e.to_string())?,
        device.tensor(&g1, &[n1]).map_err(|e| e.to_string())?,
    );
    let t = time(1, 5, || {
        for _ in 0..reps {
            drop(x1.add(&y1)?);
        }
        device.synchronize_blocking()
    })?;
    let gbs = |secs: f64| 12.0 * n1 as f64 / (secs / reps as f64) / 1e9;
    let mut d1 = Row::new(
        Id::D1,
        format!("add on device-resident {n1}-element tensors"),
        gbs(median(t.clone())),
        "GB/s",
        t.len(),
        format!("{reps} adds then synchronize; bytes read + written"),
    );
    if let Some(r) = &cx.raw {
        match r.d1(n1, reps, 5) {
            Ok(rt) => {
                let raw_gbs = 12.0 * n1 as f64 / median(rt) / 1e9;
                d1.raw = Some(raw_gbs);
                d1.slowdown_vs_raw = d1.value.map(|v| raw_gbs / v);
            }
            Err(e) => d1.note = format!("{}; raw baseline: {e}", d1.note),
        }
    }
    #[cfg(cuda)]
    if let Some(r) = &cx.raw_cuda {
        let raw_gbs = 12.0 * n1 as f64 / median(r.d1(&h1, &g1, reps, 5)?) / 1e9;
        d1.raw = Some(raw_gbs);
        d1.slowdown_vs_raw = d1.value.map(|v| raw_gbs / v);
    }
    if let Some(p) = &device.info().cuda {
        d1.note = format!(
            "{}; {:.0}% of the {:.0} GB/s theoretical peak",
            d1.note,
            100.0 * d1.value.unwrap_or(0.0) * 1e9 / p.peak_bandwidth(),
            p.peak_bandwidth() / 1e9
        );
    }
    Ok(d1)
}

/// D3: 100 chained eager ops on 4096 elements and one read, per op.
pub(crate) fn chain(cx: &Ctx) -> Result<Row, String> {
    let device = &cx.device;
    let x3 = device
        .tensor(&data(4096, 7), &[4096])
        .map_err(|e| e.to_string())?;
    let bias = device.scalar(0.5).map_err(|e| e.to_string())?;
    let t = time(3, cx.runs, || {
        let mut t: Tensor = x3.clone();
        for i in 0..100 {
            t = match i % 4 {
                0 => t.relu()?,
                1 => t.scale(0.5)?,
                2 => t.add(&bias)?,
                _ => t.tanh()?,
            };
        }
        t.read_blocking().map(drop)
    })?;
    Ok(Row::new(
        Id::D3,
        "100 chained elementwise ops on 4096 elements, one read".into(),
        median(t.clone()) * 1e6 / 100.0,
        "us/op",
        t.len(),
        "total time including the one read back, divided by 100",
    ))
}
