// Elementwise ops whose operands are read through strides: views (permute, slice,
// broadcast_to) and operands broadcast along any axis, read in place with no copy first.
// Element i of the output (row-major over `shape`, up to 8 axes) reads a[a_offset + c . a_strides]
// and, for a binary op, b[b_offset + c . b_strides], where c is i's coordinate; a zero stride
// repeats an element along its axis.
//
// UNARY is a `UnaryKind` code (src/ops/elementwise.rs) for `unary`; BINARY a `BinaryOp` code
// for `binary`; `gated` takes both, binary(unary(a), b) (SwiGLU: silu(a) * b). Each pipeline
// is specialised for its codes (override constants).

override UNARY: u32 = 0u;
override BINARY: u32 = 0u;

struct Params {
    n: u32,
    rank: u32,
    a_offset: u32,
    b_offset: u32,
    p0: f32,
    p1: f32,
    _pad0: u32,
    _pad1: u32,
    shape: array<vec4<u32>, 2>,
    a_strides: array<vec4<u32>, 2>,
    b_strides: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

// @include unary_op

fn binary_op(x: f32, y: f32) -> f32 {
    var r: f32;
    switch BINARY {
        case 0u: { r = x + y; }
        case 1u: { r = x - y; }
        case 2u: { r = x * y; }
        default: { r = x / y; }
    }
    return r;
}

// The element index this invocation computes (2-D grids past 65535 workgroups).
fn element(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

// Where element i of the output lies in a (x) and in b (y).
fn offsets(i: u32) -> vec2<u32> {
    var rem = i;
    var at = vec2<u32>(params.a_offset, params.b_offset);
    for (var d = i32(params.rank) - 1; d >= 0; d = d - 1) {
        let k = u32(d);
        let size = params.shape[k / 4u][k % 4u];
        let c = rem % size;
        rem = rem / size;
        at = at + c * vec2<u32>(params.a_strides[k / 4u][k % 4u], params.b_strides[k / 4u][k % 4u]);
    }
    return at;
}

@compute @workgroup_size(256)
fn unary(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = element(gid, nwg);
    if (i >= params.n) {
        return;
    }
    let at = offsets(i);
    out[i] = unary_op(UNARY, vec4<f32>(a[at.x]), params.p0, params.p1).x;
}

@compute @workgroup_size(256)
fn binary(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = element(gid, nwg);
    if (i >= params.n) {
        return;
    }
    let at = offsets(i);
    out[i] = binary_op(a[at.x], b[at.y]);
}

@compute @workgroup_size(256)
fn gated(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = element(gid, nwg);
    if (i >= params.n) {
        return;
    }
    let at = offsets(i);
    out[i] = binary_op(unary_op(UNARY, vec4<f32>(a[at.x]), params.p0, params.p1).x, b[at.y]);
}
