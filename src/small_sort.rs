//! An insertion sort for the few records the library sorts for display (tuning records,
//! profile rows: tens at most). The standard library's sorts are fast on large inputs but
//! each instantiation adds kilobytes of generic code, which the browser package pays for.

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

#[cfg(test)]
mod tests {
    use super::sort_small_by;

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
