// Matrix-vector products for a few rows against a weight stored [n, k] (a linear layer's
// layout, `transpose_b`): out[r, c] = act(sum_e x[r, e] * w[c, e] + bias[c]).
// A workgroup computes 8 outputs: 32 lanes per output stride along the weight row (32
// consecutive floats per step, so reads are coalesced), then a 5-step reduction. The epilogue
// formulas are those of matmul.wgsl (include/activate1.wgsl).

override HAS_BIAS: bool = false;
override ACT: u32 = 0u;

const WG: u32 = 256u;
const LANES: u32 = 32u;
const PER_GROUP: u32 = 8u;

struct Params {
    m: u32,
    n: u32,
    k: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
// The weight, read as words: f32 bits, or f16/bf16 bits under f32 rows (`weight_at`).
override WEIGHT: u32 = 0u;
@group(0) @binding(2) var<storage, read> w: array<u32>;
// @include weight_at
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

var<workgroup> partial: array<f32, WG>;

// @include nan
// @include activate1

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let groups_per_row = (params.n + PER_GROUP - 1u) / PER_GROUP;
    let g = wid.x + wid.y * nwg.x;
    if (g >= params.m * groups_per_row) {
        return;
    }
    let r = g / groups_per_row;
    let slot = lid / LANES;
    let lane = lid % LANES;
    let c = (g % groups_per_row) * PER_GROUP + slot;
    let k = params.k;
    var acc = 0.0;
    if (c < params.n) {
        for (var e = lane; e < k; e = e + LANES) {
            acc = fma(x[r * k + e], weight_at(c * k + e), acc);
        }
    }
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = LANES / 2u; s > 0u; s = s >> 1u) {
        if (lane < s) {
            partial[lid] = partial[lid] + partial[lid + s];
        }
        workgroupBarrier();
    }
    if (lane == 0u && c < params.n) {
        var v = partial[lid];
        if (HAS_BIAS) {
            v = v + bias[c];
        }
        out[r * params.n + c] = activate(v);
    }
}
