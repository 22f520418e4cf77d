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
