// The matmul epilogue's activations on one f32 (the GEMV kernels); `ACT` is the including
// kernel's override and `is_nan` comes from nan.wgsl.
fn erf1(v: f32) -> f32 {
    let a = abs(v);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    let r = 1.0 - poly * exp(-a * a);
    return select(r, -r, v < 0.0);
}

fn safe_tanh(v: f32) -> f32 {
    return select(tanh(v), sign(v), abs(v) > 10.0);
}

fn activate(v: f32) -> f32 {
    var r = v;
    switch ACT {
        case 1u: { r = select(v, 0.0, v < 0.0); }
        case 2u: { r = 0.5 * v * (1.0 + erf1(v * 0.7071067812)); }
        case 3u: { r = 0.5 * v * (1.0 + safe_tanh(0.7978845608 * (v + 0.044715 * v * v * v))); }
        case 4u: { r = v / (1.0 + exp(-v)); }
        default: {}
    }
    return select(r, v, is_nan(v));
}
