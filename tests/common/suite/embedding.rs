//! Embedding lookups.

use super::*;

/// Embedding rows picked by id (repeats, first and last row, none).
pub async fn embedding(dev: &Device) {
    let (vocab, dim) = (50, 37);
    let table = Rng::new(9300).vec(vocab * dim, -1.0, 1.0);
    let t = dev.tensor(&table, &[vocab, dim]).unwrap();
    for ids in [vec![0u32, 49, 7, 7, 3], vec![12], vec![]] {
        let y = t.embedding(&ids).unwrap();
        assert_eq!(y.shape(), &[ids.len(), dim]);
        let want: Vec<f32> = ids
            .iter()
            .flat_map(|&i| table[i as usize * dim..(i as usize + 1) * dim].to_vec())
            .collect();
        check(
            &format!("embedding {ids:?}"),
            &|i| format!("{i}"),
            &y.read().await.unwrap(),
            &exact(&want),
        );
    }
    let e = t.embedding(&[1, 50]).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }) && e.to_string().contains("50"),
        "{e}"
    );
}
