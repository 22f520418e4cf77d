// Fused scaled dot-product attention with an online softmax: the score matrix is never written
// to memory. One workgroup per (query row, head, batch); keys are visited in tiles of 256:
//   1. invocation t scores key j = tile + t: s = scale * q . k_j, or -inf where masked;
//   2. the tile's maximum updates the running maximum m, the probabilities p_j = exp(s_j - m)
//      go to workgroup memory and their sum updates the running denominator l;
//   3. invocation d (< dv) rescales its accumulator and adds sum_j p_j v_j[d].
// At the end out[d] = acc / l. Grouped-query attention: query head h reads key/value head
// h / (hq / hkv). CAUSAL hides keys after the query (aligned to the end when sk > sq, as with a
// KV cache); HAS_LENS hides keys at or beyond the batch entry's length. A query with no visible
// key gets zeros. NaN follows the CPU backend: a NaN or +inf score, or a row whose visible
// scores are all -inf, gives a NaN row. Scores are checked on their bits (WGSL lets compilers
// assume no NaN or infinity, and `max` may drop a NaN): a NaN score becomes +inf, which `max`
// keeps, and a row whose running maximum is not finite at the end is NaN. Requires d, dv <= 256.

// @include attention_common

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
            // Eight loads issued before their products, in four independent sums: a key's
            // row is one invocation's, so its loads are what the tile waits on.
            var d0 = 0.0;
            var d1 = 0.0;
            var d2 = 0.0;
            var d3 = 0.0;
            let kj = k_base + j * params.k_ss;
            var e = 0u;
            for (; e + 8u <= d; e = e + 8u) {
                let k0 = k[kj + e];
                let k1 = k[kj + e + 1u];
                let k2 = k[kj + e + 2u];
                let k3 = k[kj + e + 3u];
                let k4 = k[kj + e + 4u];
                let k5 = k[kj + e + 5u];
                let k6 = k[kj + e + 6u];
                let k7 = k[kj + e + 7u];
                d0 = fma(q_row[e + 4u], k4, fma(q_row[e], k0, d0));
                d1 = fma(q_row[e + 5u], k5, fma(q_row[e + 1u], k1, d1));
                d2 = fma(q_row[e + 6u], k6, fma(q_row[e + 2u], k2, d2));
                d3 = fma(q_row[e + 7u], k7, fma(q_row[e + 3u], k3, d3));
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
        // workgroup_sum's barriers also published probs.
        if (lid < dv) {
            // Four value rows loaded before their products, in two independent sums.
            var p0 = acc * correction;
            var p1 = 0.0;
            let count = min(WG, visible - tile);
            let vt = v_base + tile * params.v_ss + lid;
            var t = 0u;
            for (; t + 4u <= count; t = t + 4u) {
                let v0 = v[vt + t * params.v_ss];
                let v1 = v[vt + (t + 1u) * params.v_ss];
                let v2 = v[vt + (t + 2u) * params.v_ss];
                let v3 = v[vt + (t + 3u) * params.v_ss];
                p0 = fma(probs[t + 2u], v2, fma(probs[t], v0, p0));
                p1 = fma(probs[t + 3u], v3, fma(probs[t + 1u], v1, p1));
            }
            for (; t < count; t = t + 1u) {
                p0 = fma(probs[t], v[vt + t * params.v_ss], p0);
            }
            acc = p0 + p1;
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

// `main_tiled`, for d and dv up to 128: a workgroup takes a block of query rows of one head,
// so each key and value row it loads serves the whole block. Heads up to 64 wide take blocks
// of 16 rows and tiles of 16 keys; wider ones (WIDE) 8 and 8, in the same workgroup memory
// (13.6 KB, within WebGPU's default 16 KB). Per tile of keys:
//   1. the tile's keys and values are copied to workgroup memory (key rows padded by one
//      float, so the rows a step reads fall in different banks);
//   2. each (query, key) pair's dot product is split over 256 / (rows x keys) invocations
//      (1, or 4 when WIDE), each summing its part of d; a whole product is masked and scaled
//      by its invocation;
//   3. one invocation per query row (adding the parts, masking and scaling when WIDE) takes
//      the tile's maximum, turns the scores into probabilities and updates the row's running
//      maximum and denominator;
//   4. each invocation rescales its four accumulators (four columns of one query's output,
//      256 / rows apart) and adds the tile's probabilities times the value rows.
// Rows of one block see different numbers of keys under CAUSAL; the tiles run up to what the
// block's last row sees, and a row's scores past its own limit are -inf.
override WIDE: bool = false;

const TQ: u32 = 16u; // rows per block (8 when WIDE)
const TK: u32 = 16u; // keys per tile (8 when WIDE)
const TD: u32 = 64u; // head width (128 when WIDE)

var<workgroup> q_tile: array<f32, TQ * TD>;
var<workgroup> k_tile: array<f32, TK * (TD + 1u)>;
var<workgroup> v_tile: array<f32, TK * TD>;
var<workgroup> p_tile: array<f32, TQ * TK>;
var<workgroup> dot_parts: array<f32, WG>;
var<workgroup> row_max: array<f32, TQ>;
var<workgroup> row_sum: array<f32, TQ>;
var<workgroup> row_scale: array<f32, TQ>;

@compute @workgroup_size(256)
fn main_tiled(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    // Block shape: rows x keys per tile, and the row stride of the q and v tiles.
    let bq = select(TQ, TQ / 2u, WIDE);
    let bk = select(TK, TK / 2u, WIDE);
    let dt = select(TD, 2u * TD, WIDE);
    let kt = dt + 1u;
    let i0 = wid.x * bq; // first query row of the block
    let h = wid.y;
    let b = wid.z;
    let d = params.d;
    let dv = params.dv;
    let kvh = h / (params.hq / params.hkv);
    let k_base = params.k_off + b * params.k_sb + kvh * params.k_sh;
    let v_base = params.v_off + b * params.v_sb + kvh * params.v_sh;
    let neg_inf = bitcast<f32>(neg_inf_bits);
    // Scores: pair (sr, sc) of the tile, part `part` of its dot product.
    let split = WG / (bq * bk);
    let pair = lid / split;
    let part = lid % split;
    let sr = pair / bk;
    let sc = pair % bk;
    let chunk = (d + split - 1u) / split;
    let e0 = min(d, part * chunk);
    let e1 = min(d, e0 + chunk);
    // Keys the scored query row sees.
    let scored = visible_keys(i0 + sr, b);
    // Output: row `orow` of the block, columns ocol + j * per_row for j < 4.
    let per_row = WG / bq;
    let orow = lid / per_row;
    let ocol = lid % per_row;

    if (lid == 0u) {
        // Visible keys grow with the row: the block's last row sees the most.
        visible_shared = visible_keys(min(i0 + bq, params.sq) - 1u, b);
    }
    let rows = min(bq, params.sq - i0);
    for (var t = lid; t < bq * d; t = t + WG) {
        let row = t / d;
        var val = 0.0;
        if (row < rows) {
            val = q[q_row_at(b, h, i0 + row) + t % d];
        }
        q_tile[row * dt + t % d] = val;
    }
    var mine = 0u;
    if (lid < bq) {
        mine = visible_keys(i0 + lid, b);
        row_max[lid] = neg_inf;
        row_sum[lid] = 0.0;
    }
    let keys = workgroupUniformLoad(&visible_shared);

    var acc0 = 0.0;
    var acc1 = 0.0;
    var acc2 = 0.0;
    var acc3 = 0.0;
    for (var tile = 0u; tile < keys; tile = tile + bk) {
        let n = min(bk, params.sk - tile);
        for (var t = lid; t < bk * d; t = t + WG) {
            let row = t / d;
            var val = 0.0;
            if (row < n) {
                val = k[k_base + (tile + row) * params.k_ss + t % d];
            }
            k_tile[row * kt + t % d] = val;
        }
        for (var t = lid; t < bk * dv; t = t + WG) {
            let row = t / dv;
            var val = 0.0;
            if (row < n) {
                val = v[v_base + (tile + row) * params.v_ss + t % dv];
            }
            v_tile[row * dt + t % dv] = val;
        }
        workgroupBarrier();

        var dot = 0.0;
        for (var e = e0; e < e1; e = e + 1u) {
            dot = fma(q_tile[sr * dt + e], k_tile[sc * kt + e], dot);
        }
        if (split == 1u) {
            // The whole dot product: the invocation masks and scales it itself.
            var s = neg_inf;
            if (tile + sc < scored) {
                s = score(dot);
            }
            p_tile[sr * bk + sc] = s;
        } else {
            dot_parts[lid] = dot;
        }
        workgroupBarrier();

        if (lid < bq) {
            let old = row_max[lid];
            var m = old;
            for (var t = 0u; t < bk; t = t + 1u) {
                if (split > 1u) {
                    var s = neg_inf;
                    if (tile + t < mine) {
                        var sum = 0.0;
                        for (var p = 0u; p < split; p = p + 1u) {
                            sum = sum + dot_parts[(lid * bk + t) * split + p];
                        }
                        s = score(sum);
                    }
                    p_tile[lid * bk + t] = s;
                }
                m = max(m, p_tile[lid * bk + t]);
            }
            var sum = 0.0;
            var scale = 1.0;
            // A row with no finite maximum yet keeps its zeros (-inf: nothing seen, which also
            // avoids -inf - -inf; +inf: the row ends NaN).
            if (is_finite(m)) {
                for (var t = 0u; t < bk; t = t + 1u) {
                    let p = exp(p_tile[lid * bk + t] - m);
                    p_tile[lid * bk + t] = p;
                    sum = sum + p;
                }
                scale = select(0.0, exp(old - m), is_finite(old));
            } else {
                for (var t = 0u; t < bk; t = t + 1u) {
                    p_tile[lid * bk + t] = 0.0;
                }
            }
            row_scale[lid] = scale;
            row_sum[lid] = row_sum[lid] * scale + sum;
            row_max[lid] = m;
        }
        workgroupBarrier();

        let scale = row_scale[orow];
        var p0 = acc0 * scale;
        var p1 = acc1 * scale;
        var p2 = acc2 * scale;
        var p3 = acc3 * scale;
        for (var t = 0u; t < bk; t = t + 1u) {
            let p = p_tile[orow * bk + t];
            let vr = t * dt + ocol;
            p0 = fma(p, v_tile[vr], p0);
            p1 = fma(p, v_tile[vr + per_row], p1);
            p2 = fma(p, v_tile[vr + 2u * per_row], p2);
            p3 = fma(p, v_tile[vr + 3u * per_row], p3);
        }
        acc0 = p0;
        acc1 = p1;
        acc2 = p2;
        acc3 = p3;
        workgroupBarrier();
    }
    let i = i0 + orow;
    if (i < params.sq) {
        // A row with no visible key gets zeros; one whose maximum is not finite, NaN.
        let l = row_sum[orow];
        let finite = is_finite(row_max[orow]);
        let seen = visible_keys(i, b) > 0u;
        let o = out_row_at(b, h, i);
        let accs = array<f32, 4>(acc0, acc1, acc2, acc3);
        for (var j = 0u; j < 4u; j = j + 1u) {
            let col = ocol + j * per_row;
            if (col < dv) {
                var r = 0.0;
                if (seen) {
                    r = select(bitcast<f32>(nan_bits), accs[j] / l, finite);
                }
                out[o + col] = r;
            }
        }
    }
}

// main_flash: blocks of 64 query rows for heads up to 64 wide, in the manner of flash attention.
// 256 invocations, four a query row. Each keeps its row of q in registers (16 vec4), scores 8
// keys of every 32-key tile (keys c, c + 4, .., c + 28, where c is its place among the row's
// four) and owns 16 output columns (vec4 groups c, c + 4, c + 8, c + 12). For each tile:
//   1. the tile's key and value rows go to workgroup memory;
//   2. each invocation scores its 8 keys (masked and scaled as in `main`) and shares their
//      maximum with the row's other three, which gives the row's new running maximum;
//   3. each turns its scores into probabilities against it, rescales its accumulators and its
//      share of the denominator, and writes the probabilities to workgroup memory;
//   4. each adds the tile's 32 probabilities times the value rows to its 16 columns.
// The four shares of the denominator are added at the end. About 26 KB of workgroup memory,
// under the 32 KB that browsers give on desktop GPUs.
//
// With SPLIT_KEYS > 0 (a multiple of FK) a block's keys are split in chunks of SPLIT_KEYS, one
// workgroup a (block, chunk), so that a grid of few blocks (a short prompt's few heads) still
// fills the GPU: workgroup x = block * chunks + chunk, and instead of the output it writes each
// row's partial (m, l, acc) for its chunk in `main_merge`'s layout (attention_split.wgsl), the
// merge running with MERGE_KEYS = SPLIT_KEYS. A chunk past the keys a row sees leaves m = -inf.
const FR: u32 = 64u; // query rows a block
const FK: u32 = 32u; // keys a tile
const FK4: u32 = 17u; // vec4s a row of k_flash: 16, and one of padding so that the four keys
// a warp reads at once fall in different banks
const FPS: u32 = 33u; // p_flash's row stride, padded for the same reason
override SPLIT_KEYS: u32 = 0u;

var<workgroup> k_flash: array<vec4<f32>, FK * FK4>;
var<workgroup> v_flash: array<vec4<f32>, FK * 16u>;
var<workgroup> p_flash: array<f32, FR * FPS>;
var<workgroup> share_flash: array<f32, WG>;

@compute @workgroup_size(256)
fn main_flash(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    // (Dividing by SPLIT_KEYS itself would be a division by zero in the pipeline without a
    // split, which WGSL rejects even where it is never run.)
    let split = max(SPLIT_KEYS, 1u);
    var chunks = 1u;
    var chunk = 0u;
    if (SPLIT_KEYS > 0u) {
        chunks = (params.sk + split - 1u) / split;
        chunk = wid.x % chunks;
    }
    let i0 = (wid.x / chunks) * FR;
    let h = wid.y;
    let b = wid.z;
    let d = params.d;
    let dv = params.dv;
    let d4 = (d + 3u) / 4u;
    let dv4 = (dv + 3u) / 4u;
    let kvh = h / (params.hq / params.hkv);
    let k_base = params.k_off + b * params.k_sb + kvh * params.k_sh;
    let v_base = params.v_off + b * params.v_sb + kvh * params.v_sh;
    let neg_inf = bitcast<f32>(neg_inf_bits);
    let r = lid / 4u;
    let c = lid % 4u;
    let i = i0 + r;
    let mine = visible_keys(i, b);
    if (lid == 0u) {
        // Visible keys grow with the row: the block's last row sees the most.
        visible_shared = visible_keys(min(i0 + FR, params.sq) - 1u, b);
    }
    let visible = workgroupUniformLoad(&visible_shared);
    // This workgroup's keys: its chunk's (a multiple of FK from its start), or all it sees.
    var first = 0u;
    var keys = visible;
    if (SPLIT_KEYS > 0u) {
        first = chunk * SPLIT_KEYS;
        keys = min(visible, first + SPLIT_KEYS);
    }

    var qr: array<vec4<f32>, 16>;
    if (i < params.sq) {
        let qb = q_row_at(b, h, i);
        for (var e4 = 0u; e4 < 16u; e4 = e4 + 1u) {
            var x = vec4<f32>(0.0);
            for (var j = 0u; j < 4u; j = j + 1u) {
                if (e4 * 4u + j < d) {
                    x[j] = q[qb + e4 * 4u + j];
                }
            }
            qr[e4] = x;
        }
    }
    var acc: array<vec4<f32>, 4>;
    var m = neg_inf;
    var l = 0.0;
    for (var tile = first; tile < keys; tile = tile + FK) {
        let n = min(FK, params.sk - tile);
        for (var t = lid; t < FK * 64u; t = t + WG) {
            let key = t / 64u;
            let e = t % 64u;
            var kx = 0.0;
            var vx = 0.0;
            if (key < n) {
                if (e < d) {
                    kx = k[k_base + (tile + key) * params.k_ss + e];
                }
                if (e < dv) {
                    vx = v[v_base + (tile + key) * params.v_ss + e];
                }
            }
            k_flash[key * FK4 + e / 4u][e % 4u] = kx;
            v_flash[key * 16u + e / 4u][e % 4u] = vx;
        }
        workgroupBarrier();

        var s: array<f32, 8>;
        var top = neg_inf;
        for (var u = 0u; u < 8u; u = u + 1u) {
            let key = c + 4u * u;
            var dot_ = 0.0;
            for (var e4 = 0u; e4 < 16u; e4 = e4 + 1u) {
                if (e4 < d4) {
                    dot_ = dot_ + dot(qr[e4], k_flash[key * FK4 + e4]);
                }
            }
            var x = neg_inf;
            if (tile + key < mine) {
                x = score(dot_);
            }
            s[u] = x;
            top = max(top, x);
        }
        share_flash[lid] = top;
        workgroupBarrier();
        let row = r * 4u;
        let tile_max = max(
            max(share_flash[row], share_flash[row + 1u]),
            max(share_flash[row + 2u], share_flash[row + 3u])
        );
        let m_new = max(m, tile_max);
        // A row with no finite maximum yet keeps its zeros (-inf: nothing seen, which also
        // avoids -inf - -inf; +inf: the row ends NaN).
        var scale = 1.0;
        var sum = 0.0;
        if (is_finite(m_new)) {
            scale = select(0.0, exp(m - m_new), is_finite(m));
            for (var u = 0u; u < 8u; u = u + 1u) {
                let p = exp(s[u] - m_new);
                s[u] = p;
                sum = sum + p;
            }
        } else {
            for (var u = 0u; u < 8u; u = u + 1u) {
                s[u] = 0.0;
            }
        }
        m = m_new;
        l = l * scale + sum;
        for (var u = 0u; u < 8u; u = u + 1u) {
            p_flash[r * FPS + c + 4u * u] = s[u];
        }
        for (var t = 0u; t < 4u; t = t + 1u) {
            acc[t] = acc[t] * scale;
        }
        workgroupBarrier();

        for (var j = 0u; j < FK; j = j + 1u) {
            let p = p_flash[r * FPS + j];
            for (var t = 0u; t < 4u; t = t + 1u) {
                let g = c + 4u * t;
                if (g < dv4) {
                    acc[t] = fma(vec4<f32>(p), v_flash[j * 16u + g], acc[t]);
                }
            }
        }
        workgroupBarrier();
    }

    // The row's denominator: the sum of its four shares.
    share_flash[lid] = l;
    workgroupBarrier();
    let row = r * 4u;
    let denom = (share_flash[row] + share_flash[row + 1u]) + (share_flash[row + 2u] + share_flash[row + 3u]);
    if (i < params.sq) {
        // A row with no visible key gets zeros; one whose maximum is not finite, NaN. A split's
        // partial keeps m, the denominator and the accumulators as they are.
        let finite = is_finite(m);
        let seen = mine > 0u;
        var o = out_row_at(b, h, i);
        if (SPLIT_KEYS > 0u) {
            o = (((b * params.hq + h) * params.sq + i) * chunks + chunk) * (dv + 2u);
            if (c == 0u) {
                out[o] = m;
                out[o + 1u] = denom;
            }
            o = o + 2u;
        }
        for (var t = 0u; t < 4u; t = t + 1u) {
            let g = c + 4u * t;
            for (var j = 0u; j < 4u; j = j + 1u) {
                let col = g * 4u + j;
                if (col < dv) {
                    var x = 0.0;
                    if (SPLIT_KEYS > 0u) {
                        x = acc[t][j];
                    } else if (seen) {
                        x = select(bitcast<f32>(nan_bits), acc[t][j] / denom, finite);
                    }
                    out[o + col] = x;
                }
            }
        }
    }
}
