// A llama decoding step in one persistent kernel: one token's embedding row, every layer, the
// output norm, the LM head and the argmax (or the logits).
//
// Run one op a kernel, a step of SmolLM2-135M is 220 small kernels, and each costs its own
// chain of launch, wait for the kernel before and a DRAM round trip or two, whatever its work
// (5-10 us for 0.3 MB). Here one block an SM stays resident for the whole step, the stages of a
// layer are separated by a grid-wide barrier (decode_layers is launched cooperatively, so every
// block is resident), and while each barrier gathers, the grid asks L2 for what the same stage
// of the next layer reads, so after each barrier the loads meet L2 rather than memory. A
// layer's stages:
//   A  RMS norm, then the fused q/k/v product, RoPE on q and k, k and v into the cache;
//   B  attention: a block a head (or, past 512 keys, a block a share of a head's keys, the
//      head's last share to finish merging them), each warp an online softmax over its rounds
//      of 16 keys, the warps joined in shared memory;
//   C  the output product + residual;
//   D  RMS norm, then gate and up products and SwiGLU (gate row j and up row j a warp);
//   E  the down product + residual.
// Layer 0's stage A reads the token's embedding row from the quantized table itself, and after
// the last layer comes one more stage: the output norm and the LM head, each block keeping the
// largest logit it made, the blocks' largest met by an atomic maximum. (Done by kernels of
// their own, the embedding's gathers, the head and the argmax took about 40 us more a step.)
// A product's rows are taken two a warp (a RoPE pair, or gate and up; the LM head's four), a
// lane taking whole quant blocks; the vector it multiplies sits in shared memory, each block of
// 32 values turned so the lanes' reads meet no bank conflicts (ds_slot). Weights are GGUF blocks of 32
// in gpukit's device layout (quant.cu): format 0 Q8_0, 1 Q4_0, 2 Q4_1, f32 scales and minimums
// apart from the words. Values written during the kernel are read through L2 only (__ldcg):
// another SM wrote them, and L1 is not coherent.
//
// Where a step's time goes (GPUKIT_DS_PROFILE=1 logs it; SmolLM2 on an H100, 256 keys): about
// 680 us, of which the 150 barriers take about 1 us each, attention 5 us a layer (one block a
// head), and each product stage 2-3.5 us, most of it trips to memory: the vector, then the
// weight rows. Tried and slower: the attention blocks making their own q/k/v rows (no stage A),
// each head's share of the output product made in stage B (no stage C), heads split over more
// blocks at short contexts, weights asked into L1 at a stage's start or during the barrier,
// barriers polling relaxed, and arrivals spread over eight counters.

#define DS_WARPS 16
#define DS_MAX_HD 256
#define DS_SPLITS 16 // the most blocks one head's keys are split over

// A quantized weight on the device.
struct DsWeight {
    u64 scales, mins, words; // mins is 0 for Q8_0 and Q4_0
    u32 format, pad;
};

// One layer's tensors.
struct DsLayer {
    u64 attn_norm, ffn_norm; // f32 [hidden]
    u64 cache;               // [capacity, 2 * kv_heads, head_dim] of `elem` values, keys first
    DsWeight qkv, o, gate_up, down;
};

// The step's two ends: the token's embedding row, and after the layers the output norm, the
// LM head and what comes back (pick 0: the logits; 1: the index of the largest, in the order
// of topk.rs: NaN above everything, then the lower index on ties).
struct DsEnds {
    DsWeight embed, head; // [embed_rows, hidden] and [vocab, hidden]
    u64 norm;             // f32 [hidden]
    u32 embed_rows, vocab, pick, pad;
};

struct DsDims {
    u32 layers, hidden, heads, kv_heads, head_dim, ffn, capacity;
    u32 elem; // the cache's values: 0 f32, 1 f16, 2 bf16
    float eps, scale;
    u64 profile; // u64 [grid][DS_EVENTS] of times (GPUKIT_DS_PROFILE), or 0
};

// Times a block stores a launch (profiling): its start, an arrival and a departure a barrier
// (five a layer), its end, then DS_DETAIL times of one layer.
#define DS_DETAIL 8
#define DS_EVENTS(layers) (2 + 10 * (layers) + DS_DETAIL)

// The globaltimer, in nanoseconds.
__device__ __forceinline__ u64 ds_now() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// A block's side of the grid barrier. `count` (64 bits, so it never wraps) only grows: each
// block adds 1 a barrier (a release, so the block's writes show first; a reduction, which does
// not wait for the old count) and waits, acquiring, until it reaches `target`, the next multiple
// of the grid's size. It is such a multiple between launches (every block passes every
// barrier), so the word stays valid from launch to launch. With `marks` (profiling), thread 0
// stores the time at the launch's start, at each arrival and each departure, and at the end.
struct DsBar {
    u64* count;
    u64 target; // the count at which the next barrier opens
    u64* marks; // this block's row of times, or null
    u32 ev;     // the next time's slot
};

__device__ __forceinline__ void ds_mark(DsBar& b) {
    if (b.marks && threadIdx.x == 0) b.marks[b.ev] = ds_now();
    ++b.ev;
}

// The barrier's first half: the block arrives. Work that nothing waits for (asking L2 for the
// next layer) goes between it and ds_wait.
__device__ __forceinline__ void ds_arrive(DsBar& b) {
    __syncthreads();
    if (threadIdx.x == 0) {
        if (b.marks) b.marks[b.ev] = ds_now();
        asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(b.count) : "memory");
        b.target += gridDim.x;
    }
}

// The barrier's second half: the block waits for every block to have arrived.
__device__ __forceinline__ void ds_wait(DsBar& b) {
    if (threadIdx.x == 0) {
        u64 now;
        do {
            asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(now) : "l"(b.count) : "memory");
        } while (now < b.target);
        if (b.marks) b.marks[b.ev + 1] = ds_now();
    }
    b.ev += 2;
    __syncthreads();
}

// A detail time (profiling): slot k after the barriers' times, in layer 3 only.
__device__ __forceinline__ void ds_sub(const DsBar& b, const DsDims& d, u32 l, u32 k) {
    if (b.marks && l == 3 && threadIdx.x == 0) b.marks[DS_EVENTS(d.layers) - DS_DETAIL + k] = ds_now();
}

// Asks L2 for `bytes` from `p`, spread over the grid's threads but warp 0's (which waits at
// the barrier while the others ask).
__device__ __forceinline__ void ds_warm(u64 p, u64 bytes) {
    if (threadIdx.x < 32) return;
    const u64 helpers = blockDim.x - 32;
    const u64 t = (u64)blockIdx.x * helpers + threadIdx.x - 32, all = (u64)gridDim.x * helpers;
    for (u64 o = t * 128; o < bytes; o += all * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"((const char*)p + o));
}

__device__ __forceinline__ void ds_warm_weight(const DsWeight& w, u64 rows, u64 cols) {
    const u64 blocks = rows * (cols / 32);
    ds_warm(w.words, blocks * (w.format == 0 ? 32 : 16));
    ds_warm(w.scales, blocks * 4);
    if (w.mins) ds_warm(w.mins, blocks * 4);
}

// What stage `stage` of layer `l` reads first, asked into L2: 0 the q/k/v weight, 1 the cache's
// rows, 2 the output weight, 3 gate and up, 4 down.
__device__ __forceinline__ void ds_warm_stage(const DsLayer& l, const DsDims& d, u32 stage,
                                              u64 cache_bytes) {
    const u64 h = d.hidden;
    if (stage == 0) ds_warm_weight(l.qkv, (u64)(d.heads + 2 * d.kv_heads) * d.head_dim, h);
    else if (stage == 1) ds_warm(l.cache, cache_bytes);
    else if (stage == 2) ds_warm_weight(l.o, h, (u64)d.heads * d.head_dim);
    else if (stage == 3) ds_warm_weight(l.gate_up, 2 * (u64)d.ffn, h);
    else ds_warm_weight(l.down, h, d.ffn);
}

__device__ __forceinline__ void ds_warm_layer(const DsLayer& l, const DsDims& d) {
    const u64 h = d.hidden, rows = (u64)(d.heads + 2 * d.kv_heads) * d.head_dim;
    ds_warm_weight(l.qkv, rows, h);
    ds_warm_weight(l.o, h, (u64)d.heads * d.head_dim);
    ds_warm_weight(l.gate_up, 2 * (u64)d.ffn, h);
    ds_warm_weight(l.down, h, d.ffn);
}

// Where value i of a vector goes in shared memory: each block of 32 values keeps its 8 float4s
// turned by the block's index, so the lanes of a warp, each reading the c-th float4 of its own
// block, read 8 different banks' groups (in order, every lane of a quarter-warp hit the same 4
// banks: 8-way conflicts on each of a block's 8 loads).
__device__ __forceinline__ u32 ds_slot(u32 i) {
    const u32 b = i / 32;
    return b * 32 + ((i / 4 + b) & 7) * 4 + i % 4;
}

// One quant block's dot product with the 32 values of block qb of x (in shared memory, laid out
// by ds_slot), weight by weight so that infinities and NaN in x give what the reference gives.
template <u32 FMT>
__device__ __forceinline__ float ds_block_dot(const uint4* wv, float d, float m,
                                              const float* __restrict__ x, u64 qb) {
    const float4* xb = reinterpret_cast<const float4*>(x) + qb * 8;
    const u32 turn = (u32)qb & 7;
    float xv[32];
#pragma unroll
    for (u32 c = 0; c < 8; ++c) {
        const float4 t = xb[(c + turn) & 7];
        xv[4 * c] = t.x;
        xv[4 * c + 1] = t.y;
        xv[4 * c + 2] = t.z;
        xv[4 * c + 3] = t.w;
    }
    float a = 0.0f;
    if (FMT == 0) {
        const u32 wr[8] = {wv[0].x, wv[0].y, wv[0].z, wv[0].w, wv[1].x, wv[1].y, wv[1].z, wv[1].w};
#pragma unroll
        for (u32 c = 0; c < 8; ++c) {
#pragma unroll
            for (u32 b = 0; b < 4; ++b) a = fmaf(xv[4 * c + b], (float)(signed char)(wr[c] >> (8 * b)), a);
        }
        return d * a;
    }
    const u32 wr[4] = {wv[0].x, wv[0].y, wv[0].z, wv[0].w};
#pragma unroll
    for (u32 c = 0; c < 4; ++c) {
#pragma unroll
        for (u32 e = 0; e < 8; ++e) {
            const float q = (float)((wr[c] >> (4 * e)) & 0xfu);
            a = fmaf(xv[8 * c + e], FMT == 2 ? fmaf(d, q, m) : d * (q - 8.0f), a);
        }
    }
    return a;
}

// Rows r0 and r1 of w (k columns) times x (k values in shared memory), summed over the warp:
// every lane gets both.
template <u32 FMT>
__device__ __forceinline__ float2 ds_pair_t(const DsWeight& w, u64 r0, u64 r1, u32 k,
                                           const float* __restrict__ x) {
    constexpr u32 WPB = FMT == 0 ? 8 : 4, VPB = WPB / 4;
    const u32 lane = threadIdx.x & 31;
    const u64 blocks = k / 32;
    const u32* __restrict__ words = reinterpret_cast<const u32*>(w.words);
    const float* __restrict__ sc = reinterpret_cast<const float*>(w.scales);
    const float* __restrict__ mn = reinterpret_cast<const float*>(w.mins);
    float a0 = 0.0f, a1 = 0.0f;
    // Two rounds of quant blocks a lane (rows up to 2048 wide in one go), loaded first.
    for (u64 qb0 = lane; qb0 < blocks; qb0 += 64) {
        uint4 w0[2][VPB], w1[2][VPB];
        float d0[2], d1[2], m0[2], m1[2];
#pragma unroll
        for (u32 r = 0; r < 2; ++r) {
            const u64 qb = qb0 + 32 * r < blocks ? qb0 + 32 * r : qb0;
            const uint4* s0 = reinterpret_cast<const uint4*>(words + (r0 * blocks + qb) * WPB);
            const uint4* s1 = reinterpret_cast<const uint4*>(words + (r1 * blocks + qb) * WPB);
#pragma unroll
            for (u32 c = 0; c < VPB; ++c) {
                w0[r][c] = __ldg(s0 + c);
                w1[r][c] = __ldg(s1 + c);
            }
            d0[r] = __ldg(sc + r0 * blocks + qb);
            d1[r] = __ldg(sc + r1 * blocks + qb);
            m0[r] = FMT == 2 ? __ldg(mn + r0 * blocks + qb) : 0.0f;
            m1[r] = FMT == 2 ? __ldg(mn + r1 * blocks + qb) : 0.0f;
        }
#pragma unroll
        for (u32 r = 0; r < 2; ++r) {
            const u64 qb = qb0 + 32 * r;
            if (qb < blocks) {
                a0 += ds_block_dot<FMT>(w0[r], d0[r], m0[r], x, qb);
                a1 += ds_block_dot<FMT>(w1[r], d1[r], m1[r], x, qb);
            }
        }
    }
    return make_float2(warp_sum(a0), warp_sum(a1));
}

__device__ __forceinline__ float2 ds_pair(const DsWeight& w, u64 r0, u64 r1, u32 k,
                                         const float* __restrict__ x) {
    if (w.format == 0) return ds_pair_t<0>(w, r0, r1, k, x);
    if (w.format == 1) return ds_pair_t<1>(w, r0, r1, k, x);
    return ds_pair_t<2>(w, r0, r1, k, x);
}

// The LM head's rows a warp task.
#define DS_HEAD_ROWS 4

// Rows r0 .. r0 + rows (rows <= DS_HEAD_ROWS) of a quantized weight of k columns times x (in
// shared memory) into y, for the LM head, whose rows outnumber the grid's warps many times:
// as ds_pair (a lane a quant block of every row, each block of x read once for all of them,
// all the rows' loads issued before any is used), with twice the rows, so a warp makes half
// as many trips to memory one after another.
template <u32 FMT>
__device__ __forceinline__ void ds_rows_t(const DsWeight& w, u64 r0, u32 rows, u32 k,
                                          const float* __restrict__ x, float (&y)[DS_HEAD_ROWS]) {
    constexpr u32 WPB = FMT == 0 ? 8 : 4, VPB = WPB / 4;
    const u32 lane = threadIdx.x & 31;
    const u64 blocks = k / 32;
    const u32* __restrict__ words = reinterpret_cast<const u32*>(w.words);
    const float* __restrict__ sc = reinterpret_cast<const float*>(w.scales);
    const float* __restrict__ mn = reinterpret_cast<const float*>(w.mins);
    float acc[DS_HEAD_ROWS];
#pragma unroll
    for (u32 r = 0; r < DS_HEAD_ROWS; ++r) acc[r] = 0.0f;
    for (u64 qb = lane; qb < blocks; qb += 32) {
        uint4 wv[DS_HEAD_ROWS][VPB];
        float dv[DS_HEAD_ROWS], mv[DS_HEAD_ROWS];
#pragma unroll
        for (u32 r = 0; r < DS_HEAD_ROWS; ++r) {
            // Rows past `rows` read row r0 again, and are not used.
            const u64 b = (r0 + (r < rows ? r : 0)) * blocks + qb;
            const uint4* src = reinterpret_cast<const uint4*>(words + b * WPB);
#pragma unroll
            for (u32 c = 0; c < VPB; ++c) wv[r][c] = __ldg(src + c);
            dv[r] = __ldg(sc + b);
            mv[r] = FMT == 2 ? __ldg(mn + b) : 0.0f;
        }
#pragma unroll
        for (u32 r = 0; r < DS_HEAD_ROWS; ++r) acc[r] += ds_block_dot<FMT>(wv[r], dv[r], mv[r], x, qb);
    }
#pragma unroll
    for (u32 r = 0; r < DS_HEAD_ROWS; ++r) y[r] = warp_sum(acc[r]);
}

__device__ __forceinline__ void ds_rows(const DsWeight& w, u64 r0, u32 rows, u32 k,
                                        const float* __restrict__ x, float (&y)[DS_HEAD_ROWS]) {
    if (w.format == 0) ds_rows_t<0>(w, r0, rows, k, x, y);
    else if (w.format == 1) ds_rows_t<1>(w, r0, rows, k, x, y);
    else ds_rows_t<2>(w, r0, rows, k, x, y);
}

// n values (a multiple of 32), value i given by `at(i)`, into shared memory at ds_slot(i),
// RMS-normalised and times `norm_w` when it is given; every thread of the block takes part.
template <class At>
__device__ void ds_load_with(At at, u32 n, const float* __restrict__ norm_w, float eps,
                             float* __restrict__ out, float* scratch) {
    // The norm's weights are loaded with x, not after the sum: each load is a trip to memory.
    float q = 0.0f;
    for (u32 i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = at(i);
        out[ds_slot(i)] = norm_w ? v * __ldg(norm_w + i) : v;
        q += v * v;
    }
    if (norm_w) {
        const float scale = rsqrtf(block_reduce(q, 0, scratch) / (float)n + eps);
        for (u32 i = threadIdx.x; i < n; i += blockDim.x) out[i] *= scale;
    }
    __syncthreads();
}

// x (n values, written in this kernel, so read through L2) into shared memory, as
// ds_load_with.
__device__ __forceinline__ void ds_load_vector(const float* x, u32 n, const float* __restrict__ norm_w,
                                               float eps, float* __restrict__ out, float* scratch) {
    ds_load_with([x](u32 i) { return __ldcg(x + i); }, n, norm_w, eps, out, scratch);
}

// Element e of row `row` of a quantized weight of `cols` columns, as quant.cu's dequant_at.
__device__ __forceinline__ float ds_dequant(const DsWeight& w, u64 row, u32 cols, u32 e) {
    const u64 blocks = cols / 32, b = row * blocks + e / 32;
    const u32 j = e % 32;
    const float d = __ldg(reinterpret_cast<const float*>(w.scales) + b);
    const u32* words = reinterpret_cast<const u32*>(w.words);
    if (w.format == 0) return d * (float)(signed char)(__ldg(words + b * 8 + j / 4) >> (8 * (j % 4)));
    const float q = (float)((__ldg(words + b * 4 + j / 8) >> (4 * (j % 8))) & 0xfu);
    return w.format == 2 ? d * q + __ldg(reinterpret_cast<const float*>(w.mins) + b) : d * (q - 8.0f);
}

// An f32 and its index as one word whose order is topk.rs's: a larger value, then (for equal
// values) a lower index, is a larger word; NaN is above every number.
__device__ __forceinline__ u64 ds_rank(float v, u32 i) {
    const u32 b = __float_as_uint(v);
    const u32 k = is_nan(v) ? 0xffffffffu : ((b & 0x80000000u) ? ~b : (b | 0x80000000u));
    return ((u64)k << 32) | (u64)(~i);
}

// The warp's tasks of a stage: task t goes to block t % grid, so every block has a share.
#define DS_TASKS(t, n)                                                                             \
    for (u32 t = (threadIdx.x >> 5) * gridDim.x + blockIdx.x; t < (n); t += gridDim.x * DS_WARPS)

// An attention row's value from its weighted sum and its weights' sum: 0 where no key was
// seen, NaN where the sums are.
__device__ __forceinline__ float ds_ratio(float num, float den) {
    return den > 0.0f ? num / den : (den == 0.0f ? 0.0f : QNAN);
}

// A half's value: f16 by the hardware's conversion (exact, as f16_float), bf16 by a shift.
template <u32 ELEM>
__device__ __forceinline__ float ds_half(unsigned short h) {
    if (ELEM == 2) return bf16_float(h);
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// Element e of the cache (ELEM 0 f32, 1 f16, 2 bf16) through L2.
template <u32 ELEM>
__device__ __forceinline__ float ds_elem(const void* p, u64 e) {
    if (ELEM == 0) return __ldcg(reinterpret_cast<const float*>(p) + e);
    const unsigned short h = __ldcg(reinterpret_cast<const unsigned short*>(p) + e);
    return ds_half<ELEM>(h);
}

// Stage B for head width HD and cache values ELEM: a block a (head, split of the keys). Warp w
// takes the split's keys w * 16 .. w * 16 + 15, then 256 further each round: scores by groups
// of lanes a key, then the values a lane a column (HD / 32 columns), an online softmax over its
// rounds. The warps' (max, sum, acc) join in
// shared memory into the head's output row, att[head], or with several splits into the split's
// partial, part[head][split]. q is in shared memory.
template <u32 HD, u32 ELEM>
__device__ void ds_attend(u64 cache, const DsDims& d, const float* __restrict__ qh, u32 h,
                          u32 begin, u32 end, u32 split, u32 splits, float* __restrict__ att,
                          float* __restrict__ part, u32* __restrict__ counts,
                          float (*acc_w)[DS_MAX_HD], float (*ml_w)[2]) {
    constexpr u32 CW = HD / 32;
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, group = d.heads / d.kv_heads;
    const u64 kv_width = 2 * (u64)d.kv_heads * HD;
    const void* base = reinterpret_cast<const void*>(cache);
    {
        const u32 kvh = h / group;
        float m = NEG_INF, sum = 0.0f, acc[CW];
#pragma unroll
        for (u32 j = 0; j < CW; ++j) acc[j] = 0.0f;
        // Rounds of RK keys a warp: at a few hundred keys every warp has one.
        constexpr u32 RK = 16;
        for (u32 k = begin + warp * RK; k < end; k += DS_WARPS * RK) {
            const bool full = end - k >= RK;
            const u64 vbase = (u64)k * kv_width + (u64)(d.kv_heads + kvh) * HD + lane;
            // A full round's first VB keys' values (32 registers), loaded with the keys.
            // (Head widths up to 64 only: wider ones would spill.)
            constexpr u32 VB = 32 / CW < RK ? 32 / CW : RK;
            constexpr bool PRE = CW <= 2;
            float v[VB][CW];
            if (PRE && full) {
#pragma unroll
                for (u32 kk = 0; kk < VB; ++kk) {
#pragma unroll
                    for (u32 j = 0; j < CW; ++j) v[kk][j] = ds_elem<ELEM>(base, vbase + kk * kv_width + j * 32);
                }
            }
            // Scores: LPK lanes share a key (8 of its values a lane), so a warp's load reads
            // KPI whole rows; after its RK / KPI groups lane L < RK holds key k + L's score.
            constexpr u32 LPK = HD / 8, KPI = 32 / LPK, GROUPS = RK / KPI > 0 ? RK / KPI : 1;
            const u32 sub = lane % LPK, slot = lane / LPK;
            float s = NEG_INF;
#pragma unroll
            for (u32 g0 = 0; g0 < GROUPS; g0 += 8) {
                float kf[8][8];
#pragma unroll
                for (u32 g = 0; g < 8 && g0 + g < GROUPS; ++g) {
                    const u32 key = k + (g0 + g) * KPI + slot;
                    const u64 at = (u64)(key < end ? key : k) * kv_width + (u64)kvh * HD + sub * 8;
                    if (ELEM == 0) {
                        const float4* src = reinterpret_cast<const float4*>(reinterpret_cast<const float*>(base) + at);
                        const float4 x0 = __ldcg(src), x1 = __ldcg(src + 1);
                        kf[g][0] = x0.x; kf[g][1] = x0.y; kf[g][2] = x0.z; kf[g][3] = x0.w;
                        kf[g][4] = x1.x; kf[g][5] = x1.y; kf[g][6] = x1.z; kf[g][7] = x1.w;
                    } else {
                        const uint4 x = __ldcg(reinterpret_cast<const uint4*>(reinterpret_cast<const unsigned short*>(base) + at));
                        const u32 w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
                        for (u32 e = 0; e < 4; ++e) {
                            const unsigned short lo = (unsigned short)(w[e] & 0xffffu), hi = (unsigned short)(w[e] >> 16);
                            kf[g][2 * e] = ds_half<ELEM>(lo);
                            kf[g][2 * e + 1] = ds_half<ELEM>(hi);
                        }
                    }
                }
#pragma unroll
                for (u32 g = 0; g < 8 && g0 + g < GROUPS; ++g) {
                    float dot = 0.0f;
#pragma unroll
                    for (u32 e = 0; e < 8; ++e) dot = fmaf(qh[sub * 8 + e], kf[g][e], dot);
#pragma unroll
                    for (u32 o = LPK / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
                    // Key (g0 + g) * KPI + slot's score; lane L's key is group L / KPI, slot L % KPI.
                    const float mine = __shfl_sync(0xffffffffu, dot, (lane % KPI) * LPK);
                    if (lane / KPI == g0 + g) s = mine;
                }
            }
            if (lane < RK && k + lane < end) s *= d.scale;
            else s = NEG_INF;
            const float mnew = nan_max(m, warp_max(s));
            const float alpha = m == NEG_INF ? 0.0f : expf(m - mnew);
            const float p = s == NEG_INF ? 0.0f : expf(s - mnew);
            sum = sum * alpha + warp_sum(p);
#pragma unroll
            for (u32 j = 0; j < CW; ++j) acc[j] *= alpha;
            if (full) {
#pragma unroll
                for (u32 k0 = 0; k0 < RK; k0 += VB) {
                    if (k0 > 0 || !PRE) {
#pragma unroll
                        for (u32 kk = 0; kk < VB; ++kk) {
#pragma unroll
                            for (u32 j = 0; j < CW; ++j)
                                v[kk][j] = ds_elem<ELEM>(base, vbase + (k0 + kk) * kv_width + j * 32);
                        }
                    }
#pragma unroll
                    for (u32 kk = 0; kk < VB; ++kk) {
                        const float pk = __shfl_sync(0xffffffffu, p, k0 + kk);
#pragma unroll
                        for (u32 j = 0; j < CW; ++j) {
                            // A value whose weight is 0 is never added (a NaN there stays out).
                            acc[j] = pk == 0.0f ? acc[j] : fmaf(pk, v[kk][j], acc[j]);
                        }
                    }
                }
            } else {
                for (u32 kk = 0; kk < end - k; ++kk) {
                    const float pk = __shfl_sync(0xffffffffu, p, kk);
#pragma unroll
                    for (u32 j = 0; j < CW; ++j) {
                        const float vv = ds_elem<ELEM>(base, vbase + kk * kv_width + j * 32);
                        acc[j] = pk == 0.0f ? acc[j] : fmaf(pk, vv, acc[j]);
                    }
                }
            }
            m = mnew;
        }
#pragma unroll
        for (u32 j = 0; j < CW; ++j) acc_w[warp][j * 32 + lane] = acc[j];
        if (lane == 0) {
            ml_w[warp][0] = m;
            ml_w[warp][1] = sum;
        }
        __syncthreads();
        for (u32 col = threadIdx.x; col < HD; col += blockDim.x) {
            float mx = NEG_INF;
#pragma unroll
            for (u32 w = 0; w < DS_WARPS; ++w) mx = nan_max(mx, ml_w[w][0]);
            float num = 0.0f, den = 0.0f;
#pragma unroll
            for (u32 w = 0; w < DS_WARPS; ++w) {
                const float f = ml_w[w][0] == NEG_INF ? 0.0f : expf(ml_w[w][0] - mx);
                num += f * acc_w[w][col];
                den += f * ml_w[w][1];
            }
            if (splits == 1) {
                att[h * HD + col] = ds_ratio(num, den);
            } else {
                // The split's partial, unnormalised: (acc[HD], max, sum).
                float* out = part + ((u64)h * DS_SPLITS + split) * (HD + 2);
                out[col] = num;
                if (col == 0) {
                    out[HD] = mx;
                    out[HD + 1] = den;
                }
            }
        }
        if (splits > 1) {
            // The head's last split to finish merges them all into att[head]: each split's
            // partial is out (the fence) before its count, so the last one sees every partial.
            __shared__ bool last;
            __threadfence();
            __syncthreads();
            if (threadIdx.x == 0) {
                const u32 old = atomicAdd(counts + h, 1u);
                last = old == splits - 1;
                if (last) counts[h] = 0; // for the next layer, after the barriers between
            }
            __syncthreads();
            if (last) {
                const float* ph = part + (u64)h * DS_SPLITS * (HD + 2);
                for (u32 col = threadIdx.x; col < HD; col += blockDim.x) {
                    float mc[DS_SPLITS], lc[DS_SPLITS], ac[DS_SPLITS];
                    float mx = NEG_INF;
#pragma unroll
                    for (u32 c = 0; c < DS_SPLITS; ++c) {
                        const bool in = c < splits;
                        mc[c] = in ? __ldcg(ph + c * (HD + 2) + HD) : NEG_INF;
                        lc[c] = in ? __ldcg(ph + c * (HD + 2) + HD + 1) : 0.0f;
                        ac[c] = in ? __ldcg(ph + c * (HD + 2) + col) : 0.0f;
                    }
#pragma unroll
                    for (u32 c = 0; c < DS_SPLITS; ++c) mx = nan_max(mx, mc[c]);
                    float num = 0.0f, den = 0.0f;
#pragma unroll
                    for (u32 c = 0; c < DS_SPLITS; ++c) {
                        const float w = mc[c] == NEG_INF ? 0.0f : expf(mc[c] - mx);
                        num += w * ac[c];
                        den += w * lc[c];
                    }
                    att[h * HD + col] = ds_ratio(num, den);
                }
            }
        }
        __syncthreads();
    }
}

template <u32 HD>
__device__ __forceinline__ void ds_attend_elem(u64 cache, const DsDims& d, const float* qh, u32 h,
                                               u32 begin, u32 end, u32 split, u32 splits,
                                               float* att, float* part, u32* counts,
                                               float (*acc_w)[DS_MAX_HD], float (*ml_w)[2]) {
    if (d.elem == 0) ds_attend<HD, 0>(cache, d, qh, h, begin, end, split, splits, att, part, counts, acc_w, ml_w);
    else if (d.elem == 1) ds_attend<HD, 1>(cache, d, qh, h, begin, end, split, splits, att, part, counts, acc_w, ml_w);
    else ds_attend<HD, 2>(cache, d, qh, h, begin, end, split, splits, att, part, counts, acc_w, ml_w);
}

__device__ __forceinline__ void ds_attend_hd(u64 cache, const DsDims& d, const float* qh, u32 h,
                                             u32 begin, u32 end, u32 split, u32 splits,
                                             float* att, float* part, u32* counts, float (*acc_w)[DS_MAX_HD],
                                             float (*ml_w)[2]) {
    const u32 hd = d.head_dim;
    if (hd == 32) ds_attend_elem<32>(cache, d, qh, h, begin, end, split, splits, att, part, counts, acc_w, ml_w);
    else if (hd == 64) ds_attend_elem<64>(cache, d, qh, h, begin, end, split, splits, att, part, counts, acc_w, ml_w);
    else if (hd == 128) ds_attend_elem<128>(cache, d, qh, h, begin, end, split, splits, att, part, counts, acc_w, ml_w);
    else ds_attend_elem<256>(cache, d, qh, h, begin, end, split, splits, att, part, counts, acc_w, ml_w);
}

// Rows r0, r0 + 1 of the q/k/v product (of the normed x in shared memory), RoPE-rotated by
// the tables' row rows[head row]: every lane gets both.
__device__ __forceinline__ float2 ds_qkv_pair(const DsWeight& w, u32 r0, u32 hidden, u32 hd,
                                              const float* __restrict__ cos_t,
                                              const float* __restrict__ sin_t,
                                              const u32* __restrict__ rows,
                                              const float* __restrict__ x) {
    const float2 y = ds_pair(w, r0, r0 + 1, hidden, x);
    const u64 ti = (u64)__ldg(rows + r0 / hd) * (hd / 2) + (r0 % hd) / 2;
    const float c = cos_t[ti], s = sin_t[ti];
    return make_float2(y.x * c - y.y * s, y.x * s + y.y * c);
}

// token: the step's token id (its embedding row, read from e.embed); cos_t, sin_t: the RoPE
// tables, [rows, head_dim / 2]; rope_rows: [heads + 2 kv_heads], each head row's table row
// (values' rows turn by the identity row); position: where the step's keys and values go
// (dropped at or past capacity); keys: how many cache rows attention sees; scratch: q,
// attention's output, the SwiGLU vector and attention's split partials (see the launch); bar:
// the barrier's count, the pick's best word and count, and the heads' split counts, zero
// before the first launch; x: the hidden state [hidden]; out: what e.pick asks for, the logits
// [vocab] (f32) or the largest one's index [1] (u32).
extern "C" __global__ void __launch_bounds__(DS_WARPS * 32, 1) decode_layers(const DsLayer* __restrict__ layers, DsDims d, DsEnds e,
                  const u32* __restrict__ token, const float* __restrict__ cos_t,
                  const float* __restrict__ sin_t, const u32* __restrict__ rope_rows,
                  const u32* __restrict__ position, const u32* __restrict__ keys,
                  float* __restrict__ scratch, u64* __restrict__ bar, float* __restrict__ x_out,
                  void* __restrict__ out) {
    WAIT_PRIOR();
    extern __shared__ float4 ds_shared[];
    float* vec = reinterpret_cast<float*>(ds_shared);
    __shared__ float red[32];
    __shared__ float acc_w[DS_WARPS][DS_MAX_HD];
    __shared__ float ml_w[DS_WARPS][2];
    __shared__ float qh_s[DS_MAX_HD]; // a head's q
    const u32 lane = threadIdx.x & 31;
    const u32 hd = d.head_dim, hidden = d.hidden, qrows = d.heads * hd;
    const u32 kv_width = 2 * d.kv_heads * hd;
    const u32 at = *position;
    const u32 seen = *keys < d.capacity ? *keys : d.capacity;
    DsBar b;
    b.count = bar;
    b.marks = d.profile ? reinterpret_cast<u64*>(d.profile) + (u64)blockIdx.x * DS_EVENTS(d.layers) : nullptr;
    b.ev = 0;
    if (threadIdx.x == 0) {
        // No block has passed this launch's first barrier, so the count is below the next
        // multiple of the grid.
        u64 now;
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(now) : "l"(bar) : "memory");
        b.target = now - now % gridDim.x;
    }
    ds_mark(b);
    u64* best = bar + 1;                           // the pick's largest word so far
    u64* picked = bar + 2;                         // blocks that have offered theirs
    u32* counts = reinterpret_cast<u32*>(bar + 3); // [heads]: each head's splits done
    float* q = scratch;          // [heads * hd]
    float* att = q + qrows;      // [heads * hd]: attention's output
    float* gated = att + qrows;  // [ffn]
    float* part = gated + d.ffn; // [heads][DS_SPLITS][hd + 2]
    // A head's keys go to one block up to 512 of them; past that to more, as many as the grid
    // has for every head (up to DS_SPLITS), the last to finish merging them.
    const u32 wanted = (seen + 511) / 512, room = gridDim.x / d.heads;
    u32 splits = wanted < room ? wanted : room;
    splits = splits < 1 ? 1 : (splits > DS_SPLITS ? DS_SPLITS : splits);
    // A split's keys: a multiple of attention's rounds of 16.
    const u32 chunk = ((seen + splits - 1) / splits + 15) / 16 * 16;
    const u64 cache_bytes = (u64)seen * kv_width * (d.elem == 0 ? 4 : 2); // the rows seen
    ds_warm_layer(layers[0], d);
    ds_warm(layers[0].cache, cache_bytes);
    // A barrier; while it gathers, the next layer's reads of the stage that follows are asked
    // into L2 (a layer ahead, and by little parts: all at once, they queued before the
    // stage's own loads).
    auto sync = [&](u32 l, u32 stage) {
        ds_arrive(b);
        if (l + 1 < d.layers) ds_warm_stage(layers[l + 1], d, stage, cache_bytes);
        ds_wait(b);
    };
    for (u32 l = 0; l < d.layers; ++l) {
        const DsLayer& L = layers[l];
        const float* x = x_out;
        // A: norm, q/k/v, RoPE, the cache row.
        ds_sub(b, d, l, 0);
        if (l == 0) {
            // The token's embedding row, which block 0 also stores as the residual (read
            // after the barrier that follows).
            const u32 id = *token < e.embed_rows ? *token : 0;
            ds_load_with(
                [&](u32 i) {
                    const float v = ds_dequant(e.embed, id, hidden, i);
                    if (blockIdx.x == 0) x_out[i] = v;
                    return v;
                },
                hidden, reinterpret_cast<const float*>(L.attn_norm), d.eps, vec, red);
        } else {
            ds_load_vector(x, hidden, reinterpret_cast<const float*>(L.attn_norm), d.eps, vec, red);
        }
        ds_sub(b, d, l, 1);
        DS_TASKS(t, (qrows + kv_width) / 2) {
            const u32 r0 = 2 * t;
            const float2 o = ds_qkv_pair(L.qkv, r0, hidden, hd, cos_t, sin_t, rope_rows, vec);
            if (lane == 0) {
                if (r0 < qrows) {
                    q[r0] = o.x;
                    q[r0 + 1] = o.y;
                } else if (at < d.capacity) {
                    const u64 e = (u64)at * kv_width + (r0 - qrows);
                    store_elem(reinterpret_cast<void*>(L.cache), e, d.elem, o.x);
                    store_elem(reinterpret_cast<void*>(L.cache), e + 1, d.elem, o.y);
                }
            }
        }
        ds_sub(b, d, l, 2);
        sync(l, 0);
        // B: attention, a block a (head, split of its keys).
        ds_sub(b, d, l, 3);
        for (u32 task = blockIdx.x; task < d.heads * splits; task += gridDim.x) {
            const u32 h = task / splits, split = task % splits;
            const u32 begin = split * chunk;
            const u32 end = begin + chunk < seen ? begin + chunk : seen;
            for (u32 i = threadIdx.x; i < hd; i += blockDim.x) qh_s[i] = __ldcg(q + h * hd + i);
            __syncthreads();
            if (task == blockIdx.x) ds_sub(b, d, l, 4);
            ds_attend_hd(L.cache, d, qh_s, h, begin, end, split, splits, att, part, counts, acc_w, ml_w);
            if (task == blockIdx.x) ds_sub(b, d, l, 5);
        }
        sync(l, 1);
        // C: the output product + residual.
        ds_load_vector(att, qrows, nullptr, 0.0f, vec, red);
        DS_TASKS(t, hidden / 2) {
            const u32 r0 = 2 * t;
            // The residual's loads go out with the weight's, not after the product.
            const float a = lane == 0 ? __ldcg(x + r0) : 0.0f, c = lane == 0 ? __ldcg(x + r0 + 1) : 0.0f;
            const float2 y = ds_pair(L.o, r0, r0 + 1, qrows, vec);
            if (lane == 0) {
                x_out[r0] = a + y.x;
                x_out[r0 + 1] = c + y.y;
            }
        }
        sync(l, 2);
        // D: norm, gate and up, SwiGLU.
        ds_sub(b, d, l, 6);
        ds_load_vector(x_out, hidden, reinterpret_cast<const float*>(L.ffn_norm), d.eps, vec, red);
        ds_sub(b, d, l, 7);
        DS_TASKS(t, d.ffn) {
            const float2 y = ds_pair(L.gate_up, t, t + d.ffn, hidden, vec);
            if (lane == 0) gated[t] = unary_op(5, y.x, 0.0f, 0.0f) * y.y;
        }
        sync(l, 3);
        // E: down + residual.
        ds_load_vector(gated, d.ffn, nullptr, 0.0f, vec, red);
        DS_TASKS(t, hidden / 2) {
            const u32 r0 = 2 * t;
            const float a = lane == 0 ? __ldcg(x_out + r0) : 0.0f;
            const float c = lane == 0 ? __ldcg(x_out + r0 + 1) : 0.0f;
            const float2 y = ds_pair(L.down, r0, r0 + 1, d.ffn, vec);
            if (lane == 0) {
                x_out[r0] = a + y.x;
                x_out[r0 + 1] = c + y.y;
            }
        }
        sync(l, 4);
    }
    // The output norm and the LM head, DS_HEAD_ROWS rows a warp task; then the logits, or the
    // largest one's index: each block offers its largest to `best` (an atomic maximum), and
    // the last block to offer writes the index and clears the word for the next launch.
    ds_load_vector(x_out, hidden, reinterpret_cast<const float*>(e.norm), d.eps, vec, red);
    u64 mine = 0;
    const u32 per = DS_HEAD_ROWS;
    DS_TASKS(t, (e.vocab + per - 1) / per) {
        const u32 r0 = per * t;
        const u32 rows = e.vocab - r0 < per ? e.vocab - r0 : per;
        float y[DS_HEAD_ROWS];
        ds_rows(e.head, r0, rows, hidden, vec, y);
        if (lane == 0) {
#pragma unroll
            for (u32 r = 0; r < DS_HEAD_ROWS; ++r) {
                if (r >= rows) break;
                if (e.pick == 0) {
                    reinterpret_cast<float*>(out)[r0 + r] = y[r];
                } else {
                    const u64 a = ds_rank(y[r], r0 + r);
                    mine = a > mine ? a : mine;
                }
            }
        }
    }
    if (e.pick == 1) {
        __shared__ u64 best_w[DS_WARPS];
        if (lane == 0) best_w[threadIdx.x >> 5] = mine;
        __syncthreads();
        if (threadIdx.x == 0) {
            for (u32 w = 1; w < DS_WARPS; ++w) mine = best_w[w] > mine ? best_w[w] : mine;
            atomicMax(reinterpret_cast<unsigned long long*>(best), (unsigned long long)mine);
            __threadfence();
            const u64 n = atomicAdd(reinterpret_cast<unsigned long long*>(picked), 1ull) + 1;
            if (n % gridDim.x == 0) {
                __threadfence();
                const u64 w = atomicExch(reinterpret_cast<unsigned long long*>(best), 0ull);
                *reinterpret_cast<u32*>(out) = ~(u32)w;
            }
        }
    }
    ds_mark(b);
}
