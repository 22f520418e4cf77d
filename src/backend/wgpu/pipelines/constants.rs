//! The override constants that specialise each kernel's shader.

use super::{split_chunk, split_key_words, AttentionBlocks, Kernel};

impl Kernel {
    /// The override constants that specialise the shader.
    pub(crate) fn constants(self) -> Vec<(&'static str, f64)> {
        match self {
            Kernel::Unary(k) => vec![("OP", k as u32 as f64)],
            Kernel::Binary(op) | Kernel::BinaryBroadcast(op) => vec![("OP", op as u32 as f64)],
            Kernel::StridedUnary(k) => vec![("UNARY", k as u32 as f64)],
            Kernel::StridedBinary(op) => vec![("BINARY", op as u32 as f64)],
            Kernel::StridedGated(k, op) => {
                vec![("UNARY", k as u32 as f64), ("BINARY", op as u32 as f64)]
            }
            Kernel::ReducePartial { op, dot } => {
                vec![("OP", op as u32 as f64), ("DOT", dot as u32 as f64)]
            }
            Kernel::ReduceFinish(op) => vec![("OP", op as u32 as f64)],
            Kernel::SoftmaxStats { narrow } | Kernel::SoftmaxCombine { narrow } => {
                softmax_width(narrow)
            }
            Kernel::Cast
            | Kernel::Compare
            | Kernel::Copy
            | Kernel::Embedding
            | Kernel::WriteRows
            | Kernel::TopK
            | Kernel::TopKSelect
            | Kernel::TopKSplit { .. }
            | Kernel::Where
            | Kernel::Fused { .. } => vec![],
            Kernel::QMatmul {
                format,
                residual,
                norm,
                swiglu,
                rope,
                cache,
                ..
            } => {
                let mut c = vec![
                    ("FORMAT", format as u32 as f64),
                    ("HAS_RESIDUAL", residual as u32 as f64),
                    ("HAS_NORM", norm as u32 as f64),
                    ("HAS_SWIGLU", swiglu as u32 as f64),
                    ("HAS_ROPE", rope as u32 as f64),
                ];
                if cache > 0 {
                    c.push(("CACHE_KV", f64::from(cache - 1)));
                }
                c
            }
            Kernel::Conv2d { bias } => vec![("HAS_BIAS", bias as u32 as f64)],
            Kernel::Pool2d { max } => vec![("MAX", max as u32 as f64)],
            Kernel::Gemv {
                bias,
                activation,
                weight,
                ..
            } => with_weight(
                vec![
                    ("HAS_BIAS", bias as u32 as f64),
                    ("ACT", activation.map_or(0, |a| a as u32) as f64),
                ],
                weight,
            ),
            Kernel::Rope { interleaved } => vec![("INTERLEAVED", interleaved as u32 as f64)],
            Kernel::Attention {
                causal,
                lens,
                blocks,
            } => {
                let mut c = vec![
                    ("CAUSAL", causal as u32 as f64),
                    ("HAS_LENS", lens as u32 as f64),
                ];
                match blocks {
                    AttentionBlocks::Split { rows, kv, k_vec4 } => {
                        c.push(("GROUP_ROWS", f64::from(rows)));
                        c.push(("CHUNK", f64::from(split_chunk(kv))));
                        c.push(("KV", f64::from(kv)));
                        c.push(("K_VEC4", k_vec4 as u32 as f64));
                        c.push(("KW", f64::from(split_key_words(kv))));
                    }
                    AttentionBlocks::Merge { keys, kv } => {
                        c.push(("MERGE_KEYS", f64::from(keys)));
                        c.push(("KV", f64::from(kv)));
                    }
                    AttentionBlocks::Flash { split, width, tile } => {
                        c.push(("SPLIT_KEYS", f64::from(split)));
                        c.push(("FLASH_D", f64::from(width)));
                        c.push(("FLASH_ROWS", f64::from(tile.rows())));
                        c.push(("FLASH_THREADS", 2.0 * f64::from(tile.rows())));
                        c.push(("FLASH_KEYS", f64::from(tile.keys())));
                        c.push(("FLASH_SHARE", tile.share() as u32 as f64));
                    }
                    _ => {}
                }
                c
            }
            Kernel::Matmul {
                transpose_a,
                transpose_b,
                bias,
                activation,
                weight,
                ..
            } => with_weight(
                vec![
                    ("TRANS_A", transpose_a as u32 as f64),
                    ("TRANS_B", transpose_b as u32 as f64),
                    ("HAS_BIAS", bias as u32 as f64),
                    ("ACT", activation.map_or(0, |a| a as u32) as f64),
                ],
                weight,
            ),
            Kernel::Norm { rms, weight, bias } => vec![
                ("RMS", rms as u32 as f64),
                ("HAS_WEIGHT", weight as u32 as f64),
                ("HAS_BIAS", bias as u32 as f64),
            ],
            Kernel::SoftmaxApply { log } => vec![("LOG", log as u32 as f64)],
            Kernel::SoftmaxRows { log, narrow } => {
                let mut c = softmax_width(narrow);
                c.push(("LOG", log as u32 as f64));
                c
            }
        }
    }
}

/// `constants` plus WEIGHT (shaders/include/weight_at.wgsl) for an f16 (1) or bf16 (2) weight;
/// an f32 weight keeps the default, so kernels without the override (the cooperative-matrix
/// matmul, which never takes half weights) are never given it.
fn with_weight(
    mut constants: Vec<(&'static str, f64)>,
    weight: crate::DType,
) -> Vec<(&'static str, f64)> {
    match weight {
        crate::DType::F16 => constants.push(("WEIGHT", 1.0)),
        crate::DType::BF16 => constants.push(("WEIGHT", 2.0)),
        _ => {}
    }
    constants
}

/// softmax.wgsl's workgroup size and merge round (`WG = ROUND * ROUND`): 4 on software
/// adapters, where a barrier costs in proportion to the workgroup (SwiftShader resumes its
/// invocations four at a time; through Dawn 64 rows of 1024 took 35 ms at 256, 3.0-3.6 at 16
/// and 2.3-2.5 at 4, one row of 65,536 and its round trip 12.1, 4.3-5.7 and 3.4-3.8), else 256.
fn softmax_width(narrow: bool) -> Vec<(&'static str, f64)> {
    let (wg, round) = if narrow { (4.0, 2.0) } else { (256.0, 16.0) };
    vec![("WG", wg), ("ROUND", round)]
}
