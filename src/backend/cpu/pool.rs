//! 2-D max and average pooling on the CPU, one task per block of planes.

use super::par;
use crate::ops::pool::PoolSpec;

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
