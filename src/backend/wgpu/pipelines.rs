//! Compute pipelines, created once per device and cached under typed keys.
//!
//! A key names a shader file, an entry point and the override constants that specialise it.
//! A misspelt kernel is a compile error, never a run-time string miss.

use std::borrow::Cow;
use std::collections::hash_map::Entry;
use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::ops::elementwise::UnaryKind;
use crate::ops::{Activation, BinaryOp, MatmulTile, Precision, ReduceOp};
use crate::quant::QuantFormat;

/// The shader files in `shaders/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Shader {
    Unary,
    Binary,
    BinaryBroadcast,
    Reduce,
    Softmax,
    Matmul,
    Norm,
    Copy,
    Embedding,
    Rope,
    Attention,
    TopK,
    QMatmul,
    Conv2d,
    Pool2d,
    Gemv,
    GemvSubgroup,
}

impl Shader {
    pub(crate) const ALL: [Shader; 17] = [
        Shader::Unary,
        Shader::Binary,
        Shader::BinaryBroadcast,
        Shader::Reduce,
        Shader::Softmax,
        Shader::Matmul,
        Shader::Norm,
        Shader::Copy,
        Shader::Embedding,
        Shader::Rope,
        Shader::Attention,
        Shader::TopK,
        Shader::QMatmul,
        Shader::Conv2d,
        Shader::Pool2d,
        Shader::Gemv,
        Shader::GemvSubgroup,
    ];

    pub(crate) fn file(self) -> &'static str {
        match self {
            Shader::Unary => "unary.wgsl",
            Shader::Binary => "binary.wgsl",
            Shader::BinaryBroadcast => "binary_broadcast.wgsl",
            Shader::Reduce => "reduce.wgsl",
            Shader::Softmax => "softmax.wgsl",
            Shader::Matmul => "matmul.wgsl",
            Shader::Norm => "norm.wgsl",
            Shader::Copy => "copy.wgsl",
            Shader::Embedding => "embedding.wgsl",
            Shader::Rope => "rope.wgsl",
            Shader::Attention => "attention.wgsl",
            Shader::TopK => "topk.wgsl",
            Shader::QMatmul => "qmatmul.wgsl",
            Shader::Conv2d => "conv2d.wgsl",
            Shader::Pool2d => "pool2d.wgsl",
            Shader::Gemv => "gemv.wgsl",
            Shader::GemvSubgroup => "gemv_subgroup.wgsl",
        }
    }

    pub(crate) fn source(self) -> &'static str {
        match self {
            Shader::Unary => include_str!("../../../shaders/unary.wgsl"),
            Shader::Binary => include_str!("../../../shaders/binary.wgsl"),
            Shader::BinaryBroadcast => include_str!("../../../shaders/binary_broadcast.wgsl"),
            Shader::Reduce => include_str!("../../../shaders/reduce.wgsl"),
            Shader::Softmax => include_str!("../../../shaders/softmax.wgsl"),
            Shader::Matmul => include_str!("../../../shaders/matmul.wgsl"),
            Shader::Norm => include_str!("../../../shaders/norm.wgsl"),
            Shader::Copy => include_str!("../../../shaders/copy.wgsl"),
            Shader::Embedding => include_str!("../../../shaders/embedding.wgsl"),
            Shader::Rope => include_str!("../../../shaders/rope.wgsl"),
            Shader::Attention => include_str!("../../../shaders/attention.wgsl"),
            Shader::TopK => include_str!("../../../shaders/topk.wgsl"),
            Shader::QMatmul => include_str!("../../../shaders/qmatmul.wgsl"),
            Shader::Conv2d => include_str!("../../../shaders/conv2d.wgsl"),
            Shader::Pool2d => include_str!("../../../shaders/pool2d.wgsl"),
            Shader::Gemv => include_str!("../../../shaders/gemv.wgsl"),
            Shader::GemvSubgroup => include_str!("../../../shaders/gemv_subgroup.wgsl"),
        }
    }
}

/// The arithmetic of a tiled matmul kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Arith {
    /// f32 tiles and multiply-adds.
    F32,
    /// f16 tiles and multiply-adds within a k tile (shader-f16).
    F16,
    /// Inputs rounded to f16, f32 arithmetic: `Precision::F16` without shader-f16.
    F16Rounded,
}

impl Arith {
    /// The arithmetic that runs `precision` on a device with or without shader-f16.
    pub(crate) fn of(precision: Precision, shader_f16: bool) -> Arith {
        match (precision, shader_f16) {
            (Precision::F32, _) => Arith::F32,
            (Precision::F16, true) => Arith::F16,
            (Precision::F16, false) => Arith::F16Rounded,
        }
    }
}

/// shaders/matmul.wgsl specialised to a tile configuration and arithmetic: its `tile:` lines
/// (and the element type) rewritten and its `@generate` lines replaced by unrolled code.
/// Errors if the template lost a line it rewrites.
pub(crate) fn matmul_source(tile: MatmulTile, arith: Arith) -> Result<String> {
    use std::fmt::Write;
    let template = Shader::Matmul.source();
    let f16 = arith == Arith::F16;
    let consts = [
        (
            "alias T = f32;",
            if f16 {
                "alias T = f16;"
            } else {
                "alias T = f32;"
            }
            .to_string(),
        ),
        (
            "const RM: u32 = 4u;",
            format!("const RM: u32 = {}u;", tile.rows),
        ),
        (
            "const RN: u32 = 4u;",
            format!("const RN: u32 = {}u;", tile.cols),
        ),
        (
            "const TK: u32 = 16u;",
            format!("const TK: u32 = {}u;", tile.depth),
        ),
        (
            "const SPLIT: bool = false;",
            format!("const SPLIT: bool = {f16};"),
        ),
        (
            "const ROUND16: bool = false;",
            format!("const ROUND16: bool = {};", arith == Arith::F16Rounded),
        ),
    ];
    let (rows, cols) = (tile.rows, tile.cols / 4);
    let cells = || (0..rows).flat_map(move |r| (0..cols).map(move |c| (r, c)));
    // Each @generate line becomes these statements (at the line's indentation).
    let generate = |what: &str| -> Option<Vec<String>> {
        let mut out = Vec::new();
        match what {
            "declare" => {
                for (r, c) in cells() {
                    out.push(format!("var acc_{r}_{c} = vec4<f32>(0.0);"));
                    if f16 {
                        out.push(format!("var part_{r}_{c} = vec4<T>(0.0);"));
                    }
                }
            }
            "zero" => {
                if f16 {
                    out.extend(cells().map(|(r, c)| format!("part_{r}_{c} = vec4<T>(0.0);")));
                }
            }
            "fma" => {
                for c in 0..cols {
                    out.push(format!(
                        "let b_{c} = b_tile[kk * BV + lid.x + {}u];",
                        16 * c
                    ));
                }
                for i in 0..rows / 4 {
                    out.push(format!("let a_{i} = a_tile[kk * AV + lid.y * RV + {i}u];"));
                }
                for (r, c) in cells() {
                    let a = format!("a_{}.{}", r / 4, ["x", "y", "z", "w"][r as usize % 4]);
                    out.push(if f16 {
                        format!("part_{r}_{c} = fma(vec4<T>({a}), b_{c}, part_{r}_{c});")
                    } else {
                        format!("acc_{r}_{c} = fma(vec4<f32>({a}), b_{c}, acc_{r}_{c});")
                    });
                }
            }
            "sum" => {
                if f16 {
                    out.extend(cells().map(|(r, c)| {
                        format!("acc_{r}_{c} = acc_{r}_{c} + vec4<f32>(part_{r}_{c});")
                    }));
                }
            }
            "store" => {
                out.extend(cells().map(|(r, c)| {
                    format!(
                        "store4(out_base, row0 + lid.y * RM + {r}u, col0 + (lid.x + {}u) * 4u, acc_{r}_{c});",
                        16 * c
                    )
                }));
            }
            _ => return None,
        }
        Some(out)
    };
    let mut source = String::with_capacity(template.len() * 2);
    if f16 {
        source.push_str("enable f16;\n");
    }
    let (mut found, mut generated) = (0, 0);
    for line in template.lines() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("// @generate ") {
            let what = rest.split(':').next().unwrap_or("");
            let Some(statements) = generate(what) else {
                return Err(Error::ShaderCompilation {
                    shader: Shader::Matmul.file(),
                    detail: format!("template: unknown @generate {what:?}"),
                });
            };
            let indent = &line[..line.len() - trimmed.len()];
            for st in statements {
                let _ = writeln!(source, "{indent}{st}");
            }
            generated += 1;
            continue;
        }
        match consts.iter().find(|(from, _)| line.starts_with(from)) {
            Some((from, to)) => {
                source.push_str(to);
                source.push_str(&line[from.len()..]);
                found += 1;
            }
            None => source.push_str(line),
        }
        source.push('\n');
    }
    if found != consts.len() || generated != 5 {
        return Err(Error::ShaderCompilation {
            shader: Shader::Matmul.file(),
            detail: format!(
                "template: {found} of {} tile lines and {generated} of 5 @generate lines found",
                consts.len()
            ),
        });
    }
    Ok(source)
}

/// How many read-only storage inputs a kernel binds (after the uniform at binding 0, before
/// the one read-write output).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Layout {
    OneInput,
    TwoInputs,
    ThreeInputs,
    FourInputs,
    /// One input, two outputs (values and indices).
    OneInputTwoOutputs,
}

impl Layout {
    pub(crate) fn inputs(self) -> usize {
        match self {
            Layout::OneInput => 1,
            Layout::TwoInputs => 2,
            Layout::ThreeInputs => 3,
            Layout::FourInputs => 4,
            Layout::OneInputTwoOutputs => 1,
        }
    }

    pub(crate) fn outputs(self) -> usize {
        match self {
            Layout::OneInputTwoOutputs => 2,
            _ => 1,
        }
    }
}

/// One pipeline: a kernel and its specialisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kernel {
    Unary(UnaryKind),
    Binary(BinaryOp),
    BinaryBroadcast(BinaryOp),
    ReducePartial {
        op: ReduceOp,
        dot: bool,
    },
    ReduceFinish(ReduceOp),
    SoftmaxStats,
    SoftmaxCombine,
    SoftmaxApply {
        log: bool,
    },
    Matmul {
        tile: MatmulTile,
        arith: Arith,
        transpose_a: bool,
        transpose_b: bool,
        bias: bool,
        activation: Option<Activation>,
    },
    Norm {
        rms: bool,
        weight: bool,
        bias: bool,
    },
    Copy,
    Embedding,
    Rope {
        interleaved: bool,
    },
    Attention {
        causal: bool,
        lens: bool,
    },
    TopK,
    QMatmul {
        format: QuantFormat,
        dequant: bool,
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
            Kernel::Unary(_) => Shader::Unary,
            Kernel::Binary(_) => Shader::Binary,
            Kernel::BinaryBroadcast(_) => Shader::BinaryBroadcast,
            Kernel::ReducePartial { .. } | Kernel::ReduceFinish(_) => Shader::Reduce,
            Kernel::SoftmaxStats | Kernel::SoftmaxCombine | Kernel::SoftmaxApply { .. } => {
                Shader::Softmax
            }
            Kernel::Matmul { .. } => Shader::Matmul,
            Kernel::Norm { .. } => Shader::Norm,
            Kernel::Copy => Shader::Copy,
            Kernel::Embedding => Shader::Embedding,
            Kernel::Rope { .. } => Shader::Rope,
            Kernel::Attention { .. } => Shader::Attention,
            Kernel::TopK => Shader::TopK,
            Kernel::QMatmul { .. } => Shader::QMatmul,
            Kernel::Conv2d { .. } => Shader::Conv2d,
            Kernel::Pool2d { .. } => Shader::Pool2d,
            Kernel::Gemv {
                subgroup: false, ..
            } => Shader::Gemv,
            Kernel::Gemv { subgroup: true, .. } => Shader::GemvSubgroup,
            // Generated from unary.wgsl's library part.
            Kernel::Fused { .. } => Shader::Unary,
        }
    }

    /// Which shader module the kernel's pipeline is made from.
    fn module_key(self) -> ModuleKey {
        match self {
            Kernel::Matmul { tile, arith, .. } => ModuleKey::Matmul(tile, arith),
            Kernel::Fused { id, .. } => ModuleKey::Fused(id),
            other => ModuleKey::File(other.shader()),
        }
    }

    /// The WGSL source of the kernel's module (generated fused kernels live in the cache).
    pub(crate) fn source(self) -> Result<Cow<'static, str>> {
        match self {
            Kernel::Matmul { tile, arith, .. } => matmul_source(tile, arith).map(Cow::Owned),
            Kernel::Fused { .. } => Err(Error::ShaderCompilation {
                shader: "fused kernel",
                detail: "generated sources are registered with the pipeline cache".into(),
            }),
            other => Ok(Cow::Borrowed(other.shader().source())),
        }
    }

    pub(crate) fn entry_point(self) -> &'static str {
        match self {
            Kernel::Unary(_)
            | Kernel::Binary(_)
            | Kernel::BinaryBroadcast(_)
            | Kernel::Matmul { .. }
            | Kernel::Norm { .. }
            | Kernel::Copy
            | Kernel::Embedding
            | Kernel::Rope { .. }
            | Kernel::Attention { .. }
            | Kernel::TopK
            | Kernel::QMatmul { dequant: false, .. }
            | Kernel::Conv2d { .. }
            | Kernel::Pool2d { .. }
            | Kernel::Gemv { .. }
            | Kernel::Fused { .. } => "main",
            Kernel::QMatmul { dequant: true, .. } => "dequant",
            Kernel::ReducePartial { .. } => "partial",
            Kernel::ReduceFinish(_) => "finish",
            Kernel::SoftmaxStats => "stats",
            Kernel::SoftmaxCombine => "combine",
            Kernel::SoftmaxApply { .. } => "apply",
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
            Kernel::Attention { .. } | Kernel::QMatmul { .. } => Layout::FourInputs,
            Kernel::TopK => Layout::OneInputTwoOutputs,
            Kernel::Matmul { .. }
            | Kernel::Norm { .. }
            | Kernel::Rope { .. }
            | Kernel::Conv2d { .. }
            | Kernel::Gemv { .. } => Layout::ThreeInputs,
            Kernel::Binary(_)
            | Kernel::BinaryBroadcast(_)
            | Kernel::ReducePartial { .. }
            | Kernel::ReduceFinish(_)
            | Kernel::SoftmaxStats
            | Kernel::SoftmaxCombine
            | Kernel::SoftmaxApply { .. }
            | Kernel::Embedding => Layout::TwoInputs,
        }
    }

    /// The override constants that specialise the shader.
    pub(crate) fn constants(self) -> Vec<(&'static str, f64)> {
        match self {
            Kernel::Unary(k) => vec![("OP", k as u32 as f64)],
            Kernel::Binary(op) | Kernel::BinaryBroadcast(op) => vec![("OP", op as u32 as f64)],
            Kernel::ReducePartial { op, dot } => {
                vec![("OP", op as u32 as f64), ("DOT", dot as u32 as f64)]
            }
            Kernel::ReduceFinish(op) => vec![("OP", op as u32 as f64)],
            Kernel::SoftmaxStats
            | Kernel::SoftmaxCombine
            | Kernel::Copy
            | Kernel::Embedding
            | Kernel::TopK
            | Kernel::Fused { .. } => vec![],
            Kernel::QMatmul { format, .. } => vec![("FORMAT", format as u32 as f64)],
            Kernel::Conv2d { bias } => vec![("HAS_BIAS", bias as u32 as f64)],
            Kernel::Pool2d { max } => vec![("MAX", max as u32 as f64)],
            Kernel::Gemv {
                bias, activation, ..
            } => vec![
                ("HAS_BIAS", bias as u32 as f64),
                ("ACT", activation.map_or(0, |a| a as u32) as f64),
            ],
            Kernel::Rope { interleaved } => vec![("INTERLEAVED", interleaved as u32 as f64)],
            Kernel::Attention { causal, lens } => {
                vec![
                    ("CAUSAL", causal as u32 as f64),
                    ("HAS_LENS", lens as u32 as f64),
                ]
            }
            Kernel::Matmul {
                transpose_a,
                transpose_b,
                bias,
                activation,
                ..
            } => vec![
                ("TRANS_A", transpose_a as u32 as f64),
                ("TRANS_B", transpose_b as u32 as f64),
                ("HAS_BIAS", bias as u32 as f64),
                ("ACT", activation.map_or(0, |a| a as u32) as f64),
            ],
            Kernel::Norm { rms, weight, bias } => vec![
                ("RMS", rms as u32 as f64),
                ("HAS_WEIGHT", weight as u32 as f64),
                ("HAS_BIAS", bias as u32 as f64),
            ],
            Kernel::SoftmaxApply { log } => vec![("LOG", log as u32 as f64)],
        }
    }
}

/// What a shader module is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ModuleKey {
    File(Shader),
    Matmul(MatmulTile, Arith),
    Fused(u64),
}

/// Shader modules, bind group layouts and pipelines of one device.
#[derive(Default)]
pub(crate) struct PipelineCache {
    modules: HashMap<ModuleKey, wgpu::ShaderModule>,
    /// Sources of generated fused kernels, by id.
    fused: HashMap<u64, String>,
    layouts: HashMap<Layout, (wgpu::BindGroupLayout, wgpu::PipelineLayout)>,
    pipelines: HashMap<Kernel, wgpu::ComputePipeline>,
}

impl PipelineCache {
    /// The kernel of a generated fused source, registered for `get` to compile.
    pub(crate) fn register_fused(&mut self, source: String, inputs: usize) -> Result<Kernel> {
        let kernel = super::kernels::fused::fused_kernel(&source, inputs);
        if let Kernel::Fused { id, .. } = kernel {
            self.fused.entry(id).or_insert(source);
        }
        Ok(kernel)
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
                    e.insert(device.create_shader_module(wgpu::ShaderModuleDescriptor {
                        label: Some(shader.file()),
                        source: wgpu::ShaderSource::Wgsl(source),
                    }))
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
mod tests {
    use super::*;
    use crate::ops::UnaryOp;

    fn every_kernel() -> Vec<Kernel> {
        let mut k: Vec<Kernel> = UnaryOp::ALL
            .iter()
            .map(|op| Kernel::Unary(op.kind()))
            .collect();
        for op in BinaryOp::ALL {
            k.extend([Kernel::Binary(op), Kernel::BinaryBroadcast(op)]);
        }
        for op in ReduceOp::ALL {
            k.extend([
                Kernel::ReducePartial { op, dot: false },
                Kernel::ReducePartial { op, dot: true },
                Kernel::ReduceFinish(op),
            ]);
        }
        k.extend([
            Kernel::SoftmaxStats,
            Kernel::SoftmaxCombine,
            Kernel::SoftmaxApply { log: false },
            Kernel::SoftmaxApply { log: true },
            Kernel::Copy,
            Kernel::Embedding,
            Kernel::Rope { interleaved: false },
            Kernel::Rope { interleaved: true },
            Kernel::Attention {
                causal: false,
                lens: false,
            },
            Kernel::Attention {
                causal: true,
                lens: true,
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
                k.push(Kernel::Matmul {
                    tile: MatmulTile::DEFAULT,
                    arith: Arith::F32,
                    transpose_a,
                    transpose_b,
                    bias,
                    activation,
                });
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
                });
            }
        }
        k.push(Kernel::TopK);
        for inputs in 1..=crate::ops::fused::MAX_INPUTS {
            k.push(super::super::kernels::fused::fused_kernel(
                &sample_fused_source(inputs),
                inputs,
            ));
        }
        for format in [QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::Q4_1] {
            for dequant in [false, true] {
                k.push(Kernel::QMatmul { format, dequant });
            }
        }
        for flag in [false, true] {
            k.extend([Kernel::Conv2d { bias: flag }, Kernel::Pool2d { max: flag }]);
            for subgroup in [false, true] {
                k.push(Kernel::Gemv {
                    bias: flag,
                    activation: flag.then_some(Activation::Gelu),
                    subgroup,
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
            Kernel::SoftmaxStats => 5,
            Kernel::SoftmaxCombine => 6,
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
        }
    }
    const VARIANTS: usize = 20;

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
            // matmul.wgsl is a template: its specialisations are validated below.
            let caps = match shader {
                Shader::Matmul => continue,
                Shader::GemvSubgroup => naga::valid::Capabilities::SUBGROUP,
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
                let source = matmul_source(tile, arith).unwrap();
                let caps = if arith == Arith::F16 {
                    naga::valid::Capabilities::SHADER_FLOAT16
                } else {
                    naga::valid::Capabilities::empty()
                };
                validate(&format!("matmul {tile} {arith:?}"), &source, caps);
                assert_eq!(source.starts_with("enable f16;"), arith == Arith::F16);
            }
        }
        // One named accumulator per row and vec4 column, and no loop-indexed arrays.
        let source = matmul_source(MatmulTile::new(8, 8, 16), Arith::F16).unwrap();
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
            let [x, y, z] = ep.workgroup_size;
            assert_eq!(
                x * y * z,
                256,
                "{kernel:?}: WebGPU guarantees 256 invocations, no more"
            );
            if !matches!(kernel, Kernel::Matmul { .. } | Kernel::Conv2d { .. }) {
                assert_eq!(
                    ep.workgroup_size,
                    [256, 1, 1],
                    "{kernel:?}: kernels.rs assumes 1-D"
                );
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
}
