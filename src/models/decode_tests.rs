//! Tests of the decode step (`models::decode`): the cache write and the fused layers against
//! the step op by op.

use crate::{Backend, DType, Device};

/// `write_rows` on the devices that have it: rows land at the device-held index, rows past
/// the end are dropped, the rest is kept, and the CPU backend refuses it.
#[test]
fn write_rows_writes_in_place_and_drops_rows_past_the_end() {
    let mut devices = vec![Device::with_backend_blocking(Backend::Vulkan)
        .expect("make test installs lavapipe, so a Vulkan adapter exists")];
    devices.extend(Device::with_backend_blocking(Backend::Cuda).ok());
    for d in devices {
        let dst = d.tensor(&[0.5; 12], &[1, 4, 3]).unwrap();
        let rows = d
            .tensor(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[1, 2, 3])
            .unwrap();
        for (at, want) in [
            (
                1u32,
                vec![0.5, 0.5, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.5, 0.5, 0.5],
            ),
            (
                3,
                vec![0.5, 0.5, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 1.0, 2.0, 3.0],
            ),
            (
                4,
                vec![0.5, 0.5, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 1.0, 2.0, 3.0],
            ),
            (
                u32::MAX,
                vec![0.5, 0.5, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 1.0, 2.0, 3.0],
            ),
        ] {
            let at = d.tensor_of(&[at], &[1]).unwrap();
            let out = dst.write_rows(1, &at, &rows).unwrap();
            assert_eq!(out.read_blocking().unwrap(), want, "{:?}", d.info().backend);
            assert_eq!(dst.read_blocking().unwrap(), want, "{:?}", d.info().backend);
        }
        // Views: a dense one (rows 1..3, read in place at an offset) and a strided one.
        let src: Vec<f32> = (0..12).map(|x| x as f32).collect();
        let src = d.tensor(&src, &[1, 4, 3]).unwrap();
        let at = d.tensor_of(&[0u32], &[1]).unwrap();
        let dense = src.slice(1, 1..3).unwrap();
        let out = dst
            .write_rows(1, &at, &dense)
            .unwrap()
            .read_blocking()
            .unwrap();
        assert_eq!(out[..6], [3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        let strided = src.reshape(&[1, 2, 6]).unwrap().slice(2, 3..6).unwrap();
        let out = dst
            .write_rows(1, &at, &strided)
            .unwrap()
            .read_blocking()
            .unwrap();
        assert_eq!(out[..6], [3.0, 4.0, 5.0, 9.0, 10.0, 11.0]);
        // A KV cache's store: rows of [2, 2] halves, the heads 3..5 of [1, 4, 5, 2] read in
        // place (offset and stride whole words), and at an odd offset (copied out first).
        let dst16 = d
            .tensor(&[0.5; 16], &[1, 4, 2, 2])
            .unwrap()
            .cast(DType::F16)
            .unwrap();
        let src: Vec<f32> = (0..40).map(|x| x as f32).collect();
        let src16 = d
            .tensor(&src, &[1, 4, 5, 2])
            .unwrap()
            .cast(DType::F16)
            .unwrap();
        let heads = src16.slice(2, 3..5).unwrap();
        let out = dst16.write_rows(1, &at, &heads).unwrap();
        let want: Vec<f32> = (0..4)
            .flat_map(|r| src[r * 10 + 6..r * 10 + 10].to_vec())
            .collect();
        let got = out.cast(DType::F32).unwrap().read_blocking().unwrap();
        assert_eq!(got, want, "{:?} f16 heads", d.info().backend);
        let odd = src16
            .reshape(&[1, 4, 10])
            .unwrap()
            .slice(2, 1..5)
            .unwrap()
            .reshape(&[1, 4, 2, 2])
            .unwrap();
        let out = dst16.write_rows(1, &at, &odd).unwrap();
        let want: Vec<f32> = (0..4)
            .flat_map(|r| src[r * 10 + 1..r * 10 + 5].to_vec())
            .collect();
        let got = out.cast(DType::F32).unwrap().read_blocking().unwrap();
        assert_eq!(got, want, "{:?} f16 at an odd offset", d.info().backend);
        let wide = d.tensor(&[1.0; 4], &[1, 1, 4]).unwrap();
        assert!(dst.write_rows(1, &at, &wide).is_err(), "a wider row");
        let halves = rows.cast(DType::F16).unwrap();
        assert!(dst.write_rows(1, &at, &halves).is_err(), "another dtype");
        assert!(dst.write_rows(1, &rows, &rows).is_err(), "an f32 index");
    }
    let cpu = Device::cpu();
    let dst = cpu.tensor(&[0.5; 3], &[1, 1, 3]).unwrap();
    let at = cpu.tensor_of(&[0u32], &[1]).unwrap();
    let e = dst.write_rows(1, &at, &dst).unwrap_err().to_string();
    assert!(e.contains("replays graphs"), "{e}");
}
/// Uniform values in [lo, hi) from a 64-bit LCG: deterministic inputs for the test below.
fn uniform(seed: &mut u64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + (hi - lo) * ((*seed >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

/// The query, key and value projection that stores its key and value rows in the cache
/// (one kernel on Vulkan) against the product and `write_rows` apart: the same product, the
/// same cache rows in f32, f16 and bf16, at an inner row, the last and past the end (dropped),
/// the other rows kept.
#[test]
fn the_cached_projection_matches_the_product_then_write_rows() {
    use crate::{QuantFormat, QuantMatmulOptions, RopeLayout};
    let d = Device::with_backend_blocking(Backend::Vulkan)
        .expect("make test installs lavapipe, so a Vulkan adapter exists");
    // 3 query heads and a KV head of 8: 5 head rows, the last 2 (16 values) cached.
    let (k, hd, heads, rows, capacity) = (64usize, 8usize, 3usize, 5usize, 4usize);
    let n = rows * hd;
    let from = heads * hd;
    let mut seed = 2026;
    // Q4_1 blocks: f16 scale and min, 16 bytes of nibbles.
    let mut bytes = Vec::new();
    for block in 0..n * k / 32 {
        let dm = uniform(&mut seed, 2, 0.01, 0.05);
        bytes.extend(half::f16::from_f32(dm[0]).to_le_bytes());
        bytes.extend(half::f16::from_f32(-dm[1]).to_le_bytes());
        bytes.extend((0..16).map(|i| ((block * 7 + i * 13) % 251) as u8));
    }
    let w = d.quantized(&bytes, QuantFormat::Q4_1, n, k).unwrap();
    let x = d
        .tensor(&uniform(&mut seed, k, -1.0, 1.0), &[1, k])
        .unwrap();
    let norm = d.tensor(&uniform(&mut seed, k, 0.5, 1.5), &[k]).unwrap();
    let angles = uniform(&mut seed, rows * hd / 2, -3.0, 3.0);
    let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
    let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
    let cos = d.tensor(&cos, &[rows, hd / 2]).unwrap();
    let sin = d.tensor(&sin, &[rows, hd / 2]).unwrap();
    let options = QuantMatmulOptions {
        rms_norm: Some((&norm, 1e-5)),
        rope: Some((&cos, &sin, RopeLayout::Interleaved)),
        ..Default::default()
    };
    let start = uniform(&mut seed, capacity * 2 * hd, -2.0, 2.0);
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let fused = d.tensor(&start, &[1, capacity, 2, hd]).unwrap();
        let fused = fused.cast(dtype).unwrap();
        let apart = d.tensor(&start, &[1, capacity, 2, hd]).unwrap();
        let apart = apart.cast(dtype).unwrap();
        // Halves: a value may round the other way when the sums differ in the last bit.
        let tol = match dtype {
            DType::F16 => 1e-3,
            DType::BF16 => 8e-3,
            _ => 1e-6,
        };
        for at in [1u32, 3, 4, u32::MAX] {
            let at = d.tensor_of(&[at], &[1]).unwrap();
            let y = x
                .matmul_quant_cached(&w, options, (&fused, &at), from)
                .unwrap()
                .expect("one kernel on Vulkan");
            let want = x.matmul_quant_with(&w, options).unwrap();
            let new = want
                .reshape(&[1, 1, rows, hd])
                .unwrap()
                .slice(2, heads..rows)
                .unwrap()
                .cast(dtype)
                .unwrap();
            apart.write_rows(1, &at, &new).unwrap();
            let (got, want) = (y.read_blocking().unwrap(), want.read_blocking().unwrap());
            let read = |t: &crate::Tensor| t.cast(DType::F32).unwrap().read_blocking().unwrap();
            let (got_cache, want_cache) = (read(&fused), read(&apart));
            for (what, got, want) in [("product", &got, &want), ("cache", &got_cache, &want_cache)]
            {
                for (i, (g, w)) in got.iter().zip(want.iter()).enumerate() {
                    let bound = if what == "cache" { tol } else { 1e-6 };
                    assert!(
                        (g - w).abs() <= bound * w.abs().max(1.0),
                        "{dtype:?} {what}[{i}]: {g} against {w}"
                    );
                }
            }
        }
    }
}

/// The fused decoding step (CUDA) against the same step recorded op by op, from the same
/// cache: the 16 largest logits of each step agree (and the fused argmax picks the same id
/// where the top two are apart) within 1e-3 of the largest in size for
/// f32 and f16 caches and 4e-3 for bf16 (whose rounding of a key or value moves with the
/// order of the sums before it; measured 1.1e-3), after a short prompt and after one of 600 tokens (16 chunks of
/// 64 keys a head, two rounds each).
#[cfg(cuda)]
#[test]
fn fused_step_matches_the_step_op_by_op_on_cuda() {
    use super::{Decoder, KvCache, Picked};
    use crate::models::{Llm, LlmOptions};
    let device = match Device::with_backend_blocking(Backend::Cuda) {
        Ok(d) => d,
        Err(e) if std::env::var_os("GPUKIT_REQUIRE_CUDA").is_some() => {
            panic!("GPUKIT_REQUIRE_CUDA is set but CUDA cannot run: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED (cuda): {e}");
            return;
        }
    };
    let path = std::env::var_os("GPUKIT_LLM_FILE").map_or_else(
        || {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("target/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
        },
        std::path::PathBuf::from,
    );
    let bytes = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}: run scripts/fetch-models.sh", path.display()));
    let long = "The quick brown fox jumps over the lazy dog near the river bank. ".repeat(45);
    for kv_cache in [DType::F32, DType::F16, DType::BF16] {
        let options = LlmOptions {
            context: Some(700),
            kv_cache,
            ..Default::default()
        };
        let llm = Llm::from_bytes(&device, &bytes, options).unwrap();
        let model = &*llm.model;
        for text in ["Name a colour.", long.as_str()] {
            let prompt = model.tokenizer.encode(&Llm::chat_prompt(text));
            let mut cache = KvCache::new(model, 700).unwrap();
            model.forward(&prompt, &mut cache).unwrap();
            let mut fused = Decoder::with_fusion(model, &cache, Some(16), true).unwrap();
            assert!(fused.fused, "CUDA records the fused layers");
            let mut plain = Decoder::with_fusion(model, &cache, Some(16), false).unwrap();
            assert!(!plain.fused);
            // The fused step's own argmax.
            let mut greedy = Decoder::with_fusion(model, &cache, None, true).unwrap();
            assert!(greedy.fused);
            let mut id = prompt[prompt.len() - 1];
            for step in 0..12 {
                let a = crate::future::block_on(fused.step(model, id, &mut cache)).unwrap();
                cache.len -= 1;
                let g = crate::future::block_on(greedy.step(model, id, &mut cache)).unwrap();
                cache.len -= 1;
                let Picked::Id(g) = g else {
                    panic!("no candidates were asked for");
                };
                let b = crate::future::block_on(plain.step(model, id, &mut cache)).unwrap();
                let (Picked::Candidates(va, ia), Picked::Candidates(vb, ib)) = (a, b) else {
                    panic!("candidates were asked for");
                };
                let scale = vb.iter().fold(0f32, |m, v| m.max(v.abs()));
                let err = va
                    .iter()
                    .zip(&vb)
                    .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
                let tol = if kv_cache == DType::BF16 { 4e-3 } else { 1e-3 };
                assert!(
                    err <= tol * scale && va.iter().all(|v| v.is_finite()),
                    "{kv_cache} cache, {} prompt tokens, step {step}: {va:?} against {vb:?}",
                    prompt.len()
                );
                if vb[0] - vb[1] > 2e-3 * scale {
                    assert_eq!(ia[0], ib[0], "{kv_cache} cache, step {step}");
                    assert_eq!(g, ib[0], "{kv_cache} cache, step {step}: the fused argmax");
                }
                id = ib[0];
            }
            println!(
                "{kv_cache} cache, {} prompt tokens: 12 steps agree",
                prompt.len()
            );
        }
    }
}
