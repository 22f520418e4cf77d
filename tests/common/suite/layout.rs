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
