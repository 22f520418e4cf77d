// where(cond, a, b): out[i] = cond[i % lc] != 0 ? a[i % la] : b[i % lb], with the index
// counted from the start of the whole tensor (`base` is this chunk's first element). A length
// of 0 means "full": the operand is bound at the chunk's offset and read at `i`. A NaN
// condition counts as true (it is not 0), as in NumPy; compared on the bits, since WGSL lets
// drivers assume floats are never NaN.

struct Params {
    n: u32,
    base: u32,
    lc: u32,
    la: u32,
    lb: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> cond: array<f32>;
@group(0) @binding(2) var<storage, read> a: array<f32>;
@group(0) @binding(3) var<storage, read> b: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

// @include repeat_index

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= params.n) {
        return;
    }
    // +0 and -0 are false; everything else, NaN included, is true.
    let truth = (bitcast<u32>(cond[index(i, params.lc)]) & 0x7fffffffu) != 0u;
    out[i] = select(b[index(i, params.lb)], a[index(i, params.la)], truth);
}
