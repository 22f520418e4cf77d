// Top-k along rows (argmax is k = 1): one workgroup per row, rounds of a workgroup arg-max.
// Natively, a long row's arg-max (k = 1) is instead split over workgroups: `main_partial` takes the best
// of each chunk of params.chunk elements (workgroup (chunk, row)) into `values` as
// [values of rows x chunks, then their indices], and `main_merge` (a workgroup a row) takes
// the best of a row's chunks from there (x).
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
    chunks: u32, // main_partial, main_merge: chunks a row
    chunk: u32, // main_partial: elements a chunk
    _pad: u32,
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

// ---- Radix selection (entry `select`), for 2 <= k <= CAP: a workgroup a row.
// The keys' top 10 bits are counted in workgroup memory to find the bin that holds the k-th
// largest; while more than CAP elements lie at or above it, the next 10 (then 10, then 2) bits
// of that bin are counted. Every element at or above the threshold is then gathered (at most
// CAP) and sorted (bitonic, larger key first, then lower index), and the first k written. When
// more than CAP elements share the k-th largest key, those above it are gathered and the ties
// taken in index order, so selection always finishes: at most six passes over the row.

const BINS: u32 = 1024u;
const CAP: u32 = 1024u;

var<workgroup> hist: array<atomic<u32>, BINS>;
var<workgroup> cand_key: array<u32, CAP>;
var<workgroup> cand_idx: array<u32, CAP>;
var<workgroup> scan: array<u32, WG>;
// The bin found by a level: [bin, elements above it in the level, elements in it].
var<workgroup> found: array<u32, 3>;
var<workgroup> gathered: atomic<u32>;

// An inclusive sum over the workgroup of each invocation's `v` (scan[lid] holds the result).
fn scan_sum(lid: u32, v: u32) {
    scan[lid] = v;
    workgroupBarrier();
    for (var o = 1u; o < WG; o = o << 1u) {
        var t = 0u;
        if (lid >= o) {
            t = scan[lid - o];
        }
        workgroupBarrier();
        scan[lid] = scan[lid] + t;
        workgroupBarrier();
    }
}

@compute @workgroup_size(256)
fn main_select(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.x + wid.y * nwg.x;
    // `row` is uniform, so every invocation of a workgroup returns or none does.
    if (row >= params.rows) {
        return;
    }
    let base = row * params.cols;
    let cols = params.cols;
    var prefix = 0u;
    var fixed = 0u;
    var above = 0u;
    var need = params.k;
    var in_bin = 0u;
    for (var level = 0u; level < 4u; level = level + 1u) {
        let bits = select(10u, 2u, level == 3u);
        let nb = 1u << bits;
        let shift = 32u - fixed - bits;
        for (var i = lid; i < BINS; i = i + WG) {
            atomicStore(&hist[i], 0u);
        }
        workgroupBarrier();
        for (var i = lid; i < cols; i = i + WG) {
            let key = order_key(x[base + i]);
            if (fixed == 0u || (key >> (32u - fixed)) == prefix) {
                atomicAdd(&hist[(key >> shift) & (nb - 1u)], 1u);
            }
        }
        workgroupBarrier();
        // Invocation t sums bins from the top, per bins each; a scan finds the one whose bins
        // cross `need`, which walks them down.
        let per = max(nb / WG, 1u);
        let hi = nb - min(lid * per, nb);
        let lo = hi - min(per, hi);
        var sum = 0u;
        for (var j = lo; j < hi; j = j + 1u) {
            sum = sum + atomicLoad(&hist[j]);
        }
        scan_sum(lid, sum);
        let incl = scan[lid];
        let excl = incl - sum;
        if (excl < need && need <= incl) {
            var acc = excl;
            var j = hi;
            loop {
                if (j == lo) {
                    break;
                }
                j = j - 1u;
                let c = atomicLoad(&hist[j]);
                if (acc + c >= need) {
                    found = array<u32, 3>(j, acc, c);
                    break;
                }
                acc = acc + c;
            }
        }
        // Uniform for the barriers of the loops below.
        let f = workgroupUniformLoad(&found);
        let b = f[0];
        let over = f[1];
        in_bin = f[2];
        above = above + over;
        need = need - over;
        prefix = (prefix << bits) | b;
        fixed = fixed + bits;
        workgroupBarrier();
        if (above + in_bin <= CAP) {
            break;
        }
    }
    // Gather: every element above the threshold, then those at it (all of them, or, when
    // they are too many, the first `need` by index).
    let threshold = select(prefix << (32u - min(fixed, 31u)), prefix, fixed == 32u);
    let all_ties = above + in_bin <= CAP;
    if (lid == 0u) {
        atomicStore(&gathered, 0u);
    }
    workgroupBarrier();
    for (var i = lid; i < cols; i = i + WG) {
        let key = order_key(x[base + i]);
        if (key > threshold || (all_ties && key >= threshold)) {
            let at = atomicAdd(&gathered, 1u);
            cand_key[at] = key;
            cand_idx[at] = i;
        }
    }
    workgroupBarrier();
    // Counted, not read back, so that it stays uniform: every element above the threshold, and
    // every tie or `need` of them.
    var n = above + select(need, in_bin, all_ties);
    if (!all_ties) {
        // Ties in index order, a chunk of WG columns at a time.
        var taken = 0u;
        for (var c0 = 0u; c0 < cols; c0 = c0 + WG) {
            let i = c0 + lid;
            var tie = 0u;
            if (i < cols && order_key(x[base + i]) == threshold) {
                tie = 1u;
            }
            scan_sum(lid, tie);
            let before_me = scan[lid] - tie;
            if (tie == 1u && taken + before_me < need) {
                cand_key[above + taken + before_me] = threshold;
                cand_idx[above + taken + before_me] = i;
            }
            taken = taken + workgroupUniformLoad(&scan[WG - 1u]);
            // Every invocation has read `scan` before the next chunk's scan writes it.
            workgroupBarrier();
            if (taken >= need) {
                break;
            }
        }
    }
    var size = 2u;
    while (size < n) {
        size = size << 1u;
    }
    // Padding sorts last: key 0 is no float's, and its index is the largest.
    for (var i = n + lid; i < size; i = i + WG) {
        cand_key[i] = 0u;
        cand_idx[i] = 0xffffffffu;
    }
    workgroupBarrier();
    for (var span = 2u; span <= size; span = span << 1u) {
        for (var stride = span >> 1u; stride > 0u; stride = stride >> 1u) {
            for (var i = lid; i < size / 2u; i = i + WG) {
                let lo = 2u * stride * (i / stride) + i % stride;
                let hi = lo + stride;
                let down = (lo & span) == 0u;
                let ka = cand_key[lo];
                let ia = cand_idx[lo];
                let kb = cand_key[hi];
                let ib = cand_idx[hi];
                // Descending runs put the earlier element first, ascending ones last.
                if (before(kb, ib, ka, ia) == down) {
                    cand_key[lo] = kb;
                    cand_idx[lo] = ib;
                    cand_key[hi] = ka;
                    cand_idx[hi] = ia;
                }
            }
            workgroupBarrier();
        }
    }
    for (var i = lid; i < params.k; i = i + WG) {
        let c = cand_idx[i];
        values[row * params.k + i] = x[base + c];
        indices[row * params.k + i] = f32(c);
    }
}

// @native-only (the browser walks a row in one workgroup: its package keeps its size)
// The best of a chunk: lowest index among equal keys, as `main`'s first round.
@compute @workgroup_size(256)
fn main_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wid.x;
    let row = wid.y;
    if (row >= params.rows || c >= params.chunks) {
        return;
    }
    let base = row * params.cols;
    let start = c * params.chunk;
    let end = min(start + params.chunk, params.cols);
    var bk = 0u;
    var bi = 0xffffffffu;
    for (var i0 = start + lid; i0 < end; i0 = i0 + 4u * WG) {
        var xs: array<f32, 4>;
        for (var u = 0u; u < 4u; u = u + 1u) {
            let i = i0 + u * WG;
            if (i < end) {
                xs[u] = x[base + i];
            }
        }
        for (var u = 0u; u < 4u; u = u + 1u) {
            let i = i0 + u * WG;
            if (i < end) {
                let key = order_key(xs[u]);
                if (bi == 0xffffffffu || before(key, i, bk, bi)) {
                    bk = key;
                    bi = i;
                }
            }
        }
    }
    let best = reduce_best(lid, bk, bi);
    if (lid == 0u && best.y != 0xffffffffu) {
        let slot = row * params.chunks + c;
        values[slot] = x[base + best.y];
        values[params.rows * params.chunks + slot] = f32(best.y);
    }
}

// The best of a row's chunks (x holds main_partial's output).
@compute @workgroup_size(256)
fn main_merge(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= params.rows) {
        return;
    }
    let base = row * params.chunks;
    let at_idx = params.rows * params.chunks + base;
    var bk = 0u;
    var bi = 0xffffffffu;
    var bs = 0u;
    for (var c = lid; c < params.chunks; c = c + WG) {
        let key = order_key(x[base + c]);
        let i = u32(x[at_idx + c]);
        if (bi == 0xffffffffu || before(key, i, bk, bi)) {
            bk = key;
            bi = i;
            bs = c;
        }
    }
    // The chunk travels in the index's place: chunks are in index order, so among equal keys
    // the lower chunk holds the lower index.
    let best = reduce_best(lid, bk, select(bs, 0xffffffffu, bi == 0xffffffffu));
    if (lid == 0u && best.y != 0xffffffffu) {
        values[row] = x[base + best.y];
        indices[row] = x[at_idx + best.y];
    }
}

// The workgroup's best (key, index) of each invocation's (bk, bi); an index of 0xffffffff is
// none.
fn reduce_best(lid: u32, bk: u32, bi: u32) -> vec2<u32> {
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
    return vec2<u32>(best_key[0], best_idx[0]);
}
// @native-end
