//! CUDA kernels: the files of `shaders/cuda/` compiled by NVRTC on first use for the device's
//! architecture, with the PTX cached on disk (keyed by a hash of the source and options, the
//! architecture and the driver version), so a second start compiles nothing. Entry points are
//! found by a typed key ([`Entry`]), never by a string a caller builds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::{CompileOptions, Ptx};

use crate::cache::stable_hash;
use crate::error::{Error, Result};

/// A kernel source file of `shaders/cuda/`, or a generated fused kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    Cast,
    Compare,
    Elementwise,
    Reduce,
    Softmax,
    Norm,
    Matmul,
    Conv,
    Pool,
    Attention,
    /// Attention for a few query rows: the split kernels and their merge.
    AttentionDecode,
    /// Decode attention with keys and values read into registers.
    AttentionRows,
    /// Tensor-core flash attention (compute capability 8.0 and later only).
    AttentionMma,
    Embedding,
    Rope,
    Layout,
    Topk,
    Quant,
    /// A llama decoding step's layers in one persistent kernel.
    DecodeStep,
    /// A fused elementwise kernel, by the hash of its generated source.
    Fused(u64),
}

impl Source {
    pub(crate) fn file(self) -> &'static str {
        match self {
            Source::Cast => "shaders/cuda/cast.cu",
            Source::Compare => "shaders/cuda/compare.cu",
            Source::Elementwise => "shaders/cuda/elementwise.cu",
            Source::Reduce => "shaders/cuda/reduce.cu",
            Source::Softmax => "shaders/cuda/softmax.cu",
            Source::Norm => "shaders/cuda/norm.cu",
            Source::Matmul => "shaders/cuda/matmul.cu",
            Source::Conv => "shaders/cuda/conv.cu",
            Source::Pool => "shaders/cuda/pool.cu",
            Source::Attention => "shaders/cuda/attention.cu",
            Source::AttentionDecode => "shaders/cuda/attention_decode.cu",
            Source::AttentionRows => "shaders/cuda/attention_rows.cu",
            Source::AttentionMma => "shaders/cuda/attention_mma.cu",
            Source::Embedding => "shaders/cuda/embedding.cu",
            Source::Rope => "shaders/cuda/rope.cu",
            Source::Layout => "shaders/cuda/layout.cu",
            Source::Topk => "shaders/cuda/topk.cu",
            Source::Quant => "shaders/cuda/quant.cu",
            Source::DecodeStep => "shaders/cuda/decode_step.cu",
            Source::Fused(_) => "a generated fused kernel (src/backend/cuda/fused.rs)",
        }
    }

    fn text(self) -> &'static str {
        match self {
            Source::Cast => include_str!("../../../shaders/cuda/cast.cu"),
            Source::Compare => include_str!("../../../shaders/cuda/compare.cu"),
            Source::Elementwise => include_str!("../../../shaders/cuda/elementwise.cu"),
            Source::Reduce => include_str!("../../../shaders/cuda/reduce.cu"),
            Source::Softmax => include_str!("../../../shaders/cuda/softmax.cu"),
            Source::Norm => include_str!("../../../shaders/cuda/norm.cu"),
            Source::Matmul => include_str!("../../../shaders/cuda/matmul.cu"),
            Source::Conv => include_str!("../../../shaders/cuda/conv.cu"),
            Source::Pool => include_str!("../../../shaders/cuda/pool.cu"),
            Source::Attention => include_str!("../../../shaders/cuda/attention.cu"),
            Source::AttentionDecode => include_str!("../../../shaders/cuda/attention_decode.cu"),
            Source::AttentionRows => include_str!("../../../shaders/cuda/attention_rows.cu"),
            Source::AttentionMma => include_str!("../../../shaders/cuda/attention_mma.cu"),
            Source::Embedding => include_str!("../../../shaders/cuda/embedding.cu"),
            Source::Rope => include_str!("../../../shaders/cuda/rope.cu"),
            Source::Layout => include_str!("../../../shaders/cuda/layout.cu"),
            Source::Topk => include_str!("../../../shaders/cuda/topk.cu"),
            Source::Quant => include_str!("../../../shaders/cuda/quant.cu"),
            Source::DecodeStep => include_str!("../../../shaders/cuda/decode_step.cu"),
            Source::Fused(_) => "",
        }
    }
}

/// The prelude every file is compiled after.
pub(crate) const COMMON: &str = include_str!("../../../shaders/cuda/common.cuh");

/// A kernel entry point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Entry {
    Cast,
    Compare,
    Unary,
    Binary,
    Where,
    Strided,
    Epilogue,
    ToF16,
    ToBf16,
    ReduceRows,
    DotPartial,
    SoftmaxRows,
    SoftmaxPartial,
    SoftmaxFinish,
    NormRows,
    CopyStrided,
    Embedding,
    WriteRows,
    Rope,
    Pool2d,
    TopkRows,
    Im2col,
    Dequantize,
    Qgemv,
    /// qgemv with x staged in shared memory.
    QgemvStaged,
    Attention,
    FlashAttention64,
    FlashAttention128,
    AttentionSplit,
    AttentionDecode,
    /// Decoding with keys and values read into registers: f32, or halves.
    AttentionRows {
        half: bool,
    },
    AttentionMerge,
    /// Tensor-core flash attention for a head width (32, 64 or 128) and half dtype.
    FlashMma {
        width: u32,
        bf16: bool,
    },
    /// Tensor-core flash attention over f32 operands at f32 accuracy (three tf32 products
    /// each) for a head width (32, 64 or 128).
    FlashTc32 {
        width: u32,
    },
    /// A llama decoding step's layers (launched cooperatively).
    DecodeLayers,
    Fused(u64),
}

impl Entry {
    fn location(self) -> (Source, &'static str) {
        use Entry::*;
        match self {
            Cast => (Source::Cast, "cast"),
            Compare => (Source::Compare, "compare"),
            Unary => (Source::Elementwise, "unary"),
            Binary => (Source::Elementwise, "binary"),
            Where => (Source::Elementwise, "where_select"),
            Strided => (Source::Elementwise, "strided"),
            Epilogue => (Source::Matmul, "epilogue"),
            ToF16 => (Source::Matmul, "to_f16"),
            ToBf16 => (Source::Matmul, "to_bf16"),
            ReduceRows => (Source::Reduce, "reduce_rows"),
            DotPartial => (Source::Reduce, "dot_partial"),
            SoftmaxRows => (Source::Softmax, "softmax_rows"),
            SoftmaxPartial => (Source::Softmax, "softmax_partial"),
            SoftmaxFinish => (Source::Softmax, "softmax_finish"),
            NormRows => (Source::Norm, "norm_rows"),
            CopyStrided => (Source::Layout, "copy_strided"),
            Embedding => (Source::Embedding, "embedding"),
            WriteRows => (Source::Embedding, "write_rows"),
            Rope => (Source::Rope, "rope"),
            Pool2d => (Source::Pool, "pool2d"),
            TopkRows => (Source::Topk, "topk_rows"),
            Im2col => (Source::Conv, "im2col"),
            Dequantize => (Source::Quant, "dequantize"),
            Qgemv => (Source::Quant, "qgemv"),
            QgemvStaged => (Source::Quant, "qgemv_staged"),
            Attention => (Source::Attention, "attention"),
            FlashAttention64 => (Source::Attention, "flash_attention_64"),
            FlashAttention128 => (Source::Attention, "flash_attention_128"),
            AttentionSplit => (Source::AttentionDecode, "attention_split"),
            AttentionDecode => (Source::AttentionDecode, "attention_decode"),
            AttentionRows { half: false } => (Source::AttentionRows, "attention_rows_f32"),
            AttentionRows { half: true } => (Source::AttentionRows, "attention_rows_half"),
            AttentionMerge => (Source::AttentionDecode, "attention_merge"),
            FlashMma { width, bf16 } => (
                Source::AttentionMma,
                match (width, bf16) {
                    (32, false) => "flash_mma_f16_32",
                    (64, false) => "flash_mma_f16_64",
                    (32, true) => "flash_mma_bf16_32",
                    (64, true) => "flash_mma_bf16_64",
                    (_, false) => "flash_mma_f16_128",
                    (_, true) => "flash_mma_bf16_128",
                },
            ),
            FlashTc32 { width } => (
                Source::AttentionMma,
                match width {
                    32 => "flash_tc32_32",
                    64 => "flash_tc32_64",
                    _ => "flash_tc32_128",
                },
            ),
            DecodeLayers => (Source::DecodeStep, "decode_layers"),
            Fused(id) => (Source::Fused(id), "fused"),
        }
    }
}

#[derive(Default)]
struct State {
    modules: HashMap<Source, Arc<CudaModule>>,
    functions: HashMap<Entry, CudaFunction>,
    generated: HashMap<u64, String>,
    /// Fused expressions' keys (see `Expr::key`) to their generated kernels' ids.
    fused_ids: HashMap<Vec<u32>, u64>,
}

/// The compiled kernels of one device.
pub(crate) struct Kernels {
    ctx: Arc<CudaContext>,
    arch: &'static str,
    driver: (u32, u32),
    state: Mutex<State>,
}

/// NVRTC options: every file is compiled the same way (no fast math: the ops keep IEEE
/// semantics at NaN and infinity, as the op suite checks), but for the register cap.
fn options(arch: &'static str, source: Source) -> CompileOptions {
    // The kernels use at most 8 accumulators per thread: 128 registers keep them unspilled
    // while letting 2 blocks of 256 threads share an SM. The tensor-core attention keeps a
    // 16 x 128 output tile and its q fragments in registers (blocks of 128 threads).
    let registers = if source == Source::AttentionMma {
        255
    } else {
        128
    };
    CompileOptions {
        arch: Some(arch),
        options: vec![
            "--std=c++17".into(),
            "--extra-device-vectorization".into(),
            format!("--maxrregcount={registers}"),
        ],
        ..Default::default()
    }
}

impl Kernels {
    pub(crate) fn new(ctx: Arc<CudaContext>, cc: (u32, u32), driver: (u32, u32)) -> Kernels {
        Kernels {
            ctx,
            arch: arch_name(cc),
            driver,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a generated kernel's source under its id (the hash of the source) and the
    /// key of the expression it came from.
    pub(crate) fn register_fused(&self, key: Vec<u32>, id: u64, source: String) {
        let mut st = self.lock();
        st.generated.entry(id).or_insert(source);
        st.fused_ids.insert(key, id);
    }

    /// The id of the kernel generated for an expression key, if there is one.
    pub(crate) fn fused_id_of(&self, key: &[u32]) -> Option<u64> {
        self.lock().fused_ids.get(key).copied()
    }

    /// The entry point, compiling (or loading from the disk cache) its file on first use.
    pub(crate) fn function(&self, entry: Entry) -> Result<CudaFunction> {
        let mut st = self.lock();
        if let Some(f) = st.functions.get(&entry) {
            return Ok(f.clone());
        }
        let (source, name) = entry.location();
        let module = match st.modules.get(&source) {
            Some(m) => m.clone(),
            None => {
                let text =
                    match source {
                        Source::Fused(id) => st.generated.get(&id).cloned().ok_or_else(|| {
                            Error::ShaderCompilation {
                                shader: source.file(),
                                detail: format!("no generated source was registered for {id:#x}"),
                            }
                        })?,
                        _ => format!("{COMMON}\n{}", source.text()),
                    };
                let ptx = self.ptx(source, &text)?;
                let module = self
                    .ctx
                    .load_module(ptx)
                    .map_err(|e| Error::ShaderCompilation {
                        shader: source.file(),
                        detail: format!("the driver could not load the PTX: {e}"),
                    })?;
                st.modules.insert(source, module.clone());
                module
            }
        };
        let f = module
            .load_function(name)
            .map_err(|e| Error::ShaderCompilation {
                shader: source.file(),
                detail: format!("entry point {name}: {e}"),
            })?;
        st.functions.insert(entry, f.clone());
        Ok(f)
    }

    /// The PTX of `text`, from the disk cache or compiled now (and then stored).
    fn ptx(&self, source: Source, text: &str) -> Result<Ptx> {
        let opts = options(self.arch, source);
        let key = stable_hash(&[text, &opts.options.join(" "), env!("CARGO_PKG_VERSION")]);
        let name = format!(
            "cuda/{key:016x}-{}-driver{}.{}.ptx",
            self.arch, self.driver.0, self.driver.1
        );
        let path = crate::cache::path(&name);
        if let Some(p) = &path {
            if let Ok(cached) = std::fs::read_to_string(p) {
                log::debug!("gpukit: PTX of {} from {}", source.file(), p.display());
                return Ok(Ptx::from_src(cached));
            }
        }
        let started = web_time::Instant::now();
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(text, opts).map_err(|e| {
            Error::ShaderCompilation {
                shader: source.file(),
                detail: format!("NVRTC: {e:?}"),
            }
        })?;
        log::info!(
            "gpukit: NVRTC compiled {} for {} in {:.0} ms",
            source.file(),
            self.arch,
            started.elapsed().as_secs_f64() * 1e3
        );
        if let Some(p) = &path {
            let stored = p
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| {
                    // Unique per writer: two devices of one process may compile the same
                    // source at once, and a shared temporary name would interleave them.
                    static WRITES: std::sync::atomic::AtomicU64 =
                        std::sync::atomic::AtomicU64::new(0);
                    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let tmp = p.with_extension(format!("ptx.{}.{n}", std::process::id()));
                    std::fs::write(&tmp, ptx.to_src())?;
                    std::fs::rename(&tmp, p)
                });
            if let Err(e) = stored {
                log::warn!("gpukit: could not cache PTX at {}: {e}", p.display());
            }
        }
        Ok(ptx)
    }
}

/// The NVRTC architecture name of a compute capability.
fn arch_name((major, minor): (u32, u32)) -> &'static str {
    match (major, minor) {
        (5, 0) => "sm_50",
        (5, 2) => "sm_52",
        (5, 3) => "sm_53",
        (6, 0) => "sm_60",
        (6, 1) => "sm_61",
        (6, 2) => "sm_62",
        (7, 0) => "sm_70",
        (7, 2) => "sm_72",
        (7, 5) => "sm_75",
        (8, 0) => "sm_80",
        (8, 6) => "sm_86",
        (8, 7) => "sm_87",
        (8, 9) => "sm_89",
        (9, 0) => "sm_90",
        (10, 0) => "sm_100",
        (10, 1) => "sm_101",
        (10, 3) => "sm_103",
        (12, 0) => "sm_120",
        (12, 1) => "sm_121",
        // Unknown (newer) devices: PTX for the newest family named here, which the driver
        // compiles forward.
        (m, _) if m >= 10 => "compute_100",
        _ => "compute_75",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_keys_are_stable_and_tell_sources_apart() {
        assert_eq!(stable_hash(&["a", "b"]), stable_hash(&["a", "b"]));
        assert_ne!(stable_hash(&["ab", ""]), stable_hash(&["a", "b"]));
    }

    /// Kernels launch with programmatic stream serialization on sm_90: one that touched memory
    /// before `WAIT_PRIOR()` could race the kernel before it. Every kernel of every file
    /// (and the generated fused one) waits first, after at most the one-wave GEMV's block of
    /// `WARM_L2` hints (see `after_warming`).
    #[test]
    fn every_kernel_waits_for_the_one_before_it_first() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders/cuda");
        let mut sources: Vec<(String, String)> = std::fs::read_dir(&dir)
            .expect("shaders/cuda")
            .map(|e| e.expect("a directory entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "cu"))
            .map(|p| {
                (
                    p.display().to_string(),
                    std::fs::read_to_string(&p).expect("a .cu file"),
                )
            })
            .collect();
        let fused = crate::backend::cuda::fused::fused_source(&crate::ops::fused::Expr::Input(0))
            .expect("the library markers exist");
        sources.push(("fused".into(), fused));
        let mut kernels = 0;
        for (file, text) in &sources {
            for (at, _) in text.match_indices("extern \"C\" __global__") {
                let body = &text[at..][text[at..].find('{').expect("a kernel body") + 1..];
                let first = body.trim_start_matches(|c: char| c.is_whitespace() || c == '\\');
                let first = after_warming(first);
                assert!(
                    first.starts_with("WAIT_PRIOR();"),
                    "{file}: a kernel at byte {at} does not begin with WAIT_PRIOR()"
                );
                kernels += 1;
            }
        }
        assert!(kernels >= 34, "{kernels} kernels found");
    }

    /// The body after its leading comments and a leading `if (launch_next && blockIdx.y ==
    /// 0) { ... }` block whose statements only declare constants and warm L2 (quant.cu's
    /// qgemv and qgemv_staged, through its `qgemv_warm` of WARM_L2 hints); the body unchanged
    /// if it has no such block.
    fn after_warming(body: &str) -> &str {
        let mut body = body;
        while let Some(comment) = body.strip_prefix("//") {
            body = comment
                .split_once('\n')
                .map_or("", |(_, next)| next)
                .trim_start();
        }
        let Some(rest) = body.strip_prefix("if (launch_next && blockIdx.y == 0) {") else {
            return body;
        };
        let Some(end) = rest.find('}') else {
            return body;
        };
        let block = &rest[..end];
        let only_hints = block.split(';').map(str::trim).all(|s| {
            s.is_empty()
                || s.starts_with("const u64 ")
                || s.starts_with("WARM_L2(")
                || s.starts_with("if (mins) WARM_L2(")
                || s.starts_with("qgemv_warm(")
        });
        if only_hints {
            rest[end + 1..].trim_start()
        } else {
            body
        }
    }

    #[test]
    fn every_file_has_its_entry_points_and_the_library_markers() {
        use Entry::*;
        for e in [
            Cast,
            Compare,
            Unary,
            Binary,
            Where,
            Epilogue,
            ToF16,
            ToBf16,
            ReduceRows,
            DotPartial,
            SoftmaxRows,
            SoftmaxPartial,
            SoftmaxFinish,
            NormRows,
            CopyStrided,
            Embedding,
            WriteRows,
            Rope,
            Pool2d,
            TopkRows,
            Im2col,
            Dequantize,
            Qgemv,
            QgemvStaged,
            Attention,
            FlashAttention64,
            FlashAttention128,
            AttentionSplit,
            AttentionDecode,
            AttentionRows { half: false },
            AttentionRows { half: true },
            AttentionMerge,
            DecodeLayers,
        ] {
            let (source, name) = e.location();
            // `void name(`, or `void __launch_bounds__(..) name(` for kernels that pin
            // their register budget.
            let text = source.text();
            assert!(
                text.contains(&format!("void {name}(")) || text.contains(&format!(") {name}(")),
                "{} has no kernel {name}",
                source.file()
            );
        }
    }
}
