// Half-precision bits and f32 by integer operations, so every adapter (with or without
// shader-f16) stores f16 and bf16 two to a u32 word. The same results as the CPU's `half` crate
// and shaders/cuda/common.cuh: round to nearest even, overflow to inf, NaN kept.
fn f32_to_f16(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    let sign = (b >> 16u) & 0x8000u;
    let e = i32((b >> 23u) & 0xffu);
    var m = b & 0x7fffffu;
    if (e == 255) {
        return sign | 0x7c00u | select(0u, 0x200u | (m >> 13u), m != 0u);
    }
    let he = e - 112;
    if (he >= 31) {
        return sign | 0x7c00u;
    }
    if (he <= 0) {
        if (he < -10) {
            return sign;
        }
        m = m | 0x800000u;
        let shift = u32(14 - he);
        var h = m >> shift;
        let rem = m & ((1u << shift) - 1u);
        let mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (h & 1u) == 1u)) {
            h = h + 1u;
        }
        return sign | h;
    }
    var h = (u32(he) << 10u) | (m >> 13u);
    let rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) == 1u)) {
        h = h + 1u;
    }
    return sign | h;
}

fn f16_to_f32(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) {
        // Zero or subnormal: m * 2^-24, with the sign (so -0 stays -0).
        return bitcast<f32>(sign | bitcast<u32>(f32(m) * 5.9604644775390625e-8));
    }
    if (e == 31u) {
        return bitcast<f32>(sign | 0x7f800000u | (m << 13u));
    }
    return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u));
}

fn f32_to_bf16(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return (b >> 16u) | 0x40u;
    }
    return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}

fn bf16_to_f32(h: u32) -> f32 {
    return bitcast<f32>(h << 16u);
}
