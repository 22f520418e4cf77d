//! An f64 all-MiniLM-L6-v2 (BERT) written plainly from the safetensors weights: the reference
//! the embedder is checked against, natively (tests/models.rs) and, through
//! `examples/bert_reference.rs`, in Node and Chromium.

use std::collections::HashMap;

use super::oracle::erf;

/// The f64 reference: the weights as f64 by name.
pub struct Reference {
    w: HashMap<String, (Vec<usize>, Vec<f64>)>,
}

impl Reference {
    pub fn load(dir: &std::path::Path) -> Reference {
        let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
        let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let mut w = HashMap::new();
        for (name, view) in file.tensors() {
            let data = match view.dtype() {
                safetensors::Dtype::F32 => view
                    .data()
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
                    .collect(),
                safetensors::Dtype::F16 => view
                    .data()
                    .chunks_exact(2)
                    .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
                    .collect(),
                _ => continue,
            };
            w.insert(
                name.trim_start_matches("bert.").to_string(),
                (view.shape().to_vec(), data),
            );
        }
        Reference { w }
    }

    fn get(&self, name: &str) -> &[f64] {
        &self.w[name].1
    }

    /// `x [n, in] . W^T + b` for a weight `[out, in]`.
    fn linear(&self, x: &[f64], n: usize, name: &str) -> Vec<f64> {
        let (shape, w) = &self.w[&format!("{name}.weight")];
        let (out, inp) = (shape[0], shape[1]);
        let b = self.get(&format!("{name}.bias"));
        let mut y = vec![0.0; n * out];
        for r in 0..n {
            for o in 0..out {
                let row = &w[o * inp..(o + 1) * inp];
                y[r * out + o] = b[o]
                    + row
                        .iter()
                        .zip(&x[r * inp..(r + 1) * inp])
                        .map(|(a, c)| a * c)
                        .sum::<f64>();
            }
        }
        y
    }

    fn layer_norm(&self, x: &mut [f64], h: usize, name: &str) {
        let (g, b) = (
            self.get(&format!("{name}.weight")),
            self.get(&format!("{name}.bias")),
        );
        for row in x.chunks_mut(h) {
            let mean = row.iter().sum::<f64>() / h as f64;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / h as f64;
            let inv = 1.0 / (var + 1e-12).sqrt();
            for (i, v) in row.iter_mut().enumerate() {
                *v = (*v - mean) * inv * g[i] + b[i];
            }
        }
    }

    /// One sentence's normalised embedding.
    pub fn embed(&self, ids: &[u32]) -> Vec<f64> {
        let (s, h, heads) = (ids.len(), 384, 12);
        let dh = h / heads;
        let (word, pos, typ) = (
            self.get("embeddings.word_embeddings.weight"),
            self.get("embeddings.position_embeddings.weight"),
            self.get("embeddings.token_type_embeddings.weight"),
        );
        let mut x: Vec<f64> = (0..s)
            .flat_map(|i| (0..h).map(move |j| (i, j)))
            .map(|(i, j)| word[ids[i] as usize * h + j] + pos[i * h + j] + typ[j])
            .collect();
        self.layer_norm(&mut x, h, "embeddings.LayerNorm");
        for l in 0..6 {
            let p = format!("encoder.layer.{l}");
            let q = self.linear(&x, s, &format!("{p}.attention.self.query"));
            let k = self.linear(&x, s, &format!("{p}.attention.self.key"));
            let v = self.linear(&x, s, &format!("{p}.attention.self.value"));
            let mut a = vec![0.0; s * h];
            for hd in 0..heads {
                for i in 0..s {
                    let scores: Vec<f64> = (0..s)
                        .map(|j| {
                            (0..dh)
                                .map(|e| q[i * h + hd * dh + e] * k[j * h + hd * dh + e])
                                .sum::<f64>()
                                / (dh as f64).sqrt()
                        })
                        .collect();
                    let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let p: Vec<f64> = scores.iter().map(|sc| (sc - m).exp()).collect();
                    let z: f64 = p.iter().sum();
                    for e in 0..dh {
                        a[i * h + hd * dh + e] =
                            (0..s).map(|j| p[j] * v[j * h + hd * dh + e]).sum::<f64>() / z;
                    }
                }
            }
            let mut y = self.linear(&a, s, &format!("{p}.attention.output.dense"));
            y.iter_mut().zip(&x).for_each(|(y, x)| *y += x);
            self.layer_norm(&mut y, h, &format!("{p}.attention.output.LayerNorm"));
            let mut f = self.linear(&y, s, &format!("{p}.intermediate.dense"));
            for v in f.iter_mut() {
                *v = 0.5 * *v * (1.0 + erf(*v / std::f64::consts::SQRT_2));
            }
            let mut z = self.linear(&f, s, &format!("{p}.output.dense"));
            z.iter_mut().zip(&y).for_each(|(z, y)| *z += y);
            self.layer_norm(&mut z, h, &format!("{p}.output.LayerNorm"));
            x = z;
        }
        let mut mean: Vec<f64> = (0..h)
            .map(|j| (0..s).map(|i| x[i * h + j]).sum::<f64>() / s as f64)
            .collect();
        let norm = mean.iter().map(|v| v * v).sum::<f64>().sqrt();
        mean.iter_mut().for_each(|v| *v /= norm);
        mean
    }
}
