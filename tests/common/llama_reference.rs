//! An f64 llama forward written plainly over the GGUF's weights, dequantised here (its own
//! block decoding, not the library's kernels): the reference the LLM is checked against.
//! The weights are dequantised once to f32 (exactly: each is an f16 scale times a small
//! integer plus an f16 min) and every product accumulates in f64.

use gpukit::models::gguf::{Gguf, TensorType};
use gpukit::QuantFormat;

/// One weight matrix `[rows, cols]` in its file format.
struct Matrix<'a> {
    kind: TensorType,
    bytes: &'a [u8],
    rows: usize,
    cols: usize,
}

fn f16(b: &[u8]) -> f64 {
    half::f16::from_le_bytes([b[0], b[1]]).to_f64()
}

impl Matrix<'_> {
    /// The whole matrix as f32 (exact: every weight is an f16 scale times a small integer,
    /// plus an f16 min), row after row.
    fn dequantize(&self) -> Vec<f32> {
        let (n, b) = (self.rows * self.cols, self.bytes);
        let mut out = vec![0f32; n];
        match self.kind {
            TensorType::F32 => {
                for i in 0..n {
                    out[i] =
                        f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
                }
            }
            TensorType::F16 => {
                for i in 0..n {
                    out[i] = f16(&b[2 * i..]) as f32;
                }
            }
            TensorType::Quant(q) => {
                let bb = q.block_bytes();
                for blk in 0..n / 32 {
                    let x = &b[blk * bb..(blk + 1) * bb];
                    let d = f16(x);
                    let o = &mut out[blk * 32..(blk + 1) * 32];
                    for j in 0..32 {
                        o[j] = match q {
                            QuantFormat::Q8_0 => d * (x[2 + j] as i8) as f64,
                            QuantFormat::Q4_0 | QuantFormat::Q4_1 => {
                                let (min, qs) = match q {
                                    QuantFormat::Q4_1 => (f16(&x[2..4]), &x[4..20]),
                                    _ => (-8.0 * d, &x[2..18]),
                                };
                                let nib = if j < 16 { qs[j] & 15 } else { qs[j - 16] >> 4 };
                                d * nib as f64 + min
                            }
                        } as f32;
                    }
                }
            }
        }
        out
    }
}

/// A dequantised `[rows, cols]` matrix.
struct Dense {
    w: Vec<f32>,
    rows: usize,
    cols: usize,
}

impl Dense {
    /// `W x` for each `x`, accumulated in f64, rows shared out over threads.
    fn apply(&self, xs: &[Vec<f64>]) -> Vec<Vec<f64>> {
        use rayon::prelude::*;
        let c = self.cols;
        let per_row: Vec<Vec<f64>> = (0..self.rows)
            .into_par_iter()
            .map(|r| {
                let w = &self.w[r * c..(r + 1) * c];
                xs.iter()
                    .map(|x| {
                        let mut s = 0.0;
                        for i in 0..c {
                            s += w[i] as f64 * x[i];
                        }
                        s
                    })
                    .collect()
            })
            .collect();
        (0..xs.len())
            .map(|t| per_row.iter().map(|row| row[t]).collect())
            .collect()
    }
}

/// The reference model with its own KV cache.
pub struct Reference {
    w: std::collections::HashMap<String, Dense>,
    hidden: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    eps: f64,
    base: f64,
    /// Per layer, each position's keys and values (`kv_heads * head_dim`).
    k: Vec<Vec<Vec<f64>>>,
    v: Vec<Vec<Vec<f64>>>,
}

impl Reference {
    pub fn new(bytes: &[u8]) -> Reference {
        use rayon::prelude::*;
        let g = Gguf::parse(bytes).unwrap();
        let w = g
            .tensors()
            .par_iter()
            .map(|t| {
                let (_, bytes) = g.tensor(&t.name).unwrap();
                let m = Matrix {
                    kind: t.kind,
                    bytes,
                    cols: t.dims[0],
                    rows: t.dims.get(1).copied().unwrap_or(1),
                };
                let dense = Dense {
                    w: m.dequantize(),
                    rows: m.rows,
                    cols: m.cols,
                };
                (t.name.clone(), dense)
            })
            .collect();
        let n = |k: &str| g.get(k).unwrap().as_u64().unwrap() as usize;
        let layers = n("llama.block_count");
        Reference {
            hidden: n("llama.embedding_length"),
            heads: n("llama.attention.head_count"),
            kv_heads: n("llama.attention.head_count_kv"),
            eps: g
                .get("llama.attention.layer_norm_rms_epsilon")
                .unwrap()
                .as_f64()
                .unwrap(),
            base: g.get("llama.rope.freq_base").unwrap().as_f64().unwrap(),
            k: vec![Vec::new(); layers],
            v: vec![Vec::new(); layers],
            layers,
            w,
        }
    }

    /// Empties the KV cache, for a new sequence.
    pub fn reset(&mut self) {
        self.k.iter_mut().chain(&mut self.v).for_each(Vec::clear);
    }

    fn vector(&self, name: &str) -> Vec<f64> {
        self.w[name].w.iter().map(|&v| v as f64).collect()
    }

    fn apply(&self, name: &str, xs: &[Vec<f64>]) -> Vec<Vec<f64>> {
        self.w[name].apply(xs)
    }

    fn rms_norm(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
        let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
        let s = 1.0 / (ms + eps).sqrt();
        x.iter().zip(w).map(|(v, w)| v * s * w).collect()
    }

    /// Rotates pairs `(2j, 2j + 1)` of each head by `pos * base^(-2j / head_dim)`.
    fn rope(&self, x: &mut [f64], pos: usize) {
        let hd = self.hidden / self.heads;
        for head in x.chunks_exact_mut(hd) {
            for j in 0..hd / 2 {
                let a = pos as f64 * self.base.powf(-2.0 * j as f64 / hd as f64);
                let (c, s) = (a.cos(), a.sin());
                let (x0, x1) = (head[2 * j], head[2 * j + 1]);
                head[2 * j] = x0 * c - x1 * s;
                head[2 * j + 1] = x0 * s + x1 * c;
            }
        }
    }

    /// Runs `ids` at the next positions; returns the last one's logits.
    pub fn step(&mut self, ids: &[u32]) -> Vec<f64> {
        let start = self.k[0].len();
        let hd = self.hidden / self.heads;
        let group = self.heads / self.kv_heads;
        let embd = &self.w["token_embd.weight"];
        let mut x: Vec<Vec<f64>> = ids
            .iter()
            .map(|&id| {
                let r = id as usize * embd.cols;
                embd.w[r..r + embd.cols].iter().map(|&v| v as f64).collect()
            })
            .collect();
        for l in 0..self.layers {
            let name = |s: &str| format!("blk.{l}.{s}.weight");
            let norm = self.vector(&name("attn_norm"));
            let h: Vec<Vec<f64>> = x
                .iter()
                .map(|x| Self::rms_norm(x, &norm, self.eps))
                .collect();
            let mut q = self.apply(&name("attn_q"), &h);
            let mut k = self.apply(&name("attn_k"), &h);
            let v = self.apply(&name("attn_v"), &h);
            for (t, (q, k)) in q.iter_mut().zip(&mut k).enumerate() {
                self.rope(q, start + t);
                self.rope(k, start + t);
            }
            self.k[l].extend(k);
            self.v[l].extend(v);
            let mut att = vec![vec![0.0; self.hidden]; ids.len()];
            for (t, out) in att.iter_mut().enumerate() {
                // Causal: position start + t sees keys 0 ..= start + t.
                let keys = start + t + 1;
                for head in 0..self.heads {
                    let kv = head / group;
                    let qh = &q[t][head * hd..(head + 1) * hd];
                    let scores: Vec<f64> = self.k[l][..keys]
                        .iter()
                        .map(|k| {
                            let kh = &k[kv * hd..(kv + 1) * hd];
                            qh.iter().zip(kh).map(|(a, b)| a * b).sum::<f64>() / (hd as f64).sqrt()
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let total: f64 = e.iter().sum();
                    for (p, w) in e.iter().enumerate() {
                        let vh = &self.v[l][p][kv * hd..(kv + 1) * hd];
                        for (o, val) in out[head * hd..(head + 1) * hd].iter_mut().zip(vh) {
                            *o += w / total * val;
                        }
                    }
                }
            }
            let o = self.apply(&name("attn_output"), &att);
            for (x, o) in x.iter_mut().zip(&o) {
                x.iter_mut().zip(o).for_each(|(a, b)| *a += b);
            }
            let norm = self.vector(&name("ffn_norm"));
            let h: Vec<Vec<f64>> = x
                .iter()
                .map(|x| Self::rms_norm(x, &norm, self.eps))
                .collect();
            let gate = self.apply(&name("ffn_gate"), &h);
            let up = self.apply(&name("ffn_up"), &h);
            let act: Vec<Vec<f64>> = gate
                .iter()
                .zip(&up)
                .map(|(g, u)| {
                    g.iter()
                        .zip(u)
                        .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                        .collect()
                })
                .collect();
            let down = self.apply(&name("ffn_down"), &act);
            for (x, d) in x.iter_mut().zip(&down) {
                x.iter_mut().zip(d).for_each(|(a, b)| *a += b);
            }
        }
        let last = x.last().unwrap();
        let h = Self::rms_norm(last, &self.vector("output_norm.weight"), self.eps);
        let head = if self.w.contains_key("output.weight") {
            "output.weight"
        } else {
            "token_embd.weight"
        };
        self.apply(head, &[h]).pop().unwrap()
    }
}

/// The largest logit's index and its margin over the second largest.
pub fn top(l: &[f64]) -> (u32, f64) {
    let (mut best, mut a, mut b) = (0, f64::NEG_INFINITY, f64::NEG_INFINITY);
    for (i, &x) in l.iter().enumerate() {
        if x > a {
            (best, a, b) = (i, x, a);
        } else if x > b {
            b = x;
        }
    }
    (best as u32, a - b)
}
