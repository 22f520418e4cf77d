//! The draw-a-digit model: a 64-64-10 MLP (relu, softmax) trained with Adam on scikit-learn's
//! 8x8 handwritten digits (`scripts/fetch-digits.sh`), plus its plain-f64 forward pass. Shared
//! by `examples/train_digits.rs`, which writes the model for the www page, and
//! `tests/digits.rs`, which checks its held-out accuracy and that gpukit agrees with it.
#![allow(dead_code)]

use std::path::Path;

pub const INPUTS: usize = 64;
pub const HIDDEN: usize = 64;
pub const CLASSES: usize = 10;

/// Images scaled to 0..1 (the data's 0..16 over 16) and their labels.
pub struct Digits {
    pub images: Vec<[f32; INPUTS]>,
    pub labels: Vec<usize>,
}

pub fn load(path: &Path) -> Result<Digits, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: {e} (run scripts/fetch-digits.sh)", path.display()))?;
    let mut d = Digits {
        images: Vec::new(),
        labels: Vec::new(),
    };
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: Vec<f32> = line
            .split(',')
            .map(|s| s.trim().parse::<f32>())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("line {}: {e}", n + 1))?;
        if v.len() != INPUTS + 1 {
            return Err(format!(
                "line {}: {} fields, want {}",
                n + 1,
                v.len(),
                INPUTS + 1
            ));
        }
        let mut img = [0.0; INPUTS];
        for (p, &x) in img.iter_mut().zip(&v) {
            *p = x / 16.0;
        }
        d.images.push(img);
        d.labels.push(v[INPUTS] as usize);
    }
    Ok(d)
}

/// A seeded shuffle split: `test_fraction` of the digits held out.
pub fn split(d: &Digits, test_fraction: f64, seed: u64) -> (Digits, Digits) {
    let mut order: Vec<usize> = (0..d.labels.len()).collect();
    let mut rng = Rng(seed);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let n_test = (d.labels.len() as f64 * test_fraction).round() as usize;
    let pick = |idx: &[usize]| Digits {
        images: idx.iter().map(|&i| d.images[i]).collect(),
        labels: idx.iter().map(|&i| d.labels[i]).collect(),
    };
    (pick(&order[n_test..]), pick(&order[..n_test]))
}

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn uniform(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Weights stored as PyTorch's `nn.Linear`: `w1` is [HIDDEN, INPUTS], `w2` [CLASSES, HIDDEN].
#[derive(Clone)]
pub struct Mlp {
    pub w1: Vec<f32>,
    pub b1: Vec<f32>,
    pub w2: Vec<f32>,
    pub b2: Vec<f32>,
}

impl Mlp {
    /// Class probabilities, computed in f64.
    pub fn forward(&self, x: &[f32; INPUTS]) -> [f64; CLASSES] {
        let mut h = [0.0f64; HIDDEN];
        for (j, hj) in h.iter_mut().enumerate() {
            let s: f64 = (0..INPUTS)
                .map(|i| self.w1[j * INPUTS + i] as f64 * x[i] as f64)
                .sum();
            *hj = (s + self.b1[j] as f64).max(0.0);
        }
        let mut z = [0.0f64; CLASSES];
        for (k, zk) in z.iter_mut().enumerate() {
            *zk = (0..HIDDEN)
                .map(|j| self.w2[k * HIDDEN + j] as f64 * h[j])
                .sum::<f64>()
                + self.b2[k] as f64;
        }
        let m = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = z.iter().map(|v| (v - m).exp()).collect();
        let s: f64 = e.iter().sum();
        let mut p = [0.0; CLASSES];
        for (pk, ek) in p.iter_mut().zip(e) {
            *pk = ek / s;
        }
        p
    }

    pub fn accuracy(&self, d: &Digits) -> f64 {
        let right = d
            .images
            .iter()
            .zip(&d.labels)
            .filter(|(x, &y)| argmax(&self.forward(x)) == y)
            .count();
        right as f64 / d.labels.len() as f64
    }
}

pub fn argmax(p: &[f64]) -> usize {
    (0..p.len()).fold(0, |b, i| if p[i] > p[b] { i } else { b })
}

/// The image moved by (dy, dx) pixels, zeros shifted in: drawn digits are rarely placed
/// exactly as the data's, so training sees shifted copies too.
fn shifted(x: &[f32; INPUTS], dy: isize, dx: isize) -> [f32; INPUTS] {
    let mut out = [0.0; INPUTS];
    for r in 0..8isize {
        for c in 0..8isize {
            let (sr, sc) = (r - dy, c - dx);
            if (0..8).contains(&sr) && (0..8).contains(&sc) {
                out[(r * 8 + c) as usize] = x[(sr * 8 + sc) as usize];
            }
        }
    }
    out
}

/// Mini-batch Adam on cross-entropy, `epochs` passes over the training digits and their
/// one-pixel shifts.
pub fn train(d: &Digits, epochs: usize, seed: u64) -> Mlp {
    let mut rng = Rng(seed);
    let mut init = |fan_in: usize, n: usize| -> Vec<f32> {
        let s = (6.0 / fan_in as f32).sqrt();
        (0..n).map(|_| (rng.uniform() * 2.0 - 1.0) * s).collect()
    };
    let mut m = Mlp {
        w1: init(INPUTS, HIDDEN * INPUTS),
        b1: vec![0.0; HIDDEN],
        w2: init(HIDDEN, CLASSES * HIDDEN),
        b2: vec![0.0; CLASSES],
    };
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    for (x, &y) in d.images.iter().zip(&d.labels) {
        for (dy, dx) in [(0, 0), (1, 0), (-1, 0), (0, 1), (0, -1)] {
            xs.push(shifted(x, dy, dx));
            ys.push(y);
        }
    }
    let sizes = [m.w1.len(), m.b1.len(), m.w2.len(), m.b2.len()];
    let mut mom: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![0.0; n]).collect();
    let mut vel: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![0.0; n]).collect();
    let (lr, b1, b2, eps) = (0.003f32, 0.9f32, 0.999f32, 1e-8f32);
    let batch = 32;
    let mut order: Vec<usize> = (0..xs.len()).collect();
    let mut step = 0i32;
    for _ in 0..epochs {
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i + 1));
        }
        for chunk in order.chunks(batch) {
            let mut g: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![0.0; n]).collect();
            for &s in chunk {
                let x = &xs[s];
                let mut h = [0.0f32; HIDDEN];
                for (j, hj) in h.iter_mut().enumerate() {
                    let z: f32 = (0..INPUTS)
                        .map(|i| m.w1[j * INPUTS + i] * x[i])
                        .sum::<f32>()
                        + m.b1[j];
                    *hj = z.max(0.0);
                }
                let mut z = [0.0f32; CLASSES];
                for (k, zk) in z.iter_mut().enumerate() {
                    *zk = (0..HIDDEN)
                        .map(|j| m.w2[k * HIDDEN + j] * h[j])
                        .sum::<f32>()
                        + m.b2[k];
                }
                let mx = z.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f32> = z.iter().map(|v| (v - mx).exp()).collect();
                let se: f32 = e.iter().sum();
                let mut dz = [0.0f32; CLASSES];
                for k in 0..CLASSES {
                    dz[k] = e[k] / se - if k == ys[s] { 1.0 } else { 0.0 };
                }
                let mut dh = [0.0f32; HIDDEN];
                for k in 0..CLASSES {
                    g[3][k] += dz[k];
                    for j in 0..HIDDEN {
                        g[2][k * HIDDEN + j] += dz[k] * h[j];
                        dh[j] += dz[k] * m.w2[k * HIDDEN + j];
                    }
                }
                for j in 0..HIDDEN {
                    if h[j] <= 0.0 {
                        continue;
                    }
                    g[1][j] += dh[j];
                    for i in 0..INPUTS {
                        g[0][j * INPUTS + i] += dh[j] * x[i];
                    }
                }
            }
            step += 1;
            let scale = 1.0 / chunk.len() as f32;
            let (c1, c2) = (1.0 - b1.powi(step), 1.0 - b2.powi(step));
            for (p, params) in [&mut m.w1, &mut m.b1, &mut m.w2, &mut m.b2]
                .into_iter()
                .enumerate()
            {
                for (i, w) in params.iter_mut().enumerate() {
                    let gi = g[p][i] * scale;
                    mom[p][i] = b1 * mom[p][i] + (1.0 - b1) * gi;
                    vel[p][i] = b2 * vel[p][i] + (1.0 - b2) * gi * gi;
                    *w -= lr * (mom[p][i] / c1) / ((vel[p][i] / c2).sqrt() + eps);
                }
            }
        }
    }
    m
}
