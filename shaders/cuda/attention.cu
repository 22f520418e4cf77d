// Fused scaled-dot-product attention with an online softmax: the score matrix is never
// written to memory. A block of WARPS warps takes WARPS consecutive query rows of one
// (batch, head); key and value tiles of `tk` rows are staged in shared memory for all of them.
// Within a tile, lane j scores key j, then every lane accumulates its own output dims.
// Semantics follow the CPU backend: scores in f32, softmax over the visible keys (causal:
// keys 0 ..= i + sk - sq; key_lengths hide padding), NaN or +inf scores give NaN rows, a row
// of only -inf scores gives NaN, and a row with no visible key is zero.

#define WARPS 4
#define MAX_DV_PER_LANE 8

// Row (b, h, i) of an operand starts at offset + b * batch + h * head + i * seq (the row's
// elements are contiguous): heads-first, sequence-first and packed QKV layouts alike.
struct RowStrides {
    u64 offset, batch, head, seq;
};
struct AttnLayout {
    RowStrides q, k, v;
    u64 out_bshd; // the output is [b, sq, hq, dv] (else [b, hq, sq, dv])
};

extern "C" __global__ void attention(AttnLayout lay, const float* __restrict__ q, const float* __restrict__ k,
                                     const float* __restrict__ v, const u32* __restrict__ lens,
                                     u64 hq, u64 hkv, u64 sq, u64 sk, u64 d, u64 dv,
                                     u32 causal, float scale, u32 tk, float* __restrict__ out) {
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
