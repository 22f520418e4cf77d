// Element loads of A and B, either storage order (matmul.wgsl and matmul_coop.wgsl).
fn load_a(base: u32, r: u32, kk: u32) -> f32 {
    if (TRANS_A) {
        return a[base + kk * params.m + r];
    }
    return a[base + r * params.k + kk];
}

// B's elements come through the including shader's `weight_at` (matmul.wgsl's reads f16 or
// bf16 weights too).
fn load_b(base: u32, kk: u32, c: u32) -> f32 {
    if (TRANS_B) {
        return weight_at(base + c * params.k + kk);
    }
    return weight_at(base + kk * params.n + c);
}
