//! Small sorts. The standard library's sorts are fast on large inputs but each instantiation
//! adds kilobytes of generic code (17 KB for the CPU top-k's `sort_unstable`), which the
//! browser package pays for: an insertion sort for the few records the library sorts for
//! display (tuning records, profile rows: tens at most), and a heapsort, O(n log n) in a few
//! hundred bytes, for the CPU top-k.

/// Sorts `v` so that no element comes after one it is `before`; stable.
pub(crate) fn sort_small_by<T>(v: &mut [T], before: impl Fn(&T, &T) -> bool) {
    for i in 1..v.len() {
        let mut j = i;
        while j > 0 && before(&v[j], &v[j - 1]) {
            v.swap(j - 1, j);
            j -= 1;
        }
    }
}

/// Moves `v[root]` down the max-heap `v[..end]` (ordered by `key`) to its place.
fn sift_down<T: Copy, K: Ord>(v: &mut [T], mut root: usize, end: usize, key: &impl Fn(T) -> K) {
    loop {
        let mut child = 2 * root + 1;
        if child >= end {
            return;
        }
        if child + 1 < end && key(v[child]) < key(v[child + 1]) {
            child += 1;
        }
        if key(v[root]) >= key(v[child]) {
            return;
        }
        v.swap(root, child);
        root = child;
    }
}

/// Sorts `v` by `key`, ascending; not stable (the top-k keys are unique).
pub(crate) fn heap_sort_by_key<T: Copy, K: Ord>(v: &mut [T], key: impl Fn(T) -> K) {
    let n = v.len();
    for root in (0..n / 2).rev() {
        sift_down(v, root, n, &key);
    }
    for end in (1..n).rev() {
        v.swap(0, end);
        sift_down(v, 0, end, &key);
    }
}

/// The `k` items of smallest `key`, ascending, in `out`: a max-heap of the best `k` so far,
/// O(n log k).
pub(crate) fn smallest_k_by_key<T: Copy, K: Ord>(
    items: impl Iterator<Item = T>,
    k: usize,
    key: impl Fn(T) -> K,
    out: &mut Vec<T>,
) {
    out.clear();
    if k == 0 {
        return;
    }
    for item in items {
        if out.len() < k {
            out.push(item);
            if out.len() == k {
                for root in (0..k / 2).rev() {
                    sift_down(out, root, k, &key);
                }
            }
        } else if key(item) < key(out[0]) {
            out[0] = item;
            sift_down(out, 0, k, &key);
        }
    }
    heap_sort_by_key(out, key);
}

#[cfg(test)]
mod tests {
    use super::{heap_sort_by_key, smallest_k_by_key, sort_small_by};

    #[test]
    fn heap_sort_sorts() {
        let mut state = 7u64;
        for n in [0usize, 1, 2, 3, 10, 257] {
            let mut v: Vec<u64> = (0..n)
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                    state >> 40
                })
                .collect();
            let mut want = v.clone();
            want.sort_unstable();
            heap_sort_by_key(&mut v, |x| x);
            assert_eq!(v, want, "n = {n}");
        }
        let data: Vec<u32> = (0..1000u32)
            .map(|i| i.wrapping_mul(2654435761) >> 7)
            .collect();
        let mut want = data.clone();
        want.sort_unstable();
        let mut out = Vec::new();
        for k in [0, 1, 5, 999, 1000, 1200] {
            smallest_k_by_key(data.iter().copied(), k, |x| x, &mut out);
            assert_eq!(out, want[..k.min(1000)], "k = {k}");
        }
        let mut rev: Vec<i32> = (0..100).collect();
        heap_sort_by_key(&mut rev, std::cmp::Reverse);
        assert_eq!(rev, (0..100).rev().collect::<Vec<_>>());
    }

    #[test]
    fn sorts_stably() {
        let mut v = vec![(3, 'a'), (1, 'b'), (3, 'c'), (0, 'd'), (1, 'e')];
        sort_small_by(&mut v, |a, b| a.0 < b.0);
        assert_eq!(v, [(0, 'd'), (1, 'b'), (1, 'e'), (3, 'a'), (3, 'c')]);
        let mut empty: Vec<u8> = Vec::new();
        sort_small_by(&mut empty, |a, b| a < b);
        assert!(empty.is_empty());
    }
}
