//! Attention launches on CUDA: split keys for a few query rows (decoding; a KV head's query rows
//! together where they fit), the flash kernel
//! where its tiles fit, the row-per-warp kernel otherwise (see shaders/cuda/attention.cu and,
//! for the split kernels, attention_decode.cu).

use bytemuck::{Pod, Zeroable};

use super::module::Entry;
use super::ops::{opt, p, u};
use super::{Arg, CudaBackend, CudaStorage};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::attention::{AttentionSpec, RowStrides};

/// Where attention's operand rows lie (`AttnLayout` in attention.cu): offset, batch, head and
/// seq strides of q, k and v, and whether the output is `[b, sq, hq, dv]`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct AttentionLayoutParams {
    q: [u64; 4],
    k: [u64; 4],
    v: [u64; 4],
    out_bshd: u64,
}

impl AttentionLayoutParams {
    fn of(a: &AttentionSpec) -> AttentionLayoutParams {
        let row = |s: RowStrides| [s.offset, s.batch, s.head, s.seq].map(|x| x as u64);
        AttentionLayoutParams {
            q: row(a.q),
            k: row(a.k),
            v: row(a.v),
            out_bshd: a.out_bshd as u64,
        }
    }
}

pub(super) fn attention(
    backend: &CudaBackend,
    q: &CudaStorage,
    k: &CudaStorage,
    v: &CudaStorage,
    lens: Option<&CudaStorage>,
    a: AttentionSpec,
) -> Result<CudaStorage> {
    const WARPS: usize = 4;
    // The operands' element type in the decode and merge kernels: f32, f16 or bf16.
    let elem: u32 = match a.storage {
        DType::F16 => 1,
        DType::BF16 => 2,
        _ => 0,
    };
    let n = a.batch * a.hq * a.sq * a.dv;
    let out = backend.alloc_bytes(n as u64 * a.storage.size() as u64)?;
    if n == 0 {
        return Ok(out);
    }
    let heads = a.batch * a.hq;
    if heads > 65535 {
        return Err(Error::LimitExceeded {
            what: "attention batch x heads".into(),
            limit: "CUDA grid y dimension",
            needed: heads as u64,
            max: 65535,
        });
    }
    if a.sq.div_ceil(WARPS) > i32::MAX as usize {
        return Err(Error::LimitExceeded {
            what: "attention query rows".into(),
            limit: "CUDA grid x dimension",
            needed: a.sq.div_ceil(WARPS) as u64,
            max: i32::MAX as u64,
        });
    }
    let dev_lens = lens;
    let layout = AttentionLayoutParams::of(&a);
    // The arguments both kernels take first; the row-per-warp kernel adds its key tile.
    let common = [
        Arg::Raw(bytemuck::bytes_of(&layout)),
        p(q),
        p(k),
        p(v),
        opt(dev_lens),
        u(a.hq),
        u(a.hkv.max(1)),
        u(a.sq),
        u(a.sk),
        u(a.d),
        u(a.dv),
        Arg::I(a.causal as u32),
        Arg::F(a.scale),
    ];
    let rows = heads * a.sq;
    // The partials of a split kernel joined into `out`: a block of 256 threads for 32 columns
    // of a query row (value widths up to 256, as every split kernel takes).
    let merge = |partial: &CudaStorage, splits: usize| {
        let merge = [
            Arg::Raw(bytemuck::bytes_of(&layout)),
            p(partial),
            opt(dev_lens),
            u(a.hq),
            u(a.sq),
            u(a.sk),
            u(a.dv),
            Arg::I(a.causal as u32),
            u(splits),
            Arg::I(elem),
            p(&out),
        ];
        let groups = a.dv.div_ceil(32) as u32;
        backend.launch(
            Entry::AttentionMerge,
            (rows as u32, groups, 1),
            256,
            0,
            &merge,
        )
    };
    // A split kernel: `extra` arguments after the common ones, partials (m, l, acc[dv]) per
    // row and split, merged when there are several.
    let split = |entry: Entry,
                 grid: (u32, u32, u32),
                 threads: u32,
                 shared: usize,
                 splits: usize,
                 extra: &[Arg<'_>]|
     -> Result<()> {
        let words = crate::shape::mul("attention partials", rows * splits, a.dv + 2)?;
        let partial = backend.alloc(if splits > 1 { words } else { 1 })?;
        let args = [&common[..], extra, &[p(&partial), p(&out)]].concat();
        backend.launch(entry, grid, threads, shared as u32, &args)?;
        if splits > 1 {
            merge(&partial, splits)?;
        }
        Ok(())
    };
    // Decoding, up to 4 query rows a KV head of width 32, 64, 128 or 256 with 16-byte aligned
    // rows: keys and values read straight into registers (8 columns a lane, a round of loads
    // in flight a warp), the keys split across blocks.
    let group = a.hq / a.hkv.max(1) * a.sq;
    let kv_blocks = a.batch * a.hkv.max(1);
    // Keys a decoding block takes: a multiple of `round` giving about `per_sm` blocks an SM,
    // at most 1024 splits.
    let chunk_of = |round: usize, per_sm: usize| {
        let want = (per_sm * backend.multiprocessors as usize)
            .div_ceil(kv_blocks)
            .max(1);
        a.sk.div_ceil(want)
            .max(a.sk.div_ceil(1024))
            .next_multiple_of(round)
            .max(round)
    };
    let vec = 16 / a.storage.size();
    let aligned = |s: RowStrides, ptr: u64| {
        [s.offset, s.batch, s.head, s.seq]
            .iter()
            .all(|x| x.is_multiple_of(vec))
            && ptr.is_multiple_of(16)
    };
    if a.sq <= 4
        && group <= 4
        && a.d == a.dv
        && matches!(a.d, 32 | 64 | 128 | 256)
        && kv_blocks <= 65535
        && a.sk <= u32::MAX as usize
        && aligned(a.k, k.ptr())
        && aligned(a.v, v.ptr())
    {
        // Keys a block takes a round (attention_rows.cu): 4 warps x 32 / (d / 8) keys a read
        // x 2 reads (f32) or 4 (halves).
        let round = 4 * (256 / a.d) * if elem == 0 { 2 } else { 4 };
        // About four rounds a block at A3's shape: 4 blocks an SM for f32, 2 for halves (whose
        // rounds take twice the keys); on an H100 A3 f16 took 30.1 us at 4 and 21.7 at 2, f32
        // 22.1 at 4 and 25.0 at 2.
        let chunk = chunk_of(round, if elem == 0 { 4 } else { 2 });
        let splits = a.sk.div_ceil(chunk).max(1);
        let grid = (splits as u32, kv_blocks as u32, 1);
        let entry = Entry::AttentionRows { half: elem != 0 };
        split(entry, grid, 128, 0, splits, &[u(chunk), Arg::I(elem)])?;
        return Ok(out);
    }
    // Decoding: every query row of a KV head's group (at most 16) in one block, so each key
    // and value is read once; the keys split into chunks (multiples of 32) for about four
    // blocks an SM, at most 1024 of them. f16 and bf16 caches are read as stored.
    if a.sq <= 4 && group <= 16 && a.d <= 256 && a.dv <= 256 && kv_blocks <= 65535 {
        let chunk = chunk_of(32, 4);
        let splits = a.sk.div_ceil(chunk).max(1);
        let shared = (group * a.d + 32 * (a.d + 1) + 32 * a.dv + group * 32 + 3 * group) * 4;
        if shared <= backend.shared_optin as usize {
            let grid = (splits as u32, kv_blocks as u32, 1);
            let extra = [u(chunk), Arg::I(elem)];
            split(Entry::AttentionDecode, grid, 256, shared, splits, &extra)?;
            return Ok(out);
        }
    }
    // Halves past decoding: the tensor-core kernel (the ops layer sends only shapes it takes).
    if elem != 0 {
        let entry = Entry::FlashMma {
            width: a.d as u32,
            bf16: a.storage == DType::BF16,
        };
        tensor_core_flash(backend, (q, k, v, lens), a, &out, entry, mma_shared(a.d))?;
        return Ok(out);
    }
    // A few query rows of larger groups: keys split across blocks of 32 (16 for wide heads),
    // a block per query row, partials merged.
    let chunk = if a.d.max(a.dv) <= 128 { 32 } else { 16 };
    let splits = a.sk.div_ceil(chunk).max(1);
    if a.sq <= 4 && a.d <= 256 && a.dv <= 256 && rows <= 65535 && splits <= i32::MAX as usize {
        let shared = (a.d + chunk * (a.d + 1) + chunk * a.dv + chunk) * 4;
        let grid = (splits as u32, rows as u32, 1);
        split(
            Entry::AttentionSplit,
            grid,
            128,
            shared,
            splits,
            &[u(chunk)],
        )?;
        return Ok(out);
    }
    // f32 on tensor cores at f32 accuracy (three tf32 products each) for head widths 32, 64
    // and 128 with rows on 16 bytes, on compute capability 8.0 and later.
    if backend.mma
        && a.d == a.dv
        && matches!(a.d, 32 | 64 | 128)
        && aligned(a.q, q.ptr())
        && aligned(a.k, k.ptr())
        && aligned(a.v, v.ptr())
        && tc32_shared(a.d) <= backend.shared_optin as usize
        && flash_blocks(heads, a.sq, MMA_ROWS).is_some()
    {
        let entry = Entry::FlashTc32 { width: a.d as u32 };
        tensor_core_flash(backend, (q, k, v, lens), a, &out, entry, tc32_shared(a.d))?;
        return Ok(out);
    }
    // Flash attention on the FP32 cores (64 query rows a block) where its tiles fit; the
    // row-per-warp kernel otherwise (odd value widths, widths past 128, shared memory too
    // small).
    const FQ: usize = 64;
    let flash_shared = {
        let (qs, ks) = (a.d * (FQ + 4), (a.d * (FQ + 4)).max(FQ * (FQ + 4)));
        (qs + ks + FQ * a.dv) * 4
    };
    let flash_grid = flash_blocks(heads, a.sq, FQ);
    if let Some(blocks) = flash_grid.filter(|_| {
        a.dv.is_multiple_of(4)
            && a.dv <= 128
            && a.d > 0
            && flash_shared <= backend.shared_optin as usize
    }) {
        let entry = if a.dv <= 64 {
            Entry::FlashAttention64
        } else {
            Entry::FlashAttention128
        };
        // One-dimensional, the heads fastest (see flash_body in attention.cu).
        let grid = (blocks, 1, 1);
        let args = [&common[..], &[p(&out)]].concat();
        backend.launch(entry, grid, 256, flash_shared as u32, &args)?;
        return Ok(out);
    }
    let shared = |tk: usize| (WARPS * a.d + tk * (a.d + 1) + tk * a.dv) * 4;
    let tk = if shared(32) <= 48 << 10 { 32 } else { 16 };
    let args = [&common[..], &[Arg::I(tk as u32), p(&out)]].concat();
    let grid = (a.sq.div_ceil(WARPS) as u32, heads as u32, 1);
    backend.launch(
        Entry::Attention,
        grid,
        (WARPS * 32) as u32,
        shared(tk) as u32,
        &args,
    )?;
    Ok(out)
}

/// Query rows and key rows of the tensor-core kernel's tiles.
const MMA_ROWS: usize = 64;

/// Shared memory of the tensor-core kernel at head width `d`: a q tile and two key and two
/// value tiles (shaders/cuda/attention_mma.cu's MMA_CFG_*: tiles of 64 keys, double-buffered),
/// rows padded by 8 elements of 2 bytes.
fn mma_shared(d: usize) -> usize {
    5 * MMA_ROWS * (d + 8) * 2
}

/// Shared memory of the f32 tensor-core kernel at head width `d`: a q tile, two key tiles
/// (rows padded by 4 words) and two value tiles (by 8), of 64 keys up to width 64 and 32 at
/// 128 (`flash_tc32_*` in shaders/cuda/attention_mma.cu).
fn tc32_shared(d: usize) -> usize {
    let keys = if d <= 64 { 64 } else { 32 };
    (MMA_ROWS * (d + 4) + 2 * keys * (d + 4) + 2 * keys * (d + 8)) * 4
}

impl CudaBackend {
    /// Whether the tensor-core kernel (`flash_mma_*`, [`tensor_core_flash`]) takes attention
    /// over `dtype` operands as stored: f16 or bf16 on compute capability 8.0 or later, d = dv
    /// of 32, 64 or 128, every row on 16 bytes (the strides of q, k and v multiples of 8
    /// elements), and a grid that fits.
    pub(crate) fn attention_takes_halves(
        &self,
        dtype: DType,
        (batch, hq, sq): (usize, usize, usize),
        (d, dv): (usize, usize),
        strides: [RowStrides; 3],
    ) -> bool {
        self.mma
            && matches!(dtype, DType::F16 | DType::BF16)
            && d == dv
            && matches!(d, 32 | 64 | 128)
            && strides.iter().all(|s| s.aligned(8))
            && mma_shared(d) <= self.shared_optin as usize
            && flash_blocks(batch.saturating_mul(hq), sq, MMA_ROWS).is_some()
    }
}

/// One of attention_mma.cu's tensor-core flash kernels (`entry`: `flash_mma_*` over f16 or
/// bf16 operands as stored, `flash_tc32_*` over f32) into `out`, in the operands' dtype: 64
/// query rows of a (batch, head) a block of 128 threads, `shared` bytes of shared memory. The
/// callers send only what the kernels take ([`CudaBackend::attention_takes_halves`] for halves).
fn tensor_core_flash(
    backend: &CudaBackend,
    (q, k, v, lens): (
        &CudaStorage,
        &CudaStorage,
        &CudaStorage,
        Option<&CudaStorage>,
    ),
    a: AttentionSpec,
    out: &CudaStorage,
    entry: Entry,
    shared: usize,
) -> Result<()> {
    let layout = AttentionLayoutParams::of(&a);
    let args = [
        Arg::Raw(bytemuck::bytes_of(&layout)),
        p(q),
        p(k),
        p(v),
        opt(lens),
        u(a.hq),
        u(a.hkv.max(1)),
        u(a.sq),
        u(a.sk),
        Arg::I(a.causal as u32),
        Arg::F(a.scale),
        p(out),
    ];
    let heads = a.batch * a.hq;
    let blocks = flash_blocks(heads, a.sq, MMA_ROWS).ok_or_else(|| Error::LimitExceeded {
        what: "tensor-core attention blocks".into(),
        limit: "CUDA grid x dimension",
        needed: (heads as u64).saturating_mul(a.sq.div_ceil(MMA_ROWS) as u64),
        max: i32::MAX as u64,
    })?;
    backend.launch(entry, (blocks, 1, 1), 128, shared as u32, &args)
}

/// The one-dimensional grid of the flash kernels (tensor-core and FP32-core), `heads` x the
/// query blocks of `rows` (the kernels take a block's head and query block from it, heads
/// fastest), if it fits a grid's x extent.
fn flash_blocks(heads: usize, sq: usize, rows: usize) -> Option<u32> {
    let blocks = heads.checked_mul(sq.div_ceil(rows))?;
    u32::try_from(blocks).ok().filter(|&b| b <= i32::MAX as u32)
}
