// Bias and activation after a product (matmul.wgsl and matmul_coop.wgsl), with the formulas
// of the elementwise ops.
// @include math4

fn activate(v: vec4<f32>) -> vec4<f32> {
    let zero = vec4<f32>(0.0);
    var r = v;
    switch ACT {
        case 1u: { r = select(v, zero, v < zero); }
        case 2u: { r = 0.5 * v * (1.0 + erf4(v * 0.7071067812)); }
        case 3u: { r = 0.5 * v * (1.0 + safe_tanh(0.7978845608 * (v + 0.044715 * v * v * v))); }
        case 4u: { r = v / (1.0 + exp(-v)); }
        default: {}
    }
    return select(r, v, is_nan4(v));
}

fn epilogue(c0: u32, v: vec4<f32>) -> vec4<f32> {
    var x = v;
    if (HAS_BIAS) {
        let n = params.n;
        var bv = vec4<f32>(0.0);
        if (c0 < n) { bv.x = bias[c0]; }
        if (c0 + 1u < n) { bv.y = bias[c0 + 1u]; }
        if (c0 + 2u < n) { bv.z = bias[c0 + 2u]; }
        if (c0 + 3u < n) { bv.w = bias[c0 + 3u]; }
        x = x + bv;
    }
    return activate(x);
}
