// Embedding gather: out[r, c] = table[ids[r], c]. The ids were checked against the table on the
// host before upload.

const WG: u32 = 256u;

struct Params {
    n: u32,
    dim: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> table: array<f32>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= params.n) {
        return;
    }
    let r = i / params.dim;
    let c = i % params.dim;
    out[i] = table[ids[r] * params.dim + c];
}
