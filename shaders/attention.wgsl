// Fused scaled dot-product attention with an online softmax: the score matrix is never written
// to memory. One workgroup per (query row, head, batch); keys are visited in tiles of 256:
//   1. invocation t scores key j = tile + t: s = scale * q . k_j, or -inf where masked;
//   2. the tile's maximum updates the running maximum m, the probabilities p_j = exp(s_j - m)
//      go to workgroup memory and their sum updates the running denominator l;
//   3. invocation d (< dv) rescales its accumulator and adds sum_j p_j v_j[d], the sum taken by
//      every invocation of the workgroup in groups of columns, each over some of the tile's
//      keys, with many value rows loaded at once (a decode step's short rows wait on memory).
// At the end out[d] = acc / l. Grouped-query attention: query head h reads key/value head
// h / (hq / hkv). CAUSAL hides keys after the query (aligned to the end when sk > sq, as with a
// KV cache); HAS_LENS hides keys at or beyond the batch entry's length. A query with no visible
// key gets zeros. NaN follows the CPU backend: a NaN or +inf score, or a row whose visible
// scores are all -inf, gives a NaN row. Scores are checked on their bits (WGSL lets compilers
// assume no NaN or infinity, and `max` may drop a NaN): a NaN score becomes +inf, which `max`
// keeps, and a row whose running maximum is not finite at the end is NaN. Requires d, dv <= 256.

// @include attention_common

@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
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
    let q_base = q_row_at(b, h, i);
    let k_base = params.k_off + b * params.k_sb + kvh * params.k_sh;
    let v_base = params.v_off + b * params.v_sb + kvh * params.v_sh;

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
            // 32 loads issued before their products natively (4 in the browser), in four
            // independent sums: a key's row is one invocation's, so its loads are what the
            // tile waits on.
            var d0 = 0.0;
            var d1 = 0.0;
            var d2 = 0.0;
            var d3 = 0.0;
            let kj = k_base + j * params.k_ss;
            var e = 0u;
            // @native-only (the browser package carries the shorter loop below)
            for (; e + 32u <= d; e = e + 32u) {
                let k0 = k[kj + e];
                let k1 = k[kj + e + 1u];
                let k2 = k[kj + e + 2u];
                let k3 = k[kj + e + 3u];
                let k4 = k[kj + e + 4u];
                let k5 = k[kj + e + 5u];
                let k6 = k[kj + e + 6u];
                let k7 = k[kj + e + 7u];
                let k8 = k[kj + e + 8u];
                let k9 = k[kj + e + 9u];
                let k10 = k[kj + e + 10u];
                let k11 = k[kj + e + 11u];
                let k12 = k[kj + e + 12u];
                let k13 = k[kj + e + 13u];
                let k14 = k[kj + e + 14u];
                let k15 = k[kj + e + 15u];
                let k16 = k[kj + e + 16u];
                let k17 = k[kj + e + 17u];
                let k18 = k[kj + e + 18u];
                let k19 = k[kj + e + 19u];
                let k20 = k[kj + e + 20u];
                let k21 = k[kj + e + 21u];
                let k22 = k[kj + e + 22u];
                let k23 = k[kj + e + 23u];
                let k24 = k[kj + e + 24u];
                let k25 = k[kj + e + 25u];
                let k26 = k[kj + e + 26u];
                let k27 = k[kj + e + 27u];
                let k28 = k[kj + e + 28u];
                let k29 = k[kj + e + 29u];
                let k30 = k[kj + e + 30u];
                let k31 = k[kj + e + 31u];
                d0 = fma(q_row[e], k0, d0);
                d1 = fma(q_row[e + 1u], k1, d1);
                d2 = fma(q_row[e + 2u], k2, d2);
                d3 = fma(q_row[e + 3u], k3, d3);
                d0 = fma(q_row[e + 4u], k4, d0);
                d1 = fma(q_row[e + 5u], k5, d1);
                d2 = fma(q_row[e + 6u], k6, d2);
                d3 = fma(q_row[e + 7u], k7, d3);
                d0 = fma(q_row[e + 8u], k8, d0);
                d1 = fma(q_row[e + 9u], k9, d1);
                d2 = fma(q_row[e + 10u], k10, d2);
                d3 = fma(q_row[e + 11u], k11, d3);
                d0 = fma(q_row[e + 12u], k12, d0);
                d1 = fma(q_row[e + 13u], k13, d1);
                d2 = fma(q_row[e + 14u], k14, d2);
                d3 = fma(q_row[e + 15u], k15, d3);
                d0 = fma(q_row[e + 16u], k16, d0);
                d1 = fma(q_row[e + 17u], k17, d1);
                d2 = fma(q_row[e + 18u], k18, d2);
                d3 = fma(q_row[e + 19u], k19, d3);
                d0 = fma(q_row[e + 20u], k20, d0);
                d1 = fma(q_row[e + 21u], k21, d1);
                d2 = fma(q_row[e + 22u], k22, d2);
                d3 = fma(q_row[e + 23u], k23, d3);
                d0 = fma(q_row[e + 24u], k24, d0);
                d1 = fma(q_row[e + 25u], k25, d1);
                d2 = fma(q_row[e + 26u], k26, d2);
                d3 = fma(q_row[e + 27u], k27, d3);
                d0 = fma(q_row[e + 28u], k28, d0);
                d1 = fma(q_row[e + 29u], k29, d1);
                d2 = fma(q_row[e + 30u], k30, d2);
                d3 = fma(q_row[e + 31u], k31, d3);
            }
            // @native-end
            for (; e + 4u <= d; e = e + 4u) {
                d0 = fma(q_row[e], k[kj + e], d0);
                d1 = fma(q_row[e + 1u], k[kj + e + 1u], d1);
                d2 = fma(q_row[e + 2u], k[kj + e + 2u], d2);
                d3 = fma(q_row[e + 3u], k[kj + e + 3u], d3);
            }
            for (; e < d; e = e + 1u) {
                d0 = fma(q_row[e], k[kj + e], d0);
            }
            s = score((d0 + d1) + (d2 + d3));
        }
        let m_new = max(m, workgroup_max(lid, s));
        // Only finite maxima are used: -inf (nothing seen yet) scales nothing, +inf makes the
        // row NaN at the end.
        let usable = is_finite(m_new);
        var p = 0.0;
        if (j < visible && usable) {
            p = exp(s - m_new);
        }
        probs[lid] = p;
        var correction = 0.0;
        if (usable && is_finite(m)) {
            correction = exp(m - m_new);
        }
        l = l * correction + workgroup_sum(lid, p);
        m = m_new;
        // workgroup_sum's barriers also published probs. The value rows: every invocation
        // takes part, in WG / lanes groups of `lanes` columns (dv rounded up to a power of
        // two); group g adds the tile's keys g, g + groups, ..., 16 rows loaded before
        // their products natively (4 in the browser), and the groups' sums meet in workgroup
        // memory.
        let lanes = 1u << (32u - countLeadingZeros(max(dv, 1u) - 1u));
        let groups = WG / lanes;
        let col = lid % lanes;
        var p0 = 0.0;
        var p1 = 0.0;
        if (col < dv) {
            let count = min(WG, visible - tile);
            let vt = v_base + tile * params.v_ss + col;
            var t = lid / lanes;
            // @native-only (the browser package carries the shorter loop below)
            for (; t + 15u * groups < count; t = t + 16u * groups) {
                let v0 = v[vt + t * params.v_ss];
                let v1 = v[vt + (t + 1u * groups) * params.v_ss];
                let v2 = v[vt + (t + 2u * groups) * params.v_ss];
                let v3 = v[vt + (t + 3u * groups) * params.v_ss];
                let v4 = v[vt + (t + 4u * groups) * params.v_ss];
                let v5 = v[vt + (t + 5u * groups) * params.v_ss];
                let v6 = v[vt + (t + 6u * groups) * params.v_ss];
                let v7 = v[vt + (t + 7u * groups) * params.v_ss];
                let v8 = v[vt + (t + 8u * groups) * params.v_ss];
                let v9 = v[vt + (t + 9u * groups) * params.v_ss];
                let v10 = v[vt + (t + 10u * groups) * params.v_ss];
                let v11 = v[vt + (t + 11u * groups) * params.v_ss];
                let v12 = v[vt + (t + 12u * groups) * params.v_ss];
                let v13 = v[vt + (t + 13u * groups) * params.v_ss];
                let v14 = v[vt + (t + 14u * groups) * params.v_ss];
                let v15 = v[vt + (t + 15u * groups) * params.v_ss];
                p0 = fma(probs[t], v0, p0);
                p1 = fma(probs[t + 1u * groups], v1, p1);
                p0 = fma(probs[t + 2u * groups], v2, p0);
                p1 = fma(probs[t + 3u * groups], v3, p1);
                p0 = fma(probs[t + 4u * groups], v4, p0);
                p1 = fma(probs[t + 5u * groups], v5, p1);
                p0 = fma(probs[t + 6u * groups], v6, p0);
                p1 = fma(probs[t + 7u * groups], v7, p1);
                p0 = fma(probs[t + 8u * groups], v8, p0);
                p1 = fma(probs[t + 9u * groups], v9, p1);
                p0 = fma(probs[t + 10u * groups], v10, p0);
                p1 = fma(probs[t + 11u * groups], v11, p1);
                p0 = fma(probs[t + 12u * groups], v12, p0);
                p1 = fma(probs[t + 13u * groups], v13, p1);
                p0 = fma(probs[t + 14u * groups], v14, p0);
                p1 = fma(probs[t + 15u * groups], v15, p1);
            }
            // @native-end
            for (; t + 3u * groups < count; t = t + 4u * groups) {
                let v0 = v[vt + t * params.v_ss];
                let v1 = v[vt + (t + 1u * groups) * params.v_ss];
                let v2 = v[vt + (t + 2u * groups) * params.v_ss];
                let v3 = v[vt + (t + 3u * groups) * params.v_ss];
                p0 = fma(probs[t], v0, p0);
                p1 = fma(probs[t + 1u * groups], v1, p1);
                p0 = fma(probs[t + 2u * groups], v2, p0);
                p1 = fma(probs[t + 3u * groups], v3, p1);
            }
            for (; t < count; t = t + groups) {
                p0 = fma(probs[t], v[vt + t * params.v_ss], p0);
            }
        }
        scratch[lid] = p0 + p1;
        workgroupBarrier();
        if (lid < dv) {
            var sum = 0.0;
            for (var g = 0u; g < groups; g = g + 1u) {
                sum = sum + scratch[g * lanes + lid];
            }
            acc = fma(acc, correction, sum);
        }
        workgroupBarrier();
    }
    if (lid < dv) {
        var r = 0.0;
        if (visible > 0u) {
            r = select(bitcast<f32>(nan_bits), acc / l, is_finite(m));
        }
        out[out_row_at(b, h, i) + lid] = r;
    }
}

// main_flash: flash attention on register tiles, for heads up to FLASH_D wide (32, 64 or 128;
// d and dv at most FLASH_D). A workgroup of 2 FLASH_ROWS invocations takes FLASH_ROWS query
// rows of one head (64, 32 or 16: the most the adapter's workgroup memory holds at the width)
// and walks its keys in tiles of FLASH_KEYS (`flash_tile`: natively 32 where those rows still
// fit, else 16; in the browser 16).
// Invocation (ty, tx) of a (FLASH_ROWS / 4) x 8 grid owns query rows 4ty..4ty+3, whose values
// it keeps in vec4s (one lane a row): their scores against keys KT tx..KT tx + KT - 1 of each
// tile (KT = FLASH_KEYS / 8: 4 or 2),
// their running maxima and its shares of their denominators, and their output columns
// 4 (tx + 8g)..+3 for g < FLASH_D / 32 (a mat4x4 each, one column a row). Each step of a
// product is a register tile: a vec4 of q^T (four rows) times a vec2 of k^T (two keys; two
// vec2s, four keys, in 32-key tiles), or a vec4 of P^T times a vec4 of v. No private array is indexed but by unrolled loops: NVIDIA's Vulkan
// compiler then keeps everything in registers. For each tile:
//   1. the tile's keys go to workgroup memory transposed (k^T) and its values as rows, from
//      registers loaded during the tile before (q^T stays there from the start); then the
//      next tile's loads are issued (with FLASH_SHARE, see below, its keys only);
//   2. each invocation scores its 4 x KT block (masked and scaled as in `main`) and shares the
//      rows' maxima with the row's other seven invocations;
//   3. each takes its rows' new running maxima, turns its scores into probabilities, rescales
//      its accumulators and its shares of the denominators, and writes the probabilities;
//   4. each adds the tile's probabilities times the value rows to its columns.
// The eight shares of a row's denominator are added at the end. With FLASH_SHARE the value
// rows are not stored in step 1 but in step 3, over k^T (whose last reads the barrier before
// step 3 has passed), and the next tile's values are loaded after that store, so k^T and v
// take one tile's memory: 64 rows fit at width 128. Workgroup memory (flash_workgroup_bytes):
// 43 KB at width 64, 64 rows and 32 keys; 30 KB at 64, 64 and 16; 47 KB at 128, 64 and 16
// shared; 35 KB at 128, 32 and 16 unshared.
//
// With SPLIT_KEYS > 0 (a multiple of 64) a block's keys are split in chunks of SPLIT_KEYS, one
// workgroup a (block, chunk), so that a grid of few blocks (a short prompt's few heads) still
// fills the GPU: workgroup x = block * chunks + chunk, and instead of the output it writes each
// row's partial (m, l, acc) for its chunk in `main_merge`'s layout (attention_split.wgsl), the
// merge running with MERGE_KEYS = SPLIT_KEYS. A chunk past the keys a row sees leaves m = -inf.
override FLASH_D: u32 = 64u;
override FLASH_ROWS: u32 = 64u;
override FLASH_THREADS: u32 = 128u; // 2 FLASH_ROWS
override SPLIT_KEYS: u32 = 0u;
override FLASH_KEYS: u32 = 16u; // keys a tile: 16 or 32
// 1: the value tile goes where k^T was once the tile's scores are taken (fv then unused), so
// a block holds twice the rows or keys in the same memory; its values are loaded after them.
override FLASH_SHARE: u32 = 0u;
const FX: u32 = 8u; // invocations along a tile's keys and the output's columns

var<workgroup> fq: array<vec4<f32>, FLASH_D * FLASH_ROWS / 4u>; // q^T: [e][row / 4]
var<workgroup> fk: array<vec2<f32>, FLASH_D * FLASH_KEYS / 2u>; // k^T: [e][key / 2], lanes key % 2
var<workgroup> fp: array<vec4<f32>, FLASH_KEYS * FLASH_ROWS / 4u>; // P^T: [key][row / 4], swizzled
var<workgroup> fv: array<vec4<f32>, (FLASH_KEYS * FLASH_D / 4u - 1u) * (1u - FLASH_SHARE) + 1u>; // v: [key][col / 4]
var<workgroup> fsh: array<vec4<f32>, FLASH_ROWS * 2u>; // [row / 4][tx], lanes row % 4

fn finite4(x: vec4<f32>) -> vec4<bool> {
    return (bitcast<vec4<u32>>(x) & vec4<u32>(0x7f800000u)) != vec4<u32>(0x7f800000u);
}

// Scores of four rows: scaled, +inf for NaN, -inf where not visible.
fn scores4(dot: vec4<f32>, visible: vec4<bool>) -> vec4<f32> {
    let s = dot * params.scale;
    let nan = (bitcast<vec4<u32>>(s) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u);
    let x = select(s, vec4<f32>(bitcast<f32>(pos_inf_bits)), nan);
    return select(vec4<f32>(bitcast<f32>(neg_inf_bits)), x, visible);
}

// o (one column a row) plus p (one lane a row) times the value row part vr.
fn pv4(o: mat4x4<f32>, p: vec4<f32>, vr: vec4<f32>) -> mat4x4<f32> {
    return mat4x4<f32>(fma(vec4<f32>(p.x), vr, o[0]), fma(vec4<f32>(p.y), vr, o[1]),
        fma(vec4<f32>(p.z), vr, o[2]), fma(vec4<f32>(p.w), vr, o[3]));
}

fn scale4(o: mat4x4<f32>, s: vec4<f32>) -> mat4x4<f32> {
    return mat4x4<f32>(o[0] * s.x, o[1] * s.y, o[2] * s.z, o[3] * s.w);
}

// The next tile's keys and values, loaded into registers while this one is computed.
var<private> kn: array<f32, 64>;
var<private> vn: array<f32, 64>;

// Loads this invocation's elements of the tile at key `tile` (below sk): with bit 1 of `parts`
// k^T's (key t % FLASH_KEYS, column t / FLASH_KEYS), with bit 2 v's (key t / FLASH_D, column
// t % FLASH_D), for t = lid + FLASH_THREADS u.
fn flash_fetch(tile: u32, lid: u32, kb: u32, vb: u32, parts: u32) {
    let n = min(FLASH_KEYS, params.sk - tile);
    for (var u = 0u; u < FLASH_KEYS * FLASH_D / FLASH_THREADS; u = u + 1u) {
        let t = lid + FLASH_THREADS * u;
        if ((parts & 1u) != 0u) {
            var x = 0.0;
            if (t % FLASH_KEYS < n && t / FLASH_KEYS < params.d) {
                x = k[kb + (tile + t % FLASH_KEYS) * params.k_ss + t / FLASH_KEYS];
            }
            kn[u] = x;
        }
        if ((parts & 2u) != 0u) {
            var y = 0.0;
            if (t / FLASH_D < n && t % FLASH_D < params.dv) {
                y = v[vb + (tile + t / FLASH_D) * params.v_ss + t % FLASH_D];
            }
            vn[u] = y;
        }
    }
}

// The value rows from vn into workgroup memory: fv, or with FLASH_SHARE fk's words as vec2s.
fn flash_put_values(lid: u32) {
    for (var u = 0u; u < FLASH_KEYS * FLASH_D / FLASH_THREADS; u = u + 1u) {
        let t = lid + FLASH_THREADS * u;
// @native-only
        if (FLASH_SHARE == 1u) {
            fk[t / FLASH_D * (FLASH_D / 2u) + t % FLASH_D / 2u][t % 2u] = vn[u];
            continue;
        }
// @native-end
        fv[t / FLASH_D * (FLASH_D / 4u) + t % FLASH_D / 4u][t % 4u] = vn[u];
    }
}

// Columns 4c..4c+3 of the tile's value row `key` (c < FLASH_D / 4).
fn flash_value(key: u32, c: u32) -> vec4<f32> {
    let i = key * (FLASH_D / 4u) + c;
// @native-only
    if (FLASH_SHARE == 1u) {
        return vec4<f32>(fk[2u * i], fk[2u * i + 1u]);
    }
// @native-end
    return fv[i];
}

// Row i's output columns 4 (tx + 8g)..+3 from its accumulators acc[g]: its result, or with
// SPLIT_KEYS its partial (m, l, acc) for chunk `chunk` of `chunks`.
fn flash_row(i: u32, b: u32, h: u32, tx: u32, chunk: u32, chunks: u32, m: f32, l: f32, seen: bool,
    acc: mat4x4<f32>) {
    if (i < params.sq) {
        let dv = params.dv;
        var o = out_row_at(b, h, i);
        // A row with no visible key gets zeros; one whose maximum is not finite (a +inf or NaN
        // score, or every score -inf), NaN.
        var r = select(0.0, select(bitcast<f32>(nan_bits), 1.0 / l, is_finite(m)), seen);
        if (SPLIT_KEYS > 0u) {
            o = (((b * params.hq + h) * params.sq + i) * chunks + chunk) * (dv + 2u);
            if (tx == 0u) {
                out[o] = m;
                out[o + 1u] = l;
            }
            o = o + 2u;
            r = 1.0;
        }
        for (var g = 0u; g < FLASH_D / 32u; g = g + 1u) {
            let x = acc[g] * r;
            for (var u = 0u; u < 4u; u = u + 1u) {
                let col = 4u * (tx + FX * g) + u;
                if (col < dv) {
                    out[o + col] = x[u];
                }
            }
        }
    }
}

@compute @workgroup_size(FLASH_THREADS)
fn main_flash(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let groups = FLASH_ROWS / 4u;
    let kt = FLASH_KEYS / FX;
    let kh = FLASH_KEYS / 2u;
    // (Dividing by SPLIT_KEYS itself would be a division by zero in the pipeline without a
    // split, which WGSL rejects even where it is never run.)
    let split = max(SPLIT_KEYS, 1u);
    // The grid: x the query head, y the batch entry, z the block of rows (times the key
    // chunks), so every head's first block starts before any head's second.
    var chunks = 1u;
    var chunk = 0u;
    if (SPLIT_KEYS > 0u) {
        chunks = (params.sk + split - 1u) / split;
        chunk = wid.z % chunks;
    }
    var block = wid.z / chunks;
    if (CAUSAL) {
        // Causal blocks further down see more keys: they start first (every head's), so that
        // the short ones fill the last wave instead of leaving the GPU idle behind a long one.
        block = (params.sq + FLASH_ROWS - 1u) / FLASH_ROWS - 1u - block;
    }
    let i0 = block * FLASH_ROWS;
    let h = wid.x;
    let b = wid.y;
    let d = params.d;
    let kvh = h / (params.hq / params.hkv);
    let k_base = params.k_off + b * params.k_sb + kvh * params.k_sh;
    let v_base = params.v_off + b * params.v_sb + kvh * params.v_sh;
    let ty = lid / FX;
    let tx = lid % FX;
    if (lid == 0u) {
        // Visible keys grow with the row: the block's last row sees the most.
        visible_shared = visible_keys(min(i0 + FLASH_ROWS, params.sq) - 1u, b);
    }
    // q^T, consecutive invocations on consecutive rows (so the writes take different banks).
    for (var t = lid; t < FLASH_D * FLASH_ROWS; t = t + FLASH_THREADS) {
        let row = t % FLASH_ROWS;
        let e = t / FLASH_ROWS;
        var x = 0.0;
        if (i0 + row < params.sq && e < d) {
            x = q[q_row_at(b, h, i0 + row) + e];
        }
        fq[e * groups + row / 4u][row % 4u] = x;
    }
    let visible = workgroupUniformLoad(&visible_shared);
    // This workgroup's keys: its chunk's (a multiple of FLASH_KEYS from its start), or all it
    // sees.
    var first = 0u;
    var keys = visible;
    if (SPLIT_KEYS > 0u) {
        first = chunk * SPLIT_KEYS;
        keys = min(visible, first + SPLIT_KEYS);
    }
    let r0 = i0 + 4u * ty;
    let vis = vec4<u32>(visible_keys(r0, b), visible_keys(r0 + 1u, b), visible_keys(r0 + 2u, b),
        visible_keys(r0 + 3u, b));
    var m = vec4<f32>(bitcast<f32>(neg_inf_bits));
    var l = vec4<f32>(0.0);
    var o0 = mat4x4<f32>();
    var o1 = mat4x4<f32>();
    var o2 = mat4x4<f32>();
    var o3 = mat4x4<f32>();
    if (first < keys) {
        flash_fetch(first, lid, k_base, v_base, 3u);
    }
    for (var tile = first; tile < keys; tile = tile + FLASH_KEYS) {
        // k^T (consecutive invocations on consecutive keys) and, unless shared, the value rows.
        for (var u = 0u; u < FLASH_KEYS * FLASH_D / FLASH_THREADS; u = u + 1u) {
            let t = lid + FLASH_THREADS * u;
            fk[t / FLASH_KEYS * kh + t % FLASH_KEYS / 2u][t % 2u] = kn[u];
        }
        if (FLASH_SHARE == 0u) {
            flash_put_values(lid);
        }
        workgroupBarrier();
        let more = tile + FLASH_KEYS < keys;
        if (more) {
            // The next tile's keys, and its values too unless this tile's are still in vn.
            flash_fetch(tile + FLASH_KEYS, lid, k_base, v_base, 3u - 2u * FLASH_SHARE);
        }

        // Scores of rows 4ty..+3 (lanes) against keys kt tx (sx), kt tx + 1 (sy) and, in
        // 32-key tiles, kt tx + 2 (sz) and kt tx + 3 (sw).
        var sx = vec4<f32>(0.0);
        var sy = vec4<f32>(0.0);
        var sz = vec4<f32>(0.0);
        var sw = vec4<f32>(0.0);
        for (var e = 0u; e < FLASH_D; e = e + 1u) {
            let qv = fq[e * groups + ty];
            let kv = fk[e * kh + kt / 2u * tx];
            sx = fma(qv, vec4<f32>(kv.x), sx);
            sy = fma(qv, vec4<f32>(kv.y), sy);
// @native-only (32-key tiles)
            if (FLASH_KEYS == 32u) {
                let kw = fk[e * kh + 2u * tx + 1u];
                sz = fma(qv, vec4<f32>(kw.x), sz);
                sw = fma(qv, vec4<f32>(kw.y), sw);
            }
// @native-end
        }
        let j = vec4<u32>(tile + kt * tx);
        sx = scores4(sx, j < vis);
        sy = scores4(sy, j + vec4<u32>(1u) < vis);
        var top = max(sx, sy);
// @native-only
        if (FLASH_KEYS == 32u) {
            sz = scores4(sz, j + vec4<u32>(2u) < vis);
            sw = scores4(sw, j + vec4<u32>(3u) < vis);
            top = max(top, max(sz, sw));
        }
// @native-end
        fsh[ty * FX + tx] = top;
        workgroupBarrier();

        top = fsh[ty * FX];
        for (var t = 1u; t < FX; t = t + 1u) {
            top = max(top, fsh[ty * FX + t]);
        }
        let m_new = max(m, top);
        // A row with no finite maximum yet keeps its zeros (-inf: nothing seen, which also
        // avoids -inf - -inf; +inf: the row ends NaN).
        let live = finite4(m_new);
        let scale = select(vec4<f32>(1.0), select(vec4<f32>(0.0), exp(m - m_new), finite4(m)), live);
        let px = select(vec4<f32>(0.0), exp(sx - m_new), live);
        let py = select(vec4<f32>(0.0), exp(sy - m_new), live);
        var pz = vec4<f32>(0.0);
        var pw = vec4<f32>(0.0);
// @native-only
        if (FLASH_KEYS == 32u) {
            pz = select(vec4<f32>(0.0), exp(sz - m_new), live);
            pw = select(vec4<f32>(0.0), exp(sw - m_new), live);
        }
// @native-end
        m = m_new;
        l = l * scale + ((px + py) + (pz + pw));
        o0 = scale4(o0, scale);
        if (FLASH_D > 32u) {
            o1 = scale4(o1, scale);
        }
        if (FLASH_D > 64u) {
            o2 = scale4(o2, scale);
            o3 = scale4(o3, scale);
        }
        // P^T, its vec4 slots turned by the keys' invocation so that the eight tx write
        // different banks.
        let slot = (ty ^ tx) & (groups - 1u);
        fp[kt * tx * groups + slot] = px;
        fp[(kt * tx + 1u) * groups + slot] = py;
// @native-only
        if (FLASH_KEYS == 32u) {
            fp[(kt * tx + 2u) * groups + slot] = pz;
            fp[(kt * tx + 3u) * groups + slot] = pw;
        }
// @native-end
// @native-only (the browser build keeps a value tile of its own)
        if (FLASH_SHARE == 1u) {
            // Every score is taken (the barrier above): the values go where k^T was, then the
            // next tile's values are loaded.
            flash_put_values(lid);
            if (more) {
                flash_fetch(tile + FLASH_KEYS, lid, k_base, v_base, 2u);
            }
        }
// @native-end
        workgroupBarrier();

        for (var jj = 0u; jj < FLASH_KEYS; jj = jj + 1u) {
            let p = fp[jj * groups + ((ty ^ (jj / kt)) & (groups - 1u))];
            o0 = pv4(o0, p, flash_value(jj, tx));
            if (FLASH_D > 32u) {
                o1 = pv4(o1, p, flash_value(jj, tx + FX));
            }
            if (FLASH_D > 64u) {
                o2 = pv4(o2, p, flash_value(jj, tx + 2u * FX));
                o3 = pv4(o3, p, flash_value(jj, tx + 3u * FX));
            }
        }
        workgroupBarrier();
    }

    // The rows' denominators: the sums of their eight shares (a split's partial keeps them).
    fsh[ty * FX + tx] = l;
    workgroupBarrier();
    var denom = fsh[ty * FX];
    for (var t = 1u; t < FX; t = t + 1u) {
        denom = denom + fsh[ty * FX + t];
    }
    // A row with no visible key gets zeros.
    let seen = vis > vec4<u32>(0u);
    flash_row(r0, b, h, tx, chunk, chunks, m.x, denom.x, seen.x,
        mat4x4<f32>(o0[0], o1[0], o2[0], o3[0]));
    flash_row(r0 + 1u, b, h, tx, chunk, chunks, m.y, denom.y, seen.y,
        mat4x4<f32>(o0[1], o1[1], o2[1], o3[1]));
    flash_row(r0 + 2u, b, h, tx, chunk, chunks, m.z, denom.z, seen.z,
        mat4x4<f32>(o0[2], o1[2], o2[2], o3[2]));
    flash_row(r0 + 3u, b, h, tx, chunk, chunks, m.w, denom.w, seen.w,
        mat4x4<f32>(o0[3], o1[3], o2[3], o3[3]));
}
