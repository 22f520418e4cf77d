//! Attention on the CPU: one task per block of query rows, scores in f32 lanes, an exact
//! softmax per row.

use super::par;
use super::reduce::{dot_f32, extreme};
use super::vmath;
use crate::ops::attention::AttentionSpec;
use multiversion::multiversion;

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
    // Keys and values whose rows follow one another are read in place; strided ones (a
    // sequence-first or packed layout) are gathered per query row.
    let dense_k = a.k.seq == a.d;
    let dense_v = a.v.seq == a.dv;
    // One task per block of output rows (in the output's memory order).
    let rows_per_task = (par::GRAIN / (a.sk * a.d.max(a.dv)).max(1)).clamp(1, a.sq.max(1));
    par::chunks_mut(&mut out, rows_per_task * a.dv, |start, block| {
        let mut scores = vec![0.0f32; a.sk];
        let mut kbuf = Vec::new();
        let mut vbuf = Vec::new();
        for (r, o) in block.chunks_exact_mut(a.dv.max(1)).enumerate() {
            let row = start / a.dv.max(1) + r;
            let (b, h, i) = if a.out_bshd {
                (row / (a.sq * a.hq), row % a.hq, (row / a.hq) % a.sq)
            } else {
                (row / (a.hq * a.sq), (row / a.sq) % a.hq, row % a.sq)
            };
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
            let qi = &q[a.q.at(b, h, i)..][..a.d];
            let kb: &[f32] = if dense_k {
                &k[a.k.at(b, kvh, 0)..][..visible * a.d]
            } else {
                kbuf.clear();
                (0..visible).for_each(|j| kbuf.extend(&k[a.k.at(b, kvh, j)..][..a.d]));
                &kbuf
            };
            let vb: &[f32] = if dense_v {
                &v[a.v.at(b, kvh, 0)..][..visible * a.dv]
            } else {
                vbuf.clear();
                (0..visible).for_each(|j| vbuf.extend(&v[a.v.at(b, kvh, j)..][..a.dv]));
                &vbuf
            };
            attend_row(qi, kb, vb, &mut scores[..visible], o, a.scale);
        }
    });
    out
}
