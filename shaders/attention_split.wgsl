// Decoding attention split along the keys (flash-decoding): a few query rows against a long
// key/value cache. `main_split` takes one chunk of 256 keys of one KV head for every query row
// that reads that head (the GQA group times sq, at most 8 rows), so each key and value row is
// read once for all of them, and writes each row's partial (m, l, acc) for the chunk;
// `main_merge` folds a row's partials into its output. One chunk per workgroup puts
// chunks x KV heads x batch workgroups to work where the row kernel (`main` in attention.wgsl)
// had one per query row and head.
//
// In `main_split`, invocation t takes key t of the chunk: it scores it for every row (q rows
// in workgroup memory), the rows' maxima come from two rounds over workgroup memory, its
// probabilities go to workgroup memory, and invocations below dv add probability times value
// for their column over the chunk's keys (and the denominators alongside); heads up to 128
// wide take the keys in two halves, one a half of the invocations, added after (the value
// rows are the chunk's wait: on an H200 A3 went from 64 to 51 us with 8 rows loaded at a time
// instead of 4, to 41 us in halves and to 38-39 us with 16). A probability of 0
// adds nothing, so a masked value row never reaches the sum. Partials of row g and chunk c
// start at (g * chunks + c) * (dv + 2): m, l, then dv accumulators; a chunk a row sees nothing
// of holds m = -inf, l = 0.

// @include attention_common

const ROWS: u32 = 8u; // query rows a workgroup, at most
// Keys a partial of `main_merge` covers: WG for `main_split`'s, the split size for those of
// attention.wgsl's `main_flash` (its SPLIT_KEYS).
override MERGE_KEYS: u32 = 256u;
// The rows this pipeline handles: the GQA group times sq rounded up to 1, 2, 4 or 8, so that
// every loop over rows has a constant bound and its arrays stay in registers.
override GROUP_ROWS: u32 = 8u;
const DMAX: u32 = 256u; // widest head
const KL: u32 = 8u; // key elements an invocation loads before their products
const VL: u32 = 16u; // value rows an invocation loads before their products

var<workgroup> q_split: array<f32, ROWS * DMAX>;
var<workgroup> p_split: array<f32, ROWS * WG>;
var<workgroup> part_split: array<f32, ROWS * 32u>;
var<workgroup> max_split: array<f32, ROWS>;

// Query row r of a KV head's group: its head and position.
fn split_row(r: u32, kvh: u32) -> vec2<u32> {
    let group = params.hq / params.hkv;
    return vec2<u32>(kvh * group + r / params.sq, r % params.sq);
}

@compute @workgroup_size(256)
fn main_split(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wid.x; // chunk
    let kvh = wid.y;
    let b = wid.z;
    let chunks = (params.sk + WG - 1u) / WG;
    let rows = (params.hq / params.hkv) * params.sq;
    let d = params.d;
    let dv = params.dv;
    let k_base = params.k_off + b * params.k_sb + kvh * params.k_sh;
    let v_base = params.v_off + b * params.v_sb + kvh * params.v_sh;
    let neg_inf = bitcast<f32>(neg_inf_bits);
    for (var t = lid; t < rows * d; t = t + WG) {
        let r = t / d;
        let hi = split_row(r, kvh);
        q_split[r * DMAX + t % d] = q[q_row_at(b, hi.x, hi.y) + t % d];
    }
    workgroupBarrier();

    // Scores of key j for every row (-inf where the row does not see it). Each element of
    // the key is loaded once and multiplied into all the rows' dot products.
    let j = c * WG + lid;
    var seen: array<u32, ROWS>;
    var k_seen = 0u; // the most keys any row sees
    for (var r = 0u; r < GROUP_ROWS; r = r + 1u) {
        if (r < rows) {
            seen[r] = visible_keys(split_row(r, kvh).y, b);
            k_seen = max(k_seen, seen[r]);
        }
    }
    var dots: array<f32, ROWS>;
    if (j < k_seen) {
        // KL elements loaded before any is used (a key's row is one invocation's, so its
        // loads are what the chunk waits on), then multiplied in order.
        let kj = k_base + j * params.k_ss;
        var e = 0u;
        for (; e + KL <= d; e = e + KL) {
            var x: array<f32, KL>;
            for (var u = 0u; u < KL; u = u + 1u) {
                x[u] = k[kj + e + u];
            }
            for (var u = 0u; u < KL; u = u + 1u) {
                for (var r = 0u; r < GROUP_ROWS; r = r + 1u) {
                    dots[r] = fma(q_split[r * DMAX + e + u], x[u], dots[r]);
                }
            }
        }
        for (; e < d; e = e + 1u) {
            let x = k[kj + e];
            for (var r = 0u; r < GROUP_ROWS; r = r + 1u) {
                dots[r] = fma(q_split[r * DMAX + e], x, dots[r]);
            }
        }
    }
    var s: array<f32, ROWS>;
    for (var r = 0u; r < GROUP_ROWS; r = r + 1u) {
        s[r] = neg_inf;
        if (j < seen[r]) {
            s[r] = score(dots[r]);
        }
        p_split[r * WG + lid] = s[r];
    }
    workgroupBarrier();
    // Each row's maximum over the chunk: 32 invocations a row take 8 scores each, then one
    // invocation a row takes the 32.
    {
        let r = lid / 32u;
        let part = lid % 32u;
        var m = neg_inf;
        for (var t = 0u; t < 8u; t = t + 1u) {
            m = max(m, p_split[r * WG + part * 8u + t]);
        }
        part_split[r * 32u + part] = m;
    }
    workgroupBarrier();
    if (lid < GROUP_ROWS) {
        var m = neg_inf;
        for (var t = 0u; t < 32u; t = t + 1u) {
            m = max(m, part_split[lid * 32u + t]);
        }
        max_split[lid] = m;
    }
    workgroupBarrier();
    // Probabilities against the chunk's maximum; a row whose maximum is not finite keeps zeros
    // (-inf: nothing seen; +inf: its merge gives NaN).
    for (var r = 0u; r < GROUP_ROWS; r = r + 1u) {
        let m = max_split[r];
        var p = 0.0;
        if (is_finite(m) && bitcast<u32>(s[r]) != neg_inf_bits) {
            p = exp(s[r] - m);
        }
        p_split[r * WG + lid] = p;
    }
    workgroupBarrier();

    let count = min(WG, k_seen - min(k_seen, c * WG));
    // Heads up to WG / 2 wide take the chunk's keys in two halves, one a half of the
    // invocations (column `col` of half `half`), added through workgroup memory after.
    var halves = 1u;
    if (dv <= WG / 2u) {
        halves = 2u;
    }
    let half = (lid / (WG / 2u)) * (halves - 1u);
    let col = lid - half * (WG / 2u);
    let per = (count + halves - 1u) / halves;
    let t0 = min(count, half * per);
    let t1 = min(count, t0 + per);
    var acc: array<f32, ROWS>;
    var l: array<f32, ROWS>;
    if (col < dv) {
        // VL value rows loaded before any is used, then added in order.
        let vc = v_base + c * WG * params.v_ss + col;
        for (var t = t0; t < t1; t = t + VL) {
            var x: array<f32, VL>;
            for (var u = 0u; u < VL; u = u + 1u) {
                x[u] = v[vc + min(t + u, t1 - 1u) * params.v_ss];
            }
            for (var u = 0u; u < VL; u = u + 1u) {
                if (t + u < t1) {
                    for (var r = 0u; r < GROUP_ROWS; r = r + 1u) {
                        let p = p_split[r * WG + t + u];
                        acc[r] = select(acc[r], fma(p, x[u], acc[r]), p != 0.0);
                        l[r] = l[r] + p;
                    }
                }
            }
        }
    }
    if (halves == 2u) {
        // q_split and part_split are free since the scores and the maxima.
        if (half == 1u && col < dv) {
            for (var r = 0u; r < GROUP_ROWS; r = r + 1u) {
                q_split[r * DMAX + col] = acc[r];
                if (col == 0u) {
                    part_split[r] = l[r];
                }
            }
        }
        workgroupBarrier();
        if (half == 0u && col < dv) {
            for (var r = 0u; r < GROUP_ROWS; r = r + 1u) {
                acc[r] = acc[r] + q_split[r * DMAX + col];
                l[r] = l[r] + part_split[r];
            }
        }
    }
    if (half == 0u && col < dv) {
        for (var r = 0u; r < rows; r = r + 1u) {
            let hi = split_row(r, kvh);
            let g = (b * params.hq + hi.x) * params.sq + hi.y;
            let base = (g * chunks + c) * (dv + 2u);
            if (col == 0u) {
                out[base] = max_split[r];
                out[base + 1u] = l[r];
            }
            out[base + 2u + col] = acc[r];
        }
    }
}

// `main_merge`: one workgroup per query row (position, head, batch entry), invocation e < dv
// for column e. The partials (bound as q) of the row's chunks rescale to their largest
// maximum: out = sum acc_c e^(m_c - M) / sum l_c e^(m_c - M). No visible key gives zeros; a
// maximum that is not finite (a NaN or +inf score, or only -inf scores) gives NaN.
@compute @workgroup_size(256)
fn main_merge(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = wid.x;
    let h = wid.y;
    let b = wid.z;
    let dv = params.dv;
    if (lid >= dv) {
        return;
    }
    let chunks = (params.sk + MERGE_KEYS - 1u) / MERGE_KEYS;
    let g = (b * params.hq + h) * params.sq + i;
    let first = g * chunks * (dv + 2u);
    var m = bitcast<f32>(neg_inf_bits);
    for (var c = 0u; c < chunks; c = c + 1u) {
        m = max(m, q[first + c * (dv + 2u)]);
    }
    var l = 0.0;
    var acc = 0.0;
    if (is_finite(m)) {
        for (var c = 0u; c < chunks; c = c + 1u) {
            let base = first + c * (dv + 2u);
            let mc = q[base];
            if (bitcast<u32>(mc) != neg_inf_bits) {
                let w = exp(mc - m);
                l = l + q[base + 1u] * w;
                acc = acc + q[base + 2u + lid] * w;
            }
        }
    }
    var r = 0.0;
    if (visible_keys(i, b) > 0u) {
        r = select(bitcast<f32>(nan_bits), acc / l, is_finite(m));
    }
    out[out_row_at(b, h, i) + lid] = r;
}
