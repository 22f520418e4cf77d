//! Rows of fused chains: W5 (a chain of eager ops recorded into one pass), W5b and W5g (the
//! same chain as one batch, fused into one kernel, and as a replayed graph), D3b and D3g (the
//! D3 chain as a batch and as a graph).

use gpukit::Device;

use super::elementwise::Inputs;
use super::{data, median, time, Ctx, Id, Row};

/// W5, W5b and W5g; `earlier` holds W2, which the batch figures are compared with.
pub(crate) fn round_trips(cx: &Ctx, w: &Inputs, earlier: &[Row]) -> Result<Vec<Row>, String> {
    let (device, m, a) = (&cx.device, w.m, &w.a);
    let mut rows = Vec::new();
    let t = time(2, cx.runs, || {
        let x = device.tensor(a, &[m])?;
        let y = x.relu()?.scale(2.0)?;
        y.add(&y)?.sigmoid()?.read_blocking().map(drop)
    })?;
    rows.push(Ctx::round_trip(
        Id::W5,
        format!("upload {m}, relu, scale, add, sigmoid, read"),
        t,
        "ops recorded into one pass, one submit",
    ));

    // W5 through the batch API: the chain becomes one fused kernel; then the same batch
    // compiled and replayed with new data each run. The target compares with W2 (upload, one
    // op, read back).
    let w2 = earlier
        .iter()
        .find(|r| r.id == Id::W2)
        .and_then(|r| r.value);
    let vs_w2 = |v: Option<f64>| match (v, w2) {
        (Some(v), Some(w)) => format!("{:.2}x W2 (upload + one op + read)", v / w),
        _ => String::new(),
    };
    let w5_batch =
        |device: &Device| -> gpukit::Result<(gpukit::Batch, gpukit::Value, gpukit::Value)> {
            let mut b = device.batch();
            let x = b.upload(a, &[m])?;
            let y = b.relu(x)?;
            let y = b.scale(y, 2.0)?;
            let y = b.add(y, y)?;
            let y = b.sigmoid(y)?;
            b.output(y)?;
            Ok((b, x, y))
        };
    let t = time(2, cx.runs, || {
        let (w5b, _, _) = w5_batch(device)?;
        w5b.run_blocking().map(drop)
    })?;
    let mut row = Ctx::round_trip(Id::W5b, format!("W5 as one batch ({m})"), t, "");
    row.note = format!("one fused kernel, one submit; {}", vs_w2(row.value));
    rows.push(row);
    let (w5b, x5, _) = w5_batch(device).map_err(|e| e.to_string())?;
    let mut graph = w5b.compile().map_err(|e| e.to_string())?;
    let t = time(2, cx.runs, || graph.run_blocking(&[(x5, &a[..])]).map(drop))?;
    let mut row = Ctx::round_trip(
        Id::W5g,
        format!("W5 as a compiled graph, new data each run ({m})"),
        t,
        "",
    );
    row.note = format!("replay: write input, dispatch, read; {}", vs_w2(row.value));
    rows.push(row);
    Ok(rows)
}

/// D3b and D3g: the D3 chain recorded as a batch (fused into one kernel) and as a graph.
pub(crate) fn chain(cx: &Ctx) -> Result<Vec<Row>, String> {
    let device = &cx.device;
    let x3h = data(4096, 7);
    let d3_batch = || -> gpukit::Result<(gpukit::Batch, gpukit::Value)> {
        let mut b = device.batch();
        let x = b.upload(&x3h, &[4096])?;
        let c = b.upload(&[0.5], &[])?;
        let mut t = x;
        for i in 0..100 {
            t = match i % 4 {
                0 => b.relu(t)?,
                1 => b.scale(t, 0.5)?,
                2 => b.add(t, c)?,
                _ => b.tanh(t)?,
            };
        }
        b.output(t)?;
        Ok((b, x))
    };
    let t = time(3, cx.runs, || {
        let (b, _) = d3_batch()?;
        b.run_blocking().map(drop)
    })?;
    let d3b = Row::new(
        Id::D3b,
        "D3 as one batch (fused), one read".into(),
        median(t.clone()) * 1e6 / 100.0,
        "us/op",
        t.len(),
        "recording, planning, one fused kernel and the read back, divided by 100",
    );
    let (b, x3v) = d3_batch().map_err(|e| e.to_string())?;
    let mut graph = b.compile().map_err(|e| e.to_string())?;
    let t = time(3, cx.runs, || {
        graph.run_blocking(&[(x3v, &x3h[..])]).map(drop)
    })?;
    let d3g = Row::new(
        Id::D3g,
        "D3 as a compiled graph, new data each run".into(),
        median(t.clone()) * 1e6 / 100.0,
        "us/op",
        t.len(),
        "input write, replay and the read back, divided by 100",
    );
    Ok(vec![d3b, d3g])
}
