//! Top-k on the CPU: per row, a partial selection by the total order of `topk::order_key`.

use super::par;

/// The `k` largest of each row, largest first (NaN above everything, ties by index).
pub(super) fn topk(x: &[f32], rows: usize, cols: usize, k: usize) -> (Vec<f32>, Vec<f32>) {
    let mut pairs = vec![(0.0f32, 0.0f32); rows * k];
    par::rows_mut(&mut pairs, k, |r0, block| {
        let mut order: Vec<usize> = Vec::with_capacity(k);
        for (r, dst) in block.chunks_exact_mut(k.max(1)).enumerate() {
            let row = &x[(r0 + r) * cols..(r0 + r + 1) * cols];
            let key = |i: usize| (std::cmp::Reverse(crate::ops::topk::order_key(row[i])), i);
            crate::small_sort::smallest_k_by_key(0..cols, k, key, &mut order);
            for (d, &i) in dst.iter_mut().zip(&order) {
                *d = (row[i], i as f32);
            }
        }
    });
    pairs.into_iter().unzip()
}
