//! Matrix products: the tiled matmul (tuned per adapter) and the GEMV path for a few rows.

use super::super::pipelines::Arith;
use super::super::{WgpuBackend, WgpuStorage};
use super::{whole, Kernel};
use crate::error::{Error, Result};
use crate::ops::matmul::{MatmulSpec, Precision};
use bytemuck::{Pod, Zeroable};

/// Up to this many rows against a `[n, k]` weight use shaders/matmul_gemv.wgsl.
pub(super) const GEMV_MAX_ROWS: u64 = 8;

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
pub(super) struct MnkParams {
    pub(super) m: u32,
    pub(super) n: u32,
    pub(super) k: u32,
    pub(super) _pad: u32,
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
        // f16 storage (the ops layer sends it only to the cooperative-matrix kernel, with k and
        // n multiples of 4, nothing transposed and no epilogue): A, B and the output two
        // elements a word, read and written in place.
        let halves = spec.storage == crate::DType::F16;
        let word = |elements: u64| if halves { elements / 2 } else { elements };
        // An f16 or bf16 weight under f32 rows and output (`matmul_takes_half_weights`): B
        // alone two elements a word, any length.
        let weight = if halves {
            crate::DType::F32
        } else {
            spec.weight
        };
        let half_weight = weight != crate::DType::F32;
        let mut st = s.state();
        let out = s.alloc(&mut st, word(batch * m * n) * 4)?;
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
        let (a_len, b_len) = match half_weight {
            true => (a_len, b_len.div_ceil(2)),
            false => (word(a_len), word(b_len)),
        };
        s.check_binding("matmul's left operand", a_len)?;
        s.check_binding("matmul's right operand", b_len)?;
        s.check_binding("matmul's output", word(batch * m * n))?;
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
            && !halves
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
                // vec4 rows need k % 4 == 0; half weights take the kernel without subgroups.
                subgroup: s.subgroup_kernels && k % 4 == 0 && !half_weight,
                weight,
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
        let mut arith = match halves {
            true => Arith::F16CoopHalves,
            false => Arith::of(spec.precision, s.shader_f16, s.coop_matrix),
        };
        // An explicit tile the f16-storage kernel lacks is left to the autotuner.
        let chosen = spec.tile.filter(|&t| !halves || Arith::F16Coop.has_tile(t));
        if let Some(tile) = chosen {
            if !arith.has_tile(tile) {
                // A tile the cooperative-matrix kernel lacks runs on the f16 tiles instead.
                arith = Arith::of(spec.precision, s.shader_f16, false);
            }
        }
        let tile = match chosen {
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
            whole(&out, word(batch * m * n)),
        ];
        let kernel = Kernel::Matmul {
            tile,
            arith,
            transpose_a: spec.transpose_a,
            transpose_b: spec.transpose_b,
            bias: cb.is_some(),
            activation: spec.activation,
            // Whole vec4 rows: the binding offsets are 0 and the batch strides multiples of 4.
            vectors: matches!(arith, Arith::F16Coop | Arith::F16CoopHalves)
                && !spec.transpose_a
                && !spec.transpose_b
                && k % 4 == 0
                && n % 4 == 0,
            weight,
        };
        s.dispatch_grid(
            &mut st,
            kernel,
            bytemuck::bytes_of(&p),
            &binds,
            grid.map(|g| g as u32),
        )?;
        drop(st);
        Ok(s.storage(out))
    }
}
