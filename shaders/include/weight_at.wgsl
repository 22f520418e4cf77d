// Element i of the weight `w`: an f32 (WEIGHT 0), or f16 (1) or bf16 (2) bits two to a word
// (as those tensors are stored), widened by integer operations: exact for subnormals,
// infinities and NaN on every adapter (unpack2x16float needs a capability that lavapipe has
// only with shader-f16). The other element's bits above the half are masked off or shifted out.
fn weight_at(i: u32) -> f32 {
    if (WEIGHT == 0u) {
        return bitcast<f32>(w[i]);
    }
    let h = w[i / 2u] >> (16u * (i % 2u));
    if (WEIGHT == 2u) {
        return bitcast<f32>(h << 16u);
    }
    let m = h & 0x3ffu;
    let e = h & 0x7c00u;
    var f = bitcast<f32>(((h & 0x7fffu) << 13u) + 0x38000000u);
    if (e == 0u) {
        // Zero or subnormal: m * 2^-24, a normal f32.
        f = f32(m) * 5.9604645e-8;
    }
    if (e == 0x7c00u) {
        f = bitcast<f32>(0x7f800000u | (m << 13u));
    }
    return select(f, -f, (h & 0x8000u) != 0u);
}
