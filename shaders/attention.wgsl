// Fused scaled dot-product attention with an online softmax: the score matrix is never written
// to memory. One workgroup per (query row, head, batch); keys are visited in tiles of 256:
//   1. invocation t scores key j = tile + t: s = scale * q . k_j, or -inf where masked;
//   2. the tile's maximum updates the running maximum m, the probabilities p_j = exp(s_j - m)
//      go to workgroup memory and their sum updates the running denominator l;
//   3. invocation d (< dv) rescales its accumulator and adds sum_j p_j v_j[d].
// At the end out[d] = acc / l. Grouped-query attention: query head h reads key/value head
// h / (hq / hkv). CAUSAL hides keys after the query (aligned to the end when sk > sq, as with a
// KV cache); HAS_LENS hides keys at or beyond the batch entry's length. A query with no visible
// key gets zeros. Requires d, dv <= 256.

// Infinity and NaN bits live in private variables: WGSL has no constant for them, and Chrome's
// compiler rejects a bitcast of constant bits that would give one.
var<private> neg_inf_bits: u32 = 0xff800000u;

override CAUSAL: bool = false;
override HAS_LENS: bool = false;

const WG: u32 = 256u;

struct Params {
    hq: u32,
    hkv: u32,
    sq: u32,
    sk: u32,
    d: u32,
    dv: u32,
    scale: f32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read> lens: array<u32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

var<workgroup> q_row: array<f32, WG>;
var<workgroup> probs: array<f32, WG>;
var<workgroup> scratch: array<f32, WG>;
var<workgroup> visible_shared: u32;

fn workgroup_max(lid: u32, x: f32) -> f32 {
    scratch[lid] = x;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            scratch[lid] = max(scratch[lid], scratch[lid + s]);
        }
        workgroupBarrier();
    }
    let r = scratch[0];
    workgroupBarrier();
    return r;
}

fn workgroup_sum(lid: u32, x: f32) -> f32 {
    scratch[lid] = x;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            scratch[lid] = scratch[lid] + scratch[lid + s];
        }
        workgroupBarrier();
    }
    let r = scratch[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = wid.x;      // query row
    let h = wid.y;      // query head
    let b = wid.z;      // batch entry
    let d = params.d;
    let dv = params.dv;
    let sk = params.sk;
    let kvh = h / (params.hq / params.hkv);
    let q_base = ((b * params.hq + h) * params.sq + i) * d;
    let k_base = (b * params.hkv + kvh) * sk * d;
    let v_base = (b * params.hkv + kvh) * sk * dv;

    if (lid == 0u) {
        var n = sk;
        if (CAUSAL) {
            // Query i sees keys 0 ..= i + (sk - sq).
            n = min(n, i + 1u + (sk - min(sk, params.sq)));
        }
        if (HAS_LENS) {
            n = min(n, lens[b]);
        }
        visible_shared = n;
    }
    if (lid < d) {
        q_row[lid] = q[q_base + lid];
    }
    // A length read from a buffer is not uniform to WGSL; loading it through workgroup memory
    // makes it so (and is the barrier that publishes q_row).
    let visible = workgroupUniformLoad(&visible_shared);

    let neg_inf = bitcast<f32>(neg_inf_bits);
    var m = neg_inf;
    var l = 0.0;
    var acc = 0.0;
    for (var tile = 0u; tile < visible; tile = tile + WG) {
        let j = tile + lid;
        var s = neg_inf;
        if (j < visible) {
            var dot = 0.0;
            let kj = k_base + j * d;
            for (var e = 0u; e < d; e = e + 1u) {
                dot = fma(q_row[e], k[kj + e], dot);
            }
            s = dot * params.scale;
        }
        let m_new = max(m, workgroup_max(lid, s));
        var p = 0.0;
        if (j < visible) {
            p = exp(s - m_new);
        }
        probs[lid] = p;
        let correction = exp(m - m_new);
        l = l * correction + workgroup_sum(lid, p);
        m = m_new;
        // workgroup_sum's barriers also published probs.
        if (lid < dv) {
            var part = acc * correction;
            let count = min(WG, visible - tile);
            for (var t = 0u; t < count; t = t + 1u) {
                part = fma(probs[t], v[v_base + (tile + t) * dv + lid], part);
            }
            acc = part;
        }
        workgroupBarrier();
    }
    if (lid < dv) {
        var r = 0.0;
        if (l > 0.0) {
            r = acc / l;
        }
        out[((b * params.hq + h) * params.sq + i) * dv + lid] = r;
    }
}

// `main_tiled`, for d and dv up to 64: a workgroup takes BQ query rows of one head, so each
// key and value row it loads serves BQ queries instead of one. Keys advance BK at a time:
//   1. the tile's keys and values are copied to workgroup memory (key rows padded by one
//      float, so the 16 rows a step reads fall in different banks);
//   2. invocation (r, c) scores query r against key c of the tile, or -inf where masked;
//   3. one invocation per query row takes the tile's maximum, turns the scores into
//      probabilities in place and updates the row's running maximum and denominator;
//   4. invocation (r, c) rescales its four accumulators (columns c, c + 16, c + 32, c + 48 of
//      query r's output) and adds the tile's probabilities times the value rows.
// Rows of one block see different numbers of keys under CAUSAL; the tiles run up to what the
// block's last row sees, and a row's scores past its own limit are -inf. Workgroup memory:
// 13.6 KB, within WebGPU's default 16 KB.
const BQ: u32 = 16u;
const BK: u32 = 16u;
const DT: u32 = 64u;

var<workgroup> q_tile: array<f32, BQ * DT>;
var<workgroup> k_tile: array<f32, BK * (DT + 1u)>;
var<workgroup> v_tile: array<f32, BK * DT>;
var<workgroup> p_tile: array<f32, BQ * BK>;
var<workgroup> row_max: array<f32, BQ>;
var<workgroup> row_sum: array<f32, BQ>;
var<workgroup> row_scale: array<f32, BQ>;

// How many keys query row i sees (0 for a row past the end).
fn visible_keys(i: u32, b: u32) -> u32 {
    if (i >= params.sq) {
        return 0u;
    }
    var n = params.sk;
    if (CAUSAL) {
        n = min(n, i + 1u + (params.sk - min(params.sk, params.sq)));
    }
    if (HAS_LENS) {
        n = min(n, lens[b]);
    }
    return n;
}

@compute @workgroup_size(256)
fn main_tiled(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i0 = wid.x * BQ; // first query row of the block
    let h = wid.y;
    let b = wid.z;
    let d = params.d;
    let dv = params.dv;
    let kvh = h / (params.hq / params.hkv);
    let q_base = ((b * params.hq + h) * params.sq + i0) * d;
    let k_base = (b * params.hkv + kvh) * params.sk * d;
    let v_base = (b * params.hkv + kvh) * params.sk * dv;
    let neg_inf = bitcast<f32>(neg_inf_bits);
    let r = lid / BK; // query row of the block (scores and output)
    let c = lid % BK; // key of the tile (scores), first output column (output)
    let i = i0 + r;
    let mine = visible_keys(i, b);

    if (lid == 0u) {
        // Visible keys grow with the row: the block's last row sees the most.
        visible_shared = visible_keys(min(i0 + BQ, params.sq) - 1u, b);
    }
    let rows = min(BQ, params.sq - i0);
    for (var t = lid; t < BQ * d; t = t + WG) {
        let row = t / d;
        var val = 0.0;
        if (row < rows) {
            val = q[q_base + t];
        }
        q_tile[row * DT + t % d] = val;
    }
    if (lid < BQ) {
        row_max[lid] = neg_inf;
        row_sum[lid] = 0.0;
    }
    let keys = workgroupUniformLoad(&visible_shared);

    var acc0 = 0.0;
    var acc1 = 0.0;
    var acc2 = 0.0;
    var acc3 = 0.0;
    for (var tile = 0u; tile < keys; tile = tile + BK) {
        let n = min(BK, params.sk - tile);
        for (var t = lid; t < BK * d; t = t + WG) {
            let row = t / d;
            var val = 0.0;
            if (row < n) {
                val = k[k_base + tile * d + t];
            }
            k_tile[row * (DT + 1u) + t % d] = val;
        }
        for (var t = lid; t < BK * dv; t = t + WG) {
            let row = t / dv;
            var val = 0.0;
            if (row < n) {
                val = v[v_base + tile * dv + t];
            }
            v_tile[row * DT + t % dv] = val;
        }
        workgroupBarrier();

        var s = neg_inf;
        if (tile + c < mine) {
            var dot = 0.0;
            for (var e = 0u; e < d; e = e + 1u) {
                dot = fma(q_tile[r * DT + e], k_tile[c * (DT + 1u) + e], dot);
            }
            s = dot * params.scale;
        }
        p_tile[r * BK + c] = s;
        workgroupBarrier();

        if (lid < BQ) {
            let old = row_max[lid];
            var m = old;
            for (var t = 0u; t < BK; t = t + 1u) {
                m = max(m, p_tile[lid * BK + t]);
            }
            var sum = 0.0;
            var scale = 1.0;
            // A row with no visible key yet keeps its zeros (and avoids -inf - -inf).
            if (m != neg_inf) {
                for (var t = 0u; t < BK; t = t + 1u) {
                    let p = exp(p_tile[lid * BK + t] - m);
                    p_tile[lid * BK + t] = p;
                    sum = sum + p;
                }
                scale = exp(old - m);
            } else {
                for (var t = 0u; t < BK; t = t + 1u) {
                    p_tile[lid * BK + t] = 0.0;
                }
            }
            row_scale[lid] = scale;
            row_sum[lid] = row_sum[lid] * scale + sum;
            row_max[lid] = m;
        }
        workgroupBarrier();

        let scale = row_scale[r];
        var p0 = acc0 * scale;
        var p1 = acc1 * scale;
        var p2 = acc2 * scale;
        var p3 = acc3 * scale;
        for (var t = 0u; t < BK; t = t + 1u) {
            let p = p_tile[r * BK + t];
            p0 = fma(p, v_tile[t * DT + c], p0);
            p1 = fma(p, v_tile[t * DT + c + 16u], p1);
            p2 = fma(p, v_tile[t * DT + c + 32u], p2);
            p3 = fma(p, v_tile[t * DT + c + 48u], p3);
        }
        acc0 = p0;
        acc1 = p1;
        acc2 = p2;
        acc3 = p3;
        workgroupBarrier();
    }
    if (i < params.sq) {
        // A row with no visible key gets zeros.
        let l = row_sum[r];
        let o = ((b * params.hq + h) * params.sq + i) * dv;
        if (c < dv) {
            out[o + c] = select(0.0, acc0 / l, l > 0.0);
        }
        if (c + 16u < dv) {
            out[o + c + 16u] = select(0.0, acc1 / l, l > 0.0);
        }
        if (c + 32u < dv) {
            out[o + c + 32u] = select(0.0, acc2 / l, l > 0.0);
        }
        if (c + 48u < dv) {
            out[o + c + 48u] = select(0.0, acc3 / l, l > 0.0);
        }
    }
}
