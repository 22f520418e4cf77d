// Matrix-vector products for a few rows against a weight stored [n, k] (a linear layer's
// layout, `transpose_b`): out[r, c] = act(sum_e x[r, e] * w[c, e] + bias[c]).
// A workgroup computes 8 outputs: 32 lanes per output stride along the weight row (32
// consecutive floats per step, so reads are coalesced), then a 5-step reduction. The epilogue
// formulas are those of matmul.wgsl (WGSL has no includes).

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
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

var<workgroup> partial: array<f32, WG>;

fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

fn erf1(v: f32) -> f32 {
    let a = abs(v);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    let r = 1.0 - poly * exp(-a * a);
    return select(r, -r, v < 0.0);
}

fn safe_tanh(v: f32) -> f32 {
    return select(tanh(v), sign(v), abs(v) > 10.0);
}

fn activate(v: f32) -> f32 {
    var r = v;
    switch ACT {
        case 1u: { r = select(v, 0.0, v < 0.0); }
        case 2u: { r = 0.5 * v * (1.0 + erf1(v * 0.7071067812)); }
        case 3u: { r = 0.5 * v * (1.0 + safe_tanh(0.7978845608 * (v + 0.044715 * v * v * v))); }
        case 4u: { r = v / (1.0 + exp(-v)); }
        default: {}
    }
    return select(r, v, is_nan(v));
}

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
            acc = fma(x[r * k + e], w[c * k + e], acc);
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
