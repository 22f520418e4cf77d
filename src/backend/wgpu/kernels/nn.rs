//! Neural-network ops that are neither products nor reductions: normalisation, embedding
//! gather, RoPE, attention, top-k and pooling.

use bytemuck::{Pod, Zeroable};

use super::super::pipelines::AttentionBlocks;
use super::super::{Shared, State, WgpuBackend, WgpuStorage};
use super::{u32_of, whole, Kernel, WG};
use crate::error::{Error, Result};
use crate::ops::attention::AttentionSpec;
use crate::ops::conv::PoolSpec;
use crate::ops::norm::NormSpec;
use crate::ops::RopeLayout;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct NormParams {
    rows: u32,
    cols: u32,
    eps: f32,
    _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct EmbeddingParams {
    n: u32,
    dim: u32,
    _pad: [u32; 2],
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct RopeParams {
    pairs: u32,
    dim: u32,
    seq: u32,
    _pad: u32,
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
    _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct TopKParams {
    rows: u32,
    cols: u32,
    k: u32,
    r0: u32,
    r1: u32,
    _pad: [u32; 3],
}

/// Elements one topk workgroup visits per dispatch, at most: rounds are split across dispatches
/// so that no workgroup runs long.
const TOPK_VISITS_PER_DISPATCH: u64 = 1 << 20;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct PoolParams {
    planes: u32,
    h: u32,
    w: u32,
    oh: u32,
    ow: u32,
    kh: u32,
    kw: u32,
    sh: u32,
    sw: u32,
    ph: u32,
    pw: u32,
    _pad: u32,
}

impl WgpuBackend {
    pub(super) fn encode_norm(
        &self,
        x: &WgpuStorage,
        weight: Option<&WgpuStorage>,
        bias: Option<&WgpuStorage>,
        spec: NormSpec,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let xb = x.buffer()?;
        let w = weight.map(WgpuStorage::buffer).transpose()?;
        let b = bias.map(WgpuStorage::buffer).transpose()?;
        let (rows, cols) = (spec.rows as u64, spec.cols as u64);
        let n = rows * cols;
        let mut st = s.state();
        let out = s.alloc(&mut st, n * 4)?;
        if n == 0 {
            return Ok(s.storage(out));
        }
        s.check_binding("a normalisation's input", n)?;
        let p = NormParams {
            rows: u32_of(rows, "normalised rows")?,
            cols: cols as u32,
            eps: spec.eps,
            _pad: 0,
        };
        // Absent weight or bias: the shader never reads them; x stands in.
        let binds = [
            whole(xb, n),
            w.map_or(whole(xb, n), |w| whole(w, cols)),
            b.map_or(whole(xb, n), |b| whole(b, cols)),
            whole(&out, n),
        ];
        let kernel = Kernel::Norm {
            rms: spec.rms,
            weight: w.is_some(),
            bias: b.is_some(),
        };
        s.dispatch(&mut st, kernel, bytemuck::bytes_of(&p), &binds, rows)?;
        Ok(s.storage(out))
    }

    pub(super) fn encode_embedding(
        &self,
        table: &WgpuStorage,
        ids: &[u32],
        dim: usize,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let tb = table.buffer()?;
        let (rows, dim) = (ids.len() as u64, dim as u64);
        let n = rows * dim;
        // Rows up to the largest id are all the gather can touch (ids are checked on the host).
        let vocab_len = ids.iter().max().map_or(1, |&m| (u64::from(m) + 1) * dim);
        if n > 0 {
            s.check_binding("the embedding table", vocab_len)?;
            s.check_binding("the embedding output", n)?;
        }
        let p = EmbeddingParams {
            n: u32_of(n, "embedding elements")?,
            dim: dim as u32,
            _pad: [0; 2],
        };
        let ids_buf = s.upload_bytes(bytemuck::cast_slice(ids))?;
        let mut st = s.state();
        let out = match s.alloc(&mut st, n * 4) {
            Ok(out) => out,
            Err(e) => {
                st.retire_upload(ids_buf);
                return Err(e);
            }
        };
        let binds = [whole(tb, vocab_len), whole(&ids_buf, rows), whole(&out, n)];
        let recorded = s.dispatch(
            &mut st,
            Kernel::Embedding,
            bytemuck::bytes_of(&p),
            &binds,
            n.div_ceil(WG),
        );
        st.retire_upload(ids_buf);
        recorded?;
        Ok(s.storage(out))
    }

    pub(super) fn encode_rope(
        &self,
        x: &WgpuStorage,
        cos: &WgpuStorage,
        sin: &WgpuStorage,
        [n, seq, dim]: [usize; 3],
        layout: RopeLayout,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let (xb, cb, sb) = (x.buffer()?, cos.buffer()?, sin.buffer()?);
        let (n, seq, dim) = (n as u64, seq as u64, dim as u64);
        let mut st = s.state();
        let out = s.alloc(&mut st, n * 4)?;
        if n > 0 {
            s.check_binding("rope's input", n)?;
            let table = seq * dim / 2;
            let p = RopeParams {
                pairs: u32_of(n / 2, "rope pairs")?,
                dim: dim as u32,
                seq: seq as u32,
                _pad: 0,
            };
            let binds = [
                whole(xb, n),
                whole(cb, table),
                whole(sb, table),
                whole(&out, n),
            ];
            let kernel = Kernel::Rope {
                interleaved: layout == RopeLayout::Interleaved,
            };
            s.dispatch(
                &mut st,
                kernel,
                bytemuck::bytes_of(&p),
                &binds,
                (n / 2).div_ceil(WG),
            )?;
        }
        Ok(s.storage(out))
    }

    pub(super) fn encode_attention(
        &self,
        q: &WgpuStorage,
        k: &WgpuStorage,
        v: &WgpuStorage,
        lens: Option<&[u32]>,
        a: AttentionSpec,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let qkv = [q.buffer()?, k.buffer()?, v.buffer()?];
        let lens_buf = lens
            .map(|l| s.upload_bytes(bytemuck::cast_slice(l)))
            .transpose()?;
        let mut st = s.state();
        let out = s.alloc(&mut st, (a.batch * a.hq * a.sq * a.dv) as u64 * 4);
        let recorded = out
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|out| s.record_attention(&mut st, qkv, lens_buf.as_ref(), out, a));
        if let Some(l) = lens_buf {
            st.retire_upload(l);
        }
        recorded?;
        Ok(s.storage(out?))
    }

    pub(super) fn encode_topk(
        &self,
        x: &WgpuStorage,
        rows: usize,
        cols: usize,
        k: usize,
    ) -> Result<(WgpuStorage, WgpuStorage)> {
        let s = self.begin()?;
        let xb = x.buffer()?;
        let (rows, cols, k) = (rows as u64, cols as u64, k as u64);
        let mut st = s.state();
        let values = s.alloc(&mut st, rows * k * 4)?;
        let indices = s.alloc(&mut st, rows * k * 4)?;
        let (values, indices) = (s.storage(values), s.storage(indices));
        if rows * k > 0 {
            s.check_binding("topk's input", rows * cols)?;
            let rows32 = u32_of(rows, "topk rows")?;
            let per_dispatch = (TOPK_VISITS_PER_DISPATCH / cols.max(1)).max(1);
            let binds = [
                whole(xb, rows * cols),
                whole(values.buffer()?, rows * k),
                whole(indices.buffer()?, rows * k),
            ];
            let mut r0 = 0;
            while r0 < k {
                let r1 = (r0 + per_dispatch).min(k);
                let p = TopKParams {
                    rows: rows32,
                    cols: cols as u32,
                    k: k as u32,
                    r0: r0 as u32,
                    r1: r1 as u32,
                    _pad: [0; 3],
                };
                s.dispatch(&mut st, Kernel::TopK, bytemuck::bytes_of(&p), &binds, rows)?;
                r0 = r1;
            }
        }
        Ok((values, indices))
    }

    pub(super) fn encode_pool2d(&self, x: &WgpuStorage, c: PoolSpec) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let xb = x.buffer()?;
        let o = c.opts;
        let (in_len, out_len) = (
            (c.planes * c.h * c.w) as u64,
            (c.planes * c.oh * c.ow) as u64,
        );
        let mut st = s.state();
        let out = s.alloc(&mut st, out_len * 4)?;
        if out_len > 0 {
            s.check_binding("a pooling input", in_len)?;
            let v = |x: usize| u32_of(x as u64, "a pooling size");
            let p = PoolParams {
                planes: v(c.planes)?,
                h: v(c.h)?,
                w: v(c.w)?,
                oh: v(c.oh)?,
                ow: v(c.ow)?,
                kh: v(o.kernel[0])?,
                kw: v(o.kernel[1])?,
                sh: v(o.stride[0])?,
                sw: v(o.stride[1])?,
                ph: v(o.padding[0])?,
                pw: v(o.padding[1])?,
                _pad: 0,
            };
            let binds = [whole(xb, in_len.max(1)), whole(&out, out_len)];
            s.dispatch(
                &mut st,
                Kernel::Pool2d { max: c.max },
                bytemuck::bytes_of(&p),
                &binds,
                out_len.div_ceil(WG),
            )?;
        }
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
        let (q_len, k_len, v_len) = (b * hq * sq * d, b * hkv * sk * d, b * hkv * sk * dv);
        for (what, len) in [
            ("attention's q", q_len),
            ("attention's k", k_len),
            ("attention's v", v_len),
            ("attention's output", n),
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
            _pad: 0,
        };
        // q, k, v can be empty along d or sk: bind at least one element. Without lengths the
        // shader never reads binding 4, and q stands in for it.
        let binds = [
            whole(qb, q_len.max(1)),
            whole(kb, k_len.max(1)),
            whole(vb, v_len.max(1)),
            lens.map_or(whole(qb, q_len.max(1)), |l| whole(l, b)),
            whole(out, n),
        ];
        // Heads up to 128 wide take blocks of query rows (one load of a key serves the block).
        let blocks = AttentionBlocks::for_width(d.max(dv));
        let kernel = Kernel::Attention {
            causal: a.causal,
            lens: lens.is_some(),
            blocks,
        };
        let rows = sq.div_ceil(blocks.rows());
        self.dispatch_grid(
            st,
            kernel,
            bytemuck::bytes_of(&p),
            &binds,
            [rows as u32, hq as u32, b as u32],
        )
    }
}
