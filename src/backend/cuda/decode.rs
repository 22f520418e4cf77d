//! A llama decoding step's transformer layers as one persistent kernel
//! (`shaders/cuda/decode_step.cu`): one block an SM for the whole step, the stages of a layer
//! apart by grid-wide barriers, instead of seven kernels a layer. The model layer
//! (`models::decode`) describes its layers once ([`CudaBackend::decode_stack`]) and records
//! [`CudaBackend::decode_layers`] in its replayed step.

use bytemuck::{Pod, Zeroable};

use super::ops::p;
use super::{Arg, CudaBackend, CudaStorage, Entry};
use crate::error::{Error, Result};

/// Threads a block (`DS_WARPS` warps of decode_step.cu).
const THREADS: u32 = 512;
/// The most blocks one head's keys are split over (`DS_SPLITS`).
const SPLITS: usize = 16;

/// A quantized weight's device buffers (`DsWeight`): format 0 Q8_0, 1 Q4_0, 2 Q4_1; `mins`
/// is 0 unless Q4_1.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default)]
pub(crate) struct DsWeight {
    pub scales: u64,
    pub mins: u64,
    pub words: u64,
    pub format: u32,
    pub pad: u32,
}

/// One layer's tensors by device address (`DsLayer`).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default)]
pub(crate) struct DsLayer {
    /// f32 `[hidden]`.
    pub attn_norm: u64,
    /// f32 `[hidden]`.
    pub ffn_norm: u64,
    /// `[capacity, 2 * kv_heads, head_dim]`, keys' heads first.
    pub cache: u64,
    pub qkv: DsWeight,
    pub o: DsWeight,
    pub gate_up: DsWeight,
    pub down: DsWeight,
}

/// The model's sizes (`DsDims`).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default)]
pub(crate) struct DsDims {
    pub layers: u32,
    pub hidden: u32,
    pub heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    pub ffn: u32,
    pub capacity: u32,
    /// The cache's values: 0 f32, 1 f16, 2 bf16.
    pub elem: u32,
    pub eps: f32,
    /// Attention's score scale.
    pub scale: f32,
}

impl DsDims {
    /// Whether the kernel takes these sizes: head widths 32, 64, 128 or 256, whole GQA
    /// groups, products over whole quant blocks.
    pub(crate) fn supported(&self) -> bool {
        // Row counts the kernel indexes in 32 bits.
        let rows = (self.heads.checked_add(self.kv_heads.saturating_mul(2)))
            .and_then(|r| r.checked_mul(self.head_dim));
        rows.is_some()
            && self.ffn.checked_mul(2).is_some()
            && [32, 64, 128, 256].contains(&self.head_dim)
            && self.kv_heads > 0
            && self.heads.is_multiple_of(self.kv_heads)
            && self.hidden.is_multiple_of(32)
            && self.ffn.is_multiple_of(32)
            && (self.heads * self.head_dim).is_multiple_of(32)
            && self.layers > 0
            && self.elem <= 2
    }
}

/// The layers' table on the device and the step's working memory.
pub(crate) struct DecodeStack {
    table: CudaStorage,
    scratch: CudaStorage,
    barrier: CudaStorage,
    dims: DsDims,
    shared: u32,
    grid: u32,
}

impl CudaBackend {
    /// Uploads the layers' table and allocates the step's scratch; `None` where the kernel
    /// cannot hold one block on every SM at once (a cooperative launch needs it).
    pub(crate) fn decode_stack(
        &self,
        dims: DsDims,
        layers: &[DsLayer],
    ) -> Result<Option<DecodeStack>> {
        if !dims.supported() || layers.len() != dims.layers as usize {
            return Ok(None);
        }
        let (hidden, ffn) = (dims.hidden as usize, dims.ffn as usize);
        let qrows = dims.heads as usize * dims.head_dim as usize;
        let widest = hidden.max(ffn).max(qrows);
        let shared = u32::try_from(widest * 4).map_err(|_| Error::LimitExceeded {
            what: "a decoding step's widest vector".into(),
            limit: "CUDA shared memory",
            needed: widest as u64 * 4,
            max: u64::from(self.shared_optin),
        })?;
        let f = self.kernels.function(Entry::DecodeLayers)?;
        self.bind()?;
        // Beside the vector, the kernel's own shared memory (attention's per-warp rows).
        let fixed = f.shared_size_bytes().map_err(super::errors::driver)?;
        if u64::from(shared) + fixed.max(0) as u64 > u64::from(self.shared_optin) {
            return Ok(None);
        }
        if shared > 48 << 10 {
            f.set_attribute(
                cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                shared as i32,
            )
            .map_err(super::errors::driver)?;
        }
        let per_sm = f
            .occupancy_max_active_blocks_per_multiprocessor(THREADS, shared as usize, None)
            .map_err(super::errors::driver)?;
        if per_sm == 0 {
            return Ok(None);
        }
        let table = self.alloc_bytes(std::mem::size_of_val(layers) as u64)?;
        self.write(table.ptr(), layers)?;
        // q, attention's output, the SwiGLU vector and attention's split partials.
        let splits = SPLITS * dims.heads as usize * (dims.head_dim as usize + 2);
        let scratch = self.alloc(2 * qrows + ffn + splits)?;
        // grid_sync's arrival count.
        let barrier = self.alloc_bytes(4)?;
        self.zero(&barrier, 4)?;
        Ok(Some(DecodeStack {
            table,
            scratch,
            barrier,
            dims,
            shared,
            grid: self.multiprocessors,
        }))
    }

    /// Runs the layers for one token: `x` its embedding row, `cos` and `sin` each head row's
    /// RoPE table row, `position` (u32) where its keys and values go, `keys` (u32) how many
    /// cache rows attention sees. Returns the last hidden state, `[hidden]`.
    pub(crate) fn decode_layers(
        &self,
        stack: &DecodeStack,
        x: &CudaStorage,
        (cos, sin): (&CudaStorage, &CudaStorage),
        position: &CudaStorage,
        keys: &CudaStorage,
    ) -> Result<CudaStorage> {
        let out = self.alloc(stack.dims.hidden as usize)?;
        let dims = bytemuck::bytes_of(&stack.dims);
        let args = [
            p(&stack.table),
            Arg::Raw(dims),
            p(x),
            p(cos),
            p(sin),
            p(position),
            p(keys),
            p(&stack.scratch),
            p(&stack.barrier),
            p(&out),
        ];
        self.launch_as(
            Entry::DecodeLayers,
            (stack.grid, 1, 1),
            THREADS,
            stack.shared,
            &args,
            true,
        )?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    /// The launch's block size and scratch sizes follow decode_step.cu's `#define`s.
    #[test]
    fn sizes_match_the_kernel() {
        let text = include_str!("../../../shaders/cuda/decode_step.cu");
        let define = |name: &str| -> u32 {
            let line = text
                .lines()
                .find_map(|l| l.strip_prefix(&format!("#define {name} ")))
                .unwrap_or_else(|| panic!("decode_step.cu defines {name}"));
            let value = line.split_whitespace().next().expect("a value");
            value.parse().expect("a number")
        };
        assert_eq!(define("DS_WARPS") * 32, super::THREADS);
        assert_eq!(define("DS_SPLITS") as usize, super::SPLITS);
    }
}
