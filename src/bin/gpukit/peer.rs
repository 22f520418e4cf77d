//! `gpukit bench --peer trueno`: W1-W6 on trueno 0.17.5's GPU backend, in the same process as
//! gpukit's, with the same data and run counts. Built only with the `peer-trueno` feature.
//! trueno picks its adapter itself (wgpu's high-performance preference); with one GPU, or
//! lavapipe alone, that is the adapter gpukit runs on.

/// Median microseconds per workload id, and trueno's W1 output (to check it computed).
pub type PeerResult = Result<(Vec<(&'static str, f64)>, Vec<f32>), String>;

/// The inputs of the W workloads, as gpukit's bench made them.
#[cfg_attr(not(feature = "peer-trueno"), allow(dead_code))]
pub struct Inputs<'a> {
    pub a: &'a [f32],
    pub b: &'a [f32],
    pub ma: &'a [f32],
    pub mb: &'a [f32],
    pub mm: usize,
    pub a6: &'a [f32],
    pub b6: &'a [f32],
    pub runs: usize,
    pub w6_runs: usize,
}

#[cfg(feature = "peer-trueno")]
pub fn trueno(i: &Inputs<'_>) -> PeerResult {
    use trueno::backends::gpu::{GpuCommandBatch, GpuDevice};

    let dev = GpuDevice::new()?;
    let time = |warm: usize, runs: usize, f: &mut dyn FnMut() -> Result<(), String>| {
        for _ in 0..warm {
            f()?;
        }
        let mut t = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t0 = std::time::Instant::now();
            f()?;
            t.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        t.sort_by(f64::total_cmp);
        Ok::<f64, String>(t[t.len() / 2])
    };
    let n = i.a.len();
    let mut out = vec![0.0f32; n];
    let mut rows = Vec::new();
    rows.push((
        "W1",
        time(2, i.runs, &mut || dev.vec_add(i.a, i.b, &mut out))?,
    ));
    let w1_result = out.clone();
    rows.push(("W2", time(2, i.runs, &mut || dev.relu(i.a, &mut out))?));
    rows.push(("W3", time(2, i.runs, &mut || dev.softmax(i.a, &mut out))?));
    let mut mout = vec![0.0f32; i.mm * i.mm];
    let w4 = time(2, i.runs, &mut || {
        dev.matmul(i.ma, i.mb, &mut mout, i.mm, i.mm, i.mm)
    })?;
    rows.push(("W4", w4));
    let w5 = time(2, i.runs, &mut || {
        let mut batch = GpuCommandBatch::new(dev.clone());
        let x = batch.upload(i.a);
        let y = batch.relu(x);
        let y = batch.scale(y, 2.0);
        let y = batch.add(y, y);
        let y = batch.sigmoid(y);
        pollster::block_on(batch.execute())?;
        pollster::block_on(batch.read(y)).map(drop)
    })?;
    rows.push(("W5", w5));
    let mut out6 = vec![0.0f32; i.a6.len()];
    rows.push((
        "W6",
        time(20, i.w6_runs, &mut || dev.vec_add(i.a6, i.b6, &mut out6))?,
    ));
    Ok((rows, w1_result))
}

#[cfg(not(feature = "peer-trueno"))]
pub fn trueno(_: &Inputs<'_>) -> PeerResult {
    Err("this gpukit was built without the peer: run \
         `cargo run --release --features peer-trueno -- bench --peer trueno`"
        .into())
}
