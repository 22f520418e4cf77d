// Reductions in two passes, both on the GPU.
//
// `partial`: one workgroup per (row, chunk of `chunk_len` columns) reduces its chunk to one
// value; with a single chunk per row that value is the answer (times `scale`, 1/cols for mean).
// `finish`: one workgroup per row reduces the row's partials.
// OP: 0 sum, 1 mean, 2 max, 3 min (`ReduceOp` in src/ops/reduce.rs). DOT reads a[i] * b[i].
// max and min propagate NaN explicitly (WGSL's max/min leave NaN to the driver).

// Infinity and NaN bits live in private variables: WGSL has no constant for them, and Chrome's
// compiler rejects a bitcast of constant bits that would give one.
var<private> inf_bits: u32 = 0x7f800000u;
var<private> neg_inf_bits: u32 = 0xff800000u;

override OP: u32 = 0u;
override DOT: bool = false;

const WG: u32 = 256u;

struct Params {
    rows: u32,
    cols: u32,
    chunks: u32,
    chunk_len: u32,
    scale: f32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

var<workgroup> shared_acc: array<f32, WG>;

// @include nan

fn identity() -> f32 {
    var r: f32;
    switch OP {
        case 2u: { r = bitcast<f32>(neg_inf_bits); } // -inf
        case 3u: { r = bitcast<f32>(inf_bits); } // +inf
        default: { r = 0.0; }
    }
    return r;
}

fn combine(x: f32, y: f32) -> f32 {
    var r: f32;
    switch OP {
        case 2u: { r = select(max(x, y), x + y, is_nan(x) || is_nan(y)); }
        case 3u: { r = select(min(x, y), x + y, is_nan(x) || is_nan(y)); }
        default: { r = x + y; }
    }
    return r;
}

fn load(i: u32) -> f32 {
    if (DOT) {
        return a[i] * b[i];
    }
    return a[i];
}

fn reduce_workgroup(lid: u32, v: f32) -> f32 {
    shared_acc[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            shared_acc[lid] = combine(shared_acc[lid], shared_acc[lid + s]);
        }
        workgroupBarrier();
    }
    return shared_acc[0];
}

@compute @workgroup_size(256)
fn partial(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= params.rows * params.chunks) {
        return;
    }
    let row = g / params.chunks;
    let start = (g % params.chunks) * params.chunk_len;
    let end = min(start + params.chunk_len, params.cols);
    let base = row * params.cols;
    var acc = identity();
    for (var i = start + lid; i < end; i = i + WG) {
        acc = combine(acc, load(base + i));
    }
    let r = reduce_workgroup(lid, acc);
    if (lid == 0u) {
        out[g] = r * params.scale;
    }
}

@compute @workgroup_size(256)
fn finish(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= params.rows) {
        return;
    }
    var acc = identity();
    for (var i = lid; i < params.chunks; i = i + WG) {
        acc = combine(acc, a[row * params.chunks + i]);
    }
    let r = reduce_workgroup(lid, acc);
    if (lid == 0u) {
        out[row] = r * params.scale;
    }
}
