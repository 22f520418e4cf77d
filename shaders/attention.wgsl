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
