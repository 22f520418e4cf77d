//! Attention launches on CUDA: split keys for a few query rows (decoding; a KV head's query rows
//! together where they fit), the flash kernel
//! where its tiles fit, the row-per-warp kernel otherwise (see shaders/cuda/attention.cu).

use bytemuck::{Pod, Zeroable};

use super::module::Entry;
use super::ops::{opt, p, u};
use super::{Arg, CudaBackend, CudaStorage};
use crate::error::{Error, Result};
use crate::ops::attention::AttentionSpec;

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

pub(super) fn attention(
    backend: &CudaBackend,
    q: &CudaStorage,
    k: &CudaStorage,
    v: &CudaStorage,
    lens: Option<&CudaStorage>,
    a: AttentionSpec,
) -> Result<CudaStorage> {
    const WARPS: usize = 4;
    let out = backend.alloc(a.batch * a.hq * a.sq * a.dv)?;
    if a.batch * a.hq * a.sq * a.dv == 0 {
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
    let row =
        |s: crate::ops::attention::RowStrides| [s.offset, s.batch, s.head, s.seq].map(|x| x as u64);
    let layout = AttentionLayoutParams {
        q: row(a.q),
        k: row(a.k),
        v: row(a.v),
        out_bshd: a.out_bshd as u64,
    };
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
    // The partials of a split kernel joined into `out`: a block of 128 threads a query row.
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
            p(&out),
        ];
        backend.launch(Entry::AttentionMerge, (rows as u32, 1, 1), 128, 0, &merge)
    };
    // Decoding: every query row of a KV head's group (at most 16) in one block, so each key
    // and value is read once; the keys split into chunks (multiples of 32) for about four
    // blocks an SM, at most 1024 of them.
    let group = a.hq / a.hkv.max(1) * a.sq;
    let kv_blocks = a.batch * a.hkv.max(1);
    if a.sq <= 4 && group <= 16 && a.d <= 256 && a.dv <= 256 && kv_blocks <= 65535 {
        let want = (4 * backend.multiprocessors as usize)
            .div_ceil(kv_blocks)
            .max(1);
        let chunk =
            a.sk.div_ceil(want)
                .max(a.sk.div_ceil(1024))
                .next_multiple_of(32)
                .max(32);
        let splits = a.sk.div_ceil(chunk).max(1);
        let shared = (group * a.d + 32 * (a.d + 1) + 32 * a.dv + group * 32 + 3 * group) * 4;
        if shared <= backend.shared_optin as usize {
            let words = crate::shape::mul("attention partials", rows * splits, a.dv + 2)?;
            let partial = backend.alloc(if splits > 1 { words } else { 1 })?;
            let args = [&common[..], &[u(chunk), p(&partial), p(&out)]].concat();
            backend.launch(
                Entry::AttentionDecode,
                (splits as u32, kv_blocks as u32, 1),
                256,
                shared as u32,
                &args,
            )?;
            if splits > 1 {
                merge(&partial, splits)?;
            }
            return Ok(out);
        }
    }
    // A few query rows of larger groups: keys split across blocks of 32 (16 for wide heads),
    // a block per query row, partials merged.
    let chunk = if a.d.max(a.dv) <= 128 { 32 } else { 16 };
    let splits = a.sk.div_ceil(chunk).max(1);
    if a.sq <= 4 && a.d <= 256 && a.dv <= 256 && rows <= 65535 && splits <= i32::MAX as usize {
        let shared = (a.d + chunk * (a.d + 1) + chunk * a.dv + chunk) * 4;
        let words = crate::shape::mul("attention partials", rows * splits, a.dv + 2)?;
        let partial = backend.alloc(if splits > 1 { words } else { 1 })?;
        let args = [&common[..], &[u(chunk), p(&partial), p(&out)]].concat();
        backend.launch(
            Entry::AttentionSplit,
            (splits as u32, rows as u32, 1),
            128,
            shared as u32,
            &args,
        )?;
        if splits > 1 {
            merge(&partial, splits)?;
        }
        return Ok(out);
    }
    // Flash attention (64 query rows a block) where its tiles fit; the row-per-warp kernel
    // otherwise (odd value widths, widths past 128, shared memory too small).
    const FQ: usize = 64;
    let flash_shared = {
        let (qs, ks) = (a.d * (FQ + 4), (a.d * (FQ + 4)).max(FQ * (FQ + 4)));
        (qs + ks + FQ * a.dv) * 4
    };
    if a.dv.is_multiple_of(4)
        && a.dv <= 128
        && a.d > 0
        && flash_shared <= backend.shared_optin as usize
    {
        let entry = if a.dv <= 64 {
            Entry::FlashAttention64
        } else {
            Entry::FlashAttention128
        };
        let grid = (a.sq.div_ceil(FQ) as u32, heads as u32, 1);
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
