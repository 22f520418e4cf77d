// Rotary position embedding over x of shape [.., seq, dim] with tables cos, sin of shape
// [seq, dim / 2] (computed once on the host in f64). One invocation per rotated pair:
// INTERLEAVED pairs (x[2j], x[2j + 1]); otherwise the half-split layout pairs (x[j], x[j + dim/2]).

override INTERLEAVED: bool = false;

const WG: u32 = 256u;

struct Params {
    pairs: u32,
    dim: u32,
    seq: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> cos_table: array<f32>;
@group(0) @binding(3) var<storage, read> sin_table: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let q = gid.x + gid.y * nwg.x * WG;
    if (q >= params.pairs) {
        return;
    }
    let half = params.dim / 2u;
    let row = q / half;
    let j = q % half;
    let t = (row % params.seq) * half + j;
    let c = cos_table[t];
    let s = sin_table[t];
    var i0 = row * params.dim + j;
    var i1 = i0 + half;
    if (INTERLEAVED) {
        i0 = row * params.dim + 2u * j;
        i1 = i0 + 1u;
    }
    let x0 = x[i0];
    let x1 = x[i1];
    out[i0] = x0 * c - x1 * s;
    out[i1] = x0 * s + x1 * c;
}
