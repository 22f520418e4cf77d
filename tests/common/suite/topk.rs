//! top-k and argmax.

use super::*;

/// topk and argmax along the last axis: ties go to the lower index, NaN ranks above +inf, -0
/// below +0 (the order of `f32::total_cmp` for positive NaN), several k, odd widths.
pub async fn topk_and_argmax(dev: &Device) {
    for (ci, (rows, cols)) in [(37usize, 129usize), (2, 4097), (1, 1), (3, 300), (5, 2)]
        .into_iter()
        .enumerate()
    {
        let seed = 9500 + ci as u64;
        let mut x = Rng::new(seed).vec(rows * cols, -4.0, 4.0);
        // Ties: round a third of the values to a coarse grid.
        for v in x.iter_mut().step_by(3) {
            *v = (*v * 2.0).round() / 2.0;
        }
        if cols >= 10 {
            x[3] = f32::NAN;
            x[cols + 5] = f32::INFINITY;
            x[cols + 6] = -0.0;
            x[cols + 7] = 0.0;
        }
        let t = dev.tensor(&x, &[rows, cols]).unwrap();
        for k in [1, 5.min(cols), cols] {
            let (vals, idx) = t.topk_last(k).unwrap();
            assert_eq!(vals.shape(), &[rows, k]);
            let (gv, gi) = (vals.read().await.unwrap(), idx.read().await.unwrap());
            let (want_v, want_i) = reference(&x, cols, k);
            let ctx = format!("topk k={k} of [{rows}, {cols}] seed {seed}");
            check(
                &format!("{ctx} indices"),
                &|i| format!("{i}"),
                &gi,
                &exact(&want_i),
            );
            check(
                &format!("{ctx} values"),
                &|i| format!("{i}"),
                &gv,
                &exact(&want_v),
            );
            if k == 1 {
                let am = t.argmax_last().unwrap();
                assert_eq!(am.shape(), &[rows]);
                check(
                    &format!("argmax of [{rows}, {cols}]"),
                    &|i| format!("{i}"),
                    &am.read().await.unwrap(),
                    &exact(&want_i),
                );
            }
        }
    }
    let t = dev.tensor(&[1.0, 2.0, 3.0], &[3]).unwrap();
    assert!(matches!(
        t.topk_last(4).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert_eq!(t.topk_last(0).unwrap().0.shape(), &[0]);
    assert_eq!(t.argmax_last().unwrap().read().await.unwrap(), vec![2.0]);
    assert!(matches!(
        dev.tensor(&[], &[2, 0]).unwrap().argmax_last().unwrap_err(),
        Error::Empty { .. }
    ));
}

/// NaN in the first column: it ranks highest, and one-column rows of NaN work (CUDA's top-k
/// once read far out of bounds there: NaN's key was its "no bound yet" sentinel).
pub async fn topk_nan_first(dev: &Device) {
    let x = dev
        .tensor(&[f32::NAN, 1.0, 2.0, f32::NAN, f32::NAN, -1.0], &[2, 3])
        .unwrap();
    let (values, indices) = x.topk_last(3).unwrap();
    let v = values.read().await.unwrap();
    assert!(v[0].is_nan() && v[1] == 2.0 && v[2] == 1.0, "{v:?}");
    assert!(v[3].is_nan() && v[4].is_nan() && v[5] == -1.0, "{v:?}");
    assert_eq!(
        indices.read().await.unwrap(),
        vec![0.0, 2.0, 1.0, 0.0, 1.0, 2.0]
    );
    let column = dev.tensor(&[f32::NAN; 5], &[5, 1]).unwrap();
    assert_eq!(
        column.argmax_last().unwrap().read().await.unwrap(),
        vec![0.0; 5]
    );
}

/// Long rows, as a vocabulary of logits (CUDA selects by radix there, in up to three passes
/// over 11, 11 and 10 key bits): spread values with NaN, -0 and infinities; values all in
/// [1, 1.001), which share their top 22 key bits; a coarse grid of ties at the threshold; and a
/// row of one value, where selection gives way to rounds. k = 1 is the arg-max that wgpu splits
/// over workgroups: NaN in the first and last chunk, ties across every chunk.
pub async fn topk_long_rows(dev: &Device) {
    let cols = 20_000usize;
    let mut rng = Rng::new(9600);
    let mut x = Vec::with_capacity(4 * cols);
    x.extend(rng.vec(cols, -30.0, 30.0));
    x[17] = f32::NAN;
    x[18] = f32::INFINITY;
    x[19] = f32::NEG_INFINITY;
    x[20] = -0.0;
    x[cols - 1] = f32::NAN;
    x.extend(rng.vec(cols, 1.0, 1.001));
    x.extend(
        rng.vec(cols, -4.0, 4.0)
            .into_iter()
            .map(|v| (v * 4.0).round() / 4.0),
    );
    x.extend(std::iter::repeat_n(0.5f32, cols));
    let t = dev.tensor(&x, &[4, cols]).unwrap();
    for k in [1usize, 2, 50, 300] {
        let (vals, idx) = t.topk_last(k).unwrap();
        let (gv, gi) = (vals.read().await.unwrap(), idx.read().await.unwrap());
        let (want_v, want_i) = reference(&x, cols, k);
        let ctx = format!("topk k={k} of [4, {cols}]");
        check(
            &format!("{ctx} indices"),
            &|i| format!("row {} #{}", i / k, i % k),
            &gi,
            &exact(&want_i),
        );
        check(
            &format!("{ctx} values"),
            &|i| format!("row {} #{}", i / k, i % k),
            &gv,
            &exact(&want_v),
        );
    }
}

/// The `k` largest of each row of `x` (rows of `cols`) and their indices as f32, by a full
/// sort in `f32::total_cmp` order, ties to the lower index.
fn reference(x: &[f32], cols: usize, k: usize) -> (Vec<f32>, Vec<f32>) {
    let (mut values, mut indices) = (Vec::new(), Vec::new());
    for row in x.chunks_exact(cols) {
        let mut order: Vec<usize> = (0..cols).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        indices.extend(order[..k].iter().map(|&i| i as f32));
        values.extend(order[..k].iter().map(|&i| row[i]));
    }
    (values, indices)
}
