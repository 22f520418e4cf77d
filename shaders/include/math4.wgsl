// vec4 helpers shared by the elementwise ops, fused kernels and the matmul epilogue.
fn is_nan4(v: vec4<f32>) -> vec4<bool> {
    return (bitcast<vec4<u32>>(v) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u);
}

// tanh(x) is +-1 in f32 beyond |x| = 10; some drivers compute it as inf/inf there.
fn safe_tanh(v: vec4<f32>) -> vec4<f32> {
    return select(tanh(v), sign(v), abs(v) > vec4<f32>(10.0));
}

// erf by Abramowitz and Stegun 7.1.26 (absolute error < 1.5e-7); the CPU backend uses the same.
fn erf4(v: vec4<f32>) -> vec4<f32> {
    let a = abs(v);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    let r = 1.0 - poly * exp(-a * a);
    return select(r, -r, v < vec4<f32>(0.0));
}
