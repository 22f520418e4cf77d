//! Fused attention: the tiled kernels by head width (see ARCHITECTURE.md, Kernels).

use super::super::pipelines::{
    flash_split, flash_tile, flash_width, kv_code, split_chunk, AttentionBlocks,
};
use super::super::{Shared, State, WgpuBackend, WgpuStorage};
use super::{whole, Bind, Kernel};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::attention::{AttentionSpec, Dims, RowStrides};
use bytemuck::{Pod, Zeroable};

/// Keys from which a few query rows take the split kernel rather than the row kernel.
const SPLIT_MIN_KEYS: u64 = 512;

/// Whether attention of `dims` decodes over many keys: a few query rows (the GQA group times
/// sq at most 8) over 512 keys or more, heads up to 256 wide, which the split kernel takes.
/// Natively only: the browser build leaves the split kernel's text out (its package's size
/// budget) and decodes with the row kernel.
fn split_decode((_, hq, hkv, sq, sk, d, dv): Dims) -> bool {
    cfg!(native)
        && sq <= 4
        && hkv > 0
        && (hq / hkv) * sq <= 8
        && sk as u64 >= SPLIT_MIN_KEYS
        && d <= 256
        && dv <= 256
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct AttentionParams {
    hq: u32,
    hkv: u32,
    sq: u32,
    sk: u32,
    d: u32,
    dv: u32,
    scale: f32,
    out_bshd: u32,
    /// Offset, batch, head and seq strides of q, k and v.
    rows: [[u32; 4]; 3],
}

impl WgpuBackend {
    /// Whether attention of `dims` takes q, k and v of `dtype` (f16 or bf16) as stored: the
    /// split decode kernel (native only, see [`split_decode`]), which reads them two to a
    /// word, so widths, offsets and strides must be even (no row starts inside a word). Other
    /// shapes convert around the f32 kernels.
    pub(crate) fn attention_takes_halves(
        &self,
        dtype: DType,
        dims: Dims,
        strides: [RowStrides; 3],
    ) -> bool {
        let (.., d, dv) = dims;
        matches!(dtype, DType::F16 | DType::BF16)
            && split_decode(dims)
            && d.is_multiple_of(2)
            && dv.is_multiple_of(2)
            && strides.iter().all(|s| s.aligned(2))
    }

    pub(super) fn encode_attention(
        &self,
        q: &WgpuStorage,
        k: &WgpuStorage,
        v: &WgpuStorage,
        lens: Option<&WgpuStorage>,
        a: AttentionSpec,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let qkv = [q.buffer()?, k.buffer()?, v.buffer()?];
        let lens = lens.map(WgpuStorage::buffer).transpose()?;
        let mut st = s.state();
        let n = (a.batch * a.hq * a.sq * a.dv) as u64;
        let out = s.alloc(&mut st, (n * a.storage.size() as u64).next_multiple_of(4))?;
        s.record_attention(&mut st, qkv, lens, &out, a)?;
        Ok(s.storage(out))
    }
}

impl Shared {
    /// Checks attention's limits and records its dispatch (one workgroup per query row, head
    /// and batch entry).
    fn record_attention(
        &self,
        st: &mut State,
        [qb, kb, vb]: [&wgpu::Buffer; 3],
        lens: Option<&wgpu::Buffer>,
        out: &wgpu::Buffer,
        a: AttentionSpec,
    ) -> Result<()> {
        let [b, hq, hkv, sq, sk, d, dv] =
            [a.batch, a.hq, a.hkv, a.sq, a.sk, a.d, a.dv].map(|x| x as u64);
        let n = b * hq * sq * dv;
        if n == 0 {
            return Ok(());
        }
        let extent = |s, h, seq, dim| AttentionSpec::extent(s, a.batch, h, seq, dim) as u64;
        // Operands and the output are bound in u32 words: an element each for f32, two
        // halves otherwise.
        let kv = kv_code(a.storage);
        let words = |len: u64| if kv == 0 { len } else { len.div_ceil(2) };
        let q_len = words(extent(a.q, a.hq, a.sq, a.d));
        let k_len = words(extent(a.k, a.hkv, a.sk, a.d));
        let v_len = words(extent(a.v, a.hkv, a.sk, a.dv));
        let n_words = words(n);
        for (what, len) in [
            ("attention's q", q_len),
            ("attention's k", k_len),
            ("attention's v", v_len),
            ("attention's output", n_words),
        ] {
            self.check_binding(what, len)?;
        }
        let max = u64::from(self.limits.max_compute_workgroups_per_dimension);
        if let Some(&over) = [sq, hq, b].iter().find(|&&g| g > max) {
            return Err(Error::LimitExceeded {
                what: "attention's query rows, heads or batch".into(),
                limit: "max_compute_workgroups_per_dimension",
                needed: over,
                max,
            });
        }
        let p = AttentionParams {
            hq: hq as u32,
            hkv: hkv as u32,
            sq: sq as u32,
            sk: sk as u32,
            d: d as u32,
            dv: dv as u32,
            scale: a.scale,
            out_bshd: a.out_bshd as u32,
            // Every stride is below an operand's extent, which fits one binding (checked).
            rows: [a.q, a.k, a.v].map(|s| [s.offset, s.batch, s.head, s.seq].map(|x| x as u32)),
        };
        // q, k, v can be empty along d or sk: bind at least one element. Without lengths the
        // shader never reads binding 4, and q stands in for it.
        let binds = [
            whole(qb, q_len.max(1)),
            whole(kb, k_len.max(1)),
            whole(vb, v_len.max(1)),
            lens.map_or(whole(qb, q_len.max(1)), |l| whole(l, b)),
            whole(out, n_words),
        ];
        // Heads up to 128 wide take blocks of query rows (one load of a key serves the block);
        // a few rows (decoding) take the row kernel, which scores 256 keys at a time instead
        // of walking tiles for a block of rows it mostly does not have.
        // Decoding over many keys: chunks of a KV head's keys, each for every query row that
        // reads the head, then a merge per row (see attention_split.wgsl). Half-precision
        // operands come here only (`attention_takes_halves`).
        let dims = (a.batch, a.hq, a.hkv, a.sq, a.sk, a.d, a.dv);
        if split_decode(dims) {
            let chunk = u64::from(split_chunk(kv));
            let chunks = sk.div_ceil(chunk);
            if let Some(&over) = [chunks, hkv].iter().find(|&&g| g > max) {
                return Err(Error::LimitExceeded {
                    what: "attention's key chunks or KV heads".into(),
                    limit: "max_compute_workgroups_per_dimension",
                    needed: over,
                    max,
                });
            }
            // The rows rounded up to 1, 2, 4 or 8: one pipeline each.
            let rows = ((hq / hkv) * sq).next_power_of_two() as u8;
            // Key rows at multiples of 4 words load a vec4 at a time (the offset is in
            // elements, the binding at 0).
            let epw = if kv == 0 { 1 } else { 2 };
            let k_vec4 = a.k.aligned(4 * epw);
            let split = AttentionBlocks::Split { rows, kv, k_vec4 };
            let grid = [chunks as u32, hkv as u32, b as u32];
            return self.record_split(
                st,
                binds,
                lens.is_some(),
                a,
                &p,
                (split, grid),
                chunks,
                chunk as u16,
            );
        }
        if kv != 0 {
            return Err(Error::InvalidArgument {
                op: "attention",
                reason: "internal error: half-precision operands outside the split kernel".into(),
            });
        }
        // Heads up to 128 wide take the flash kernel in the largest block of rows the adapter's
        // workgroup memory holds, in key tiles of 32 where they fit (`flash_tile`); wider heads,
        // or too little memory, the row kernel.
        let width = d.max(dv);
        let storage = self.limits.max_compute_workgroup_storage_size;
        let flash = flash_width(width).and_then(|w| Some((w, flash_tile(w, storage)?)));
        let blocks = match flash {
            Some((width, tile)) if sq > 4 => {
                let split = flash_split(sq.div_ceil(u64::from(tile.rows())) * hq * b, sk);
                let flash = AttentionBlocks::Flash { split, width, tile };
                if split > 0 {
                    return self.record_flash_split(st, binds, lens.is_some(), a, &p, flash);
                }
                flash
            }
            _ => AttentionBlocks::Row,
        };
        let kernel = Kernel::Attention {
            causal: a.causal,
            lens: lens.is_some(),
            blocks,
        };
        let rows = sq.div_ceil(blocks.rows());
        // The flash kernel's grid goes through the heads first (see `main_flash`).
        let grid = match blocks {
            AttentionBlocks::Flash { .. } => [hq as u32, b as u32, rows as u32],
            _ => [rows as u32, hq as u32, b as u32],
        };
        self.dispatch_grid(st, kernel, bytemuck::bytes_of(&p), &binds, grid)
    }

    /// `main_flash` in `flash`'s blocks with their keys split in chunks of its `split` (a grid
    /// too small to fill the GPU), each (block, chunk) writing partials, then `main_merge` per
    /// row.
    fn record_flash_split(
        &self,
        st: &mut State,
        binds: [Bind<'_>; 5],
        has_lens: bool,
        a: AttentionSpec,
        p: &AttentionParams,
        flash: AttentionBlocks,
    ) -> Result<()> {
        let (split, rows) = (flash.split_keys(), flash.rows());
        let [b, hq, sq, sk] = [a.batch, a.hq, a.sq, a.sk].map(|x| x as u64);
        // At most 512 / blocks chunks (`flash_split`) for fewer than 256 blocks of rows, so
        // the grid's z (blocks of rows times chunks) stays under 1024, within WebGPU's 65535.
        let chunks = sk.div_ceil(u64::from(split));
        let grid = [hq as u32, b as u32, (sq.div_ceil(rows) * chunks) as u32];
        let kernel = (flash, grid);
        self.record_split(st, binds, has_lens, a, p, kernel, chunks, split)
    }

    /// A kernel over `grid` writing each query row's partial (m, l, acc) for `chunks` chunks of
    /// `keys` keys, then `main_merge` folding them into the output (`binds[4]`).
    #[allow(clippy::too_many_arguments)]
    fn record_split(
        &self,
        st: &mut State,
        binds: [Bind<'_>; 5],
        has_lens: bool,
        a: AttentionSpec,
        p: &AttentionParams,
        (blocks, grid): (AttentionBlocks, [u32; 3]),
        chunks: u64,
        keys: u16,
    ) -> Result<()> {
        let [b, hq, sq, dv] = [a.batch, a.hq, a.sq, a.dv].map(|x| x as u64);
        // The output's length times the chunks and (dv + 2) / dv: products of values that
        // each fit u32 (chunks within the grid limit), checked against the binding limit.
        let partials_len = b * hq * sq * chunks * (dv + 2);
        self.check_binding("attention's partial results", partials_len)?;
        let partials = self.alloc(st, partials_len * 4)?;
        let kernel = |blocks| Kernel::Attention {
            causal: a.causal,
            lens: has_lens,
            blocks,
        };
        let mut split_binds = binds;
        split_binds[4] = whole(&partials, partials_len);
        self.dispatch_grid(
            st,
            kernel(blocks),
            bytemuck::bytes_of(p),
            &split_binds,
            grid,
        )?;
        let mut merge_binds = binds;
        merge_binds[0] = whole(&partials, partials_len);
        let merge = kernel(AttentionBlocks::Merge {
            keys,
            kv: kv_code(a.storage),
        });
        let rows = [sq as u32, hq as u32, b as u32];
        self.dispatch_grid(st, merge, bytemuck::bytes_of(p), &merge_binds, rows)?;
        st.retire(partials);
        Ok(())
    }
}
