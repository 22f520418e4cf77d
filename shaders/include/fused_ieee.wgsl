// Subtraction and division with IEEE results in fused kernels. Within one fused
// kernel both sides of `x - x` or `x / x` can be one value, which shader compilers fold to 0
// and 1 (WGSL lets them assume no NaN or infinity); eager ops read two bindings and are not
// folded. The special cases are found on the bits, which no float rewrite touches.
// (`nan_bits` and `is_nan4` come from unary_op.wgsl, which precedes it.)
fn is_inf4(x: vec4<f32>) -> vec4<bool> {
    return (bitcast<vec4<u32>>(x) & vec4<u32>(0x7fffffffu)) == vec4<u32>(0x7f800000u);
}
fn is_zero4(x: vec4<f32>) -> vec4<bool> {
    return (bitcast<vec4<u32>>(x) & vec4<u32>(0x7fffffffu)) == vec4<u32>(0u);
}
fn ieee_sub(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    let same = bitcast<vec4<u32>>(a) == bitcast<vec4<u32>>(b);
    let nan = is_nan4(a) | is_nan4(b) | (is_inf4(a) & same);
    return select(a - b, vec4<f32>(bitcast<f32>(nan_bits)), nan);
}
fn ieee_div(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    let nan = is_nan4(a) | is_nan4(b) | (is_inf4(a) & is_inf4(b)) | (is_zero4(a) & is_zero4(b));
    return select(a / b, vec4<f32>(bitcast<f32>(nan_bits)), nan);
}
