//! conv2d on the CPU: im2col blocks, then a product per image and group.

use super::matmul::{sgemm, View};
use super::par;
use crate::error::Result;
use crate::ops::conv::ConvSpec;

/// Elements of an im2col block above which conv2d works through output rows in tiles.
const IM2COL_BUDGET: usize = 1 << 22;

/// conv2d as, per image and group, `out[og, oh*ow] = w[og, cg*kh*kw] x cols[cg*kh*kw, oh*ow]`.
pub(super) fn conv2d(x: &[f32], w: &[f32], bias: Option<&[f32]>, s: ConvSpec) -> Result<Vec<f32>> {
    let o = &s.opts;
    let (cg, og) = (s.c / o.groups, s.o / o.groups);
    let depth = cg * s.kh * s.kw;
    let plane = s.oh * s.ow;
    let mut out = vec![0.0f32; s.n * s.o * plane];
    if let Some(b) = bias {
        for (i, p) in out.chunks_exact_mut(plane.max(1)).enumerate() {
            p.fill(b[i % s.o]);
        }
    }
    let pointwise = s.kh == 1
        && s.kw == 1
        && o.stride == [1, 1]
        && o.padding == [0, 0]
        && (s.oh, s.ow) == (s.h, s.w);
    let tile_rows = (IM2COL_BUDGET / (depth * s.ow).max(1)).clamp(1, s.oh.max(1));
    let mut cols = Vec::new();
    for n in 0..s.n {
        for g in 0..o.groups {
            let wg = View {
                data: &w[g * og * depth..],
                rs: depth,
                cs: 1,
            };
            let out_g = &mut out[(n * s.o + g * og) * plane..];
            if pointwise {
                let xg = View {
                    data: &x[(n * s.c + g * cg) * s.h * s.w..],
                    rs: s.h * s.w,
                    cs: 1,
                };
                sgemm(
                    og,
                    plane,
                    depth,
                    wg,
                    xg,
                    out_g,
                    plane,
                    true,
                    par::threads(),
                    None,
                )?;
                continue;
            }
            for oy0 in (0..s.oh).step_by(tile_rows) {
                let rows = tile_rows.min(s.oh - oy0);
                let width = rows * s.ow;
                cols.clear();
                cols.resize(depth * width, 0.0);
                im2col(x, &s, n, g * cg, oy0, rows, &mut cols);
                let cv = View {
                    data: &cols,
                    rs: width,
                    cs: 1,
                };
                let dst = &mut out_g[oy0 * s.ow..];
                sgemm(
                    og,
                    width,
                    depth,
                    wg,
                    cv,
                    dst,
                    plane,
                    true,
                    par::threads(),
                    None,
                )?;
            }
        }
    }
    Ok(out)
}

/// Fills `cols[(c*kh + ky)*kw + kx, (oy - oy0)*ow + ox]` with the input pixel under that tap
/// (zero in the padding), for output rows `oy0..oy0 + rows`.
fn im2col(x: &[f32], s: &ConvSpec, n: usize, c0: usize, oy0: usize, rows: usize, cols: &mut [f32]) {
    let o = &s.opts;
    let width = rows * s.ow;
    par::rows_each_mut(cols, width, |r, dst| {
        let (c, rem) = (r / (s.kh * s.kw), r % (s.kh * s.kw));
        let (ky, kx) = (rem / s.kw, rem % s.kw);
        let src = &x[(n * s.c + c0 + c) * s.h * s.w..][..s.h * s.w];
        for (yy, line) in dst.chunks_exact_mut(s.ow).enumerate() {
            let iy =
                ((oy0 + yy) * o.stride[0] + ky * o.dilation[0]) as isize - o.padding[0] as isize;
            if iy < 0 || iy >= s.h as isize {
                line.fill(0.0);
                continue;
            }
            let src_row = &src[iy as usize * s.w..][..s.w];
            for (ox, v) in line.iter_mut().enumerate() {
                let ix = (ox * o.stride[1] + kx * o.dilation[1]) as isize - o.padding[1] as isize;
                *v = if ix < 0 || ix >= s.w as isize {
                    0.0
                } else {
                    src_row[ix as usize]
                };
            }
        }
    });
}
