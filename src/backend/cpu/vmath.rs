//! Scalar functions written so that a loop calling them vectorises: no calls into libm, no
//! branches that cannot become selects. `std`'s `exp`, `ln` and `tanh` are library calls that
//! stop LLVM's loop vectoriser, so the elementwise kernels use these instead.
//!
//! Accuracy (tested on every 499th float): `exp` and `ln` are within 3 ulp of the true value,
//! `tanh` within 5 ulp, over the whole f32 range, with IEEE results for NaN, infinities and
//! zeros. The op tolerances (relative 2e-5 for transcendental ops) leave a wide margin.

use std::f32::consts::LOG2_E;

/// ln 2 split in two: `N * LN2_HI` is exact for every exponent `N` that occurs.
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;

/// Adding and subtracting 1.5 * 2^23 rounds a float of magnitude below 2^22 to an integer.
const ROUNDER: f32 = 12_582_912.0;

/// `e^x`.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    // Beyond these bounds the result is infinite or zero anyway; clamping keeps `n` small.
    let xc = x.clamp(-104.0, 89.0);
    let shifted = xc * LOG2_E + ROUNDER;
    let n = shifted - ROUNDER;
    let r = xc - n * LN2_HI - n * LN2_LO; // |r| <= ln2 / 2
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    // 2^n in two halves, each a normal float even when 2^n itself is not.
    // n as an integer, read from the mantissa of `shifted` (`n as i32` would be a saturating
    // conversion, which LLVM does not vectorise).
    let ni = shifted.to_bits() as i32 - ROUNDER.to_bits() as i32;
    let h = ni >> 1;
    let s1 = f32::from_bits(((h + 127) as u32) << 23);
    let s2 = f32::from_bits(((ni - h + 127) as u32) << 23);
    let y = p * s1 * s2;
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// Natural logarithm.
#[inline(always)]
pub(crate) fn ln(x: f32) -> f32 {
    const SQRT_HALF_BITS: u32 = 0x3f35_04f3;
    // Subnormals: scale into the normal range first.
    let tiny = x < f32::MIN_POSITIVE;
    let xs = if tiny { x * 8_388_608.0 } else { x };
    // x = m * 2^e with m in [sqrt(1/2), sqrt(2)).
    let t = xs.to_bits().wrapping_sub(SQRT_HALF_BITS);
    let e = (t as i32 >> 23) - if tiny { 23 } else { 0 };
    let m = f32::from_bits((t & 0x007f_ffff).wrapping_add(SQRT_HALF_BITS));
    // ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.172.
    let s = (m - 1.0) / (m + 1.0);
    let z = s * s;
    let poly = s * (2.0 + z * (2.0 / 3.0 + z * (2.0 / 5.0 + z * (2.0 / 7.0 + z * (2.0 / 9.0)))));
    let ef = e as f32;
    let y = ef * LN2_HI + (ef * LN2_LO + poly);
    if x.is_nan() || x < 0.0 {
        f32::NAN
    } else if x == 0.0 {
        f32::NEG_INFINITY
    } else if x == f32::INFINITY {
        x
    } else {
        y
    }
}

/// Hyperbolic tangent.
#[inline(always)]
pub(crate) fn tanh(x: f32) -> f32 {
    let a = x.abs();
    // Away from zero: (1 - e^-2a) / (1 + e^-2a), which saturates to 1 cleanly.
    let e = exp(-2.0 * a);
    let big = ((1.0 - e) / (1.0 + e)).copysign(x);
    // Near zero, where 1 - e^-2a loses digits: the odd Taylor series (error < 1e-9 there).
    let z = x * x;
    let small = x + x
        * z
        * (-1.0 / 3.0
            + z * (2.0 / 15.0
                + z * (-17.0 / 315.0 + z * (62.0 / 2835.0 + z * (-1382.0 / 155_925.0)))));
    if a < 0.3 {
        small
    } else {
        big
    }
}

/// erf by Abramowitz and Stegun 7.1.26, the formula the shaders and `UnaryOp::apply` use.
#[inline(always)]
pub(crate) fn erf(x: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_72 + t * (1.421_413_8 + t * (-1.453_152_1 + t * 1.061_405_4))));
    let y = (1.0 - poly * exp(-x * x)).copysign(x);
    if x.is_nan() {
        x
    } else {
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place between `got` and the f64 truth.
    fn ulps(got: f32, want: f64) -> f64 {
        if want.is_nan() {
            return if got.is_nan() { 0.0 } else { f64::INFINITY };
        }
        let w = want as f32;
        if w.is_infinite() || got.is_infinite() {
            return if got == w { 0.0 } else { f64::INFINITY };
        }
        let ulp = (f32::from_bits(w.abs().to_bits() + 1) - w.abs()).max(f32::from_bits(1)) as f64;
        (got as f64 - want).abs() / ulp
    }

    /// Every 499th float bit pattern of both signs, plus the special values.
    fn samples() -> impl Iterator<Item = f32> {
        (0..u32::MAX / 499).map(|i| f32::from_bits(i * 499)).chain([
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1.0,
        ])
    }

    /// The largest error of `f` against `truth` over the samples, and where.
    fn worst(f: impl Fn(f32) -> f32, truth: impl Fn(f64) -> f64) -> (f64, f32) {
        samples()
            .map(|x| (ulps(f(x), truth(x as f64)), x))
            .fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a })
    }

    #[test]
    fn exp_is_within_three_ulp_everywhere() {
        let (e, x) = worst(exp, f64::exp);
        assert!(e <= 3.0, "worst exp error {e} ulp at {x:e}");
    }

    #[test]
    fn ln_is_within_three_ulp_everywhere() {
        let (e, x) = worst(ln, |x| if x < 0.0 { f64::NAN } else { x.ln() });
        assert!(e <= 3.0, "worst ln error {e} ulp at {x:e}");
    }

    #[test]
    fn tanh_is_within_a_few_ulp_everywhere() {
        let (e, x) = worst(tanh, f64::tanh);
        assert!(e <= 5.0, "worst tanh error {e} ulp at {x:e}");
    }

    #[test]
    fn erf_matches_the_scalar_formula() {
        for x in samples().step_by(101) {
            let (got, want) = (erf(x), crate::ops::elementwise::erf(x));
            assert!(
                (got - want).abs() <= 1e-6 || (got.is_nan() && want.is_nan()),
                "erf({x}) = {got}, scalar formula {want}"
            );
        }
    }
}
