// Whether a float is NaN, decided on its bits: WGSL lets drivers assume floats are never NaN,
// so float comparisons cannot be trusted to see one.
fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}
