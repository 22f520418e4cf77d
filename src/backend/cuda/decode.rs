//! A llama decoding step as one persistent kernel (`shaders/cuda/decode_step.cu`): the
//! token's embedding row, every transformer layer, the output norm, the LM head and the
//! argmax (or the logits), with one block an SM for the whole step and the stages apart by
//! grid-wide barriers, instead of some 220 small kernels. The model layer
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

/// The step's ends (`DsEnds`): the embedding table the token's row comes from, and the output
/// norm and LM head after the layers.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default)]
pub(crate) struct DsEnds {
    /// `[embed_rows, hidden]`.
    pub embed: DsWeight,
    /// `[vocab, hidden]`.
    pub head: DsWeight,
    /// The output norm's weights, f32 `[hidden]`.
    pub norm: u64,
    pub embed_rows: u32,
    pub vocab: u32,
    /// What a step gives back: [`DsPick`] as its number.
    pub pick: u32,
    pub pad: u32,
}

/// What a step of the fused kernel gives back.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum DsPick {
    /// The logits, f32 `[vocab]`.
    Logits = 0,
    /// The largest logit's index (u32; NaN above every number, the lower index on ties).
    Argmax = 1,
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
    /// Where the kernel stores its stage times (`GPUKIT_DS_PROFILE`), or 0.
    pub profile: u64,
}

impl DsDims {
    /// Whether the kernel takes these sizes and ends: head widths 32, 64, 128 or 256, whole
    /// GQA groups, products over whole quant blocks, a vocabulary and an embedding table.
    pub(crate) fn supported(&self, ends: &DsEnds) -> bool {
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
            && ends.vocab > 0
            && ends.embed_rows > 0
            && ends.pick <= 1
            && [ends.embed.format, ends.head.format]
                .iter()
                .all(|&f| f <= 2)
    }
}

/// The layers' table on the device and the step's working memory.
pub(crate) struct DecodeStack {
    table: CudaStorage,
    scratch: CudaStorage,
    barrier: CudaStorage,
    /// The hidden state, f32 `[hidden]`.
    hidden: CudaStorage,
    dims: DsDims,
    ends: DsEnds,
    shared: u32,
    grid: u32,
    /// The kernel's times, `[grid][events(layers)]` u64 nanoseconds, when profiling.
    profile: Option<CudaStorage>,
}

impl CudaBackend {
    /// Uploads the layers' table and allocates the step's scratch; `None` where the kernel
    /// does not take these sizes or cannot hold one block on every SM at once (a cooperative
    /// launch needs it).
    pub(crate) fn decode_stack(
        &self,
        dims: DsDims,
        ends: DsEnds,
        layers: &[DsLayer],
    ) -> Result<Option<DecodeStack>> {
        if !dims.supported(&ends) || layers.len() != dims.layers as usize {
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
        self.opt_in_shared(&f, shared)?;
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
        // The barrier's arrival count, the pick's largest word and its count of blocks (u64
        // each), then each head's count of finished splits (u32).
        let bytes = 24 + 4 * u64::from(dims.heads);
        let barrier = self.alloc_bytes(bytes)?;
        self.zero(&barrier, bytes)?;
        let mut dims = dims;
        let profile = if std::env::var_os("GPUKIT_DS_PROFILE").is_some() {
            let bytes = u64::from(self.multiprocessors) * events(dims.layers) * 8;
            let buf = self.alloc_bytes(bytes)?;
            self.zero(&buf, bytes)?;
            dims.profile = buf.ptr();
            Some(buf)
        } else {
            None
        };
        Ok(Some(DecodeStack {
            table,
            scratch,
            barrier,
            hidden: self.alloc(hidden)?,
            dims,
            ends,
            shared,
            grid: self.multiprocessors,
            profile,
        }))
    }

    /// Runs the step for one token: `token` (u32) its id, `cos` and `sin` the RoPE tables
    /// (`[rows, head_dim / 2]`), `rope_rows` (u32, one a head row) the table row each head
    /// row turns by, `position` (u32) where its keys and values go, `keys` (u32) how many
    /// cache rows attention sees. Returns what the stack's ends pick: the logits (f32
    /// `[vocab]`) or the largest one's index (u32 `[1]`).
    pub(crate) fn decode_layers(
        &self,
        stack: &DecodeStack,
        token: &CudaStorage,
        (cos, sin): (&CudaStorage, &CudaStorage),
        rope_rows: &CudaStorage,
        position: &CudaStorage,
        keys: &CudaStorage,
    ) -> Result<CudaStorage> {
        let out = match stack.pick() {
            DsPick::Logits => self.alloc(stack.ends.vocab as usize)?,
            DsPick::Argmax => self.alloc(1)?,
        };
        let dims = bytemuck::bytes_of(&stack.dims);
        let ends = bytemuck::bytes_of(&stack.ends);
        let args = [
            p(&stack.table),
            Arg::Raw(dims),
            Arg::Raw(ends),
            p(token),
            p(cos),
            p(sin),
            p(rope_rows),
            p(position),
            p(keys),
            p(&stack.scratch),
            p(&stack.barrier),
            p(&stack.hidden),
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

impl DecodeStack {
    /// The LM head's rows: the logits a step gives back with [`DsPick::Logits`].
    pub(crate) fn vocab(&self) -> usize {
        self.ends.vocab as usize
    }

    /// What a step gives back.
    pub(crate) fn pick(&self) -> DsPick {
        if self.ends.pick == DsPick::Argmax as u32 {
            DsPick::Argmax
        } else {
            DsPick::Logits
        }
    }
}

/// Times a block stores a launch (`DS_EVENTS`): its start, an arrival and a departure a
/// barrier (five a layer, the last before the LM head), its end, then [`DETAIL`] times of one
/// layer.
fn events(layers: u32) -> u64 {
    2 + 10 * u64::from(layers) + DETAIL as u64
}

/// Detail times of one layer (`DS_DETAIL`).
const DETAIL: usize = 8;

impl CudaBackend {
    /// The last launch's stage times (`GPUKIT_DS_PROFILE`) as a table: for each of a layer's
    /// barriers, the mean over layers of the slowest block's work before it (from the previous
    /// barrier's last departure to the last arrival) and of the barrier itself (last arrival
    /// to last departure), in microseconds.
    pub(crate) fn decode_profile(&self, stack: &DecodeStack) -> Result<Option<String>> {
        let Some(buf) = &stack.profile else {
            return Ok(None);
        };
        let ev = events(stack.dims.layers) as usize;
        let grid = stack.grid as usize;
        let raw = self.read_blocking(buf, grid * ev * 2)?;
        let t: Vec<u64> = bytemuck::pod_collect_to_vec(&raw);
        let last = |e: usize| (0..grid).map(|b| t[b * ev + e]).max().unwrap_or(0);
        let first = |e: usize| (0..grid).map(|b| t[b * ev + e]).min().unwrap_or(0);
        // Events: 0 start; then (arrive, leave) pairs; the end.
        let pairs = 5 * stack.dims.layers as usize;
        let used: Vec<usize> = (0..pairs).filter(|&i| last(2 + 2 * i) != 0).collect();
        let per_layer = used.len().div_ceil(stack.dims.layers as usize).max(1);
        let mut work = vec![0.0f64; per_layer];
        let mut wait = vec![0.0f64; per_layer];
        let mut counts = vec![0usize; per_layer];
        let mut prev = first(0);
        for (n, &i) in used.iter().enumerate() {
            let (arrive, leave) = (last(1 + 2 * i), last(2 + 2 * i));
            let s = n % per_layer;
            work[s] += arrive.saturating_sub(prev) as f64 / 1e3;
            wait[s] += leave.saturating_sub(arrive) as f64 / 1e3;
            counts[s] += 1;
            prev = leave;
        }
        let end = (0..grid)
            .map(|b| t[b * ev + 1 + 2 * used.len()])
            .max()
            .unwrap_or(0);
        let total = end.saturating_sub(first(0)) as f64 / 1e3;
        let mut out = format!(
            "decode_layers: {total:.1} us, {} barriers; per stage (mean over layers): ",
            used.len(),
        );
        for s in 0..per_layer {
            let c = counts[s].max(1) as f64;
            out += &format!("[{s}: work {:.2} barrier {:.2}] ", work[s] / c, wait[s] / c);
        }
        out += &format!(
            "LM head and pick {:.2}; block 0 in layer 3:",
            end.saturating_sub(prev) as f64 / 1e3
        );
        let sub = &t[ev - DETAIL..ev];
        for k in 1..DETAIL {
            if sub[k] != 0 && sub[k - 1] != 0 {
                out += &format!(
                    " {}-{k} {:.2}",
                    k - 1,
                    sub[k].saturating_sub(sub[k - 1]) as f64 / 1e3
                );
            }
        }
        Ok(Some(out))
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
        assert_eq!(define("DS_DETAIL") as usize, super::DETAIL);
    }
}
