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
