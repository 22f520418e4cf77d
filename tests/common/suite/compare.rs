//! Comparisons, integer arithmetic, and the errors of wrong dtypes.

use super::*;
use gpukit::{bf16, f16, CompareOp, DType};

/// Comparisons of every dtype (IEEE for floats: NaN unordered, -0 == +0; signed and unsigned
/// integers), and wrapping integer add, sub and mul, with broadcasting; then `where` with a
/// mask, argmax as u32, `arange`.
pub async fn compare_and_integers(dev: &Device) {
    let mut rng = Rng::new(43_000);
    let mut a: Vec<f32> = (0..61).map(|_| (rng.uniform(-3.0, 3.0)).round()).collect();
    let b: Vec<f32> = (0..61).map(|_| (rng.uniform(-3.0, 3.0)).round()).collect();
    a[0] = f32::NAN;
    a[1] = -0.0;
    let (ta, tb) = (
        dev.tensor(&a, &[61]).unwrap(),
        dev.tensor(&b, &[61]).unwrap(),
    );
    let ai: Vec<i32> = a.iter().map(|&v| v as i32 - 7).collect();
    let bi: Vec<i32> = b.iter().map(|&v| v as i32 * 1_000_003).collect();
    let (ia, ib) = (
        dev.tensor_of(&ai, &[61]).unwrap(),
        dev.tensor_of(&bi, &[61]).unwrap(),
    );
    let au: Vec<u32> = ai.iter().map(|&v| v as u32).collect();
    let bu: Vec<u32> = bi.iter().map(|&v| v as u32).collect();
    let (ua, ub) = (
        dev.tensor_of(&au, &[61]).unwrap(),
        dev.tensor_of(&bu, &[61]).unwrap(),
    );
    let (ha, hb) = (ta.cast(DType::F16).unwrap(), tb.cast(DType::F16).unwrap());
    for op in CompareOp::ALL {
        let holds = |o: Option<std::cmp::Ordering>| {
            use std::cmp::Ordering::*;
            match op {
                CompareOp::Equal => o == Some(Equal),
                CompareOp::NotEqual => o != Some(Equal),
                CompareOp::Less => o == Some(Less),
                CompareOp::LessEqual => matches!(o, Some(Less | Equal)),
                CompareOp::Greater => o == Some(Greater),
                CompareOp::GreaterEqual => matches!(o, Some(Greater | Equal)),
            }
        };
        let cases: [(&Tensor, &Tensor, Vec<u32>); 4] = [
            (
                &ta,
                &tb,
                (0..61)
                    .map(|i| holds(a[i].partial_cmp(&b[i])) as u32)
                    .collect(),
            ),
            (
                &ha,
                &hb,
                (0..61)
                    .map(|i| holds(a[i].partial_cmp(&b[i])) as u32)
                    .collect(),
            ),
            (
                &ia,
                &ib,
                (0..61)
                    .map(|i| holds(ai[i].partial_cmp(&bi[i])) as u32)
                    .collect(),
            ),
            (
                &ua,
                &ub,
                (0..61)
                    .map(|i| holds(au[i].partial_cmp(&bu[i])) as u32)
                    .collect(),
            ),
        ];
        for (x, y, want) in cases {
            let m = x.compare(op, y).unwrap();
            assert_eq!(m.dtype(), DType::U32);
            assert_eq!(
                m.read_as::<u32>().await.unwrap(),
                want,
                "{} {}",
                op.name(),
                x.dtype()
            );
        }
    }
    // Broadcast: [3, 61] against a row, and a scalar.
    let m = dev
        .tensor(&[a.clone(), b.clone(), a.clone()].concat(), &[3, 61])
        .unwrap()
        .greater(&tb)
        .unwrap();
    let want: Vec<u32> = [&a, &b, &a]
        .iter()
        .flat_map(|r| (0..61).map(|i| (r[i] > b[i]) as u32).collect::<Vec<_>>())
        .collect();
    assert_eq!(m.read_as::<u32>().await.unwrap(), want);

    // Integer arithmetic wraps, with a broadcast scalar.
    let seven = dev.tensor_of(&[7i32], &[]).unwrap();
    for (op, f) in [
        (BinaryOp::Add, i32::wrapping_add as fn(i32, i32) -> i32),
        (BinaryOp::Sub, i32::wrapping_sub),
        (BinaryOp::Mul, i32::wrapping_mul),
    ] {
        let got = ia.binary(op, &ib).unwrap().read_as::<i32>().await.unwrap();
        let want: Vec<i32> = (0..61).map(|i| f(ai[i], bi[i])).collect();
        assert_eq!(got, want, "i32 {}", op.name());
        let got = ib
            .binary(op, &seven)
            .unwrap()
            .read_as::<i32>()
            .await
            .unwrap();
        let want: Vec<i32> = (0..61).map(|i| f(bi[i], 7)).collect();
        assert_eq!(got, want, "i32 {} scalar", op.name());
        let got = ua.binary(op, &ub).unwrap().read_as::<u32>().await.unwrap();
        let want: Vec<u32> = (0..61).map(|i| f(ai[i], bi[i]) as u32).collect();
        assert_eq!(got, want, "u32 {}", op.name());
    }

    // where with a u32 mask picks i32 values as they are.
    let mask = ia.less(&ib).unwrap();
    let w = mask.where_cond(&ia, &ib).unwrap();
    assert_eq!(w.dtype(), DType::I32);
    let want: Vec<i32> = (0..61).map(|i| ai[i].min(bi[i])).collect();
    assert_eq!(w.read_as::<i32>().await.unwrap(), want);

    // argmax is u32; arange of each dtype.
    let am = dev.tensor(&b, &[1, 61]).unwrap().argmax_last().unwrap();
    assert_eq!(am.dtype(), DType::U32);
    let best = (0..61).fold(0, |m, i| if b[i] > b[m] { i } else { m });
    assert_eq!(am.read_as::<u32>().await.unwrap(), [best as u32]);
    for dtype in DType::ALL {
        let r = dev.arange(1000, dtype).unwrap();
        assert_eq!((r.dtype(), r.shape()), (dtype, &[1000][..]));
        let want: Vec<f32> = (0..1000)
            .map(|i| match dtype {
                DType::F16 => f16::from_f32(i as f32).to_f32(),
                DType::BF16 => bf16::from_f32(i as f32).to_f32(),
                _ => i as f32,
            })
            .collect();
        assert_eq!(r.read().await.unwrap(), want, "arange {dtype}");
    }
}

/// Wrong dtypes are clear errors: an integer into a float op, mixed dtypes, integer div,
/// reading as another type, f32 into a batch op recorded natively.
pub async fn dtype_errors(dev: &Device) {
    let i = dev.tensor_of(&[1i32, 2], &[2]).unwrap();
    let u = dev.tensor_of(&[1u32, 2], &[2]).unwrap();
    let f = dev.tensor(&[1.0, 2.0], &[2]).unwrap();
    for (what, e) in [
        ("relu of i32", i.relu().unwrap_err()),
        ("i32 + u32", i.add(&u).unwrap_err()),
        ("i32 + f32", i.add(&f).unwrap_err()),
        ("i32 / i32", i.div(&i).unwrap_err()),
        ("softmax of u32", u.softmax().unwrap_err()),
        (
            "matmul of u32",
            u.reshape(&[1, 2])
                .unwrap()
                .matmul(&f.reshape(&[2, 1]).unwrap())
                .unwrap_err(),
        ),
    ] {
        assert!(matches!(e, Error::InvalidArgument { .. }), "{what}: {e}");
        assert!(
            e.to_string().contains("i32") || e.to_string().contains("u32"),
            "{what}: {e}"
        );
    }
    let e = futures_read_as(&f).await;
    assert!(e.contains("f32"), "{e}");
    let mut batch = dev.batch();
    let v = batch.upload_of(&[1u32, 2], &[2]).unwrap();
    let e = batch.relu(v).unwrap_err();
    assert!(e.to_string().contains("u32"), "{e}");
    let c = batch.cast(v, DType::F32).unwrap();
    assert!(batch.relu(c).is_ok());
}

async fn futures_read_as(t: &Tensor) -> String {
    t.read_as::<u32>().await.unwrap_err().to_string()
}
