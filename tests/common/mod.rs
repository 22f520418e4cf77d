//! Shared test support: the f64 oracle, seeded random data, comparison, and the op suite that
//! every backend runs.
#![allow(dead_code)]

pub mod oracle;

pub mod suite;

#[cfg(target_arch = "wasm32")]
#[macro_use]
pub mod web;

/// Calls `$callback!($args.. [every test of the op suite])`: the one list of the suite's
/// tests, which each harness (native backends, Node, the browser) turns into tests its way.
macro_rules! with_suite_tests {
    ($callback:ident!($($args:tt)*)) => {
        $callback!($($args)* [
            // suite/elementwise.rs
            unary_random, unary_edges, binary_random, binary_edges, chained_ops, broadcasting,
            where_cond, strided_elementwise, swiglu,
            // suite/reduce.rs, softmax.rs, norm.rs
            reduce_random, reduce_edges, dot_random, reduce_axes, softmax_random, softmax_edges,
            norms,
            // suite/matmul.rs
            matmul_random, matmul_edges, matmul_options, matmul_tiles_and_f16, matmul_long_k,
            matmul_f16_small_rows, matmul_half_weights,
            // suite/conv.rs, pool.rs, attention.rs
            conv, pool, attention, attention_special_values, attention_split_prompt,
            attention_input_errors,
            attention_layouts, attention_halves,
            // suite/embedding.rs, rope.rs, layout.rs, topk.rs, quant.rs, quant_prompt.rs
            embedding, rope, layout, split_and_chunk, views, topk_and_argmax, topk_nan_first,
            topk_long_rows, quantized, quantized_residual, quantized_rope, quantized_rows,
            quantized_prompt_halves,
            // suite/fused.rs, batch.rs, batch_quant.rs
            fused_special_values, batch_fusion_shapes, batch_api, batch_every_op,
            random_batches_vs_eager, batch_quant,
            // suite/cast.rs, compare.rs, embedding.rs
            cast_every_pair, half_precision_ops, half_precision_every_op, compare_and_integers,
            device_ids_and_lengths,
            dtype_errors,
            // suite/load.rs, group.rs, errors.rs, device.rs, random.rs
            loading, collectives, parallel_helpers, errors, hostile_shapes, verification_mode, device_loss, random_shapes_vs_oracle,
        ]);
    };
}

use oracle::Tol;

/// The sizes every op is tried at: empty, one, small odd, around the workgroup size, around a
/// reduction chunk (4096), and large and odd.
pub const SIZES: [usize; 8] = [0, 1, 3, 255, 256, 257, 4097, 65537];

/// A 2-D shape with an odd last axis.
pub const SHAPE_2D: [usize; 2] = [37, 129];

/// Values where ops misbehave: NaN, infinities, signed zeros, tiny and huge magnitudes.
pub const EDGES: [f32; 15] = [
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    0.0,
    -0.0,
    1e-30,
    -1e-30,
    0.5,
    -0.5,
    50.0,
    -50.0,
    100.0,
    -100.0,
    1e30,
    -1e30,
];

/// SplitMix64: a small, well-mixed generator, so every seed gives the same data everywhere.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }

    pub fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }

    /// Magnitudes in [lo, hi) with random signs (never near zero).
    pub fn signed_vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let v = self.uniform(lo, hi);
                if self.next_u64() & 1 == 0 {
                    v
                } else {
                    -v
                }
            })
            .collect()
    }
}

/// Whether `got` is within `tol` of `want` (NaN meets NaN; infinities must be equal).
pub fn close(got: f32, want: f64, tol: Tol) -> bool {
    let g = got as f64;
    if want.is_nan() || g.is_nan() {
        return want.is_nan() && g.is_nan();
    }
    if want.is_infinite() || g.is_infinite() {
        // A finite want that rounds to infinity in f32 counts as infinite.
        return g == want || (want as f32) == got;
    }
    (g - want).abs() <= tol.atol + tol.rtol * want.abs()
}

/// Fails with the context, the seed and the first few mismatches when any element is off.
pub fn check(ctx: &str, inputs: &dyn Fn(usize) -> String, got: &[f32], want: &[(f64, Tol)]) {
    assert_eq!(
        got.len(),
        want.len(),
        "{ctx}: got {} elements, want {}",
        got.len(),
        want.len()
    );
    let bad: Vec<String> = got
        .iter()
        .zip(want)
        .enumerate()
        .filter(|(_, (g, (w, t)))| !close(**g, *w, *t))
        .take(5)
        .map(|(i, (g, (w, t)))| {
            format!(
                "  [{i}] input {} got {g:e} want {w:e} (atol {:e}, rtol {:e})",
                inputs(i),
                t.atol,
                t.rtol
            )
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{ctx}: {} mismatches, first:\n{}",
        got.iter()
            .zip(want)
            .filter(|(g, (w, t))| !close(**g, *w, *t))
            .count(),
        bad.join("\n")
    );
}
