//! The remaining CPU ops: attention, rope, embedding, top-k, pooling, strided copies and
//! dequantization. Each splits its output into independent rows or planes for the threads;
//! the inner loops are slice loops that vectorise.

use multiversion::multiversion;

use super::par;
use super::rows::{dot_f32, extreme};
use super::vmath;
use crate::ops::attention::AttentionSpec;
use crate::ops::conv::PoolSpec;
use crate::ops::layout::CopySpec;
use crate::ops::RopeLayout;
use crate::quant::{dequant, QuantParts};

use super::CpuStorage;

/// One query row: `o = softmax(scale * K q) V` over the first `visible` keys.
#[multiversion(targets("x86_64+avx2+fma"))]
fn attend_row(q: &[f32], k: &[f32], v: &[f32], scores: &mut [f32], o: &mut [f32], scale: f32) {
    let (d, dv) = (q.len(), o.len());
    for (j, s) in scores.iter_mut().enumerate() {
        *s = dot_f32(q, &k[j * d..(j + 1) * d]) * scale;
    }
    let m = extreme(scores, true);
    let mut l = 0.0f32;
    for (j, &s) in scores.iter().enumerate() {
        let p = vmath::exp(s - m);
        l += p;
        for (od, &vd) in o.iter_mut().zip(&v[j * dv..(j + 1) * dv]) {
            *od += p * vd;
        }
    }
    let inv = 1.0 / l;
    o.iter_mut().for_each(|x| *x *= inv);
}

pub(super) fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    lens: Option<&[u32]>,
    a: AttentionSpec,
) -> Vec<f32> {
    let mut out = vec![0.0f32; a.batch * a.hq * a.sq * a.dv];
    let group = (a.hq / a.hkv.max(1)).max(1);
    // One task per (batch, head, block of query rows).
    let rows_per_task = (par::GRAIN / (a.sk * a.d.max(a.dv)).max(1)).clamp(1, a.sq.max(1));
    par::chunks_mut(&mut out, rows_per_task * a.dv, |start, block| {
        let mut scores = vec![0.0f32; a.sk];
        for (r, o) in block.chunks_exact_mut(a.dv.max(1)).enumerate() {
            let row = start / a.dv.max(1) + r;
            let (bh, i) = (row / a.sq, row % a.sq);
            let (b, h) = (bh / a.hq, bh % a.hq);
            let kvh = h / group;
            let mut visible = a.sk;
            if a.causal {
                visible = visible.min(i + 1 + a.sk.saturating_sub(a.sq));
            }
            if let Some(l) = lens {
                visible = visible.min(l[b] as usize);
            }
            if visible == 0 {
                continue;
            }
            let qi = &q[row * a.d..(row + 1) * a.d];
            let kb = &k[(b * a.hkv + kvh) * a.sk * a.d..][..visible * a.d];
            let vb = &v[(b * a.hkv + kvh) * a.sk * a.dv..][..visible * a.dv];
            attend_row(qi, kb, vb, &mut scores[..visible], o, a.scale);
        }
    });
    out
}

pub(super) fn rope(
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    [n, seq, dim]: [usize; 3],
    layout: RopeLayout,
) -> Vec<f32> {
    let mut out = x[..n].to_vec();
    let half = dim / 2;
    par::rows_mut(&mut out, dim, |r0, block| {
        for (r, v) in block.chunks_exact_mut(dim.max(1)).enumerate() {
            let t = ((r0 + r) % seq) * half;
            let (c, s) = (&cos[t..t + half], &sin[t..t + half]);
            match layout {
                RopeLayout::HalfSplit => {
                    let (lo, hi) = v.split_at_mut(half);
                    for j in 0..half {
                        let (x0, x1) = (lo[j], hi[j]);
                        lo[j] = x0 * c[j] - x1 * s[j];
                        hi[j] = x0 * s[j] + x1 * c[j];
                    }
                }
                RopeLayout::Interleaved => {
                    for (j, pair) in v.chunks_exact_mut(2).take(half).enumerate() {
                        let (x0, x1) = (pair[0], pair[1]);
                        pair[0] = x0 * c[j] - x1 * s[j];
                        pair[1] = x0 * s[j] + x1 * c[j];
                    }
                }
            }
        }
    });
    out
}

pub(super) fn embedding(table: &[f32], ids: &[u32], dim: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; ids.len() * dim];
    par::rows_mut(&mut out, dim, |r0, block| {
        for (r, row) in block.chunks_exact_mut(dim).enumerate() {
            let id = ids[r0 + r] as usize;
            row.copy_from_slice(&table[id * dim..(id + 1) * dim]);
        }
    });
    out
}

/// The `k` largest of each row, largest first (NaN above everything, ties by index).
pub(super) fn topk(x: &[f32], rows: usize, cols: usize, k: usize) -> (Vec<f32>, Vec<f32>) {
    let mut pairs = vec![(0.0f32, 0.0f32); rows * k];
    par::rows_mut(&mut pairs, k, |r0, block| {
        let mut order: Vec<usize> = Vec::with_capacity(k);
        for (r, dst) in block.chunks_exact_mut(k.max(1)).enumerate() {
            let row = &x[(r0 + r) * cols..(r0 + r + 1) * cols];
            let key = |i: usize| (std::cmp::Reverse(crate::ops::select::order_key(row[i])), i);
            crate::small_sort::smallest_k_by_key(0..cols, k, key, &mut order);
            for (d, &i) in dst.iter_mut().zip(&order) {
                *d = (row[i], i as f32);
            }
        }
    });
    pairs.into_iter().unzip()
}

pub(super) fn pool2d(x: &[f32], s: PoolSpec) -> Vec<f32> {
    let o = &s.opts;
    let mut out = vec![0.0f32; s.planes * s.oh * s.ow];
    let area = (o.kernel[0] * o.kernel[1]) as f32;
    par::rows_mut(&mut out, (s.oh * s.ow).max(1), |p0, block| {
        for (p, plane) in block.chunks_exact_mut((s.oh * s.ow).max(1)).enumerate() {
            let src = &x[(p0 + p) * s.h * s.w..][..s.h * s.w];
            for (idx, slot) in plane.iter_mut().enumerate() {
                let (oy, ox) = (idx / s.ow, idx % s.ow);
                let (mut m, mut sum, mut nan) = (f32::NEG_INFINITY, 0.0f32, false);
                for ky in 0..o.kernel[0] {
                    let iy = (oy * o.stride[0] + ky) as isize - o.padding[0] as isize;
                    if iy < 0 || iy >= s.h as isize {
                        continue;
                    }
                    for kx in 0..o.kernel[1] {
                        let ix = (ox * o.stride[1] + kx) as isize - o.padding[1] as isize;
                        if ix < 0 || ix >= s.w as isize {
                            continue;
                        }
                        let v = src[iy as usize * s.w + ix as usize];
                        nan |= v.is_nan();
                        m = m.max(v);
                        sum += v;
                    }
                }
                *slot = match (s.max, nan) {
                    (true, true) => f32::NAN,
                    (true, false) => m,
                    (false, _) => sum / area,
                };
            }
        }
    });
    out
}

/// Strided copies into a fresh buffer; the innermost axis moves as a run when both sides
/// are contiguous along it.
pub(super) fn copy(parts: &[(&CpuStorage, CopySpec)], n: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; n];
    for (src, spec) in parts {
        let rank = spec.shape.len();
        let total = spec.len();
        if total == 0 {
            continue;
        }
        if rank == 0 {
            out[spec.out_offset] = src.0[spec.src_offset];
            continue;
        }
        let inner = spec.shape[rank - 1];
        let unit = spec.src_strides[rank - 1] == 1 && spec.out_strides[rank - 1] == 1;
        for line in 0..total / inner {
            let (mut rem, mut from, mut to) = (line, spec.src_offset, spec.out_offset);
            for d in (0..rank - 1).rev() {
                let c = rem % spec.shape[d];
                rem /= spec.shape[d];
                from += c * spec.src_strides[d];
                to += c * spec.out_strides[d];
            }
            if unit {
                out[to..to + inner].copy_from_slice(&src.0[from..from + inner]);
            } else {
                for j in 0..inner {
                    out[to + j * spec.out_strides[rank - 1]] =
                        src.0[from + j * spec.src_strides[rank - 1]];
                }
            }
        }
    }
    out
}

/// Dequantizes weight rows `r0..` into `out`, whole rows of `w.cols` each.
pub(super) fn dequant_rows(w: &QuantParts<'_, CpuStorage>, r0: usize, out: &mut [f32]) {
    let words: &[u32] = bytemuck::cast_slice(&w.words.0);
    let blocks = w.cols / crate::quant::BLOCK;
    let wpb = blocks * w.format.words_per_block();
    for (i, row) in out.chunks_exact_mut(w.cols.max(1)).enumerate() {
        let r = r0 + i;
        let scales = &w.scales.0[r * blocks..(r + 1) * blocks];
        let mins = w.mins.map(|m| &m.0[r * blocks..(r + 1) * blocks]);
        let words = &words[r * wpb..(r + 1) * wpb];
        for (e, v) in row.iter_mut().enumerate() {
            *v = dequant(w.format, scales, mins, words, e);
        }
    }
}

pub(super) fn dequantize(w: QuantParts<'_, CpuStorage>) -> Vec<f32> {
    let mut out = vec![0.0f32; w.rows * w.cols];
    par::rows_mut(&mut out, w.cols, |r0, block| dequant_rows(&w, r0, block));
    out
}
