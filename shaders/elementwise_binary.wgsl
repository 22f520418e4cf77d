// Binary elementwise ops on two operands of the same shape, four elements per invocation.
// OP: 0 add, 1 sub, 2 mul, 3 div (`BinaryOp` in src/ops/elementwise.rs).

override OP: u32 = 0u;

struct Params {
    n4: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> a: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> b: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> out: array<vec4<f32>>;

fn apply(x: vec4<f32>, y: vec4<f32>) -> vec4<f32> {
    var r: vec4<f32>;
    switch OP {
        case 0u: { r = x + y; }
        case 1u: { r = x - y; }
        case 2u: { r = x * y; }
        default: { r = x / y; }
    }
    return r;
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= params.n4) {
        return;
    }
    out[i] = apply(a[i], b[i]);
}
