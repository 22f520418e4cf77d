// Element loads of A and B, either storage order (matmul.wgsl and matmul_coop.wgsl).
fn load_a(base: u32, r: u32, kk: u32) -> f32 {
    if (TRANS_A) {
        return a[base + kk * params.m + r];
    }
    return a[base + r * params.k + kk];
}

fn load_b(base: u32, kk: u32, c: u32) -> f32 {
    if (TRANS_B) {
        return b[base + c * params.k + kk];
    }
    return b[base + kk * params.n + c];
}
