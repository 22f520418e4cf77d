// Binary elementwise ops where one operand repeats: out[i] = op(a[i % la], b[i % lb]), with
// the index counted from the start of the whole tensor (`base` is this chunk's first element).
// An operand length of 0 means "full": it is bound at the chunk's offset and read at `i`.
// OP: 0 add, 1 sub, 2 mul, 3 div (`BinaryOp` in src/ops/elementwise.rs).

override OP: u32 = 0u;

struct Params {
    n: u32,
    base: u32,
    la: u32,
    lb: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

fn apply(x: f32, y: f32) -> f32 {
    var r: f32;
    switch OP {
        case 0u: { r = x + y; }
        case 1u: { r = x - y; }
        case 2u: { r = x * y; }
        default: { r = x / y; }
    }
    return r;
}

// @include repeat_index

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= params.n) {
        return;
    }
    out[i] = apply(a[index(i, params.la)], b[index(i, params.lb)]);
}
