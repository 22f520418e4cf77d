//! Compute pipelines, created once per device and cached under typed keys.
//!
//! A key names a shader file, an entry point and the override constants that specialise it.
//! A misspelt kernel is a compile error, never a run-time string miss.

pub(crate) use super::matmul_template::{matmul_source, Arith};
pub(crate) use super::shaders::Shader;
use crate::error::{Error, Result};
use crate::ops::elementwise::UnaryKind;
use crate::ops::quant::QuantFormat;
use crate::ops::{Activation, BinaryOp, MatmulTile, ReduceOp};
use crate::DType;
use std::borrow::Cow;
use std::collections::hash_map::Entry;
use std::collections::HashMap;

mod attention_blocks;
mod constants;
mod layout;
pub(crate) use attention_blocks::{
    flash_split, flash_tile, flash_width, kv_code, split_chunk, split_key_words, AttentionBlocks,
};
pub(crate) use layout::Layout;

/// One pipeline: a kernel and its specialisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kernel {
    /// Conversion between dtypes.
    Cast,
    /// Comparisons and integer arithmetic.
    Compare,
    Unary(UnaryKind),
    Binary(BinaryOp),
    BinaryBroadcast(BinaryOp),
    /// `where(cond, a, b)`, every operand read by repetition.
    Where,
    /// A unary op on an operand read through strides.
    StridedUnary(UnaryKind),
    /// A binary op on operands read through strides.
    StridedBinary(BinaryOp),
    /// `binary(unary(a), b)` on operands read through strides (SwiGLU).
    StridedGated(UnaryKind, BinaryOp),
    ReducePartial {
        op: ReduceOp,
        dot: bool,
    },
    ReduceFinish(ReduceOp),
    /// `narrow`: workgroups of 4 rather than 256 (see `constants.rs`).
    SoftmaxStats {
        narrow: bool,
    },
    SoftmaxCombine {
        narrow: bool,
    },
    SoftmaxApply {
        log: bool,
    },
    /// Softmax of rows of one chunk, statistics and values in one dispatch.
    SoftmaxRows {
        log: bool,
        narrow: bool,
    },
    Matmul {
        tile: MatmulTile,
        arith: Arith,
        transpose_a: bool,
        transpose_b: bool,
        bias: bool,
        activation: Option<Activation>,
        /// vec4 loads of A and B (`matmul_source`); only the cooperative-matrix kernel has them.
        vectors: bool,
        /// B's dtype: f32, or f16/bf16 bits two to a word under f32 A and output (the tiled
        /// kernel only: shaders/include/weight_at.wgsl).
        weight: DType,
    },
    Norm {
        rms: bool,
        weight: bool,
        bias: bool,
    },
    Copy,
    Embedding,
    /// embedding.wgsl's in-place row store (`Tensor::write_rows`).
    #[cfg_attr(not(feature = "models"), allow(dead_code))]
    WriteRows,
    Rope {
        interleaved: bool,
    },
    Attention {
        causal: bool,
        lens: bool,
        blocks: AttentionBlocks,
    },
    TopK,
    /// topk.wgsl's radix selection (`main_select`).
    TopKSelect,
    /// A long row's arg-max over workgroups: topk.wgsl's `main_partial`, or with `merge` its
    /// `main_merge`.
    TopKSplit {
        merge: bool,
    },
    QMatmul {
        format: QuantFormat,
        dequant: bool,
        /// Adds a residual of the output's shape (the product only).
        residual: bool,
        /// RMS-normalises x's rows first (the product only).
        norm: bool,
        /// Reads x as SwiGLU halves, `silu(gate) * up` (the product only).
        swiglu: bool,
        /// Rotates the result as interleaved RoPE rows (the product only).
        rope: bool,
        /// quant_cached.wgsl: also stores the product's last columns in a KV cache held as
        /// `cache - 1` ([`kv_code`]); 0 is quant.wgsl (the product only).
        cache: u8,
    },
    Conv2d {
        bias: bool,
    },
    Pool2d {
        max: bool,
    },
    Gemv {
        bias: bool,
        activation: Option<Activation>,
        subgroup: bool,
        /// The weight's dtype: f32, or f16/bf16 bits two to a word (without subgroups only:
        /// shaders/include/weight_at.wgsl).
        weight: DType,
    },
    /// A generated elementwise kernel (kernels/fused.rs), by the hash of its source.
    Fused {
        id: u64,
        inputs: u8,
    },
}

impl Kernel {
    pub(crate) fn shader(self) -> Shader {
        match self {
            Kernel::Cast => Shader::Cast,
            Kernel::Compare => Shader::Compare,
            Kernel::Unary(_) => Shader::ElementwiseUnary,
            Kernel::Binary(_) => Shader::ElementwiseBinary,
            Kernel::BinaryBroadcast(_) => Shader::ElementwiseBroadcast,
            Kernel::Where => Shader::ElementwiseWhere,
            Kernel::ReducePartial { .. } | Kernel::ReduceFinish(_) => Shader::Reduce,
            Kernel::SoftmaxStats { .. }
            | Kernel::SoftmaxCombine { .. }
            | Kernel::SoftmaxApply { .. }
            | Kernel::SoftmaxRows { .. } => Shader::Softmax,
            Kernel::Matmul {
                arith: Arith::F16Coop | Arith::F16CoopHalves,
                ..
            } => Shader::MatmulCoop,
            Kernel::Matmul { .. } => Shader::Matmul,
            Kernel::Norm { .. } => Shader::Norm,
            Kernel::Copy => Shader::Layout,
            Kernel::StridedUnary(_) | Kernel::StridedBinary(_) | Kernel::StridedGated(..) => {
                Shader::ElementwiseStrided
            }
            Kernel::Embedding | Kernel::WriteRows => Shader::Embedding,
            Kernel::Rope { .. } => Shader::Rope,
            Kernel::Attention {
                blocks: AttentionBlocks::Split { .. } | AttentionBlocks::Merge { .. },
                ..
            } => Shader::AttentionSplit,
            Kernel::Attention { .. } => Shader::Attention,
            Kernel::TopK | Kernel::TopKSelect | Kernel::TopKSplit { .. } => Shader::TopK,
            Kernel::QMatmul { cache: 0, .. } => Shader::Quant,
            Kernel::QMatmul { .. } => Shader::QuantCached,
            Kernel::Conv2d { .. } => Shader::Conv,
            Kernel::Pool2d { .. } => Shader::Pool,
            Kernel::Gemv {
                subgroup: false, ..
            } => Shader::MatmulGemv,
            Kernel::Gemv { subgroup: true, .. } => Shader::MatmulGemvSubgroup,
            // Generated from elementwise_unary.wgsl's library part.
            Kernel::Fused { .. } => Shader::ElementwiseUnary,
        }
    }

    /// Whether the kernel's indices and loops were audited to stay in bounds without runtime
    /// checks (see `create_module`).
    fn audited(self) -> bool {
        matches!(
            self,
            Kernel::Matmul { .. }
                | Kernel::QMatmul { .. }
                | Kernel::Attention {
                    blocks: AttentionBlocks::Flash { .. }
                        | AttentionBlocks::Split { .. }
                        | AttentionBlocks::Merge { .. }
                        | AttentionBlocks::Row,
                    ..
                }
        )
    }

    /// Which shader module the kernel's pipeline is made from.
    fn module_key(self) -> ModuleKey {
        match self {
            Kernel::Matmul {
                tile,
                arith,
                vectors,
                ..
            } => ModuleKey::Matmul(tile, arith, vectors),
            Kernel::Fused { id, .. } => ModuleKey::Fused(id),
            other if other.audited() => ModuleKey::Audited(other.shader()),
            other => ModuleKey::File(other.shader()),
        }
    }

    /// The WGSL source of the kernel's module (generated fused kernels live in the cache).
    pub(crate) fn source(self) -> Result<Cow<'static, str>> {
        match self {
            Kernel::Matmul {
                tile,
                arith,
                vectors,
                ..
            } => matmul_source(tile, arith, vectors).map(Cow::Owned),
            Kernel::Fused { .. } => Err(Error::ShaderCompilation {
                shader: "fused kernel",
                detail: "generated sources are registered with the pipeline cache".into(),
            }),
            #[cfg(web)]
            Kernel::Gemv { subgroup: true, .. } => Ok(Cow::Owned(format!(
                "{}{}",
                super::web_features::ENABLE_SUBGROUPS,
                self.shader().source()
            ))),
            other => Ok(Cow::Borrowed(other.shader().source())),
        }
    }

    pub(crate) fn entry_point(self) -> &'static str {
        match self {
            Kernel::Cast
            | Kernel::Compare
            | Kernel::Unary(_)
            | Kernel::Binary(_)
            | Kernel::BinaryBroadcast(_)
            | Kernel::Where
            | Kernel::Matmul { .. }
            | Kernel::Norm { .. }
            | Kernel::Copy
            | Kernel::Embedding
            | Kernel::Rope { .. }
            | Kernel::Attention {
                blocks: AttentionBlocks::Row,
                ..
            }
            | Kernel::TopK
            | Kernel::QMatmul { dequant: false, .. }
            | Kernel::Conv2d { .. }
            | Kernel::Pool2d { .. }
            | Kernel::Gemv { .. }
            | Kernel::Fused { .. } => "main",
            Kernel::QMatmul { dequant: true, .. } => "dequant",
            Kernel::StridedUnary(_) => "unary",
            Kernel::StridedBinary(_) => "binary",
            Kernel::StridedGated(..) => "gated",
            Kernel::WriteRows => "write_rows",
            Kernel::TopKSelect => "main_select",
            Kernel::TopKSplit { merge: false } => "main_partial",
            Kernel::TopKSplit { merge: true } => "main_merge",
            Kernel::Attention {
                blocks: AttentionBlocks::Flash { .. },
                ..
            } => "main_flash",
            Kernel::Attention {
                blocks: AttentionBlocks::Split { .. },
                ..
            } => "main_split",
            Kernel::Attention {
                blocks: AttentionBlocks::Merge { .. },
                ..
            } => "main_merge",
            Kernel::ReducePartial { .. } => "partial",
            Kernel::ReduceFinish(_) => "finish",
            Kernel::SoftmaxStats { .. } => "stats",
            Kernel::SoftmaxCombine { .. } => "combine",
            Kernel::SoftmaxApply { .. } => "apply",
            Kernel::SoftmaxRows { .. } => "rows",
        }
    }

    pub(crate) fn layout(self) -> Layout {
        match self {
            Kernel::Unary(_) | Kernel::Copy | Kernel::Pool2d { .. } => Layout::OneInput,
            Kernel::Fused { inputs, .. } => match inputs {
                0 | 1 => Layout::OneInput,
                2 => Layout::TwoInputs,
                3 => Layout::ThreeInputs,
                _ => Layout::FourInputs,
            },
            Kernel::Attention { .. } => Layout::FourInputs,
            Kernel::QMatmul { cache: 0, .. } => Layout::SevenInputs,
            Kernel::QMatmul { .. } => Layout::EightInputsTwoOutputs,
            Kernel::TopK | Kernel::TopKSelect | Kernel::TopKSplit { .. } => {
                Layout::OneInputTwoOutputs
            }
            Kernel::Matmul { .. }
            | Kernel::Norm { .. }
            | Kernel::Rope { .. }
            | Kernel::Conv2d { .. }
            | Kernel::Gemv { .. }
            | Kernel::Where => Layout::ThreeInputs,
            Kernel::Binary(_)
            | Kernel::BinaryBroadcast(_)
            | Kernel::StridedUnary(_)
            | Kernel::StridedBinary(_)
            | Kernel::StridedGated(..)
            | Kernel::ReducePartial { .. }
            | Kernel::ReduceFinish(_)
            | Kernel::SoftmaxStats { .. }
            | Kernel::SoftmaxCombine { .. }
            | Kernel::SoftmaxApply { .. }
            | Kernel::SoftmaxRows { .. }
            | Kernel::Compare
            | Kernel::Embedding
            | Kernel::WriteRows => Layout::TwoInputs,
            Kernel::Cast => Layout::OneInput,
        }
    }
}

/// What a shader module is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ModuleKey {
    File(Shader),
    /// A file's module made without runtime checks, for the audited entry points in it.
    Audited(Shader),
    Matmul(MatmulTile, Arith, bool),
    Fused(u64),
}

/// Shader modules, bind group layouts and pipelines of one device.
#[derive(Default)]
pub(crate) struct PipelineCache {
    modules: HashMap<ModuleKey, wgpu::ShaderModule>,
    /// Sources of generated fused kernels, by id.
    fused: HashMap<u64, String>,
    /// Generated fused kernels by expression key (see `Expr::key`).
    fused_by_expr: HashMap<Vec<u32>, Kernel>,
    layouts: HashMap<Layout, (wgpu::BindGroupLayout, wgpu::PipelineLayout)>,
    pipelines: HashMap<Kernel, wgpu::ComputePipeline>,
}

impl PipelineCache {
    /// The kernel of a generated fused source, registered for `get` to compile and remembered
    /// under its expression's key.
    pub(crate) fn register_fused(
        &mut self,
        key: Vec<u32>,
        source: String,
        inputs: usize,
    ) -> Result<Kernel> {
        let kernel = super::kernels::fused::fused_kernel(&source, inputs);
        if let Kernel::Fused { id, .. } = kernel {
            self.fused.entry(id).or_insert(source);
        }
        self.fused_by_expr.insert(key, kernel);
        Ok(kernel)
    }

    /// The kernel registered for an expression key, if any.
    pub(crate) fn fused_kernel_of(&self, key: &[u32]) -> Option<Kernel> {
        self.fused_by_expr.get(key).copied()
    }

    pub(crate) fn bind_group_layout(
        &mut self,
        device: &wgpu::Device,
        layout: Layout,
    ) -> &wgpu::BindGroupLayout {
        &self
            .layouts
            .entry(layout)
            .or_insert_with(|| create_layout(device, layout))
            .0
    }

    /// The pipeline for `kernel`, created on first use. `check` reports driver errors raised
    /// while creating it.
    pub(crate) fn get(
        &mut self,
        device: &wgpu::Device,
        kernel: Kernel,
        check: impl Fn() -> Option<String>,
    ) -> Result<&wgpu::ComputePipeline> {
        if !self.pipelines.contains_key(&kernel) {
            let shader = kernel.shader();
            let key = kernel.module_key();
            let module = match self.modules.entry(key) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => {
                    let source = match kernel {
                        Kernel::Fused { id, .. } => match self.fused.get(&id) {
                            Some(src) => Cow::Owned(src.clone()),
                            None => kernel.source()?,
                        },
                        _ => kernel.source()?,
                    };
                    let desc = wgpu::ShaderModuleDescriptor {
                        label: Some(shader.file()),
                        source: wgpu::ShaderSource::Wgsl(source),
                    };
                    e.insert(create_module(device, desc, kernel.audited()))
                }
            };
            let (_, pipeline_layout) = self
                .layouts
                .entry(kernel.layout())
                .or_insert_with(|| create_layout(device, kernel.layout()));
            let constants = kernel.constants();
            let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(shader.file()),
                layout: Some(pipeline_layout),
                module,
                entry_point: Some(kernel.entry_point()),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &constants,
                    zero_initialize_workgroup_memory: false,
                },
                cache: None,
            });
            if let Some(detail) = check() {
                self.modules.remove(&key);
                return Err(Error::ShaderCompilation {
                    shader: shader.file(),
                    detail,
                });
            }
            self.pipelines.insert(kernel, pipeline);
        }
        self.pipelines
            .get(&kernel)
            .ok_or_else(|| Error::ShaderCompilation {
                shader: kernel.shader().file(),
                detail: "pipeline missing from cache".into(),
            })
    }
}

/// Creates a shader module. Natively, an `audited` kernel's module is created without the
/// runtime checks naga adds for untrusted code: the clamp on every workgroup-array index and
/// the iteration counter on every loop. The matmul kernels index workgroup memory with
/// constants and invocation ids below the tile sizes (and their private prefetch arrays only
/// in loops of constant length, their size), bound every storage access by explicit
/// comparisons with the sizes they were dispatched for, and loop a bounded number of times;
/// without the checks the driver unrolls and schedules their inner loops, 1.4x faster at
/// 4096 on an H100 (BENCHMARKS.md, "What held the f32 kernel back"). Flash attention
/// (`main_flash`) indexes its workgroup arrays with columns below FLASH_D, rows below
/// FLASH_ROWS, keys below its FLASH_KEYS-key tile (k^T at e FLASH_KEYS / 2 + key / 2, and
/// shared value rows at key FLASH_D / 2 + col / 2, both below FLASH_D FLASH_KEYS / 2) and
/// invocation ids below FLASH_THREADS
/// (the arrays are sized by the same overrides), and its private arrays only by unrolled loops
/// below FLASH_KEYS FLASH_D / FLASH_THREADS (at most 64, their size, which `flash_tile`
/// keeps); it reads q, k and v only at rows below
/// sq and sk and columns below d and dv, whose extents were checked against the bindings,
/// writes partials below the buffer's length (checked), and its tile loop ends at the key
/// count; with the checks its private arrays left registers. The
/// split decode kernels (attention_split.wgsl) index their arrays with constants, rows below 8,
/// columns below d and dv (at most 256), invocation ids (a key's parts: key * parts + p <
/// WG), value groups' sums at ((g - 1) cols + col) epw + h < 2 WG rows and the groups' counts
/// below 32; they read words of q, k and v below the rows' visible counts and widths (halves
/// only with even widths and strides, so a row's words lie inside its extent), and write
/// partials below the buffer's length (b * hq * sq * chunks * (dv + 2), checked) and output
/// words below its binding. The row
/// kernel (`main`) indexes its arrays of 256 with invocation ids, columns below d and dv (at
/// most 256, checked by the ops layer) and keys below 256, and loops to the visible key count.
/// The quantized GEMV and dequantisation (quant.wgsl) index their array of 256 with invocation
/// ids (partners `lid ^ 32`, sums `lid + s` for `lid < s`), read weights, x, the residual,
/// the norm's weight and the rope tables at rows and words below the extents checked when
/// they were bound (a lane's extra loads are clamped to the row's last word), and loop up to
/// word and column counts far below 2^31, so no counter wraps; quant_cached.wgsl writes the
/// cache's words only for a row below its capacity and columns below its width, within the
/// words bound (checked).
/// Buffer accesses keep whatever robustness the driver itself provides. In the browser the
/// checks are the browser's to keep.
fn create_module(
    device: &wgpu::Device,
    desc: wgpu::ShaderModuleDescriptor<'_>,
    audited: bool,
) -> wgpu::ShaderModule {
    #[cfg(native)]
    if audited {
        let checks = wgpu::ShaderRuntimeChecks {
            bounds_checks: false,
            force_loop_bounding: false,
            ..wgpu::ShaderRuntimeChecks::checked()
        };
        // SAFETY: `audited` is true only for the kernels `Kernel::audited` names, whose every
        // index is in bounds and every loop finite by construction, as described above.
        return unsafe { device.create_shader_module_trusted(desc, checks) };
    }
    let _ = audited;
    device.create_shader_module(desc)
}

fn create_layout(
    device: &wgpu::Device,
    layout: Layout,
) -> (wgpu::BindGroupLayout, wgpu::PipelineLayout) {
    let storage = |binding: u32, read_only: bool| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only },
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    };
    let mut entries = vec![wgpu::BindGroupLayoutEntry {
        binding: 0,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }];
    let inputs = layout.inputs() as u32;
    entries.extend((1..=inputs).map(|b| storage(b, true)));
    let outputs = layout.outputs() as u32;
    entries.extend((inputs + 1..=inputs + outputs).map(|b| storage(b, false)));
    let bgl = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("gpukit"),
        entries: &entries,
    });
    let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some("gpukit"),
        bind_group_layouts: &[Some(&bgl)],
        immediate_size: 0,
    });
    (bgl, pl)
}

#[cfg(test)]
mod tests;
