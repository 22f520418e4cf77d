// Top-k along rows (argmax is k = 1): one workgroup per row, rounds of a workgroup arg-max.
// A dispatch runs rounds r0 .. r1 and resumes from round r0 - 1's choice, read back from the
// output; the host splits k into dispatches of bounded work (a software rasteriser stopped
// long-running workgroups early).
// Elements are ordered by a total order on their bits, so no float comparison (which drivers
// may fold assuming no NaN) decides anything: NaN above +inf above every number, -0 below +0,
// ties broken by the lower index. Round r takes the best element ordered strictly after round
// r - 1's choice, so no marking of the row is needed.

const WG: u32 = 256u;

struct Params {
    rows: u32,
    cols: u32,
    k: u32,
    r0: u32,
    r1: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> values: array<f32>;
@group(0) @binding(3) var<storage, read_write> indices: array<f32>;

var<workgroup> best_key: array<u32, WG>;
var<workgroup> best_idx: array<u32, WG>;

// Monotone map of f32 bits to u32: larger float, larger key; any NaN is the largest key.
fn order_key(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return 0xffffffffu;
    }
    if ((b & 0x80000000u) != 0u) {
        return ~b;
    }
    return b | 0x80000000u;
}

// Whether (ka, ia) comes before (kb, ib): larger key first, then lower index.
fn before(ka: u32, ia: u32, kb: u32, ib: u32) -> bool {
    return ka > kb || (ka == kb && ia < ib);
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= params.rows) {
        return;
    }
    let base = row * params.cols;
    // The previous choice; the first round has none (every element comes after it).
    var prev_key = 0xffffffffu;
    var prev_idx = 0xffffffffu;
    var first = true;
    if (params.r0 > 0u) {
        prev_idx = u32(indices[row * params.k + params.r0 - 1u]);
        prev_key = order_key(x[base + prev_idx]);
        first = false;
    }
    for (var r = params.r0; r < params.r1; r = r + 1u) {
        var bk = 0u;
        var bi = 0xffffffffu;
        // Four loads in flight before any is compared (one at a time, a row of logits waits
        // on each).
        for (var i0 = lid; i0 < params.cols; i0 = i0 + 4u * WG) {
            var xs: array<f32, 4>;
            for (var u = 0u; u < 4u; u = u + 1u) {
                let i = i0 + u * WG;
                if (i < params.cols) {
                    xs[u] = x[base + i];
                }
            }
            for (var u = 0u; u < 4u; u = u + 1u) {
                let i = i0 + u * WG;
                if (i < params.cols) {
                    let key = order_key(xs[u]);
                    let after_prev = first || before(prev_key, prev_idx, key, i);
                    if (after_prev && (bi == 0xffffffffu || before(key, i, bk, bi))) {
                        bk = key;
                        bi = i;
                    }
                }
            }
        }
        best_key[lid] = bk;
        best_idx[lid] = bi;
        workgroupBarrier();
        for (var s = WG / 2u; s > 0u; s = s >> 1u) {
            if (lid < s) {
                let ok = best_idx[lid + s];
                if (ok != 0xffffffffu && (best_idx[lid] == 0xffffffffu || before(best_key[lid + s], ok, best_key[lid], best_idx[lid]))) {
                    best_key[lid] = best_key[lid + s];
                    best_idx[lid] = ok;
                }
            }
            workgroupBarrier();
        }
        prev_key = best_key[0];
        prev_idx = best_idx[0];
        first = false;
        if (lid == 0u) {
            values[row * params.k + r] = x[base + prev_idx];
            indices[row * params.k + r] = f32(prev_idx);
        }
        workgroupBarrier();
    }
}
