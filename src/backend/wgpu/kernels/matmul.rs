//! Matrix products: the tiled matmul, the GEMV path, the quantized matmul and conv2d (the
//! tiled kernel with gathered columns).

use bytemuck::{Pod, Zeroable};

use super::super::pipelines::Arith;
use super::super::{WgpuBackend, WgpuStorage};
use super::{u32_of, whole, Kernel, WG};
use crate::error::{Error, Result};
use crate::ops::conv::ConvSpec;
use crate::ops::matmul::{MatmulDims, MatmulSpec, Precision};
use crate::quant::{QuantParts, BLOCK};

/// Rows and columns of the output tile of one conv2d workgroup (shaders/conv2d.wgsl).
const CONV_TILE: u64 = 64;
/// Up to this many rows against a `[n, k]` weight use shaders/gemv.wgsl.
const GEMV_MAX_ROWS: u64 = 8;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct MatmulParams {
    m: u32,
    n: u32,
    k: u32,
    a_stride: u32,
    b_stride: u32,
    _pad: [u32; 3],
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct MnkParams {
    m: u32,
    n: u32,
    k: u32,
    _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct ConvParams {
    n: u32,
    c: u32,
    h: u32,
    w: u32,
    o: u32,
    kh: u32,
    kw: u32,
    oh: u32,
    ow: u32,
    sh: u32,
    sw: u32,
    ph: u32,
    pw: u32,
    dh: u32,
    dw: u32,
    cg: u32,
    og: u32,
    _pad: [u32; 3],
}

impl WgpuBackend {
    pub(super) fn encode_matmul(
        &self,
        a: &WgpuStorage,
        b: &WgpuStorage,
        bias: Option<&WgpuStorage>,
        spec: MatmulSpec,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let d = spec.dims;
        let (ab, bb) = (a.buffer()?, b.buffer()?);
        let cb = match bias {
            Some(c) => Some(c.buffer()?),
            None => None,
        };
        let [batch, m, k, n] = [d.batch, d.m, d.k, d.n].map(|v| v as u64);
        let mut st = s.state();
        let out = s.alloc(&mut st, batch * m * n * 4)?;
        if batch * m * n == 0 {
            return Ok(s.storage(out));
        }
        let a_len = if d.a_stride == 0 {
            m * k
        } else {
            batch * m * k
        };
        let b_len = if d.b_stride == 0 {
            k * n
        } else {
            batch * k * n
        };
        s.check_binding("matmul's left operand", a_len)?;
        s.check_binding("matmul's right operand", b_len)?;
        s.check_binding("matmul's output", batch * m * n)?;
        // A few rows against a weight stored [n, k] (token-by-token inference): the row-dot
        // kernel, 8 outputs per workgroup, instead of 64 x 64 tiles that would be mostly empty.
        let rows = batch * m;
        let rows_contiguous = batch == 1 || (d.b_stride == 0 && d.a_stride != 0);
        // The GEMV kernel multiplies in f32: a product that asks for rounded inputs (f16, bf16)
        // takes the tiled kernel, which rounds them.
        let exact = matches!(spec.precision, Precision::F32 | Precision::Tf32);
        if spec.transpose_b
            && !spec.transpose_a
            && exact
            && rows_contiguous
            && rows <= GEMV_MAX_ROWS
        {
            let p = MnkParams {
                m: rows as u32,
                n: n as u32,
                k: k as u32,
                _pad: 0,
            };
            let binds = [
                whole(ab, a_len.max(1)),
                whole(bb, b_len.max(1)),
                cb.map_or(whole(ab, a_len.max(1)), |c| whole(c, n)),
                whole(&out, rows * n),
            ];
            let kernel = Kernel::Gemv {
                bias: cb.is_some(),
                activation: spec.activation,
                // vec4 rows need k % 4 == 0.
                subgroup: s.subgroup_kernels && k % 4 == 0,
            };
            s.dispatch(
                &mut st,
                kernel,
                bytemuck::bytes_of(&p),
                &binds,
                rows * n.div_ceil(8),
            )?;
            return Ok(s.storage(out));
        }
        let mut arith = Arith::of(spec.precision, s.shader_f16, s.coop_matrix);
        if let Some(tile) = spec.tile {
            if !arith.has_tile(tile) {
                // A tile the cooperative-matrix kernel lacks runs on the f16 tiles instead.
                arith = Arith::of(spec.precision, s.shader_f16, false);
            }
        }
        let tile = match spec.tile {
            Some(tile) if !s.tile_fits(tile, arith) => {
                return Err(Error::LimitExceeded {
                    what: format!("matmul tile {tile}'s workgroup memory"),
                    limit: "max_compute_workgroup_storage_size",
                    needed: u64::from(arith.workgroup_bytes(tile)),
                    max: u64::from(s.limits.max_compute_workgroup_storage_size),
                })
            }
            Some(tile) => tile,
            None => {
                // Tuning submits and waits on its own: release the state first.
                drop(st);
                let tile = s.matmul_tile(m, n, k, arith);
                st = s.state();
                tile
            }
        };
        let max = u64::from(s.limits.max_compute_workgroups_per_dimension);
        let grid = [
            n.div_ceil(u64::from(tile.tile_n())),
            m.div_ceil(u64::from(tile.tile_m())),
            batch,
        ];
        if let Some(&over) = grid.iter().find(|&&g| g > max) {
            return Err(Error::LimitExceeded {
                what: format!("a matmul grid of {grid:?} workgroups"),
                limit: "max_compute_workgroups_per_dimension",
                needed: over,
                max,
            });
        }
        let p = MatmulParams {
            m: m as u32,
            n: n as u32,
            k: k as u32,
            a_stride: d.a_stride as u32,
            b_stride: d.b_stride as u32,
            _pad: [0; 3],
        };
        // A K-empty product is zero: nothing to load, the kernel stores its zero accumulators.
        let binds = [
            whole(ab, a_len.max(1)),
            whole(bb, b_len.max(1)),
            // Without a bias the shader never reads binding 3; A stands in for it.
            cb.map_or(whole(ab, a_len.max(1)), |c| whole(c, n)),
            whole(&out, batch * m * n),
        ];
        let kernel = Kernel::Matmul {
            tile,
            arith,
            transpose_a: spec.transpose_a,
            transpose_b: spec.transpose_b,
            bias: cb.is_some(),
            activation: spec.activation,
            // Whole vec4 rows: the binding offsets are 0 and the batch strides multiples of 4.
            vectors: arith == Arith::F16Coop
                && !spec.transpose_a
                && !spec.transpose_b
                && k % 4 == 0
                && n % 4 == 0,
        };
        s.dispatch_grid(
            &mut st,
            kernel,
            bytemuck::bytes_of(&p),
            &binds,
            grid.map(|g| g as u32),
        )?;
        Ok(s.storage(out))
    }

    pub(super) fn encode_matmul_quant(
        &self,
        x: &WgpuStorage,
        w: QuantParts<'_, WgpuStorage>,
        m: usize,
    ) -> Result<WgpuStorage> {
        let weights = (w.rows * w.cols) as u64;
        if m as u64 > GEMV_MAX_ROWS && weights > 0 && self.shared.fits_binding(weights) {
            // Many rows (a prompt): dequantise once and run the tiled matmul, x w^T, instead
            // of reading every weight once per row. The f32 copy lives until the product is
            // recorded; its buffer goes back to the pool after the submit. A copy larger than
            // one binding allows (128 MiB in browsers) stays on the per-row kernel.
            let (n, k) = (w.rows, w.cols);
            let weights = self.encode_dequantize(w)?;
            let spec = MatmulSpec {
                dims: MatmulDims {
                    batch: 1,
                    m,
                    k,
                    n,
                    a_stride: 0,
                    b_stride: 0,
                },
                transpose_a: false,
                transpose_b: true,
                activation: None,
                precision: Precision::F32,
                tile: None,
            };
            return self.encode_matmul(x, &weights, None, spec);
        }
        let (m, n) = (m as u64, w.rows as u64);
        self.quant_kernel(Some(x), w, m * n, m)
    }

    pub(super) fn encode_dequantize(&self, w: QuantParts<'_, WgpuStorage>) -> Result<WgpuStorage> {
        let n = (w.rows * w.cols) as u64;
        self.quant_kernel(None, w, n, 0)
    }

    pub(super) fn encode_conv2d(
        &self,
        x: &WgpuStorage,
        w: &WgpuStorage,
        bias: Option<&WgpuStorage>,
        c: ConvSpec,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let (xb, wb) = (x.buffer()?, w.buffer()?);
        let bb = bias.map(WgpuStorage::buffer).transpose()?;
        let o = c.opts;
        let g = o.groups as u64;
        let [n, ch, h, wd, oc, kh, kw, oh, ow] =
            [c.n, c.c, c.h, c.w, c.o, c.kh, c.kw, c.oh, c.ow].map(|v| v as u64);
        let out_len = n * oc * oh * ow;
        let mut st = s.state();
        let out = s.alloc(&mut st, out_len * 4)?;
        let (x_len, w_len) = (n * ch * h * wd, oc * (ch / g) * kh * kw);
        // The ops layer rejects empty kernels and channels, so only an empty output is left.
        if out_len == 0 {
            return Ok(s.storage(out));
        }
        for (what, len) in [
            ("conv2d's input", x_len),
            ("conv2d's weight", w_len),
            ("conv2d's output", out_len),
        ] {
            s.check_binding(what, len)?;
        }
        let v = |x: usize| u32_of(x as u64, "a conv2d size");
        let p = ConvParams {
            n: v(c.n)?,
            c: v(c.c)?,
            h: v(c.h)?,
            w: v(c.w)?,
            o: v(c.o)?,
            kh: v(c.kh)?,
            kw: v(c.kw)?,
            oh: v(c.oh)?,
            ow: v(c.ow)?,
            sh: v(o.stride[0])?,
            sw: v(o.stride[1])?,
            ph: v(o.padding[0])?,
            pw: v(o.padding[1])?,
            dh: v(o.dilation[0])?,
            dw: v(o.dilation[1])?,
            cg: v(c.c / o.groups)?,
            og: v(c.o / o.groups)?,
            _pad: [0; 3],
        };
        let binds = [
            whole(xb, x_len),
            whole(wb, w_len),
            bb.map_or(whole(wb, w_len), |b| whole(b, oc)),
            whole(&out, out_len),
        ];
        let grid = [
            (n * oh * ow).div_ceil(CONV_TILE),
            (oc / g).div_ceil(CONV_TILE),
            g,
        ];
        let max = u64::from(s.limits.max_compute_workgroups_per_dimension);
        if let Some(&over) = grid.iter().find(|&&x| x > max) {
            return Err(Error::LimitExceeded {
                what: format!("a conv2d grid of {grid:?} workgroups"),
                limit: "max_compute_workgroups_per_dimension",
                needed: over,
                max,
            });
        }
        let kernel = Kernel::Conv2d { bias: bb.is_some() };
        s.dispatch_grid(
            &mut st,
            kernel,
            bytemuck::bytes_of(&p),
            &binds,
            grid.map(|x| x as u32),
        )?;
        Ok(s.storage(out))
    }
}

impl WgpuBackend {
    /// Runs qmatmul.wgsl: the matmul when `x` is given (`m` rows), else the dequantisation.
    fn quant_kernel(
        &self,
        x: Option<&WgpuStorage>,
        w: QuantParts<'_, WgpuStorage>,
        out_len: u64,
        m: u64,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let (n, k) = (w.rows as u64, w.cols as u64);
        let blocks = n * k / BLOCK as u64;
        let (scales, words) = (w.scales.buffer()?, w.words.buffer()?);
        let mins = w.mins.map(WgpuStorage::buffer).transpose()?;
        let xb = x.map(WgpuStorage::buffer).transpose()?;
        let mut st = s.state();
        let out = s.alloc(&mut st, out_len * 4)?;
        if out_len == 0 {
            return Ok(s.storage(out));
        }
        let words_len = blocks * w.format.words_per_block() as u64;
        for (what, len) in [
            ("quantized scales", blocks),
            ("quantized words", words_len),
            ("the output", out_len),
            ("the input", m * k),
        ] {
            s.check_binding(what, len)?;
        }
        let p = MnkParams {
            m: u32_of(m, "rows")?,
            n: u32_of(n, "weight rows")?,
            k: u32_of(k, "weight cols")?,
            _pad: 0,
        };
        // Absent x (dequantise) or mins (Q4_0, Q8_0): the shader never reads them; scales stand in.
        let binds = [
            xb.map_or(whole(scales, blocks), |x| whole(x, (m * k).max(1))),
            whole(scales, blocks),
            mins.map_or(whole(scales, blocks), |b| whole(b, blocks)),
            whole(words, words_len),
            whole(&out, out_len),
        ];
        let kernel = Kernel::QMatmul {
            format: w.format,
            dequant: x.is_none(),
        };
        let groups = if x.is_some() {
            m * n.div_ceil(8)
        } else {
            out_len.div_ceil(WG)
        };
        s.dispatch(&mut st, kernel, bytemuck::bytes_of(&p), &binds, groups)?;
        Ok(s.storage(out))
    }
}
