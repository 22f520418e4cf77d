//! Checks of the kernel table against the shaders: naga validation of every source and
//! specialisation, and every kernel's bindings, entry point and overrides.

use super::attention_blocks::FlashTile;
use super::*;
use crate::ops::UnaryOp;

fn every_kernel() -> Vec<Kernel> {
    let mut k: Vec<Kernel> = UnaryOp::ALL
        .iter()
        .flat_map(|op| [Kernel::Unary(op.kind()), Kernel::StridedUnary(op.kind())])
        .collect();
    for op in BinaryOp::ALL {
        k.extend([
            Kernel::Binary(op),
            Kernel::BinaryBroadcast(op),
            Kernel::StridedBinary(op),
            Kernel::StridedGated(UnaryOp::Silu.kind(), op),
        ]);
    }
    k.push(Kernel::Where);
    for op in ReduceOp::ALL {
        k.extend([
            Kernel::ReducePartial { op, dot: false },
            Kernel::ReducePartial { op, dot: true },
            Kernel::ReduceFinish(op),
        ]);
    }
    k.extend([
        Kernel::SoftmaxStats { narrow: false },
        Kernel::SoftmaxStats { narrow: true },
        Kernel::SoftmaxCombine { narrow: false },
        Kernel::SoftmaxCombine { narrow: true },
        Kernel::SoftmaxApply { log: false },
        Kernel::SoftmaxApply { log: true },
        Kernel::SoftmaxRows {
            log: false,
            narrow: false,
        },
        Kernel::SoftmaxRows {
            log: true,
            narrow: true,
        },
        Kernel::Copy,
        Kernel::Embedding,
        Kernel::WriteRows,
        Kernel::Rope { interleaved: false },
        Kernel::Rope { interleaved: true },
        Kernel::Attention {
            causal: false,
            lens: false,
            blocks: AttentionBlocks::Row,
        },
        Kernel::Attention {
            causal: true,
            lens: true,
            blocks: AttentionBlocks::Flash {
                split: 0,
                width: 64,
                tile: FlashTile::new(64, 32, false),
            },
        },
        Kernel::Attention {
            causal: true,
            lens: true,
            blocks: AttentionBlocks::Flash {
                split: 128,
                width: 128,
                tile: FlashTile::new(64, 16, true),
            },
        },
        Kernel::Attention {
            causal: false,
            lens: false,
            blocks: AttentionBlocks::Flash {
                split: 0,
                width: 32,
                tile: FlashTile::new(16, 16, false),
            },
        },
        Kernel::Attention {
            causal: true,
            lens: true,
            blocks: AttentionBlocks::Split {
                rows: 4,
                kv: 1,
                k_vec4: true,
            },
        },
        Kernel::Attention {
            causal: false,
            lens: false,
            blocks: AttentionBlocks::Split {
                rows: 8,
                kv: 0,
                k_vec4: false,
            },
        },
        Kernel::Attention {
            causal: false,
            lens: false,
            blocks: AttentionBlocks::Merge { keys: 256, kv: 2 },
        },
        Kernel::Attention {
            causal: true,
            lens: true,
            blocks: AttentionBlocks::Merge { keys: 64, kv: 0 },
        },
    ]);
    for activation in [
        None,
        Some(Activation::Relu),
        Some(Activation::Gelu),
        Some(Activation::GeluTanh),
        Some(Activation::Silu),
    ] {
        for (transpose_a, transpose_b, bias) in [(false, false, false), (true, true, true)] {
            k.push(Kernel::Norm {
                rms: transpose_a,
                weight: bias,
                bias: !bias,
            });
            // f32 weights, and half weights in both of B's layouts.
            for weight in [DType::F32, DType::F16, DType::BF16] {
                k.push(Kernel::Matmul {
                    tile: MatmulTile::DEFAULT,
                    arith: Arith::F32,
                    transpose_a,
                    transpose_b,
                    bias,
                    activation,
                    vectors: false,
                    weight,
                });
            }
        }
    }
    for tile in MatmulTile::CANDIDATES {
        for arith in [Arith::F32, Arith::F16, Arith::F16Rounded] {
            k.push(Kernel::Matmul {
                tile,
                arith,
                transpose_a: false,
                transpose_b: true,
                bias: true,
                activation: Some(Activation::Silu),
                vectors: false,
                weight: DType::F32,
            });
        }
    }
    for &tile in Arith::F16Coop.candidates() {
        for vectors in [false, true] {
            k.push(Kernel::Matmul {
                tile,
                arith: Arith::F16Coop,
                transpose_a: vectors,
                transpose_b: false,
                bias: true,
                activation: Some(Activation::Gelu),
                vectors,
                weight: DType::F32,
            });
        }
        k.push(Kernel::Matmul {
            tile,
            arith: Arith::F16CoopHalves,
            transpose_a: false,
            transpose_b: false,
            bias: false,
            activation: None,
            vectors: true,
            weight: DType::F32,
        });
    }
    k.extend([
        Kernel::TopK,
        Kernel::TopKSelect,
        Kernel::TopKSplit { merge: false },
        Kernel::TopKSplit { merge: true },
    ]);
    for inputs in 1..=crate::ops::fused::MAX_INPUTS {
        k.push(super::super::kernels::fused::fused_kernel(
            &sample_fused_source(inputs),
            inputs,
        ));
    }
    k.extend([Kernel::Cast, Kernel::Compare]);
    for format in [QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::Q4_1] {
        for (dequant, residual, norm, swiglu, rope) in [
            (false, false, false, false, false),
            (false, true, false, false, false),
            (false, false, true, false, false),
            (false, true, true, false, false),
            (false, true, false, true, false),
            (false, false, true, false, true),
            (false, false, false, false, true),
            (true, false, false, false, false),
        ] {
            k.push(Kernel::QMatmul {
                format,
                dequant,
                residual,
                norm,
                swiglu,
                rope,
                cache: 0,
            });
        }
        for cache in 1..=3 {
            k.push(Kernel::QMatmul {
                format,
                dequant: false,
                residual: false,
                norm: true,
                swiglu: false,
                rope: true,
                cache,
            });
        }
    }
    for flag in [false, true] {
        k.extend([Kernel::Conv2d { bias: flag }, Kernel::Pool2d { max: flag }]);
        for subgroup in [false, true] {
            k.push(Kernel::Gemv {
                bias: flag,
                activation: flag.then_some(Activation::Gelu),
                subgroup,
                weight: DType::F32,
            });
        }
        // Half weights (WEIGHT) take the GEMV without subgroups.
        for weight in [DType::F16, DType::BF16] {
            k.push(Kernel::Gemv {
                bias: flag,
                activation: None,
                subgroup: false,
                weight,
            });
        }
    }
    k
}

/// Which variant a kernel is. The match has no wildcard: a new variant does not compile
/// until it is numbered here, and `every_kernel_variant_is_checked` then fails until
/// `every_kernel` lists it.
fn variant(k: Kernel) -> usize {
    match k {
        Kernel::Unary(_) => 0,
        Kernel::Binary(_) => 1,
        Kernel::BinaryBroadcast(_) => 2,
        Kernel::ReducePartial { .. } => 3,
        Kernel::ReduceFinish(_) => 4,
        Kernel::SoftmaxStats { .. } => 5,
        Kernel::SoftmaxCombine { .. } => 6,
        Kernel::SoftmaxApply { .. } => 7,
        Kernel::Matmul { .. } => 8,
        Kernel::Norm { .. } => 9,
        Kernel::Copy => 10,
        Kernel::Embedding => 11,
        Kernel::Rope { .. } => 12,
        Kernel::Attention { .. } => 13,
        Kernel::TopK => 14,
        Kernel::QMatmul { .. } => 15,
        Kernel::Conv2d { .. } => 16,
        Kernel::Pool2d { .. } => 17,
        Kernel::Gemv { .. } => 18,
        Kernel::Fused { .. } => 19,
        Kernel::Where => 20,
        Kernel::Cast => 21,
        Kernel::Compare => 22,
        Kernel::WriteRows => 23,
        Kernel::StridedUnary(_) => 24,
        Kernel::StridedBinary(_) => 25,
        Kernel::TopKSelect => 26,
        Kernel::SoftmaxRows { .. } => 27,
        Kernel::StridedGated(..) => 28,
        Kernel::TopKSplit { .. } => 29,
    }
}
const VARIANTS: usize = 30;

#[test]
fn every_kernel_variant_is_checked() {
    let mut seen = [false; VARIANTS];
    for k in every_kernel() {
        seen[variant(k)] = true;
    }
    let missing: Vec<usize> = (0..VARIANTS).filter(|&i| !seen[i]).collect();
    assert!(
        missing.is_empty(),
        "variants {missing:?} are missing from every_kernel()"
    );
}

fn parse_source(name: &str, source: &str) -> naga::Module {
    naga::front::wgsl::parse_str(source)
        .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(source)))
}

/// A fused expression reading `inputs` inputs through every unary and binary op.
fn sample_fused(inputs: usize) -> crate::ops::fused::Expr {
    use crate::ops::fused::Expr;
    let mut e = Expr::Input(0);
    for (i, op) in UnaryOp::ALL.into_iter().enumerate() {
        e = Expr::Unary(op, Box::new(e));
        let op2 = BinaryOp::ALL[i % BinaryOp::ALL.len()];
        e = Expr::Binary(op2, Box::new(e), Box::new(Expr::Input(i % inputs)));
    }
    e
}

fn sample_fused_source(inputs: usize) -> String {
    super::super::kernels::fused::fused_source(&sample_fused(inputs), inputs).unwrap()
}

fn parse(kernel: Kernel) -> naga::Module {
    let source = match kernel {
        Kernel::Fused { inputs, .. } => sample_fused_source(inputs as usize),
        _ => kernel.source().unwrap().into_owned(),
    };
    parse_source(kernel.shader().file(), &source)
}

/// Generated fused kernels validate for every input count.
#[test]
fn fused_sources_validate() {
    for inputs in 1..=crate::ops::fused::MAX_INPUTS {
        let source = sample_fused_source(inputs);
        validate(
            &format!("fused, {inputs} inputs"),
            &source,
            naga::valid::Capabilities::empty(),
        );
        // Parameters are exact bit patterns, and every op is applied.
        assert!(
            source.contains(&format!("{:#010x}u", 0.01f32.to_bits())),
            "{source}"
        );
        assert_eq!(source.matches("unary_op(").count(), UnaryOp::ALL.len() + 1);
    }
}

fn validate(name: &str, source: &str, caps: naga::valid::Capabilities) {
    let module = parse_source(name, source);
    naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
        .validate(&module)
        .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(source)));
}

#[test]
fn every_shader_parses_and_validates() {
    for shader in Shader::ALL {
        // build.rs replaced every include line with its file.
        assert!(
            !shader.source().contains("@include"),
            "{} was not assembled",
            shader.file()
        );
        // matmul.wgsl is a template: its specialisations are validated below.
        let caps = match shader {
            Shader::Matmul | Shader::MatmulCoop => continue,
            Shader::MatmulGemvSubgroup => naga::valid::Capabilities::SUBGROUP,
            _ => naga::valid::Capabilities::empty(),
        };
        validate(shader.file(), shader.source(), caps);
    }
}

/// Every matmul specialisation is valid WGSL: f32 and rounded ones without any capability,
/// the f16 ones with shader-f16 only.
#[test]
fn every_matmul_specialisation_validates() {
    for tile in MatmulTile::CANDIDATES {
        for arith in [Arith::F32, Arith::F16, Arith::F16Rounded] {
            let source = matmul_source(tile, arith, false).unwrap();
            let caps = if arith == Arith::F16 {
                naga::valid::Capabilities::SHADER_FLOAT16
            } else {
                naga::valid::Capabilities::empty()
            };
            validate(&format!("matmul {tile} {arith:?}"), &source, caps);
            assert_eq!(source.starts_with("enable f16;"), arith == Arith::F16);
        }
    }
    for &tile in Arith::F16Coop.candidates() {
        for vectors in [false, true] {
            let source = matmul_source(tile, Arith::F16Coop, vectors).unwrap();
            let caps = naga::valid::Capabilities::SHADER_FLOAT16
                | naga::valid::Capabilities::COOPERATIVE_MATRIX;
            validate(&format!("matmul {tile} cooperative"), &source, caps);
            assert!(!source.contains("// @"), "{tile}: a template line is left");
            // One accumulator per 16 x 16 block: 2 x (BN / 32) subgroups of (BM / 32) x 2.
            let last = format!("var acc_{}_1 ", tile.tile_m() / 32 - 1);
            assert!(source.contains(&last), "{tile}: {last} missing");
            assert_eq!(source.contains("array<vec4<f32>>"), vectors);
            assert_eq!(source.contains("fn load_a("), !vectors);
        }
        // f16 storage: halves in, f32 out (converted by a cast dispatch).
        let source = matmul_source(tile, Arith::F16CoopHalves, true).unwrap();
        let caps = naga::valid::Capabilities::SHADER_FLOAT16
            | naga::valid::Capabilities::COOPERATIVE_MATRIX;
        validate(
            &format!("matmul {tile} cooperative f16 storage"),
            &source,
            caps,
        );
        assert!(!source.contains("// @"), "{tile}: a template line is left");
        assert!(source.contains("array<vec4<f16>>"));
        assert!(!source.contains("array<vec4<f32>>"));
    }
    assert!(matmul_source(MatmulTile::new(8, 8, 8), Arith::F16Coop, false).is_err());
    // One named accumulator per row and vec4 column, and no loop-indexed arrays.
    let source = matmul_source(MatmulTile::new(8, 8, 16), Arith::F16, false).unwrap();
    assert!(source.contains("var acc_7_1 ") && !source.contains("acc_8_0"));
    assert!(source.contains("var part_7_1 "));
    assert!(!source
        .lines()
        .any(|l| l.trim_start().starts_with("// @generate")));
    assert!(!source.contains("array<vec4<f32>, RM"));
}

#[test]
fn every_kernel_names_a_real_entry_point_and_overrides() {
    for kernel in every_kernel() {
        let module = parse(kernel);
        let ep = module
            .entry_points
            .iter()
            .find(|e| e.name == kernel.entry_point());
        let ep =
            ep.unwrap_or_else(|| panic!("{kernel:?}: no entry point {}", kernel.entry_point()));
        // A size set by an override (softmax's WG) is that override's value for the kernel.
        let mut size = ep.workgroup_size;
        for (axis, e) in ep.workgroup_size_overrides.iter().flatten().enumerate() {
            let Some(e) = e else { continue };
            let naga::Expression::Override(h) = module.global_expressions[*e] else {
                panic!("{kernel:?}: a workgroup size from an expression, not an override");
            };
            let name = module.overrides[h].name.clone().unwrap_or_default();
            let value = kernel
                .constants()
                .iter()
                .find(|(n, _)| *n == name)
                .map(|&(_, v)| v as u32)
                .unwrap_or_else(|| panic!("{kernel:?}: no value for the override {name}"));
            size[axis] = value;
        }
        let [x, y, z] = size;
        // The cooperative-matrix kernel (native only) sizes its workgroups by its tile; softmax
        // narrows its workgroups on software adapters; flash attention takes two invocations a
        // query row of its block.
        let threads = match kernel {
            Kernel::Matmul { arith, tile, .. } => arith.threads(tile),
            Kernel::SoftmaxStats { narrow: true }
            | Kernel::SoftmaxCombine { narrow: true }
            | Kernel::SoftmaxRows { narrow: true, .. } => 4,
            Kernel::Attention {
                blocks: AttentionBlocks::Flash { tile, .. },
                ..
            } => 2 * u32::from(tile.rows()),
            _ => 256,
        };
        assert!(
            threads <= 256,
            "{kernel:?}: WebGPU guarantees 256 invocations, no more"
        );
        assert_eq!(
            x * y * z,
            threads,
            "{kernel:?}: the workgroup size the code assumes"
        );
        if !matches!(kernel, Kernel::Matmul { .. } | Kernel::Conv2d { .. }) {
            assert_eq!(size, [threads, 1, 1], "{kernel:?}: kernels.rs assumes 1-D");
        }
        // The bind group layout must match the shader: uniform at 0, read-only inputs, then
        // read-write outputs, and nothing else.
        let layout = kernel.layout();
        let (inputs, outputs) = (layout.inputs() as u32, layout.outputs() as u32);
        for (_, var) in module.global_variables.iter() {
            let Some(binding) = &var.binding else {
                continue;
            };
            let expected = match binding.binding {
                0 => "uniform",
                b if b <= inputs => "read",
                b if b <= inputs + outputs => "read_write",
                _ => "nothing",
            };
            let actual = match var.space {
                naga::AddressSpace::Uniform => "uniform",
                naga::AddressSpace::Storage { access }
                    if access.contains(naga::StorageAccess::STORE) =>
                {
                    "read_write"
                }
                naga::AddressSpace::Storage { .. } => "read",
                _ => "other",
            };
            assert_eq!(
                actual,
                expected,
                "{kernel:?}: binding {} of {}",
                binding.binding,
                kernel.shader().file()
            );
        }
        for (name, _) in kernel.constants() {
            assert!(
                module
                    .overrides
                    .iter()
                    .any(|(_, o)| o.name.as_deref() == Some(name)),
                "{kernel:?}: shader has no override {name}"
            );
        }
    }
}

#[test]
#[cfg(native)]
fn flash_tiles_fit_the_workgroup_memory() {
    use super::attention_blocks::{flash_tile, flash_workgroup_bytes};
    let t = FlashTile::new;
    assert_eq!(flash_workgroup_bytes(64, t(64, 16, false)), 30724);
    assert_eq!(flash_workgroup_bytes(64, t(64, 32, false)), 43012);
    assert_eq!(flash_workgroup_bytes(128, t(64, 16, true)), 47124);
    // Native Vulkan on NVIDIA, lavapipe, a 16 KB adapter: (rows, keys, share) by width.
    assert_eq!(
        [32, 64, 128].map(|w| flash_tile(w, 49152)),
        [
            Some(t(64, 32, false)),
            Some(t(64, 32, false)),
            Some(t(64, 16, true))
        ]
    );
    assert_eq!(
        [32, 64, 128].map(|w| flash_tile(w, 32768)),
        [
            Some(t(64, 32, false)),
            Some(t(64, 16, false)),
            Some(t(32, 16, true))
        ]
    );
    assert_eq!(
        [32, 64, 128].map(|w| flash_tile(w, 16384)),
        [Some(t(32, 32, true)), Some(t(32, 16, true)), None]
    );
    for w in [32, 64, 128] {
        for storage in [16384, 32768, 49152, 65536] {
            if let Some(tile) = flash_tile(w, storage) {
                assert!(flash_workgroup_bytes(w, tile) <= storage);
                // Each invocation's prefetch fits its private arrays of 64.
                assert!(u32::from(tile.keys()) * u32::from(w) <= 128 * u32::from(tile.rows()));
            }
        }
    }
}

#[test]
fn flash_split_fills_small_grids_only() {
    use super::flash_split;
    // SmolLM2's 512-token prompt: 8 blocks x 9 heads, chunks of 64 keys (8 a block).
    assert_eq!(flash_split(72, 512), 64);
    // 128 and 192 workgroups: chunks of 128 and 256 keys.
    assert_eq!(flash_split(128, 500), 128);
    assert_eq!(flash_split(192, 700), 256);
    // Grids that fill the GPU, keys that fit one chunk, and no grid at all take blocks whole.
    assert_eq!(flash_split(256, 1 << 20), 0);
    assert_eq!(flash_split(4, 64), 0);
    assert_eq!(flash_split(0, 512), 0);
    // Chunks stay within u16 for the longest keys.
    assert_eq!(flash_split(1, u64::from(u32::MAX)), 0);
    assert_eq!(flash_split(1, 1 << 20), 2048);
}
