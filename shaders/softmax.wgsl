// softmax / log_softmax along rows, in up to three passes, all on the GPU.
//
// A row's statistics are (m, s): its maximum and the sum of exp(x - m). Pairs merge exactly
// (the online-softmax rule), so a long row is split into chunks:
// `stats`: one workgroup per (row, chunk) writes the chunk's (m, s) pair (each invocation
// makes a pair of its elements, HELD at a time, then the pairs merge);
// `combine`: one workgroup per row merges its chunks' pairs (skipped with one chunk per row);
// `apply`: one invocation per element writes exp(x - m) / s, or x - m - log(s) when LOG;
// `rows`: rows of one chunk, all of that in one workgroup a row and one dispatch.
// Pairs are stored as two consecutive f32. NaN propagates through m; -inf entries add 0.

// Infinity and NaN bits live in private variables: WGSL has no constant for them, and Chrome's
// compiler rejects a bitcast of constant bits that would give one.
var<private> neg_inf_bits: u32 = 0xff800000u;
var<private> inf_bits: u32 = 0x7f800000u;
var<private> nan_bits: u32 = 0x7fc00000u;

override LOG: bool = false;

// The workgroup size of `stats`, `combine` and `rows`, and how many pairs each invocation of
// the first round merges (WG = ROUND * ROUND): 256 (16 x 16), or 4 (2 x 2) on a software
// adapter. SwiftShader runs a workgroup's invocations in groups of four and resumes each
// group in turn at a barrier, so there a barrier costs in proportion to the workgroup.
override WG: u32 = 256u;
override ROUND: u32 = 16u;

struct Params {
    rows: u32,
    cols: u32,
    chunks: u32,
    chunk_len: u32,
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

var<workgroup> shared_m: array<f32, 256>;
var<workgroup> shared_s: array<f32, 256>;
var<workgroup> round_m: array<f32, 16>;
var<workgroup> round_s: array<f32, 16>;

// @include nan

fn nan_max(x: f32, y: f32) -> f32 {
    return select(max(x, y), bitcast<f32>(nan_bits), is_nan(x) || is_nan(y));
}


// A pair's contribution rescaled to the maximum m; an empty pair (s = 0) or a -inf maximum adds 0.
fn rescale(p: vec2<f32>, m: f32) -> f32 {
    let empty = p.y == 0.0 || bitcast<u32>(p.x) == neg_inf_bits;
    return select(p.y * exp(p.x - m), 0.0, empty);
}

fn merge(p: vec2<f32>, q: vec2<f32>) -> vec2<f32> {
    let m = nan_max(p.x, q.x);
    return vec2<f32>(m, rescale(p, m) + rescale(q, m));
}

// Merges the workgroup's pairs in two rounds of ROUND (two barriers, where a halving tree takes
// log2(WG) + 1: barriers are what a software adapter pays for most). The result is invocation
// 0's; the others get their own pair back.
fn merge_workgroup(lid: u32, v: vec2<f32>) -> vec2<f32> {
    shared_m[lid] = v.x;
    shared_s[lid] = v.y;
    workgroupBarrier();
    if (lid < ROUND) {
        var acc = vec2<f32>(shared_m[lid * ROUND], shared_s[lid * ROUND]);
        for (var j = 1u; j < ROUND; j = j + 1u) {
            acc = merge(acc, vec2<f32>(shared_m[lid * ROUND + j], shared_s[lid * ROUND + j]));
        }
        round_m[lid] = acc.x;
        round_s[lid] = acc.y;
    }
    workgroupBarrier();
    var r = v;
    if (lid == 0u) {
        r = vec2<f32>(round_m[0], round_s[0]);
        for (var j = 1u; j < ROUND; j = j + 1u) {
            r = merge(r, vec2<f32>(round_m[j], round_s[j]));
        }
    }
    return r;
}

// Each invocation holds HELD elements of a row at a time, WG apart: all their loads in flight
// at once, then their maximum, then one exponential each. A row of up to WG * HELD elements
// (the chunk, on a GPU) stays in registers between `rows`' two phases.
const HELD: u32 = 16u;

// The row's elements first + j * WG below `end`; -inf past it, which adds nothing.
fn load_held(base: u32, first: u32, end: u32) -> array<f32, HELD> {
    var x: array<f32, HELD>;
    for (var j = 0u; j < HELD; j = j + 1u) {
        let i = first + j * WG;
        x[j] = bitcast<f32>(neg_inf_bits);
        if (i < end) {
            x[j] = a[base + i];
        }
    }
    return x;
}

fn held_pair(x: array<f32, HELD>) -> vec2<f32> {
    var m = x[0];
    for (var j = 1u; j < HELD; j = j + 1u) {
        m = nan_max(m, x[j]);
    }
    var s = 0.0;
    for (var j = 0u; j < HELD; j = j + 1u) {
        s = s + select(exp(x[j] - m), 0.0, bitcast<u32>(x[j]) == neg_inf_bits);
    }
    return vec2<f32>(m, s);
}

// The invocation's pair of the row's elements from `first` below `end`, HELD at a time.
fn invocation_pair(base: u32, first: u32, end: u32) -> vec2<f32> {
    var acc = vec2<f32>(bitcast<f32>(neg_inf_bits), 0.0);
    for (var i = first; i < end; i = i + WG * HELD) {
        acc = merge(acc, held_pair(load_held(base, i, end)));
    }
    return acc;
}

@compute @workgroup_size(WG)
fn stats(
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
    let r = merge_workgroup(lid, invocation_pair(row * params.cols, start + lid, end));
    if (lid == 0u) {
        out[2u * g] = r.x;
        out[2u * g + 1u] = r.y;
    }
}

@compute @workgroup_size(WG)
fn combine(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= params.rows) {
        return;
    }
    var acc = vec2<f32>(bitcast<f32>(neg_inf_bits), 0.0);
    for (var i = lid; i < params.chunks; i = i + WG) {
        let k = 2u * (row * params.chunks + i);
        acc = merge(acc, vec2<f32>(a[k], a[k + 1u]));
    }
    let r = merge_workgroup(lid, acc);
    if (lid == 0u) {
        out[2u * row] = r.x;
        out[2u * row + 1u] = r.y;
    }
}

// A value of a row whose statistics are (m, s). A row with a NaN, a +inf maximum (inf - inf) or
// only -inf (0 / 0) is all NaN. Said explicitly: WGSL leaves arithmetic on NaN and inf to the
// driver, and SwiftShader's exp and log do not propagate them.
fn value(x: f32, m: f32, s: f32) -> f32 {
    if (is_nan(m) || is_nan(s) || s == 0.0 || bitcast<u32>(m) == inf_bits) {
        return bitcast<f32>(nan_bits);
    } else if (LOG) {
        return x - m - log(s);
    }
    return exp(x - m) / s;
}

@compute @workgroup_size(256)
fn apply(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= params.n) {
        return;
    }
    let row = i / params.cols;
    out[i] = value(a[i], b[2u * row], b[2u * row + 1u]);
}

// `rows`: rows of one chunk, one workgroup a row: the row's pair as in `stats`, shared through
// workgroup memory, then its values as in `apply`, in one dispatch. The invocation's first HELD
// elements stay in registers for the second phase.
@compute @workgroup_size(WG)
fn rows(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= params.rows) {
        return;
    }
    let base = row * params.cols;
    let x = load_held(base, lid, params.cols);
    let step = WG * HELD;
    let r = merge_workgroup(lid, merge(held_pair(x), invocation_pair(base, lid + step, params.cols)));
    if (lid == 0u) {
        shared_m[0] = r.x;
        shared_s[0] = r.y;
    }
    workgroupBarrier();
    let m = shared_m[0];
    let s = shared_s[0];
    for (var j = 0u; j < HELD; j = j + 1u) {
        let i = lid + j * WG;
        if (i < params.cols) {
            out[base + i] = value(x[j], m, s);
        }
    }
    for (var i = lid + step; i < params.cols; i = i + WG) {
        out[base + i] = value(a[base + i], m, s);
    }
}
