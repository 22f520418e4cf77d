//! The f64 reference: every op written as plainly as possible in f64, the oracle the op suite
//! checks each backend against, with the tolerance each op is allowed next to it.

use gpukit::{BinaryOp, ReduceOp, UnaryOp};

/// Allowed error: |got - want| <= atol + rtol * |want|. NaN must meet NaN, infinities must match.
#[derive(Debug, Clone, Copy)]
pub struct Tol {
    pub atol: f64,
    pub rtol: f64,
}

/// erf in f64: its Maclaurin series below 2.5, the continued fraction of erfc above.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let r = if a < 2.5 {
        let (mut term, mut sum, mut n) = (a, a, 0.0);
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -a * a / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else if a.is_infinite() {
        1.0
    } else {
        let mut f = a;
        for k in (1..=80).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        1.0 - (-a * a).exp() / (std::f64::consts::PI.sqrt() * f)
    };
    r.copysign(x)
}

/// Each unary op in f64, and its tolerance. Tolerances follow WGSL's accuracy rules (exp and
/// log within a few ULP, tanh and erf through their formulas) with room for f32 rounding.
pub fn unary(op: UnaryOp, x: f64) -> (f64, Tol) {
    let exact = Tol {
        atol: 1e-30,
        rtol: 1e-6,
    };
    let transcendental = Tol {
        atol: 2e-6,
        rtol: 2e-5,
    };
    match op {
        UnaryOp::Relu => (if x < 0.0 { 0.0 } else { x }, exact),
        UnaryOp::LeakyRelu(a) => (if x < 0.0 { a as f64 * x } else { x }, exact),
        UnaryOp::Elu(a) => (
            if x > 0.0 { x } else { a as f64 * x.exp_m1() },
            transcendental,
        ),
        UnaryOp::Sigmoid => (1.0 / (1.0 + (-x).exp()), transcendental),
        UnaryOp::Tanh => (x.tanh(), transcendental),
        UnaryOp::Silu => (x / (1.0 + (-x).exp()), transcendental),
        UnaryOp::Gelu => (
            0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
            transcendental,
        ),
        UnaryOp::GeluTanh => {
            let k = (2.0 / std::f64::consts::PI).sqrt();
            (
                0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh()),
                transcendental,
            )
        }
        UnaryOp::Clip { min, max } => {
            let (lo, hi) = (min as f64, max as f64);
            (
                if x < lo {
                    lo
                } else if x > hi {
                    hi
                } else {
                    x
                },
                exact,
            )
        }
        UnaryOp::Scale(s) => (x * s as f64, exact),
        UnaryOp::Exp => (
            x.exp(),
            Tol {
                atol: 1e-30,
                rtol: 2e-5,
            },
        ),
        UnaryOp::Log => (
            x.ln(),
            Tol {
                atol: 2e-6,
                rtol: 1e-5,
            },
        ),
        UnaryOp::Sqrt => (
            x.sqrt(),
            Tol {
                atol: 1e-30,
                rtol: 2e-6,
            },
        ),
        UnaryOp::Neg => (-x, exact),
        UnaryOp::Abs => (x.abs(), exact),
    }
}

/// Each binary op in f64 and its tolerance (f32 arithmetic is correctly rounded; WGSL allows
/// division 2.5 ULP).
pub fn binary(op: BinaryOp, a: f64, b: f64) -> (f64, Tol) {
    let tol = Tol {
        atol: 1e-30,
        rtol: 1e-6,
    };
    let v = match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
    };
    (v, tol)
}

/// A reduction of one row in f64 and its tolerance: sums are allowed 2e-6 of the sum of
/// magnitudes (f32 tree summation), max and min must be exact. NaN anywhere gives NaN.
pub fn reduce(op: ReduceOp, row: &[f64]) -> (f64, Tol) {
    let mag: f64 = row.iter().map(|x| x.abs()).filter(|x| x.is_finite()).sum();
    let sum_tol = Tol {
        atol: 2e-6 * mag + 1e-6,
        rtol: 1e-6,
    };
    let exact = Tol {
        atol: 0.0,
        rtol: 0.0,
    };
    let nan = row.iter().any(|x| x.is_nan());
    match op {
        ReduceOp::Sum => (row.iter().sum(), sum_tol),
        ReduceOp::Mean => {
            let n = row.len() as f64;
            (
                row.iter().sum::<f64>() / n,
                Tol {
                    atol: sum_tol.atol / n,
                    rtol: 1e-6,
                },
            )
        }
        ReduceOp::Max if nan => (f64::NAN, exact),
        ReduceOp::Min if nan => (f64::NAN, exact),
        ReduceOp::Max => (row.iter().copied().fold(f64::NEG_INFINITY, f64::max), exact),
        ReduceOp::Min => (row.iter().copied().fold(f64::INFINITY, f64::min), exact),
    }
}

/// softmax / log_softmax of one row in f64, and the tolerance.
pub fn softmax(row: &[f64], log: bool) -> (Vec<f64>, Tol) {
    let m = if row.iter().any(|x| x.is_nan()) {
        f64::NAN
    } else {
        row.iter().copied().fold(f64::NEG_INFINITY, f64::max)
    };
    let s: f64 = row.iter().map(|x| (x - m).exp()).sum();
    if log {
        let ls = s.ln();
        (
            row.iter().map(|x| x - m - ls).collect(),
            Tol {
                atol: 2e-5,
                rtol: 2e-5,
            },
        )
    } else {
        (
            row.iter().map(|x| (x - m).exp() / s).collect(),
            Tol {
                atol: 1e-7,
                rtol: 5e-5,
            },
        )
    }
}

/// One batch entry of a matmul in f64, and per-element tolerances: f32 accumulation over k
/// terms is allowed 1e-4 of the sum of |a_ik * b_kj| (the kernels' documented bound).
pub fn matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<(f64, Tol)> {
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut mag) = (0.0f64, 0.0f64);
            for p in 0..k {
                let t = a[i * k + p] as f64 * b[p * n + j] as f64;
                s += t;
                mag += t.abs();
            }
            out.push((
                s,
                Tol {
                    atol: 1e-4 * mag + 1e-30,
                    rtol: 0.0,
                },
            ));
        }
    }
    out
}

/// A matmul reference with the f16 tolerance (`Precision::F16`): 1e-2 of the sum of the
/// products' magnitudes, which the f32 tolerance carries in its absolute part (1e-4 of it).
pub fn as_f16_tolerance(reference: Vec<(f64, Tol)>) -> Vec<(f64, Tol)> {
    widen(reference, 100.0)
}

/// Widens a matmul reference's tolerance for inputs rounded to bf16 (8 mantissa bits, eight
/// times f16's rounding error).
pub fn as_bf16_tolerance(reference: Vec<(f64, Tol)>) -> Vec<(f64, Tol)> {
    widen(reference, 800.0)
}

/// Multiplies each absolute tolerance by `factor`.
fn widen(reference: Vec<(f64, Tol)>, factor: f64) -> Vec<(f64, Tol)> {
    reference
        .into_iter()
        .map(|(v, t)| {
            (
                v,
                Tol {
                    atol: t.atol * factor,
                    rtol: t.rtol,
                },
            )
        })
        .collect()
}

/// A matmul with transposed operands and an epilogue, in f64: `act(op(a) x op(b) + bias)`.
/// The tolerance is the matmul's, carried through the activation (whose slope is at most 1.2),
/// plus the activation's own.
#[allow(clippy::too_many_arguments)]
pub fn matmul_with(
    a: &[f32],
    b: &[f32],
    (m, k, n): (usize, usize, usize),
    (ta, tb): (bool, bool),
    bias: Option<&[f32]>,
    act: Option<UnaryOp>,
) -> Vec<(f64, Tol)> {
    let at: Vec<f32> = if ta {
        (0..m * k).map(|i| a[(i % k) * m + i / k]).collect()
    } else {
        a[..m * k].to_vec()
    };
    let bt: Vec<f32> = if tb {
        (0..k * n).map(|i| b[(i % n) * k + i / n]).collect()
    } else {
        b[..k * n].to_vec()
    };
    matmul(&at, &bt, m, k, n)
        .into_iter()
        .enumerate()
        .map(|(i, (v, tol))| {
            let v = v + bias.map_or(0.0, |c| c[i % n] as f64);
            match act {
                None => (v, tol),
                Some(op) => {
                    let (y, t) = unary(op, v);
                    (
                        y,
                        Tol {
                            atol: 1.2 * tol.atol + t.atol,
                            rtol: t.rtol,
                        },
                    )
                }
            }
        })
        .collect()
}

/// layernorm (or rmsnorm) of one row in f64, then weight and bias; two passes, biased variance.
pub fn norm(
    row: &[f64],
    rms: bool,
    weight: Option<&[f32]>,
    bias: Option<&[f32]>,
    eps: f64,
) -> (Vec<f64>, Tol) {
    let n = row.len() as f64;
    let mean = if rms {
        0.0
    } else {
        row.iter().sum::<f64>() / n
    };
    let var = row.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    let inv = 1.0 / (var + eps).sqrt();
    let out = row
        .iter()
        .enumerate()
        .map(|(i, x)| {
            (x - mean) * inv * weight.map_or(1.0, |w| w[i] as f64)
                + bias.map_or(0.0, |b| b[i] as f64)
        })
        .collect();
    // The f32 mean is a few ulp of |mean| off (NVIDIA divides through the reciprocal), and the
    // normalisation multiplies that by 1 / sqrt(var + eps): for a near-constant row this, not
    // the arithmetic of the kernel, bounds what any f32 implementation can reach.
    let mean_rounding = 8.0 * f32::EPSILON as f64 * mean.abs() * inv;
    let wmax = weight.map_or(1.0, |w| {
        w.iter().fold(0.0f64, |m, &x| m.max((x as f64).abs()))
    });
    let atol = (3e-5
        + if mean_rounding.is_finite() {
            mean_rounding
        } else {
            0.0
        })
        * wmax;
    (out, Tol { atol, rtol: 3e-5 })
}

/// Scaled dot-product attention in f64 over one batch of heads: q `[hq, sq, d]`, k `[hkv, sk, d]`,
/// v `[hkv, sk, dv]`, with the causal rule and a key length. A query that sees no key gives 0.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (hq, hkv, sq, sk, d, dv): (usize, usize, usize, usize, usize, usize),
    causal: bool,
    len: usize,
    scale: f64,
) -> Vec<(f64, Tol)> {
    let tol = Tol {
        atol: 2e-5,
        rtol: 1e-4,
    };
    let mut out = Vec::with_capacity(hq * sq * dv);
    for h in 0..hq {
        let kh = h / (hq / hkv);
        for i in 0..sq {
            let mut visible = sk.min(len);
            if causal {
                visible = visible.min(i + 1 + sk.saturating_sub(sq));
            }
            let qi = &q[(h * sq + i) * d..][..d];
            let scores: Vec<f64> = (0..visible)
                .map(|j| {
                    qi.iter()
                        .zip(&k[(kh * sk + j) * d..][..d])
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let p: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let l: f64 = p.iter().sum();
            for e in 0..dv {
                let acc: f64 = p
                    .iter()
                    .enumerate()
                    .map(|(j, pj)| pj * v[(kh * sk + j) * dv + e] as f64)
                    .sum();
                out.push((if visible == 0 { 0.0 } else { acc / l }, tol));
            }
        }
    }
    out
}

/// Quantizes rows of 32-element blocks the way GGUF's reference quantizers do, to bytes.
pub fn quantize(x: &[f32], format: gpukit::QuantFormat) -> Vec<u8> {
    use gpukit::QuantFormat::*;
    let f16 = |v: f32| half::f16::from_f32(v).to_le_bytes();
    let mut out = Vec::new();
    for b in x.chunks_exact(32) {
        match format {
            Q8_0 => {
                let amax = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let d = amax / 127.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                out.extend(f16(d));
                out.extend(b.iter().map(|v| (v * id).round() as i8 as u8));
            }
            Q4_0 => {
                let max = b
                    .iter()
                    .copied()
                    .fold(0.0f32, |m, v| if v.abs() > m.abs() { v } else { m });
                let d = max / -8.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                let q = |v: f32| ((v * id + 8.5) as i32).clamp(0, 15) as u8;
                out.extend(f16(d));
                out.extend((0..16).map(|j| q(b[j]) | q(b[j + 16]) << 4));
            }
            Q4_1 => {
                let (min, max) = b
                    .iter()
                    .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
                        (lo.min(v), hi.max(v))
                    });
                let d = (max - min) / 15.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                let q = |v: f32| (((v - min) * id + 0.5) as i32).clamp(0, 15) as u8;
                out.extend(f16(d));
                out.extend(f16(min));
                out.extend((0..16).map(|j| q(b[j]) | q(b[j + 16]) << 4));
            }
        }
    }
    out
}

/// The values GGUF bytes encode, read straight from the bytes in f64.
pub fn dequantize(bytes: &[u8], format: gpukit::QuantFormat) -> Vec<f64> {
    use gpukit::QuantFormat::*;
    let f16 = |b: &[u8], at: usize| half::f16::from_le_bytes([b[at], b[at + 1]]).to_f64();
    let mut out = Vec::new();
    for b in bytes.chunks_exact(format.block_bytes()) {
        match format {
            Q8_0 => out.extend(b[2..34].iter().map(|&q| f16(b, 0) * q as i8 as f64)),
            Q4_0 | Q4_1 => {
                let qs = if format == Q4_1 { &b[4..20] } else { &b[2..18] };
                let nib = |e: usize| (if e < 16 { qs[e] & 15 } else { qs[e - 16] >> 4 }) as f64;
                out.extend((0..32).map(|e| {
                    if format == Q4_1 {
                        f16(b, 0) * nib(e) + f16(b, 2)
                    } else {
                        f16(b, 0) * (nib(e) - 8.0)
                    }
                }));
            }
        }
    }
    out
}
