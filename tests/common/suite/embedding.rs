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

/// Ids and key lengths as device tensors: u32 and i32 ids of any shape, an id out of range
/// gives a NaN row; device lengths give what host lengths give; a graph replays with new ids
/// and lengths.
pub async fn device_ids_and_lengths(dev: &Device) {
    let (vocab, dim) = (11usize, 6usize);
    let table = Rng::new(44_000).vec(vocab * dim, -1.0, 1.0);
    let t = dev.tensor(&table, &[vocab, dim]).unwrap();
    let ids = [3u32, 10, 0, 3, 99, 7];
    let dev_ids = dev.tensor_of(&ids, &[2, 3]).unwrap();
    let e = t.embedding_ids(&dev_ids).unwrap();
    assert_eq!(e.shape(), &[2, 3, dim]);
    let got = e.read().await.unwrap();
    for (r, &id) in ids.iter().enumerate() {
        let row = &got[r * dim..(r + 1) * dim];
        if (id as usize) < vocab {
            assert_eq!(row, &table[id as usize * dim..(id as usize + 1) * dim]);
        } else {
            assert!(row.iter().all(|v| v.is_nan()), "id {id}: {row:?}");
        }
    }
    let signed = dev.tensor_of(&[-1i32, 2], &[2]).unwrap();
    let got = t.embedding_ids(&signed).unwrap().read().await.unwrap();
    assert!(got[..dim].iter().all(|v| v.is_nan()));
    assert_eq!(&got[dim..], &table[2 * dim..3 * dim]);
    let float_ids = dev.tensor(&[1.0], &[1]).unwrap();
    let err = t.embedding_ids(&float_ids).unwrap_err();
    assert!(err.to_string().contains("u32"), "{err}");

    // Device lengths equal host lengths.
    let (b, h, s, d) = (2usize, 2usize, 7usize, 4usize);
    let mk = |k: u64| {
        dev.tensor(
            &Rng::new(44_100 + k).vec(b * h * s * d, -1.0, 1.0),
            &[b, h, s, d],
        )
    };
    let (q, k, v) = (mk(1).unwrap(), mk(2).unwrap(), mk(3).unwrap());
    let host = AttentionOptions {
        key_lengths: Some(&[3, 7]),
        ..Default::default()
    };
    let want = q.attention(&k, &v, host).unwrap().read().await.unwrap();
    let lens = dev.tensor_of(&[3u32, 7], &[2]).unwrap();
    let on_device = AttentionOptions {
        lengths: Some(&lens),
        ..Default::default()
    };
    let got = q
        .attention(&k, &v, on_device)
        .unwrap()
        .read()
        .await
        .unwrap();
    assert_eq!(got, want);
    let both = AttentionOptions {
        key_lengths: Some(&[3, 7]),
        lengths: Some(&lens),
        ..Default::default()
    };
    assert!(q.attention(&k, &v, both).is_err());

    // A graph takes new ids and lengths at each run.
    let mut batch = dev.batch();
    let tv = batch.tensor(&t).unwrap();
    let iv = batch.upload_of(&[1u32, 2, 3], &[3]).unwrap();
    let rows = batch.embedding_ids(tv, iv).unwrap();
    let total = batch.reduce_last(ReduceOp::Sum, rows).unwrap();
    batch.output(total).unwrap();
    let qv = batch.tensor(&q).unwrap();
    let kv = batch.tensor(&k).unwrap();
    let vv = batch.tensor(&v).unwrap();
    let lv = batch.upload_of(&[7u32, 7], &[2]).unwrap();
    let att = batch
        .attention_lengths([qv, kv, vv], lv, false, None)
        .unwrap();
    batch.output(att).unwrap();
    assert_eq!(batch.dtype(iv).unwrap(), gpukit::DType::U32);
    let mut graph = batch.compile().unwrap();
    for (new_ids, new_lens) in [([9u32, 0, 4], [3u32, 7]), ([5, 5, 10], [1, 2])] {
        graph.set_input(iv, &new_ids).unwrap();
        graph.set_input(lv, &new_lens).unwrap();
        let r = graph.run(&[]).await.unwrap();
        let want: Vec<f32> = new_ids
            .iter()
            .map(|&i| table[i as usize * dim..(i as usize + 1) * dim].iter().sum())
            .collect();
        let got = r.get(total).unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() < 1e-5,
                "graph ids {new_ids:?}: {got:?} vs {want:?}"
            );
        }
        let opts = AttentionOptions {
            key_lengths: Some(&new_lens),
            ..Default::default()
        };
        let want = q.attention(&k, &v, opts).unwrap().read().await.unwrap();
        assert_eq!(r.get(att).unwrap(), &want[..], "graph lengths {new_lens:?}");
    }
    assert!(graph.set_input(iv, &[1.0f32, 2.0, 3.0]).is_err());
    assert!(graph.set_input(iv, &[1u32]).is_err());

    // Outputs come back in their own dtype, run once and replayed: integers past 2^24 and
    // indices exactly, halves as their bits.
    let mut batch = dev.batch();
    let big = batch.upload_of(&[16_777_217i32, -5], &[2]).unwrap();
    let sum = batch.cast(big, gpukit::DType::U32).unwrap();
    let scores = batch
        .upload(&[0.5, 3.0, -1.0, 9.0, 2.0, 1.0], &[2, 3])
        .unwrap();
    let best = batch.argmax_last(scores).unwrap();
    let half = batch.cast(scores, gpukit::DType::F16).unwrap();
    for v in [sum, best, half] {
        batch.output(v).unwrap();
    }
    let once = batch.run().await.unwrap();
    let mut graph = batch.compile().unwrap();
    for (run, r) in [(0, once), (1, graph.run(&[]).await.unwrap())] {
        let want = [16_777_217u32, u32::MAX - 4];
        assert_eq!(r.get_as::<u32>(sum).unwrap(), want, "run {run}");
        assert_eq!(r.get(sum).unwrap(), want.map(|w| w as f32), "run {run}");
        assert_eq!(r.dtype(best).unwrap(), gpukit::DType::U32);
        assert_eq!(r.get_as::<u32>(best).unwrap(), [1, 0], "run {run}");
        let bits: Vec<u16> = r
            .get_as::<gpukit::f16>(half)
            .unwrap()
            .iter()
            .map(|h| h.to_bits())
            .collect();
        assert_eq!(bits, [0x3800, 0x4200, 0xbc00, 0x4880, 0x4000, 0x3c00]);
        let err = r.get_as::<f32>(best).unwrap_err();
        assert!(err.to_string().contains("u32"), "{err}");
    }
}
