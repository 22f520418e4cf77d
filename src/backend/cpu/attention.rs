//! Attention on the CPU: one task per (batch, head); its query rows go in blocks of 32, each
//! block's scores computed as one product against the keys, then an exact softmax per row
//! and a second product with the values (gemm's kernels, on the task's thread). NaN in the
//! scores, a +inf score or a row of -inf scores gives NaN, as IEEE arithmetic does.

use super::matmul::{sgemm, View};
use super::par;
use super::reduce::{extreme, sum};
use super::vmath;
use crate::ops::attention::AttentionSpec;
use multiversion::multiversion;

/// Query rows per block: the score block stays in L1/L2 and the kernel's tiles fill.
const BLOCK: usize = 32;

type At<'a> = &'a (dyn Fn(usize, usize, usize) -> usize + Sync);

pub(super) fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    lens: Option<&[u32]>,
    a: AttentionSpec,
) -> Vec<f32> {
    let group = (a.hq / a.hkv.max(1)).max(1);
    // Keys and values whose rows follow one another are read in place; strided ones (a
    // sequence-first or packed layout) are first gathered once into [batch, kv heads, keys,
    // width], which every query row of that head then reads in place.
    let gathered = |x: &[f32], at: At<'_>, width: usize| {
        let mut g = vec![0.0f32; a.batch * a.hkv * a.sk * width];
        par::rows_mut(&mut g, a.sk * width, |first, rows| {
            for (r, head) in rows.chunks_exact_mut(a.sk * width).enumerate() {
                let (b, h) = ((first + r) / a.hkv, (first + r) % a.hkv);
                for (j, row) in head.chunks_exact_mut(width).enumerate() {
                    row.copy_from_slice(&x[at(b, h, j)..][..width]);
                }
            }
        });
        g
    };
    let (kg, vg);
    let (k, kat): (&[f32], At<'_>) = if a.k.seq == a.d {
        (k, &|b, h, j| a.k.at(b, h, j))
    } else {
        kg = gathered(k, &|b, h, j| a.k.at(b, h, j), a.d);
        (&kg, &|b, h, j| ((b * a.hkv + h) * a.sk + j) * a.d)
    };
    let (v, vat): (&[f32], At<'_>) = if a.v.seq == a.dv {
        (v, &|b, h, j| a.v.at(b, h, j))
    } else {
        vg = gathered(v, &|b, h, j| a.v.at(b, h, j), a.dv);
        (&vg, &|b, h, j| ((b * a.hkv + h) * a.sk + j) * a.dv)
    };
    // Results in [batch, heads, sq, dv] order, one task per (batch, head).
    let mut out = vec![0.0f32; a.batch * a.hq * a.sq * a.dv];
    let head_len = (a.sq * a.dv).max(1);
    par::chunks_mut(&mut out, head_len, |start, o| {
        let bh = start / head_len;
        let (b, h) = (bh / a.hq, bh % a.hq);
        head(q, k, v, kat, vat, lens, &a, b, h, h / group, o);
    });
    if !a.out_bshd {
        return out;
    }
    let mut bshd = vec![0.0f32; out.len()];
    par::rows_mut(&mut bshd, a.hq * a.dv, |first, rows| {
        for (r, row) in rows.chunks_exact_mut(a.hq * a.dv).enumerate() {
            let (b, i) = ((first + r) / a.sq, (first + r) % a.sq);
            for (h, o) in row.chunks_exact_mut(a.dv).enumerate() {
                o.copy_from_slice(&out[((b * a.hq + h) * a.sq + i) * a.dv..][..a.dv]);
            }
        }
    });
    bshd
}

/// A row of scores into unnormalised softmax weights in place: the first `seen` scaled and
/// exponentiated after subtracting their largest, the rest (masked keys) zero. Returns the
/// weights' sum. Its own function so that it is compiled for the CPU's widest vectors (the
/// exponential is most of attention's time outside the two products).
#[multiversion(targets(
    "x86_64+avx2+fma+avx512f+avx512bw+avx512dq+avx512vl",
    "x86_64+avx2+fma"
))]
fn weights(row: &mut [f32], seen: usize, scale: f32) -> f32 {
    let (live, masked) = row.split_at_mut(seen.min(row.len()));
    live.iter_mut().for_each(|x| *x *= scale);
    let m = extreme(live, true);
    live.iter_mut().for_each(|x| *x = vmath::exp(*x - m));
    masked.fill(0.0);
    sum(live) as f32
}

/// Every query row of head `h` of batch entry `b` into `out` (`[sq, dv]`).
#[allow(clippy::too_many_arguments)]
fn head(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    kat: At<'_>,
    vat: At<'_>,
    lens: Option<&[u32]>,
    a: &AttentionSpec,
    b: usize,
    h: usize,
    kvh: usize,
    out: &mut [f32],
) {
    let (d, dv) = (a.d, a.dv);
    let keys = lens.map_or(a.sk, |l| a.sk.min(l[b] as usize));
    // Keys row `i` sees: all, or (causal) those up to its position, aligned at the end.
    let visible = |i: usize| {
        if a.causal {
            keys.min(i + 1 + a.sk.saturating_sub(a.sq))
        } else {
            keys
        }
    };
    let mut qb = vec![0.0f32; BLOCK * d];
    let mut s = Vec::new();
    for i0 in (0..a.sq).step_by(BLOCK) {
        let r = BLOCK.min(a.sq - i0);
        let n = visible(i0 + r - 1);
        if n == 0 {
            continue;
        }
        for (t, row) in qb.chunks_exact_mut(d.max(1)).take(r).enumerate() {
            row.copy_from_slice(&q[a.q.at(b, h, i0 + t)..][..d]);
        }
        // Scores [r, n] = q_block . k^T, as one product (k read through its strides).
        s.clear();
        s.resize(r * n, 0.0);
        let kb = View {
            data: &k[kat(b, kvh, 0)..][..n * d],
            rs: 1,
            cs: d,
        };
        let qv = View {
            data: &qb[..r * d],
            rs: d,
            cs: 1,
        };
        // Extents are exact by construction; an error here would be a gpukit bug, and the
        // rows it leaves unwritten stay zero.
        let _ = sgemm(r, n, d, qv, kb, &mut s, n, false, 1, None);
        let mut sums = [0.0f32; BLOCK];
        for (t, row) in s.chunks_exact_mut(n).enumerate() {
            sums[t] = weights(row, visible(i0 + t), a.scale);
        }
        // Output rows [r, dv] = p . v.
        let o = &mut out[i0 * dv..(i0 + r) * dv];
        let vb = View {
            data: &v[vat(b, kvh, 0)..][..n * dv],
            rs: dv,
            cs: 1,
        };
        let pv = View {
            data: &s,
            rs: n,
            cs: 1,
        };
        let _ = sgemm(r, dv, n, pv, vb, o, dv, false, 1, None);
        for (t, ot) in o.chunks_exact_mut(dv.max(1)).enumerate() {
            if visible(i0 + t) == 0 {
                ot.fill(0.0);
                continue;
            }
            let inv = 1.0 / sums[t];
            ot.iter_mut().for_each(|x| *x *= inv);
        }
    }
}
