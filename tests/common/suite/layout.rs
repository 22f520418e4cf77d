//! permute, transpose, slice and concat.

use super::*;

/// permute / transpose / slice / concat move values exactly where coordinates say.
pub async fn layout(dev: &Device) {
    let shape = [2, 3, 5, 7];
    let n: usize = shape.iter().product();
    let x = Rng::new(9100).vec(n, -1.0, 1.0);
    let t = dev.tensor(&x, &shape).unwrap();
    for axes in [
        [0, 1, 2, 3],
        [3, 2, 1, 0],
        [1, 0, 3, 2],
        [2, 3, 0, 1],
        [0, 3, 1, 2],
    ] {
        let y = t.permute(&axes).unwrap();
        let out_shape: Vec<usize> = axes.iter().map(|&a| shape[a]).collect();
        assert_eq!(y.shape(), out_shape.as_slice());
        let want: Vec<f32> = (0..n)
            .map(|i| {
                let co = coords(i, &out_shape);
                let mut ci = [0; 4];
                for (k, &a) in axes.iter().enumerate() {
                    ci[a] = co[k];
                }
                x[flat(&ci, &shape)]
            })
            .collect();
        check(
            &format!("permute {axes:?}"),
            &|i| format!("{i}"),
            &y.read().await.unwrap(),
            &exact(&want),
        );
    }
    let m = dev
        .tensor(&x[..37 * 3], &[37, 3])
        .unwrap()
        .transpose(0, 1)
        .unwrap();
    let want: Vec<f32> = (0..37 * 3).map(|i| x[(i % 37) * 3 + i / 37]).collect();
    check(
        "transpose [37, 3]",
        &|i| format!("{i}"),
        &m.read().await.unwrap(),
        &exact(&want),
    );

    for (axis, range) in [
        (0, 1..2),
        (1, 0..3),
        (2, 1..4),
        (3, 6..7),
        (3, 2..2),
        (1, 1..3),
    ] {
        let y = t.slice(axis, range.clone()).unwrap();
        let mut out_shape = shape.to_vec();
        out_shape[axis] = range.len();
        assert_eq!(y.shape(), out_shape.as_slice());
        let want: Vec<f32> = (0..y.len())
            .map(|i| {
                let mut c = coords(i, &out_shape);
                c[axis] += range.start;
                x[flat(&c, &shape)]
            })
            .collect();
        check(
            &format!("slice axis {axis} {range:?}"),
            &|i| format!("{i}"),
            &y.read().await.unwrap(),
            &exact(&want),
        );
    }

    for axis in 0..4 {
        let parts: Vec<Tensor> = [1usize, 2, 3]
            .iter()
            .map(|&k| {
                let mut s = shape.to_vec();
                s[axis] = k;
                let len: usize = s.iter().product();
                dev.tensor(&Rng::new(9200 + k as u64).vec(len, -1.0, 1.0), &s)
                    .unwrap()
            })
            .collect();
        let refs: Vec<&Tensor> = parts.iter().collect();
        let y = Tensor::concat(&refs, axis).unwrap();
        let mut out_shape = shape.to_vec();
        out_shape[axis] = 6;
        assert_eq!(y.shape(), out_shape.as_slice());
        let host: Vec<Vec<f32>> = {
            let mut h = Vec::new();
            for p in &parts {
                h.push(p.read().await.unwrap());
            }
            h
        };
        let want: Vec<f32> = (0..y.len())
            .map(|i| {
                let mut c = coords(i, &out_shape);
                let (part, start) = match c[axis] {
                    0 => (0, 0),
                    1 | 2 => (1, 1),
                    _ => (2, 3),
                };
                c[axis] -= start;
                host[part][flat(&c, parts[part].shape())]
            })
            .collect();
        check(
            &format!("concat along axis {axis}"),
            &|i| format!("{i}"),
            &y.read().await.unwrap(),
            &exact(&want),
        );
    }

    assert!(matches!(
        t.permute(&[0, 0, 1, 2]).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        t.permute(&[0, 1, 2]).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        t.slice(3, 5..8).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        t.slice(4, 0..1).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    let other = dev.tensor(&x[..6], &[2, 3]).unwrap();
    assert!(matches!(
        Tensor::concat(&[&t, &other], 0).unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
    assert!(Tensor::concat(&[], 0).is_err());
}

/// split and chunk against the host's slices of the same data, joined back by concat; their
/// errors.
pub async fn split_and_chunk(dev: &Device) {
    let shape = [4usize, 7, 3];
    let x = Rng::new(34_000).vec(shape.iter().product(), -1.0, 1.0);
    let t = dev.tensor(&x, &shape).unwrap();
    // The host's part of axis 1 from `start`, `len` long.
    let part = |start: usize, len: usize| -> Vec<f32> {
        let mut out = Vec::new();
        for a in 0..shape[0] {
            for b in start..start + len {
                out.extend(&x[(a * shape[1] + b) * shape[2]..][..shape[2]]);
            }
        }
        out
    };
    let cases: [(&str, Vec<Tensor>, Vec<usize>); 2] = [
        (
            "split [2, 0, 5]",
            t.split(1, &[2, 0, 5]).unwrap(),
            vec![2, 0, 5],
        ),
        ("chunk 3", t.chunk(3, 1).unwrap(), vec![3, 3, 1]),
    ];
    for (what, parts, sizes) in cases {
        assert_eq!(parts.len(), sizes.len(), "{what}");
        let mut start = 0;
        for (p, &len) in parts.iter().zip(&sizes) {
            assert_eq!(p.shape(), &[shape[0], len, shape[2]], "{what}");
            assert_eq!(
                p.read().await.unwrap(),
                part(start, len),
                "{what} from {start}"
            );
            start += len;
        }
        let refs: Vec<&Tensor> = parts.iter().collect();
        let joined = Tensor::concat(&refs, 1).unwrap();
        assert_eq!(
            joined.read().await.unwrap(),
            x,
            "{what}: concat of the parts"
        );
    }
    // More chunks than elements: one per element.
    assert_eq!(t.chunk(10, 0).unwrap().len(), 4);
    assert!(t.split(1, &[3, 3]).is_err());
    assert!(t.split(3, &[4]).is_err());
    assert!(t.chunk(0, 1).is_err());
    assert!(t.chunk(2, 5).is_err());
}

/// Elements of a view on the host: `shape`'s coordinates read at `offset + c . strides`.
pub(super) fn gather(data: &[f32], shape: &[usize], strides: &[usize], offset: usize) -> Vec<f32> {
    let n: usize = shape.iter().product();
    (0..n)
        .map(|mut i| {
            let mut at = offset;
            for (d, &size) in shape.iter().enumerate().rev() {
                at += (i % size) * strides[d];
                i /= size;
            }
            data[at]
        })
        .collect()
}

pub(super) fn row_major(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Views: `permute`, `transpose`, `slice`, `chunk` and `broadcast_to` share their source's
/// storage (views of views too, on random shapes of 1 to 6 axes); reads, `contiguous`, ops on
/// them and `reshape` match the values gathered on the host; matmul reads transposed views as
/// its flags and attention reads a permuted `[b, s, h, d]` view in place, each equal to the
/// same op on copied-out tensors.
pub async fn views(dev: &Device) {
    let mut rng = Rng::new(9600);
    for case in 0..14 {
        let rank = 1 + case % 6;
        let shape: Vec<usize> = (0..rank)
            .map(|_| 1 + (rng.next_u64() % 4) as usize)
            .collect();
        let n: usize = shape.iter().product();
        let data = rng.signed_vec(n, 0.1, 2.0);
        let t = dev.tensor(&data, &shape).unwrap();
        let ctx = format!("case {case} shape {shape:?}");
        // A random permutation.
        let mut axes: Vec<usize> = (0..rank).collect();
        for i in (1..rank).rev() {
            axes.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        let base = row_major(&shape);
        let p_shape: Vec<usize> = axes.iter().map(|&a| shape[a]).collect();
        let p_strides: Vec<usize> = axes.iter().map(|&a| base[a]).collect();
        let p = t.permute(&axes).unwrap();
        let want = gather(&data, &p_shape, &p_strides, 0);
        assert_eq!(p.read().await.unwrap(), want, "permute {axes:?} {ctx}");
        assert!(p.contiguous().unwrap().is_contiguous());
        assert_eq!(p.contiguous().unwrap().read().await.unwrap(), want, "{ctx}");
        let relu: Vec<f32> = want.iter().map(|&v| v.max(0.0)).collect();
        assert_eq!(
            p.relu().unwrap().read().await.unwrap(),
            relu,
            "relu of a view {ctx}"
        );
        // A slice of the permuted view (a view of a view), then an op of two views.
        let axis = (rng.next_u64() % rank as u64) as usize;
        let len = p_shape[axis];
        let start = (rng.next_u64() % len as u64) as usize;
        let s = p.slice(axis, start..len).unwrap();
        let mut s_shape = p_shape.clone();
        s_shape[axis] = len - start;
        let s_want = gather(&data, &s_shape, &p_strides, start * p_strides[axis]);
        assert_eq!(
            s.read().await.unwrap(),
            s_want,
            "slice {axis} {start}.. {ctx}"
        );
        let sum: Vec<f32> = s_want.iter().map(|&v| v + v).collect();
        assert_eq!(s.add(&s).unwrap().read().await.unwrap(), sum, "{ctx}");
        let flat = s.reshape(&[s_want.len()]).unwrap();
        assert_eq!(
            flat.read().await.unwrap(),
            s_want,
            "reshape of a view {ctx}"
        );
        // Chunks are views too; an f16 view keeps its dtype.
        for (i, c) in p.chunk(2, 0).unwrap().iter().enumerate() {
            let rows = p_shape[0].div_ceil(2);
            let mut c_shape = p_shape.clone();
            c_shape[0] = c.shape()[0];
            let c_want = gather(&data, &c_shape, &p_strides, i * rows * p_strides[0]);
            assert_eq!(c.read().await.unwrap(), c_want, "chunk {i} {ctx}");
        }
        let h = t.cast(gpukit::DType::F16).unwrap().permute(&axes).unwrap();
        assert_eq!(h.dtype(), gpukit::DType::F16);
        let h_want: Vec<f32> = want
            .iter()
            .map(|&v| half::f16::from_f32(v).to_f32())
            .collect();
        assert_eq!(h.read().await.unwrap(), h_want, "f16 view {ctx}");
    }
    // broadcast_to: stride 0 along the repeated axes, then an op reading it.
    let col = dev.tensor(&[1.0, 2.0, 3.0], &[3, 1]).unwrap();
    let b = col.broadcast_to(&[2, 3, 4]).unwrap();
    let want: Vec<f32> = (0..24).map(|i| [1.0, 2.0, 3.0][(i / 4) % 3]).collect();
    assert_eq!(b.read().await.unwrap(), want);
    assert_eq!(b.sum().unwrap().read_scalar().await.unwrap(), 48.0);

    // matmul on transposed views (the flags, no copy) equals matmul on copies.
    let (m, k, n) = (5usize, 7usize, 3usize);
    let a_km = dev
        .tensor(&rng.signed_vec(2 * k * m, 0.1, 1.0), &[2, k, m])
        .unwrap();
    let b_nk = dev
        .tensor(&rng.signed_vec(n * k, 0.1, 1.0), &[n, k])
        .unwrap();
    let (a, bt) = (a_km.transpose(1, 2).unwrap(), b_nk.transpose(0, 1).unwrap());
    let got = a.matmul(&bt).unwrap().read().await.unwrap();
    let want = a
        .contiguous()
        .unwrap()
        .matmul(&bt.contiguous().unwrap())
        .unwrap()
        .read()
        .await
        .unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert!(
            (g - w).abs() <= 1e-5 + 1e-5 * w.abs(),
            "transposed views: {g} vs {w}"
        );
    }

    // Attention on a [b, s, h, d] tensor permuted to [b, h, s, d]: read in place.
    let (bsz, s, h, d) = (2usize, 6usize, 3usize, 8usize);
    let mk = |seed| {
        dev.tensor(
            &Rng::new(seed).vec(bsz * s * h * d, -1.0, 1.0),
            &[bsz, s, h, d],
        )
        .unwrap()
    };
    let (q, kk, v) = (mk(9601), mk(9602), mk(9603));
    let views = [&q, &kk, &v].map(|t| t.permute(&[0, 2, 1, 3]).unwrap());
    let opts = AttentionOptions {
        causal: true,
        ..Default::default()
    };
    let got = views[0].attention(&views[1], &views[2], opts).unwrap();
    let dense = views.each_ref().map(|t| t.contiguous().unwrap());
    let want = dense[0].attention(&dense[1], &dense[2], opts).unwrap();
    assert_eq!(got.read().await.unwrap(), want.read().await.unwrap());
}
