// The overrides, parameters and uniform binding of the tiled matmul kernels (matmul.wgsl and
// matmul_coop.wgsl).
override TRANS_A: bool = false;
override TRANS_B: bool = false;
override HAS_BIAS: bool = false;
override ACT: u32 = 0u;

struct Params {
    m: u32,
    n: u32,
    k: u32,
    a_stride: u32,
    b_stride: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
