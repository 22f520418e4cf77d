//! Loading tensors from bytes: every dtype from unaligned little-endian bytes, and safetensors
//! files built here byte by byte.

use super::*;

/// `values` as little-endian bytes of `dtype`, and the f64 each element must load as.
fn encode(dtype: gpukit::DType, values: &[f64]) -> (Vec<u8>, Vec<f64>) {
    use gpukit::DType;
    let mut bytes = Vec::new();
    let mut want = Vec::new();
    for &v in values {
        match dtype {
            DType::F32 => {
                bytes.extend((v as f32).to_le_bytes());
                want.push((v as f32) as f64);
            }
            DType::F16 => {
                let h = half::f16::from_f64(v);
                bytes.extend(h.to_le_bytes());
                want.push(h.to_f64());
            }
            DType::BF16 => {
                let h = half::bf16::from_f64(v);
                bytes.extend(h.to_le_bytes());
                want.push(h.to_f64());
            }
            DType::I32 => {
                bytes.extend((v as i32).to_le_bytes());
                want.push((v as i32) as f64);
            }
            DType::U32 => {
                bytes.extend((v.abs() as u32).to_le_bytes());
                want.push((v.abs() as u32) as f64);
            }
            _ => unreachable!("a dtype this test does not know"),
        }
    }
    (bytes, want)
}

/// A safetensors file: the 8-byte header length, the JSON header, then each tensor's data.
fn safetensors_file(tensors: &[(&str, &str, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let mut header = String::from("{");
    let mut offset = 0;
    for (i, (name, dtype, shape, data)) in tensors.iter().enumerate() {
        if i > 0 {
            header.push(',');
        }
        let shape: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        header.push_str(&format!(
            "\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":[{}],\"data_offsets\":[{offset},{}]}}",
            shape.join(","),
            offset + data.len()
        ));
        offset += data.len();
    }
    header.push('}');
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend(header.as_bytes());
    for (.., data) in tensors {
        file.extend(data);
    }
    file
}

/// Every dtype from bytes at an odd address (NaN, ±Inf, subnormals and f16 overflow among the
/// floats, ±2^24 among the integers), each kept in its dtype; the errors for wrong lengths; and
/// safetensors files with several dtypes, an unsupported dtype and truncation.
pub async fn loading(dev: &Device) {
    use gpukit::DType;
    let mut rng = Rng::new(33_000);
    let mut values: Vec<f64> = rng
        .vec(37, -100.0, 100.0)
        .into_iter()
        .map(f64::from)
        .collect();
    values.extend([
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1e-6,
        -1e-40,
        1e5,
        0.0,
        -0.0,
    ]);
    let ints: Vec<f64> = values[..37]
        .iter()
        .map(|v| v.round())
        .chain([16_777_216.0, -16_777_216.0, 0.0])
        .collect();
    for dtype in DType::ALL {
        let src = if matches!(dtype, DType::I32 | DType::U32) {
            &ints
        } else {
            &values
        };
        let (bytes, want) = encode(dtype, src);
        // One byte in, so the elements are not aligned.
        let mut shifted = vec![0u8];
        shifted.extend(&bytes);
        let t = dev
            .tensor_from_bytes(&shifted[1..], dtype, &[want.len()])
            .unwrap();
        let exact = Tol {
            atol: 0.0,
            rtol: 0.0,
        };
        // f32 storage rounds f64 references of f32 values exactly; subnormal f32 inputs may be
        // flushed by a GPU only in arithmetic, never by a load.
        let want: Vec<(f64, Tol)> = want.iter().map(|&w| ((w as f32) as f64, exact)).collect();
        let got = t.read().await.unwrap();
        check(
            &format!("tensor_from_bytes {dtype}"),
            &|i| format!("{i}"),
            &got,
            &want,
        );
        assert!(dev
            .tensor_from_bytes(&bytes[1..], dtype, &[want.len()])
            .is_err());
        assert!(dev
            .tensor_from_bytes(&bytes, dtype, &[want.len() + 1])
            .is_err());
    }
    // Each dtype is stored as it is: the bytes come back unchanged, and an f16 tensor holds
    // two bytes an element; integers beyond 2^24 are exact.
    let big = [16_777_217i32, i32::MIN, -1];
    let bytes: Vec<u8> = big.iter().flat_map(|v| v.to_le_bytes()).collect();
    let t = dev.tensor_from_bytes(&bytes, DType::I32, &[3]).unwrap();
    assert_eq!(t.dtype(), DType::I32);
    assert_eq!(t.read_as::<i32>().await.unwrap(), big);
    assert_eq!(t.read_bytes().await.unwrap(), bytes);
    assert!(t.read_as::<u32>().await.is_err());
    let u = dev
        .tensor_from_bytes(&u32::MAX.to_le_bytes(), DType::U32, &[1])
        .unwrap();
    assert_eq!(u.read_as::<u32>().await.unwrap(), [u32::MAX]);
    assert_eq!("bf16".parse::<DType>().unwrap(), DType::BF16);
    assert!("f64".parse::<DType>().is_err());

    // A safetensors file: f32, f16, bf16 and i32 tensors.
    let w: Vec<f32> = rng.vec(6, -1.0, 1.0);
    let w_bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    let (h_bytes, h_want) = encode(DType::F16, &[0.5, -2.0, 65504.0, 1e-7]);
    let (b_bytes, b_want) = encode(DType::BF16, &[3.0, -1e30]);
    let (i_bytes, i_want) = encode(DType::I32, &[7.0, -3.0, 0.0]);
    let file = safetensors_file(&[
        ("layer.weight", "F32", vec![2, 3], w_bytes.clone()),
        ("layer.half", "F16", vec![4], h_bytes),
        ("emb", "BF16", vec![1, 2], b_bytes),
        ("ids", "I32", vec![3], i_bytes),
    ]);
    let loaded = dev.load_safetensors(&file).unwrap();
    let names: Vec<&str> = loaded.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["layer.weight", "layer.half", "emb", "ids"]);
    let wants: [Vec<f64>; 4] = [
        w.iter().map(|&v| v as f64).collect(),
        h_want,
        b_want,
        i_want,
    ];
    let shapes: [&[usize]; 4] = [&[2, 3], &[4], &[1, 2], &[3]];
    for (((name, t), want), shape) in loaded.iter().zip(&wants).zip(shapes) {
        assert_eq!(t.shape(), shape, "{name}");
        let want: Vec<(f64, Tol)> = want
            .iter()
            .map(|&v| {
                (
                    (v as f32) as f64,
                    Tol {
                        atol: 0.0,
                        rtol: 0.0,
                    },
                )
            })
            .collect();
        check(name, &|i| format!("{i}"), &t.read().await.unwrap(), &want);
    }
    // An unsupported dtype names its tensor; a truncated file and garbage are errors.
    let f64_file = safetensors_file(&[("scale", "F64", vec![1], 1.0f64.to_le_bytes().to_vec())]);
    let e = dev.load_safetensors(&f64_file).unwrap_err();
    assert!(e.to_string().contains("scale"), "{e}");
    assert!(dev.load_safetensors(&file[..file.len() - 3]).is_err());
    assert!(dev.load_safetensors(&file[..5]).is_err());
    assert!(dev
        .load_safetensors(b"not a safetensors file at all")
        .is_err());
}
