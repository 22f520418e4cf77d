// Strided copy, the one kernel behind permute, slice and concat: for every coordinate c of a
// `shape` of up to 8 axes, out[out_offset + c . out_strides] = x[in_offset + c . in_strides].

const WG: u32 = 256u;

struct Params {
    n: u32,
    rank: u32,
    in_offset: u32,
    out_offset: u32,
    shape: array<vec4<u32>, 2>,
    in_strides: array<vec4<u32>, 2>,
    out_strides: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= params.n) {
        return;
    }
    var rem = i;
    var src = params.in_offset;
    var dst = params.out_offset;
    for (var d = i32(params.rank) - 1; d >= 0; d = d - 1) {
        let k = u32(d);
        let size = params.shape[k / 4u][k % 4u];
        let c = rem % size;
        rem = rem / size;
        src = src + c * params.in_strides[k / 4u][k % 4u];
        dst = dst + c * params.out_strides[k / 4u][k % 4u];
    }
    out[dst] = x[src];
}
