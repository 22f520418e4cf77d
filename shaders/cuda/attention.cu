// Fused scaled-dot-product attention with an online softmax: the score matrix is never
// written to memory. A block of WARPS warps takes WARPS consecutive query rows of one
// (batch, head); key and value tiles of `tk` rows are staged in shared memory for all of them.
// Within a tile, lane j scores key j, then every lane accumulates its own output dims.
// Semantics follow the CPU backend: scores in f32, softmax over the visible keys (causal:
// keys 0 ..= i + sk - sq; key_lengths hide padding), NaN or +inf scores give NaN rows, a row
// of only -inf scores gives NaN, and a row with no visible key is zero.

#define WARPS 4
#define MAX_DV_PER_LANE 8

// AttnLayout (common.cuh) says where the rows of q, k and v lie.

extern "C" __global__ void attention(AttnLayout lay, const float* __restrict__ q, const float* __restrict__ k,
                                     const float* __restrict__ v, const u32* __restrict__ lens,
                                     u64 hq, u64 hkv, u64 sq, u64 sk, u64 d, u64 dv,
                                     u32 causal, float scale, u32 tk, float* __restrict__ out) {
    WAIT_PRIOR();
    extern __shared__ float smem[];
    float* qs = smem;                    // [WARPS][d]
    float* ks = qs + WARPS * d;          // [tk][d + 1]
    float* vs = ks + tk * (d + 1);       // [tk][dv]
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const u64 bh = blockIdx.y, b = bh / hq, h = bh % hq;
    const u64 kvh = h / (hq / hkv);
    const u64 i0 = (u64)blockIdx.x * WARPS, i = i0 + warp;
    const u64 shift = sk > sq ? sk - sq : 0;
    const u64 cap = lens ? (lens[b] < sk ? lens[b] : sk) : sk;
    // Keys this row sees, and the most that any row of the block sees.
    u64 visible = cap, block_visible = cap;
    if (causal) {
        u64 last = i0 + WARPS - 1 < sq ? i0 + WARPS - 1 : sq - 1;
        visible = i + 1 + shift < visible ? i + 1 + shift : visible;
        block_visible = last + 1 + shift < block_visible ? last + 1 + shift : block_visible;
    }
    if (i >= sq) visible = 0;
    const float* kb = k + lay.k.offset + b * lay.k.batch + kvh * lay.k.head;
    const float* vb = v + lay.v.offset + b * lay.v.batch + kvh * lay.v.head;
    if (i < sq) {
        const float* qi = q + lay.q.offset + b * lay.q.batch + h * lay.q.head + i * lay.q.seq;
        for (u64 c = lane; c < d; c += 32) qs[warp * d + c] = qi[c];
    }
    float acc[MAX_DV_PER_LANE];
    for (int t = 0; t < MAX_DV_PER_LANE; ++t) acc[t] = 0.0f;
    float m = NEG_INF, l = 0.0f;
    for (u64 j0 = 0; j0 < block_visible; j0 += tk) {
        const u64 count = block_visible - j0 < tk ? block_visible - j0 : tk;
        __syncthreads();
        for (u64 e = threadIdx.x; e < count * d; e += blockDim.x) {
            ks[(e / d) * (d + 1) + e % d] = kb[(j0 + e / d) * lay.k.seq + e % d];
        }
        if (lay.v.seq == dv) { // rows one after another: no division per element
            for (u64 e = threadIdx.x; e < count * dv; e += blockDim.x) vs[e] = vb[j0 * dv + e];
        } else {
            for (u64 e = threadIdx.x; e < count * dv; e += blockDim.x) {
                vs[e] = vb[(j0 + e / dv) * lay.v.seq + e % dv];
            }
        }
        __syncthreads();
        const bool valid = lane < count && j0 + lane < visible;
        float s = NEG_INF;
        if (valid) {
            float dotp = 0.0f;
            const float* kr = ks + lane * (d + 1);
            const float* qr = qs + warp * d;
            for (u64 c = 0; c < d; ++c) dotp += qr[c] * kr[c];
            s = dotp * scale;
        }
        const float m_new = nan_max(m, warp_max(s));
        if (m_new == NEG_INF) continue; // every visible score so far is -inf
        const float corr = m == NEG_INF ? 0.0f : expf(m - m_new);
        const float p = valid ? expf(s - m_new) : 0.0f;
        l = l * corr + warp_sum(p);
        for (int t = 0; t < MAX_DV_PER_LANE; ++t) acc[t] *= corr;
        for (u64 j = 0; j < count && j0 + j < visible; ++j) {
            const float pj = __shfl_sync(0xffffffffu, p, (int)j);
            for (int t = 0; t < MAX_DV_PER_LANE; ++t) {
                const u64 c = lane + 32 * t;
                if (c < dv) acc[t] += pj * vs[j * dv + c];
            }
        }
        m = m_new;
    }
    if (i >= sq) return;
    float* o = out + (lay.out_bshd ? (b * sq + i) * hq + h : bh * sq + i) * dv;
    const float inv = 1.0f / l;
    for (int t = 0; t < MAX_DV_PER_LANE; ++t) {
        const u64 c = lane + 32 * t;
        if (c >= dv) break;
        float r;
        if (visible == 0) r = 0.0f;
        else if (m == NEG_INF) r = QNAN;
        else r = acc[t] * inv;
        o[c] = r;
    }
}

// Flash attention (the FlashAttention-2 scheme on the FP32 cores): a block of 256 threads
// takes FQ = 64 query rows of one (batch, head), keeps them in shared memory, and walks the
// visible keys in tiles of FK = 64. Thread (ty, tx) of a 16 x 16 grid owns query rows
// 4ty..4ty+3: it computes their scores against keys 4tx..4tx+3 of the tile (a 4 x 4 register
// tile over float4 reads of shared memory), updates the rows' running maximum and sum across
// its 16-lane row group with shuffles, writes its probabilities to shared memory, then adds
// P V for its rows and output columns 64g + 4tx..+3. The semantics are those of `attention`
// above. Needs dv a multiple of 4 and d, dv <= 64 G; the host falls back to `attention`.
#define FQ 64
#define FK 64
#define FPAD 4
#ifndef FLASH_MIN_BLOCKS_64
#define FLASH_MIN_BLOCKS_64 3
#endif
#ifndef FLASH_MIN_BLOCKS_128
#define FLASH_MIN_BLOCKS_128 2
#endif

__device__ __forceinline__ float row_max16(float v) {
    for (int o = 8; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o, 16));
    return v;
}
__device__ __forceinline__ float row_sum16(float v) {
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o, 16);
    return v;
}

template <int G>
__device__ __forceinline__ void flash_body(const AttnLayout& lay, const float* __restrict__ q,
                                           const float* __restrict__ k, const float* __restrict__ v,
                                           const u32* __restrict__ lens, u64 hq, u64 hkv, u64 sq, u64 sk,
                                           u64 d, u64 dv, u32 causal, float scale, float* __restrict__ out) {
    extern __shared__ float4 smem4[];
    float* smem = (float*)smem4;
    const u32 qstride = FQ + FPAD, kstride = FK + FPAD;
    float* qs = smem;                                   // [d][FQ + 4]
    float* ks = qs + d * qstride;                       // [d][FK + 4]; then P as [FK][FQ + 4]
    const u32 kreg = (u32)d * kstride > FK * qstride ? (u32)d * kstride : FK * qstride;
    float* vs = ks + kreg;                              // [FK][dv]
    const u32 tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    // A one-dimensional grid, the heads fastest: causal blocks further down see more keys, so
    // every head's block of the last rows starts first, then every head's next one, and the
    // short ones fill the last wave instead of leaving SMs idle behind a long one.
    const u64 blocks = (sq + FQ - 1) / FQ, heads = gridDim.x / blocks, rank = blockIdx.x / heads;
    const u64 bh = blockIdx.x % heads, b = bh / hq, h = bh % hq, kvh = h / (hq / hkv);
    const u64 qblock = causal ? blocks - 1 - rank : rank;
    const u64 i0 = qblock * FQ;
    const u64 shift = sk > sq ? sk - sq : 0;
    const u64 cap = lens ? (lens[b] < sk ? lens[b] : sk) : sk;
    u64 vis[4];
    for (int r = 0; r < 4; ++r) {
        const u64 i = i0 + ty * 4 + r;
        u64 x = cap;
        if (causal && i + 1 + shift < x) x = i + 1 + shift;
        vis[r] = i < sq ? x : 0;
    }
    u64 block_visible = cap;
    if (causal) {
        const u64 last = (i0 + FQ < sq ? i0 + FQ : sq) - 1;
        if (last + 1 + shift < block_visible) block_visible = last + 1 + shift;
    }
    // Tiles are loaded a row per `tpr` threads (d rounded up to a power of two, at most 256):
    // shifts and masks, where a division per element would cost more than the products.
    u32 tpr = 1;
    while (tpr < d && tpr < 256) tpr <<= 1;
    const u32 lane_c = tid & (tpr - 1), rows_per_pass = 256 / tpr;
    const float* qb = q + lay.q.offset + b * lay.q.batch + h * lay.q.head;
    for (u32 r = tid / tpr; r < FQ; r += rows_per_pass) {
        const u64 i = i0 + r;
        for (u32 c = lane_c; c < d; c += tpr) qs[c * qstride + r] = i < sq ? qb[i * lay.q.seq + c] : 0.0f;
    }
    const float* kb = k + lay.k.offset + b * lay.k.batch + kvh * lay.k.head;
    const float* vb = v + lay.v.offset + b * lay.v.batch + kvh * lay.v.head;
    float o[4][4 * G];
    float m[4], l[4];
    for (int r = 0; r < 4; ++r) {
        m[r] = NEG_INF;
        l[r] = 0.0f;
        for (int t = 0; t < 4 * G; ++t) o[r][t] = 0.0f;
    }
    for (u64 j0 = 0; j0 < block_visible; j0 += FK) {
        const u64 count = block_visible - j0 < FK ? block_visible - j0 : FK;
        __syncthreads(); // the previous tile's P and V are no longer read
        for (u32 j = tid / tpr; j < count; j += rows_per_pass) {
            const float* kr = kb + (j0 + j) * lay.k.seq;
            for (u32 c = lane_c; c < d; c += tpr) ks[c * kstride + j] = kr[c];
        }
        for (u32 j = tid / 64; j < count; j += 4) {
            const float* vr = vb + (j0 + j) * lay.v.seq;
            for (u32 c = tid & 63; c < dv; c += 64) vs[j * dv + c] = vr[c];
        }
        __syncthreads();
        float s[4][4];
        for (int r = 0; r < 4; ++r)
            for (int c = 0; c < 4; ++c) s[r][c] = 0.0f;
        const u32 dd = (u32)d;
#pragma unroll 4
        for (u32 c = 0; c < dd; ++c) {
            const float4 a = *(const float4*)&qs[c * qstride + ty * 4];
            const float4 kk = *(const float4*)&ks[c * kstride + tx * 4];
            const float av[4] = {a.x, a.y, a.z, a.w}, kv[4] = {kk.x, kk.y, kk.z, kk.w};
            for (int r = 0; r < 4; ++r)
                for (int cc = 0; cc < 4; ++cc) s[r][cc] = fmaf(av[r], kv[cc], s[r][cc]);
        }
        for (int r = 0; r < 4; ++r) {
            bool valid[4];
            float mx = NEG_INF;
            for (int cc = 0; cc < 4; ++cc) {
                const u64 j = j0 + tx * 4 + cc;
                valid[cc] = tx * 4 + cc < count && j < vis[r];
                s[r][cc] = valid[cc] ? s[r][cc] * scale : NEG_INF;
                mx = nan_max(mx, s[r][cc]);
            }
            const float m_new = nan_max(m[r], row_max16(mx));
            float corr = 1.0f, sum = 0.0f;
            if (m_new == NEG_INF) { // every visible score so far is -inf
                for (int cc = 0; cc < 4; ++cc) s[r][cc] = 0.0f;
            } else {
                corr = m[r] == NEG_INF ? 0.0f : expf(m[r] - m_new);
                for (int cc = 0; cc < 4; ++cc) {
                    s[r][cc] = valid[cc] ? expf(s[r][cc] - m_new) : 0.0f;
                    sum += s[r][cc];
                }
            }
            l[r] = l[r] * corr + row_sum16(sum);
            m[r] = m_new;
            for (int t = 0; t < 4 * G; ++t) o[r][t] *= corr;
        }
        __syncthreads(); // every score is read: the key region now holds P
        for (int cc = 0; cc < 4; ++cc) {
            *(float4*)&ks[(tx * 4 + cc) * qstride + ty * 4] = make_float4(s[0][cc], s[1][cc], s[2][cc], s[3][cc]);
        }
        __syncthreads();
        const u32 cnt = (u32)count;
#pragma unroll 4
        for (u32 j = 0; j < cnt; ++j) {
            const float4 p4 = *(const float4*)&ks[j * qstride + ty * 4];
            const float pr[4] = {p4.x, p4.y, p4.z, p4.w};
            for (int g = 0; g < G; ++g) {
                const u32 col = g * 64 + tx * 4;
                if (col >= dv) break;
                const float4 v4 = *(const float4*)&vs[j * dv + col];
                const float vv[4] = {v4.x, v4.y, v4.z, v4.w};
                for (int r = 0; r < 4; ++r)
                    for (int u = 0; u < 4; ++u) o[r][g * 4 + u] = fmaf(pr[r], vv[u], o[r][g * 4 + u]);
            }
        }
    }
    for (int r = 0; r < 4; ++r) {
        const u64 i = i0 + ty * 4 + r;
        if (i >= sq) continue;
        float* orow = out + (lay.out_bshd ? (b * sq + i) * hq + h : bh * sq + i) * dv;
        const float inv = 1.0f / l[r];
        for (int g = 0; g < G; ++g) {
            for (int u = 0; u < 4; ++u) {
                const u64 col = g * 64 + tx * 4 + u;
                if (col >= dv) break;
                float x;
                if (vis[r] == 0) x = 0.0f;
                else if (m[r] == NEG_INF) x = QNAN;
                else x = o[r][g * 4 + u] * inv;
                orow[col] = x;
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(256, FLASH_MIN_BLOCKS_64) flash_attention_64(
    AttnLayout lay, const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
    const u32* __restrict__ lens, u64 hq, u64 hkv, u64 sq, u64 sk, u64 d, u64 dv, u32 causal, float scale,
    float* __restrict__ out) {
    WAIT_PRIOR();
    flash_body<1>(lay, q, k, v, lens, hq, hkv, sq, sk, d, dv, causal, scale, out);
}

extern "C" __global__ void __launch_bounds__(256, FLASH_MIN_BLOCKS_128) flash_attention_128(
    AttnLayout lay, const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
    const u32* __restrict__ lens, u64 hq, u64 hkv, u64 sq, u64 sk, u64 d, u64 dv, u32 causal, float scale,
    float* __restrict__ out) {
    WAIT_PRIOR();
    flash_body<2>(lay, q, k, v, lens, hq, hkv, sq, sk, d, dv, causal, scale, out);
}
