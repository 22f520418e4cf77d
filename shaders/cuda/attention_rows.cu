// Decode attention read straight into registers: up to DR_ROWS query rows of one KV head (its
// group's heads x sq) against many keys, for head widths 32, 64, 128 and 256 whose rows are
// 16-byte aligned. Block (split, b * hkv + kvh) takes the split's keys in rounds. A lane holds
// 8 columns of a key (one 16-byte vector of halves, two of f32), so L = d / 8 lanes share a
// key and a warp reads 32 / L keys at once; in a round each warp issues its key and value loads
// for DR_SLOTS such reads before using any, so a round costs one memory latency and no shared
// memory. A round's scores (each slot's key against each query row) are summed across a key's
// lanes by one reduce-scatter of shuffles, which leaves each lane one or a few finished sums,
// then gathered back: half the shuffles of summing each score alone, and 8-10% off A3 on an
// H200 (BENCHMARKS.md). Each warp keeps its own online
// softmax in base 2 (q is scaled by log2 e), and at the end the warps' (m, l, acc) join in
// shared memory into one partial (attention_merge's layout, m in natural units) or, with one
// split, the output row. A value whose probability is 0 is never added, so a NaN in a masked
// value row stays out. The same results as attention_decode.cu's kernels otherwise (NaN or
// +inf scores give NaN, a row whose keys all score -inf gives NaN, no visible key gives zeros).
#define DR_ROWS 4
#define DR_WARPS 4
#define DR_WIDTH 256
#define DR_LOG2E 1.4426950408889634f
#define DR_LN2 0.6931471805599453f

// A lane's 8 columns of a key or value from NV 16-byte vectors: 2 of f32, or 1 of halves
// (elem 1 f16, 2 bf16).
template <int NV>
__device__ __forceinline__ void dr_unpack(const uint4* x, u32 elem, float* f) {
    if (NV == 2) {
#pragma unroll
        for (int v = 0; v < 2; ++v) {
            f[4 * v] = __uint_as_float(x[v].x);
            f[4 * v + 1] = __uint_as_float(x[v].y);
            f[4 * v + 2] = __uint_as_float(x[v].z);
            f[4 * v + 3] = __uint_as_float(x[v].w);
        }
        return;
    }
    const u32 w[4] = {x[0].x, x[0].y, x[0].z, x[0].w};
    if (elem == 1) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            asm("cvt.f32.f16 %0, %1;" : "=f"(f[2 * j]) : "h"((unsigned short)(w[j] & 0xffffu)));
            asm("cvt.f32.f16 %0, %1;" : "=f"(f[2 * j + 1]) : "h"((unsigned short)(w[j] >> 16)));
        }
    } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            f[2 * j] = __uint_as_float(w[j] << 16);
            f[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
        }
    }
}

// exp2 of x, 0 where the running maximum is -inf (nothing seen yet).
__device__ __forceinline__ float dr_exp2(float x, float m) { return m == NEG_INF ? 0.0f : exp2f(x); }

template <int NV, int L>
__device__ __forceinline__ void decode_rows(AttnLayout lay, const void* __restrict__ q,
                                            const void* __restrict__ k,
                                            const void* __restrict__ v,
                                            const u32* __restrict__ lens, u64 hq, u64 hkv, u64 sq,
                                            u64 sk, u64 d, u32 causal, float scale, u64 chunk,
                                            u32 elem, float* __restrict__ partial,
                                            void* __restrict__ out,
                                            float (*sm_acc)[DR_ROWS][DR_WIDTH],
                                            float (*sm_ml)[DR_ROWS][2]) {
    constexpr u32 KG = 32 / L;                 // keys a warp reads at once
    constexpr u32 SLOTS = 4 / NV;              // reads a warp has in flight a round
    constexpr u32 WK = SLOTS * KG;             // keys a warp takes a round
    constexpr u32 RK = DR_WARPS * WK;          // keys a block takes a round
    constexpr u32 ES = NV == 2 ? 4 : 2;        // bytes an element
    const u32 tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const u32 grp = lane / L, sub = lane % L;
    const u32 kvs = (u32)hkv, group = (u32)(hq / hkv), rows = group * (u32)sq, sqs = (u32)sq;
    const u32 bb = blockIdx.y / kvs, kh = blockIdx.y % kvs;
    const u64 b = bb, kvh = kh;
    const u64 begin = (u64)blockIdx.x * chunk;
    // Row r's visible keys as offsets from `begin` (0 past the split), and the split's end.
    u32 lim[DR_ROWS];
    u64 stop = 0;
    float qf[DR_ROWS][8], acc[DR_ROWS][8], m[DR_ROWS], l[DR_ROWS];
#pragma unroll
    for (u32 r = 0; r < DR_ROWS; ++r) {
        const u32 rr = r < rows ? r : 0;
        const u64 h = kvh * group + rr / sqs, i = rr % sqs;
        const u64 vis = r < rows ? visible_keys(lens, b, i, sq, sk, causal) : 0;
        stop = vis > stop ? vis : stop;
        const u64 end = vis < begin + chunk ? vis : begin + chunk;
        lim[r] = end > begin ? (u32)(end - begin) : 0u;
        m[r] = NEG_INF;
        l[r] = 0.0f;
        const u64 at = lay.q.offset + b * lay.q.batch + h * lay.q.head + i * lay.q.seq + sub * 8;
#pragma unroll
        for (u32 j = 0; j < 8; ++j) {
            acc[r][j] = 0.0f;
            qf[r][j] = r < rows ? load_elem(q, at + j, elem) * (scale * DR_LOG2E) : 0.0f;
        }
    }
    stop = begin + chunk < stop ? begin + chunk : stop;
    const u32 count = stop > begin ? (u32)(stop - begin) : 0u;
    // This lane's first key of a round, and the distance between its slots and rounds.
    const u32 first = warp * KG + grp;
    const u64 kst = lay.k.seq * ES, vst = lay.v.seq * ES;
    const char* kp = (const char*)k + (lay.k.offset + b * lay.k.batch + kvh * lay.k.head + sub * 8) * ES +
                     (begin + first) * kst;
    const char* vp = (const char*)v + (lay.v.offset + b * lay.v.batch + kvh * lay.v.head + sub * 8) * ES +
                     (begin + first) * vst;
    const u64 kslot = (u64)DR_WARPS * KG * kst, vslot = (u64)DR_WARPS * KG * vst;
    for (u32 t0 = 0; t0 < count; t0 += RK) {
        uint4 kr[SLOTS][NV], vr[SLOTS][NV];
#pragma unroll
        for (u32 n = 0; n < SLOTS; ++n) {
            const u32 key = t0 + first + n * DR_WARPS * KG;
#pragma unroll
            for (u32 c = 0; c < NV; ++c) {
                kr[n][c] = make_uint4(0u, 0u, 0u, 0u);
                vr[n][c] = kr[n][c];
                if (key < count) {
                    kr[n][c] = __ldg(reinterpret_cast<const uint4*>(kp + n * kslot) + c);
                    vr[n][c] = __ldg(reinterpret_cast<const uint4*>(vp + n * vslot) + c);
                }
            }
        }
        kp += RK * kst;
        vp += RK * vst;
        // Scores: the lane's 8 products of each (slot, row) pair, summed over the key's L
        // lanes by one reduce-scatter (each exchange halves the pairs a lane holds: V / 2 +
        // V / 4 + ... shuffles instead of V log2 L), then gathered back, then masked.
        constexpr u32 V = SLOTS * DR_ROWS;
        constexpr u32 LOGV = V == 16 ? 4 : (V == 8 ? 3 : (V == 4 ? 2 : 1));
        constexpr u32 LOGL = L == 32 ? 5 : (L == 16 ? 4 : (L == 8 ? 3 : 2));
        constexpr u32 S = LOGV < LOGL ? LOGV : LOGL;
        constexpr u32 CNT = V >> S;
        float part[V];
#pragma unroll
        for (u32 n = 0; n < SLOTS; ++n) {
            float kf[8];
            dr_unpack<NV>(kr[n], elem, kf);
#pragma unroll
            for (u32 r = 0; r < DR_ROWS; ++r) {
                float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
                for (u32 j = 0; j < 8; j += 2) {
                    a0 = fmaf(qf[r][j], kf[j], a0);
                    a1 = fmaf(qf[r][j + 1], kf[j + 1], a1);
                }
                part[n * DR_ROWS + r] = a0 + a1;
            }
        }
#pragma unroll
        for (u32 st = 0, cnt = V; st < S; ++st, cnt >>= 1) {
            const bool up = (sub >> st) & 1u;
#pragma unroll
            for (u32 i = 0; i < cnt / 2; ++i) {
                const float send = up ? part[i] : part[i + cnt / 2];
                const float keep = up ? part[i + cnt / 2] : part[i];
                part[i] = keep + __shfl_xor_sync(0xffffffffu, send, 1u << st);
            }
        }
#pragma unroll
        for (u32 o = 1u << S; o < L; o <<= 1) {
#pragma unroll
            for (u32 i = 0; i < CNT; ++i) part[i] += __shfl_xor_sync(0xffffffffu, part[i], o);
        }
        float s[SLOTS][DR_ROWS];
#pragma unroll
        for (u32 v = 0; v < V; ++v) {
            u32 from = 0;
#pragma unroll
            for (u32 st = 0; st < S; ++st) from |= ((v >> (LOGV - 1 - st)) & 1u) << st;
            const float x = __shfl_sync(0xffffffffu, part[v & (CNT - 1)], (lane & ~(L - 1)) | from);
            const u32 n = v / DR_ROWS, r = v % DR_ROWS;
            s[n][r] = t0 + first + n * DR_WARPS * KG < lim[r] ? x : NEG_INF;
        }
        // The round's softmax, row by row: the max over the warp's keys, the running sum and
        // accumulators rescaled, the scores turned into probabilities.
#pragma unroll
        for (u32 r = 0; r < DR_ROWS; ++r) {
            if (r >= rows) break;
            float mr = s[0][r];
#pragma unroll
            for (u32 n = 1; n < SLOTS; ++n) mr = nan_max(mr, s[n][r]);
#pragma unroll
            for (u32 o = L; o < 32; o <<= 1) mr = nan_max(mr, __shfl_xor_sync(0xffffffffu, mr, o));
            const float mn = nan_max(m[r], mr);
            const float alpha = dr_exp2(m[r] - mn, m[r]);
            float lr = 0.0f;
#pragma unroll
            for (u32 n = 0; n < SLOTS; ++n) {
                s[n][r] = dr_exp2(s[n][r] - mn, mn);
                lr += s[n][r];
            }
#pragma unroll
            for (u32 o = L; o < 32; o <<= 1) lr += __shfl_xor_sync(0xffffffffu, lr, o);
            l[r] = l[r] * alpha + lr;
            m[r] = mn;
#pragma unroll
            for (u32 j = 0; j < 8; ++j) acc[r][j] *= alpha;
        }
#pragma unroll
        for (u32 n = 0; n < SLOTS; ++n) {
            float vf[8];
            dr_unpack<NV>(vr[n], elem, vf);
#pragma unroll
            for (u32 r = 0; r < DR_ROWS; ++r) {
                if (r >= rows) break;
                if (s[n][r] != 0.0f) {
#pragma unroll
                    for (u32 j = 0; j < 8; ++j) acc[r][j] = fmaf(s[n][r], vf[j], acc[r][j]);
                }
            }
        }
    }
    // The warp's key groups joined (same columns, other keys), then the warps.
#pragma unroll
    for (u32 r = 0; r < DR_ROWS; ++r) {
#pragma unroll
        for (u32 j = 0; j < 8; ++j) {
#pragma unroll
            for (u32 o = L; o < 32; o <<= 1) acc[r][j] += __shfl_xor_sync(0xffffffffu, acc[r][j], o);
            if (grp == 0) sm_acc[warp][r][sub * 8 + j] = acc[r][j];
        }
        if (lane == 0) {
            sm_ml[warp][r][0] = m[r];
            sm_ml[warp][r][1] = l[r];
        }
    }
    __syncthreads();
    const bool whole = gridDim.x == 1;
    for (u32 r = 0; r < rows; ++r) {
        float mm = NEG_INF;
#pragma unroll
        for (u32 w = 0; w < DR_WARPS; ++w) mm = nan_max(mm, sm_ml[w][r][0]);
        float f[DR_WARPS], ll = 0.0f;
#pragma unroll
        for (u32 w = 0; w < DR_WARPS; ++w) {
            const float mw = sm_ml[w][r][0];
            f[w] = (mw == NEG_INF || mm == NEG_INF) ? 0.0f : exp2f(mw - mm);
            if (f[w] != 0.0f) ll += f[w] * sm_ml[w][r][1];
        }
        const u64 h = kvh * group + r / sqs, i = r % sqs, row = (b * hq + h) * sq + i;
        const bool none = visible_keys(lens, b, i, sq, sk, causal) == 0;
        float* part = partial + (row * gridDim.x + blockIdx.x) * (d + 2);
        if (!whole && tid == 0) {
            part[0] = mm * DR_LN2;
            part[1] = ll;
        }
        for (u32 c = tid; c < (u32)d; c += blockDim.x) {
            float a = 0.0f;
#pragma unroll
            for (u32 w = 0; w < DR_WARPS; ++w) {
                if (f[w] != 0.0f) a += f[w] * sm_acc[w][r][c];
            }
            if (whole) {
                const u64 o = (lay.out_bshd ? (b * sq + i) * hq + h : row) * d + c;
                store_elem(out, o, elem, none ? 0.0f : (mm == NEG_INF ? QNAN : a / ll));
            } else {
                part[2 + c] = a;
            }
        }
    }
}

// d / 8 lanes a key: f32 operands (two vectors a lane) or halves (one).
#define DR_ARGS                                                                                   \
    AttnLayout lay, const void *__restrict__ q, const void *__restrict__ k,                      \
        const void *__restrict__ v, const u32 *__restrict__ lens, u64 hq, u64 hkv, u64 sq, u64 sk, \
        u64 d, u64 dv, u32 causal, float scale, u64 chunk, u32 elem, float *__restrict__ partial,  \
        void *__restrict__ out
#define DR_CALL(NV, L)                                                                            \
    decode_rows<NV, L>(lay, q, k, v, lens, hq, hkv, sq, sk, d, causal, scale, chunk, elem,        \
                       partial, out, sm_acc, sm_ml)

extern "C" __global__ void __launch_bounds__(128, 4) attention_rows_f32(DR_ARGS) {
    WAIT_PRIOR();
    __shared__ float sm_acc[DR_WARPS][DR_ROWS][DR_WIDTH];
    __shared__ float sm_ml[DR_WARPS][DR_ROWS][2];
    switch (d) {
    case 32: DR_CALL(2, 4); break;
    case 64: DR_CALL(2, 8); break;
    case 128: DR_CALL(2, 16); break;
    default: DR_CALL(2, 32); break;
    }
}

extern "C" __global__ void __launch_bounds__(128) attention_rows_half(DR_ARGS) {
    WAIT_PRIOR();
    __shared__ float sm_acc[DR_WARPS][DR_ROWS][DR_WIDTH];
    __shared__ float sm_ml[DR_WARPS][DR_ROWS][2];
    switch (d) {
    case 32: DR_CALL(1, 4); break;
    case 64: DR_CALL(1, 8); break;
    case 128: DR_CALL(1, 16); break;
    default: DR_CALL(1, 32); break;
    }
}
