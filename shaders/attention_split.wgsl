// Decoding attention split along the keys (flash-decoding): a few query rows against a long
// key/value cache. `main_split` takes one chunk of CHUNK keys of one KV head for every query
// row that reads that head (the GQA group times sq, at most 8 rows), so each key and value row
// is read once for all of them, and writes each row's partial (m, l, acc) for the chunk;
// `main_merge` folds a row's partials into its output. One chunk per workgroup puts
// chunks x KV heads x batch workgroups to work where the row kernel (`main` in attention.wgsl)
// had one per query row and head. The host takes chunks of 256 keys of an f32 cache and 128 of
// a half-precision one (the faster of 64, 128 and 256 for each on an H200).
//
// q, k, v and the output are read and written as u32 words: f32 bits (KV 0), or f16 (1) or
// bf16 (2) two to a word as those tensors are stored, so a half-precision KV cache is read as
// stored, at half the bytes (the host sends halves only with even widths, offsets and strides,
// so no row starts inside a word). Partials are f32.
//
// In `main_split`, WG / CHUNK invocations share a key: each takes a run of the key's words
// and its products with every row (q in workgroup memory), and the first adds the others'
// sums. k is bound as vec4 words: where every key row starts at a multiple of 16 bytes
// (K_VEC4) the runs are whole vec4s, loaded 4 words at a time (scalar loads of a key an
// invocation were most of the f32 kernel's time); otherwise a word at a time. The rows'
// maxima come from two rounds over workgroup memory, the probabilities go to
// workgroup memory, and the value phase gives each group of dv / (elements a word)
// invocations a share of the chunk's keys, one word column each (16 value rows loaded before
// their products); the groups' sums meet in workgroup memory. A probability of 0 adds nothing,
// so a masked value row never reaches the sum. Partials of row g and chunk c start at
// (g * chunks + c) * (dv + 2): m, l, then dv accumulators; a chunk a row sees nothing of holds
// m = -inf, l = 0.

// @include attention_common
// @native-only
// @include dtype
// @native-end

@group(0) @binding(1) var<storage, read> q: array<u32>;
@group(0) @binding(2) var<storage, read> k: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> v: array<u32>;
@group(0) @binding(5) var<storage, read_write> out: array<u32>;

// Keys a partial of `main_merge` covers: `main_split`'s CHUNK, or the split size of
// attention.wgsl's `main_flash` (its SPLIT_KEYS).
override MERGE_KEYS: u32 = 256u;
// How q, k, v and the output are stored: 0 f32, 1 f16, 2 bf16.
override KV: u32 = 0u;

// `main_split` is native only: the browser build decodes with the row kernel (attention.wgsl's
// `main`), since the split kernel's text took its package over the size budget.
// @native-only
const ROWS: u32 = 8u; // query rows a workgroup, at most
// The rows this pipeline handles: the GQA group times sq rounded up to 1, 2, 4 or 8, so that
// every loop over rows has a constant bound and its arrays stay in registers.
override GROUP_ROWS: u32 = 8u;
// Keys a `main_split` workgroup takes: a power of two from 32 to 256, WG / CHUNK invocations a
// key (the host sends 128 or 256).
override CHUNK: u32 = 256u;
// Whether every key row starts at a multiple of 4 words (16 bytes): the key phase then loads
// 4 words at a time (A3 1.9x faster in f32 on an H200); otherwise a word at a time.
override K_VEC4: bool = false;
const DMAX: u32 = 256u; // widest head
// Key words an invocation loads before their products: up to KW_MAX, a multiple of 4 (the host
// sends 16 for f32 and 8 for halves, the faster for each on an H200).
override KW: u32 = 8u;
const KW_MAX: u32 = 16u;
const VL: u32 = 16u; // value rows an invocation loads before their products

// The query rows at r * DMAX, the scores and then the probabilities of key t at
// PROBS + r * WG + t * (WG / CHUNK); at the end, the value groups' sums over all of it.
var<workgroup> wsm: array<f32, 2u * ROWS * DMAX>;
const PROBS: u32 = ROWS * DMAX;
var<workgroup> part_split: array<f32, ROWS * 32u>;
var<workgroup> max_split: array<f32, ROWS>;

// Word `i` of k (bound as vec4 words so that aligned rows load 4 at a time).
fn k_word(i: u32) -> u32 {
    return k[i / 4u][i % 4u];
}

// Element `e` (0 or 1) of word `w`: its f32 bits, or its low or high half widened.
fn elem(w: u32, e: u32) -> f32 {
    if (KV != 0u) {
        let h = (w >> (16u * e)) & 0xffffu;
        if (KV == 2u) {
            return bf16_to_f32(h);
        }
        return f16_to_f32(h);
    }
    return bitcast<f32>(w);
}

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
    let epw = select(1u, 2u, KV != 0u); // elements a word
    let chunks = (params.sk + CHUNK - 1u) / CHUNK;
    let rows = (params.hq / params.hkv) * params.sq;
    let d = params.d;
    let dv = params.dv;
    let k_base = params.k_off + b * params.k_sb + kvh * params.k_sh;
    let v_base = params.v_off + b * params.v_sb + kvh * params.v_sh;
    let neg_inf = bitcast<f32>(neg_inf_bits);
    for (var t = lid; t < rows * d; t = t + WG) {
        let r = t / d;
        let hi = split_row(r, kvh);
        let i = q_row_at(b, hi.x, hi.y) + t % d;
        wsm[r * DMAX + t % d] = elem(q[i / epw], i % epw);
    }
    workgroupBarrier();

    // Invocation `part` of key j takes words [w0, w1) of the key's row: its share of the
    // products with every row (-inf where the row does not see the key). Each element is
    // loaded once and multiplied into all the rows' dot products.
    let parts = WG / CHUNK;
    let key = lid / parts;
    let part = lid % parts;
    let j = c * CHUNK + key;
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
        let words = d / epw;
        // With K_VEC4, shares of whole vec4 words, so that each starts aligned.
        let share = (words + parts - 1u) / parts;
        let share4 = select(share, (share + 3u) & ~3u, K_VEC4);
        let w0 = min(words, part * share4);
        let w1 = min(words, w0 + share4);
        let kj = (k_base + j * params.k_ss) / epw;
        // KW words loaded before any is used (a key's row is a few invocations', so its loads
        // are what the chunk waits on), then multiplied in order.
        var w = w0;
        for (; w + KW <= w1; w = w + KW) {
            var x: array<u32, KW_MAX>;
            if (K_VEC4) {
                for (var u = 0u; u < KW / 4u; u = u + 1u) {
                    let x4 = k[(kj + w) / 4u + u];
                    x[4u * u] = x4.x;
                    x[4u * u + 1u] = x4.y;
                    x[4u * u + 2u] = x4.z;
                    x[4u * u + 3u] = x4.w;
                }
            } else {
                for (var u = 0u; u < KW; u = u + 1u) {
                    x[u] = k_word(kj + w + u);
                }
            }
            for (var u = 0u; u < KW; u = u + 1u) {
                for (var h = 0u; h < epw; h = h + 1u) {
                    let e = (w + u) * epw + h;
                    let xe = elem(x[u], h);
                    for (var r = 0u; r < GROUP_ROWS; r = r + 1u) {
                        dots[r] = fma(wsm[r * DMAX + e], xe, dots[r]);
                    }
                }
            }
        }
        for (; w < w1; w = w + 1u) {
            let x = k_word(kj + w);
            for (var h = 0u; h < epw; h = h + 1u) {
                let xe = elem(x, h);
                for (var r = 0u; r < GROUP_ROWS; r = r + 1u) {
                    dots[r] = fma(wsm[r * DMAX + w * epw + h], xe, dots[r]);
                }
            }
        }
    }
    for (var r = 0u; r < GROUP_ROWS; r = r + 1u) {
        wsm[PROBS + r * WG + lid] = dots[r];
    }
    workgroupBarrier();
    // The key's first invocation adds the other parts' sums and keeps the scores, in its own
    // slot (which only it reads).
    var s: array<f32, ROWS>;
    if (part == 0u) {
        for (var r = 0u; r < GROUP_ROWS; r = r + 1u) {
            var dot = dots[r];
            for (var p = 1u; p < parts; p = p + 1u) {
                dot = dot + wsm[PROBS + r * WG + lid + p];
            }
            s[r] = neg_inf;
            if (j < seen[r]) {
                s[r] = score(dot);
            }
            wsm[PROBS + r * WG + lid] = s[r];
        }
    }
    workgroupBarrier();
    // Each row's maximum over the chunk: 32 invocations a row take CHUNK / 32 scores each,
    // then one invocation a row takes the 32.
    {
        let r = lid / 32u;
        let part32 = lid % 32u;
        let each = CHUNK / 32u;
        var m = neg_inf;
        for (var t = 0u; t < each; t = t + 1u) {
            m = max(m, wsm[PROBS + r * WG + (part32 * each + t) * parts]);
        }
        part_split[r * 32u + part32] = m;
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
    if (part == 0u) {
        for (var r = 0u; r < GROUP_ROWS; r = r + 1u) {
            let m = max_split[r];
            var p = 0.0;
            if (is_finite(m) && bitcast<u32>(s[r]) != neg_inf_bits) {
                p = exp(s[r] - m);
            }
            wsm[PROBS + r * WG + lid] = p;
        }
    }
    workgroupBarrier();

    // Groups of `cols` invocations (one a word column of the values) take the chunk's keys in
    // `groups` shares.
    let count = min(CHUNK, k_seen - min(k_seen, c * CHUNK));
    let cols = max(1u, dv / epw);
    let groups = min(32u, max(1u, WG / cols));
    let g = lid / cols;
    let col = lid % cols;
    let per = (count + groups - 1u) / groups;
    let t0 = min(count, g * per);
    let t1 = min(count, t0 + per);
    var acc: array<vec2<f32>, ROWS>;
    var l: array<f32, ROWS>;
    if (g < groups) {
        let vc = (v_base + c * CHUNK * params.v_ss) / epw + col;
        let stride = params.v_ss / epw;
        var t = t0;
        for (; t + VL <= t1; t = t + VL) {
            var x: array<u32, VL>;
            for (var u = 0u; u < VL; u = u + 1u) {
                x[u] = v[vc + (t + u) * stride];
            }
            for (var u = 0u; u < VL; u = u + 1u) {
                // Widened once for all the rows: inside their loop, halves were widened once a
                // row (A3 with an f16 cache 34 us against 27 on an H200).
                let x0 = elem(x[u], 0u);
                var x1 = 0.0;
                if (epw == 2u) {
                    x1 = elem(x[u], 1u);
                }
                for (var r = 0u; r < GROUP_ROWS; r = r + 1u) {
                    let p = wsm[PROBS + r * WG + (t + u) * parts];
                    acc[r].x = select(acc[r].x, fma(p, x0, acc[r].x), p != 0.0);
                    if (epw == 2u) {
                        acc[r].y = select(acc[r].y, fma(p, x1, acc[r].y), p != 0.0);
                    }
                    l[r] = l[r] + p;
                }
            }
        }
        for (; t < t1; t = t + 1u) {
            let x = v[vc + t * stride];
            let x0 = elem(x, 0u);
            var x1 = 0.0;
            if (epw == 2u) {
                x1 = elem(x, 1u);
            }
            for (var r = 0u; r < GROUP_ROWS; r = r + 1u) {
                let p = wsm[PROBS + r * WG + t * parts];
                acc[r].x = select(acc[r].x, fma(p, x0, acc[r].x), p != 0.0);
                if (epw == 2u) {
                    acc[r].y = select(acc[r].y, fma(p, x1, acc[r].y), p != 0.0);
                }
                l[r] = l[r] + p;
            }
        }
    }
    // The other groups' sums to the first through workgroup memory, free once every group has
    // read its probabilities: ((g - 1) cols + col) epw + h < WG epw, times ROWS rows.
    workgroupBarrier();
    if (g >= 1u && g < groups) {
        for (var r = 0u; r < GROUP_ROWS; r = r + 1u) {
            let at = (((g - 1u) * cols + col) * epw) * ROWS + r;
            wsm[at] = acc[r].x;
            if (epw == 2u) {
                wsm[at + ROWS] = acc[r].y;
            }
            if (col == 0u) {
                part_split[g * ROWS + r] = l[r];
            }
        }
    }
    workgroupBarrier();
    if (g == 0u && col * epw < dv) {
        for (var o = 1u; o < groups; o = o + 1u) {
            for (var r = 0u; r < GROUP_ROWS; r = r + 1u) {
                let at = (((o - 1u) * cols + col) * epw) * ROWS + r;
                acc[r].x = acc[r].x + wsm[at];
                if (epw == 2u) {
                    acc[r].y = acc[r].y + wsm[at + ROWS];
                }
                l[r] = l[r] + part_split[o * ROWS + r];
            }
        }
        for (var r = 0u; r < rows; r = r + 1u) {
            let hi = split_row(r, kvh);
            let gi = (b * params.hq + hi.x) * params.sq + hi.y;
            let base = (gi * chunks + c) * (dv + 2u);
            if (col == 0u) {
                out[base] = bitcast<u32>(max_split[r]);
                out[base + 1u] = bitcast<u32>(l[r]);
            }
            out[base + 2u + col * epw] = bitcast<u32>(acc[r].x);
            if (epw == 2u) {
                out[base + 3u + col * epw] = bitcast<u32>(acc[r].y);
            }
        }
    }
}
// @native-end

// `main_merge`: one workgroup per query row (position, head, batch entry), invocation `col`
// for the word column col of the output (columns col * epw ..). The partials (bound as q) of
// the row's chunks rescale to their largest maximum: out = sum acc_c e^(m_c - M) /
// sum l_c e^(m_c - M). No visible key gives zeros; a maximum that is not finite (a NaN or
// +inf score, or only -inf scores) gives NaN.
@compute @workgroup_size(256)
fn main_merge(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = wid.x;
    let h = wid.y;
    let b = wid.z;
    let dv = params.dv;
    let epw = select(1u, 2u, KV != 0u); // elements a word
    if (lid * epw >= dv) {
        return;
    }
    let chunks = (params.sk + MERGE_KEYS - 1u) / MERGE_KEYS;
    let g = (b * params.hq + h) * params.sq + i;
    let first = g * chunks * (dv + 2u);
    var m = bitcast<f32>(neg_inf_bits);
    for (var c = 0u; c < chunks; c = c + 1u) {
        m = max(m, bitcast<f32>(q[first + c * (dv + 2u)]));
    }
    var l = 0.0;
    var acc = vec2<f32>(0.0);
    if (is_finite(m)) {
        for (var c = 0u; c < chunks; c = c + 1u) {
            let base = first + c * (dv + 2u);
            let mc = bitcast<f32>(q[base]);
            if (bitcast<u32>(mc) != neg_inf_bits) {
                let w = exp(mc - m);
                l = l + bitcast<f32>(q[base + 1u]) * w;
                acc.x = acc.x + bitcast<f32>(q[base + 2u + lid * epw]) * w;
                // @native-only
                if (epw == 2u) {
                    acc.y = acc.y + bitcast<f32>(q[base + 3u + lid * epw]) * w;
                }
                // @native-end
            }
        }
    }
    var r = vec2<f32>(0.0);
    if (visible_keys(i, b) > 0u) {
        let nan = bitcast<f32>(nan_bits);
        r = select(vec2<f32>(nan), acc / l, is_finite(m));
    }
    let o = out_row_at(b, h, i) + lid * epw;
    // @native-only
    if (KV != 0u) {
        var bits = vec2<u32>(f32_to_f16(r.x), f32_to_f16(r.y));
        if (KV == 2u) {
            bits = vec2<u32>(f32_to_bf16(r.x), f32_to_bf16(r.y));
        }
        out[o / 2u] = bits.x | (bits.y << 16u);
        return;
    }
    // @native-end
    out[o] = bitcast<u32>(r.x);
}
