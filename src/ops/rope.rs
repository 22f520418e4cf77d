//! Rotary position embeddings (RoPE) and their tables.

use crate::device::Device;
use crate::error::{Error, Result};
use crate::ops::OpSpec;
use crate::profile::Work;
use crate::tensor::Tensor;
use crate::verify::Tol;

/// Which elements RoPE rotates together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RopeLayout {
    /// Pairs `(x[2j], x[2j + 1])` (GPT-J, llama.cpp's default).
    Interleaved,
    /// Pairs `(x[j], x[j + dim/2])` (GPT-NeoX, Hugging Face llama).
    HalfSplit,
}

impl Tensor {
    /// Rotates pairs of the last axis by position: `self` is `[.., seq, dim]` (position = the
    /// second-to-last axis), `cos` and `sin` are `[seq, dim / 2]`, as [`Device::rope_tables`]
    /// makes them. For `[batch, seq, heads, dim]` data, `transpose(1, 2)` first.
    pub fn rope(&self, cos: &Tensor, sin: &Tensor, layout: RopeLayout) -> Result<Tensor> {
        let shape = self.shape();
        if shape.len() < 2 || !shape[shape.len() - 1].is_multiple_of(2) {
            return Err(Error::InvalidArgument {
                op: "rope",
                reason: format!("expected [.., seq, dim] with an even dim, got {shape:?}"),
            });
        }
        let (seq, dim) = (shape[shape.len() - 2], shape[shape.len() - 1]);
        for t in [cos, sin] {
            self.same_device(t, "rope")?;
            if t.shape() != [seq, dim / 2] {
                return Err(Error::shape(
                    "rope",
                    t.shape(),
                    &[seq, dim / 2],
                    "(cos and sin tables are [seq, dim / 2])",
                ));
            }
        }
        if let Some(out) =
            Tensor::promoted("rope", &[self, cos, sin], |t| t[0].rope(t[1], t[2], layout))?
        {
            // The result has x's dtype whatever the tables' (f32 tables rotate f16 data).
            return out.cast(self.dtype());
        }
        self.device().check_output("rope", shape)?;
        let spec = RopeSpec {
            n: self.len(),
            seq,
            dim,
            layout,
        };
        let storage =
            self.device()
                .op(&spec)
                .rope(self.storage(), cos.storage(), sin.storage(), spec)?;
        let out = self.with_storage(storage, shape.to_vec());
        out.verified("rope", [self, cos, sin], Tol::Accumulate, move |t| {
            t[0].rope(t[1], t[2], layout)
        })
    }
}

impl Device {
    /// RoPE tables for positions `offset .. offset + seq`: `cos` and `sin` of
    /// `position * base^(-2j / dim)`, shape `[seq, dim / 2]`, computed in f64 on the host.
    pub fn rope_tables(
        &self,
        seq: usize,
        dim: usize,
        base: f64,
        offset: usize,
    ) -> Result<(Tensor, Tensor)> {
        if !(dim.is_multiple_of(2) && base.is_finite() && base > 0.0) {
            return Err(Error::InvalidArgument {
                op: "rope_tables",
                reason: format!("dim must be even and base positive, got dim={dim}, base={base}"),
            });
        }
        let half = dim / 2;
        let end = crate::shape::add("rope_tables", offset, seq)?;
        let n = self.check_output("rope_tables", &[seq, half])?;
        // Both tables exist at once: twice the bytes of one must fit too.
        self.check_output("rope_tables", &[2, seq, half])?;
        let (mut c, mut s) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for p in offset..end {
            for j in 0..half {
                let angle = p as f64 * base.powf(-2.0 * j as f64 / dim as f64);
                let (cos, sin) = cos_sin(angle);
                c.push(cos as f32);
                s.push(sin as f32);
            }
        }
        Ok((
            self.tensor(&c, &[seq, half])?,
            self.tensor(&s, &[seq, half])?,
        ))
    }
}

/// The cosine and sine of `x` radians, within a few f64 ulps of std's for |x| up to 2^20 * pi/2
/// (positions far past any context; beyond it the error grows to about 1e-7 at 1e9, still
/// below the tables' f32 rounding). Written here rather than calling `f64::cos`/`sin`, which
/// brought libm's argument reduction (about 6 KB) into the browser package for this one use.
/// `x` is reduced by the nearest multiple q of pi/2, subtracted in three parts whose products
/// with q are exact (Cody and Waite; the parts are fdlibm's published constants), then both
/// functions are Taylor polynomials on [-pi/4, pi/4] (the first omitted terms are below 5e-17)
/// and q's quadrant swaps and negates them.
fn cos_sin(x: f64) -> (f64, f64) {
    const PIO2_1: f64 = 1.570_796_326_734_125_6e0;
    const PIO2_2: f64 = 6.077_100_506_303_966e-11;
    const PIO2_3: f64 = 2.022_266_248_711_166_5e-21;
    let q = (x * std::f64::consts::FRAC_2_PI).round();
    let r = ((x - q * PIO2_1) - q * PIO2_2) - q * PIO2_3;
    let r2 = r * r;
    // Nested from the highest term: sin r / r = 1 - r^2/(2*3) (1 - r^2/(4*5) (1 - ..)) to
    // r^17/17!, cos r = 1 - r^2/(1*2) (1 - r^2/(3*4) (..)) to r^16/16!.
    let (mut sin, mut cos) = (1.0f64, 1.0f64);
    for k in (1..=8).rev() {
        let k2 = 2.0 * k as f64;
        sin = 1.0 - r2 / (k2 * (k2 + 1.0)) * sin;
        cos = 1.0 - r2 / ((k2 - 1.0) * k2) * cos;
    }
    let sin = sin * r;
    match q.rem_euclid(4.0) as u8 {
        0 => (cos, sin),
        1 => (-sin, cos),
        2 => (-cos, -sin),
        _ => (sin, -cos),
    }
}

/// RoPE over `n` elements in rows of `dim`; row `r` takes the table row `r % seq`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RopeSpec {
    pub n: usize,
    pub seq: usize,
    pub dim: usize,
    pub layout: RopeLayout,
}

impl OpSpec for RopeSpec {
    fn name(&self) -> &'static str {
        "rope"
    }

    fn work(&self) -> Work {
        Work::elements(self.n, 3)
    }
}

#[cfg(test)]
mod tests {
    /// `cos_sin` against std's f64 functions: a sweep, points next to multiples of pi/2
    /// (where the reduction cancels most), negative angles and large positions.
    #[test]
    fn cos_sin_matches_std() {
        let mut worst = 0.0f64;
        let mut check = |x: f64, tol: f64| {
            let (c, s) = super::cos_sin(x);
            let e = (c - x.cos()).abs().max((s - x.sin()).abs());
            assert!(e <= tol, "cos_sin({x:e}): error {e:e}");
            worst = worst.max(e);
        };
        for i in -20_000..20_000 {
            check(i as f64 * 0.013_7, 4e-16);
        }
        for q in [1.0, 2.0, 3.0, 4.0, 101.0, 4096.0, 65_537.0] {
            let x = q * std::f64::consts::FRAC_PI_2;
            for d in [-1e-9, 0.0, 1e-12, 3e-7] {
                check(x + d, 4e-16);
                check(-(x + d), 4e-16);
            }
        }
        // Positions a long context reaches (a frequency of 1 at position p is p radians).
        for p in [8_191.0, 131_071.0, 1_000_003.0, 1_640_000.5] {
            check(p, 1e-15);
        }
        assert!(
            worst > 0.0,
            "every angle was exact: the comparison compared nothing"
        );
    }
}
