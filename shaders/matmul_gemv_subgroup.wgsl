// The GEMV of shaders/matmul_gemv.wgsl (a few rows against a weight stored [n, k]) for adapters with
// subgroups, when k is a multiple of 4: out[r, c] = act(sum_e x[r, e] * w[c, e] + bias[c]).
// A workgroup computes 8 outputs of one row. Every invocation walks the row in vec4 steps
// (256 consecutive vec4s per step, so reads are coalesced) and keeps 8 partial sums, reusing
// each x value for the 8 weight rows; then subgroupAdd reduces each sum within a subgroup and
// one barrier combines the subgroups, instead of matmul_gemv.wgsl's five barrier rounds. Any subgroup
// size and layout works: the combination is indexed by subgroup_id.

override HAS_BIAS: bool = false;
override ACT: u32 = 0u;

const WG: u32 = 256u;
const PER_GROUP: u32 = 8u;
// Subgroups per workgroup at the smallest subgroup size (4) this variant is chosen for.
const MAX_SUBGROUPS: u32 = 64u;

struct Params {
    m: u32,
    n: u32,
    k: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> w: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

var<workgroup> partial: array<array<f32, MAX_SUBGROUPS>, PER_GROUP>;

// @include nan
// @include activate1

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) sgs: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let groups_per_row = (params.n + PER_GROUP - 1u) / PER_GROUP;
    // Uniform per workgroup, so every invocation reaches the barrier below or none does.
    let g = wid.x + wid.y * nwg.x;
    if (g >= params.m * groups_per_row) {
        return;
    }
    let r = g / groups_per_row;
    let c0 = (g % groups_per_row) * PER_GROUP;
    let k4 = params.k / 4u;
    let outputs = min(PER_GROUP, params.n - c0);
    // Eight named sums (an indexed array could live in local memory).
    var a0 = 0.0;
    var a1 = 0.0;
    var a2 = 0.0;
    var a3 = 0.0;
    var a4 = 0.0;
    var a5 = 0.0;
    var a6 = 0.0;
    var a7 = 0.0;
    for (var e = lid; e < k4; e = e + WG) {
        let xv = x[r * k4 + e];
        // Rows past n are skipped, never read.
        if (outputs > 0u) { a0 = a0 + dot(xv, w[(c0 + 0u) * k4 + e]); }
        if (outputs > 1u) { a1 = a1 + dot(xv, w[(c0 + 1u) * k4 + e]); }
        if (outputs > 2u) { a2 = a2 + dot(xv, w[(c0 + 2u) * k4 + e]); }
        if (outputs > 3u) { a3 = a3 + dot(xv, w[(c0 + 3u) * k4 + e]); }
        if (outputs > 4u) { a4 = a4 + dot(xv, w[(c0 + 4u) * k4 + e]); }
        if (outputs > 5u) { a5 = a5 + dot(xv, w[(c0 + 5u) * k4 + e]); }
        if (outputs > 6u) { a6 = a6 + dot(xv, w[(c0 + 6u) * k4 + e]); }
        if (outputs > 7u) { a7 = a7 + dot(xv, w[(c0 + 7u) * k4 + e]); }
    }
    let s0 = subgroupAdd(a0);
    let s1 = subgroupAdd(a1);
    let s2 = subgroupAdd(a2);
    let s3 = subgroupAdd(a3);
    let s4 = subgroupAdd(a4);
    let s5 = subgroupAdd(a5);
    let s6 = subgroupAdd(a6);
    let s7 = subgroupAdd(a7);
    if (lane == 0u && sg < MAX_SUBGROUPS) {
        partial[0][sg] = s0;
        partial[1][sg] = s1;
        partial[2][sg] = s2;
        partial[3][sg] = s3;
        partial[4][sg] = s4;
        partial[5][sg] = s5;
        partial[6][sg] = s6;
        partial[7][sg] = s7;
    }
    workgroupBarrier();
    if (lid < outputs) {
        var v = 0.0;
        for (var i = 0u; i < min(sgs, MAX_SUBGROUPS); i = i + 1u) {
            v = v + partial[lid][i];
        }
        let c = c0 + lid;
        if (HAS_BIAS) {
            v = v + bias[c];
        }
        out[r * params.n + c] = activate(v);
    }
}
