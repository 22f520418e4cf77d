//! softmax and log_softmax.

use super::*;

async fn run_softmax(dev: &Device, x: &[f32], shape: &[usize], log: bool, ctx: &str) {
    let t = dev.tensor(x, shape).unwrap();
    let y = if log {
        t.log_softmax().unwrap()
    } else {
        t.softmax().unwrap()
    };
    assert_eq!(y.shape(), shape, "{ctx}: shape");
    let got = y.read().await.unwrap();
    let cols = *shape.last().unwrap();
    let xs = widen(x);
    let want: Vec<(f64, Tol)> = if cols == 0 {
        vec![]
    } else {
        xs.chunks(cols)
            .flat_map(|row| {
                let (v, tol) = oracle::softmax(row, log);
                v.into_iter().map(move |w| (w, tol))
            })
            .collect()
    };
    check(ctx, &|i| format!("{:e}", x[i]), &got, &want);
}

pub async fn softmax_random(dev: &Device) {
    // 4096 columns fill the registers of a GPU's `rows` kernel (256 x 16); 257 and 129 leave
    // some empty, and a software adapter's (4 x 16) takes its second loop.
    let shapes: [&[usize]; 10] = [
        &[1],
        &[3],
        &[257],
        &[37, 129],
        &[3, 4096],
        &[4, 4097],
        &[2, 65537],
        &[1000, 7],
        &[0, 5],
        &[3, 0],
    ];
    for log in [false, true] {
        for shape in shapes {
            let n: usize = shape.iter().product();
            let seed = 6000 + n as u64;
            let x = Rng::new(seed).vec(n, -8.0, 8.0);
            let name = if log { "log_softmax" } else { "softmax" };
            run_softmax(
                dev,
                &x,
                shape,
                log,
                &format!("{name} {shape:?} seed {seed}"),
            )
            .await;
        }
        // Large values: stability needs the maximum subtracted first.
        let x: Vec<f32> = Rng::new(7).vec(300, 1.0e4, 1.0e4 + 10.0);
        run_softmax(dev, &x, &[3, 100], log, "softmax of values near 1e4").await;
    }
}

pub async fn softmax_edges(dev: &Device) {
    let x: Vec<f32> = vec![
        1.0,
        2.0,
        3.0, //
        f32::NEG_INFINITY,
        0.0,
        1.0, //
        f32::NAN,
        1.0,
        2.0, //
        f32::NEG_INFINITY,
        f32::NEG_INFINITY,
        f32::NEG_INFINITY, //
        f32::INFINITY,
        0.0,
        1.0, //
        -1e30,
        1e30,
        0.0,
    ];
    for log in [false, true] {
        run_softmax(
            dev,
            &x,
            &[6, 3],
            log,
            &format!("softmax(log={log}) of edge rows"),
        )
        .await;
    }
    // A long row whose first chunk is all -inf exercises merging an empty chunk.
    let mut long = vec![f32::NEG_INFINITY; 5000];
    long[4500] = 1.0;
    long[4999] = 2.0;
    run_softmax(
        dev,
        &long,
        &[5000],
        false,
        "softmax with an all -inf first chunk",
    )
    .await;
    // Rows long enough to be split across blocks (CUDA): chunks of only -inf before finite
    // values, a row of only -inf, a +inf and a NaN far from the start.
    let cols = 40000;
    let mut rows = Rng::new(8).vec(4 * cols, -4.0, 4.0);
    rows[..17000].fill(f32::NEG_INFINITY);
    rows[cols..2 * cols].fill(f32::NEG_INFINITY);
    rows[2 * cols + 30000] = f32::INFINITY;
    rows[3 * cols + 35000] = f32::NAN;
    for log in [false, true] {
        run_softmax(
            dev,
            &rows,
            &[4, cols],
            log,
            &format!("softmax(log={log}) of long rows with -inf chunks, +inf and NaN"),
        )
        .await;
    }
}
