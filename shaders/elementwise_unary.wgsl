// Unary elementwise ops, four elements per invocation.
//
// OP selects the op; its codes are `UnaryKind` in src/ops/elementwise.rs. Each pipeline is
// specialised for one OP (an override constant), so the switch folds away when compiled.
// NaN in gives NaN out for every op. WGSL lets drivers assume floats are never NaN, and they do:
// NVIDIA's compiler turns `select(v, 0, v < 0)` into a max that drops NaN. So NaN is detected
// on the bits (integer ops, which no float optimisation touches) and passed through explicitly.

override OP: u32 = 0u;

struct Params {
    n4: u32,   // vec4 elements in this dispatch
    _pad: u32,
    p0: f32,   // alpha, scale, or clip min
    p1: f32,   // clip max
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<vec4<f32>>;

// @include unary_op

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= params.n4) {
        return;
    }
    y[i] = unary_op(OP, x[i], params.p0, params.p1);
}
