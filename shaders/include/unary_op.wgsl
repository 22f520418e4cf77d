// The unary ops by `UnaryKind` code: the elementwise kernel and every fused kernel
// (src/backend/wgpu/kernels/fused.rs) include this.
// Infinity and NaN bits live in private variables: WGSL has no constant for them, and Chrome's
// compiler rejects a bitcast of constant bits that would give one.
var<private> inf_bits: u32 = 0x7f800000u;
var<private> nan_bits: u32 = 0x7fc00000u;
const SQRT_2_OVER_PI: f32 = 0.7978845608;
const FRAC_1_SQRT_2: f32 = 0.7071067812;

// @include math4

// log with IEEE results at the edges, which WGSL leaves to the driver (SwiftShader returns
// finite values for log(0) and for negative inputs): log(+-0) = -inf, log(x < 0) = NaN,
// log(inf) = inf.
fn log4(v: vec4<f32>) -> vec4<f32> {
    let bits = bitcast<vec4<u32>>(v);
    let inf = vec4<f32>(bitcast<f32>(inf_bits));
    var r = select(log(v), -inf, (bits & vec4<u32>(0x7fffffffu)) == vec4<u32>(0u));
    r = select(r, vec4<f32>(bitcast<f32>(nan_bits)), bits > vec4<u32>(0x80000000u));
    return select(r, inf, bits == vec4<u32>(inf_bits));
}

// Unary op `op` (a `UnaryKind` code) with parameters p0 (alpha, scale or clip min), p1 (max).
fn unary_op(op: u32, v: vec4<f32>, p0: f32, p1: f32) -> vec4<f32> {
    let zero = vec4<f32>(0.0);
    var r: vec4<f32>;
    switch op {
        case 0u: { r = select(v, zero, v < zero); }                                  // relu
        case 1u: { r = select(v, v * p0, v < zero); }                         // leaky_relu
        case 2u: { r = select(p0 * (exp(v) - 1.0), v, v > zero); }            // elu
        case 3u: { r = 1.0 / (1.0 + exp(-v)); }                                      // sigmoid
        case 4u: { r = safe_tanh(v); }                                               // tanh
        case 5u: { r = v / (1.0 + exp(-v)); }                                        // silu
        case 6u: { r = 0.5 * v * (1.0 + erf4(v * FRAC_1_SQRT_2)); }                  // gelu (erf)
        case 7u: { r = 0.5 * v * (1.0 + safe_tanh(SQRT_2_OVER_PI * (v + 0.044715 * v * v * v))); } // gelu_tanh
        case 8u: {                                                                   // clip
            let lo = vec4<f32>(p0);
            let hi = vec4<f32>(p1);
            r = select(select(v, lo, v < lo), hi, v > hi);
        }
        case 9u: { r = v * p0; }                                              // scale
        case 10u: { r = exp(v); }                                                    // exp
        case 11u: { r = log4(v); }                                                   // log
        case 12u: { r = sqrt(v); }                                                   // sqrt
        case 13u: { r = -v; }                                                        // neg
        default: { r = abs(v); }                                                     // abs (14)
    }
    return select(r, v, is_nan4(v));
}
