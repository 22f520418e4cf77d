// Flash attention on tensor cores (the FlashAttention-2 scheme) for f16 and bf16 operands, as
// stored: products on `mma.sync` m16n8k16 with f32 accumulation, the online softmax in f32
// registers. Compiled only for compute capability 8.0 and later (src/backend/cuda/attention.rs
// chooses it; older GPUs and other head widths take the f32 kernels of attention.cu).
//
// A block of 4 warps takes MMA_BR = 64 query rows of one (batch, head), 16 a warp, whose q
// fragments stay in registers. Key and value tiles of MMA_BC = 64 rows are double-buffered in
// shared memory and copied with cp.async: tile t + 1's keys are issued as tile t starts and its
// values once tile t's scores are done, so one barrier a tile suffices and each copy has a
// whole tile's work to land behind. Each warp computes its 16 x 64 scores (S = q k^T), masks
// (only tiles on the causal diagonal or at the end) and scales them, updates its rows' running
// maximum and sum, converts the probabilities to the operand dtype in registers (the
// accumulator layout of S is the A-operand layout of P) and adds P v into its 16 x D
// accumulators. Shared rows are padded by 16 bytes, so ldmatrix's eight row reads hit
// different banks. Addresses are worked out once: a tile's copies and fragment reads cost an
// add each (Nsight Compute counted 734 instructions a warp and tile at A1 16 x 4096 x 64 when
// they were recomputed per access, 395 after).

// Semantics are those of attention.cu: softmax over the visible keys (causal: keys
// 0 ..= i + sk - sq; key lengths hide padding), a NaN or +inf score gives a NaN row, a row of
// only -inf scores gives NaN, a row with no visible key is zero. The exponentials are taken in
// base 2 on scores premultiplied by scale * log2(e); maxima use fmaxf, which passes NaN by, and
// a NaN score reaches its row's sum and output through its probability instead.

#define MMA_BR 64
#define MMA_BC 64
#define MMA_PAD 8

typedef unsigned short h16;

__device__ __forceinline__ u32 shared_addr(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// 16 bytes from global to shared memory; `bytes` = 0 fills the destination with zeros.
__device__ __forceinline__ void copy16(u32 dst, const void* src, u32 bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void copies_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void copies_wait() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Four 8 x 8 matrices of 16-bit elements from shared memory (lane l gives the address of row
// l % 8 of matrix l / 8); `trans` reads them transposed.
__device__ __forceinline__ void ldsm4(u32 addr, u32 (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm4_trans(u32 addr, u32 (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// c += a b for a 16 x 16 A fragment and a 16 x 8 B fragment (b0, b1), f32 accumulators.
// Not volatile: a pure function of registers, which the compiler may schedule freely.
template <bool BF>
__device__ __forceinline__ void mma16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    if (BF) {
        asm(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// Two floats as two 16-bit values of the operand dtype (round to nearest even), `lo` in the
// low half.
template <bool BF>
__device__ __forceinline__ u32 pack2(float lo, float hi) {
    u32 r;
    if (BF) {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    } else {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    }
    return r;
}

// 2^x on the special function unit (results below 2^-126 flush to zero; -inf gives 0).
__device__ __forceinline__ float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Rows [r0 + RP i] of a tile, 16 bytes at column c each, for the 128 threads of a block:
// thread `tid` copies column (tid % (D / 8)) * 8 of rows tid / (D / 8) + RP i. Shared
// addresses and the row step are worked out once; a tile then costs a pointer add a row.
template <int D, int ROWS>
struct TileCopy {
    static constexpr u32 CH = D / 8, RP = 128 / CH, PASSES = ROWS / RP;
    static constexpr u32 S = D + MMA_PAD;
    u32 r0, dst; // this thread's first row, and its byte offset in a shared tile
    __device__ __forceinline__ TileCopy(u32 tid) {
        r0 = tid / CH;
        dst = (r0 * S + (tid % CH) * 8) * 2;
    }
    // `src` is row 0 of the tile (with this thread's column added), `step` RP rows in bytes;
    // rows from `rows` on arrive as zeros (read from `fallback`, which is never read).
    template <bool FULL>
    __device__ __forceinline__ void copy(u32 tile, const char* src, u64 step, u64 rows,
                                         const char* fallback) const {
#pragma unroll
        for (u32 i = 0; i < PASSES; ++i) {
            const u32 to = tile + dst + i * RP * S * 2;
            if (FULL) {
                copy16(to, src, 16);
            } else {
                const bool in = r0 + i * RP < rows;
                copy16(to, in ? src : fallback, in ? 16 : 0);
            }
            src += step;
        }
    }
    __device__ __forceinline__ void rows(u32 tile, const char* src, u64 step, u64 rows,
                                         const char* fallback) const {
        if (rows >= ROWS) {
            copy<true>(tile, src, step, rows, fallback);
        } else {
            copy<false>(tile, src, step, rows, fallback);
        }
    }
};

// The online softmax of a warp's 16 x BC scores `s` (this thread's two rows, r = 0, 1):
// updates the rows' maxima `m` (scaled, base 2) and this thread's share of their sums `l`,
// leaves the probabilities in `s` and the factor the output rescales by in `corr`. MASK tiles
// (the causal diagonal, the last keys) hide columns from `lim[r]` on; the others take the
// scale inside the exponent's fused multiply-add (sl2 >= 0: q's signs carry a negative scale).
template <int BC, bool MASK>
__device__ __forceinline__ void tile_softmax(float (&s)[BC / 8][4], const int (&lim)[2],
                                             float sl2, u32 t4, float (&m)[2], float (&l)[2],
                                             float (&corr)[2]) {
    // Reductions run in four independent chains a row and both rows interleave, so their
    // latencies overlap instead of adding up.
    float mx[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float c[4] = {NEG_INF, NEG_INF, NEG_INF, NEG_INF};
#pragma unroll
        for (int n = 0; n < BC / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float x = s[n][2 * r + e];
                if (MASK) {
                    x *= sl2;
                    if (n * 8 + 2 * (int)t4 + e >= lim[r]) x = NEG_INF;
                    s[n][2 * r + e] = x;
                }
                c[(2 * n + e) & 3] = fmaxf(c[(2 * n + e) & 3], x);
            }
        }
        mx[r] = fmaxf(fmaxf(c[0], c[1]), fmaxf(c[2], c[3]));
    }
    // fmaxf passes NaN by; a NaN score still makes its row NaN through its
    // probability (exp2(NaN) is NaN), kept even where every other score is -inf.
#pragma unroll
    for (int r = 0; r < 2; ++r) mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
#pragma unroll
    for (int r = 0; r < 2; ++r) mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    // Scaling is monotonic (sl2 >= 0), so the scaled maximum is the maximum scaled.
    float mn[2], sum[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) mn[r] = fmaxf(m[r], MASK ? mx[r] : mx[r] * sl2);
    if (mn[0] != NEG_INF && mn[1] != NEG_INF) {
        float c[2][4] = {};
        float nm[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            corr[r] = exp2_ftz(m[r] - mn[r]); // 0 while m was -inf
            nm[r] = -mn[r];
        }
#pragma unroll
        for (int n = 0; n < BC / 8; ++n) {
#pragma unroll
            for (int x = 0; x < 4; ++x) {
                const int r = x >> 1;
                const float p = exp2_ftz(MASK ? s[n][x] + nm[r] : fmaf(s[n][x], sl2, nm[r]));
                s[n][x] = p;
                c[r][(2 * n + x) & 3] += p;
            }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) sum[r] = (c[r][0] + c[r][1]) + (c[r][2] + c[r][3]);
    } else {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            sum[r] = 0.0f;
            if (mn[r] == NEG_INF) { // every visible score so far is -inf (or NaN)
                corr[r] = 1.0f;
#pragma unroll
                for (int n = 0; n < BC / 8; ++n) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float x = MASK ? s[n][2 * r + e] : s[n][2 * r + e] * sl2;
                        const float p = x != x ? x : 0.0f;
                        s[n][2 * r + e] = p;
                        sum[r] += p;
                    }
                }
            } else {
                corr[r] = exp2_ftz(m[r] - mn[r]);
#pragma unroll
                for (int n = 0; n < BC / 8; ++n) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float x = s[n][2 * r + e];
                        const float p = exp2_ftz(MASK ? x - mn[r] : fmaf(x, sl2, -mn[r]));
                        s[n][2 * r + e] = p;
                        sum[r] += p;
                    }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] = l[r] * corr[r] + sum[r]; // this thread's share; the quad adds them at the end
        m[r] = mn[r];
    }
}

template <int D, bool BF>
__device__ __forceinline__ void flash_mma(const AttnLayout& lay, const h16* __restrict__ q,
                                          const h16* __restrict__ k, const h16* __restrict__ v,
                                          const u32* __restrict__ lens, u64 hq, u64 hkv, u64 sq,
                                          u64 sk, u32 causal, float scale, h16* __restrict__ out) {
    constexpr u32 S = D + MMA_PAD; // a shared row, in 16-bit elements
    constexpr int BC = MMA_BC;
    extern __shared__ uint4 smem_mma[];
    const u32 qs = shared_addr(smem_mma);           // [MMA_BR][S]
    const u32 ks = qs + MMA_BR * S * 2;             // [BC][S]
    constexpr u32 TILE = BC * S * 2;                // a key or value tile, in bytes
    const u32 vs = ks + 2 * TILE;                   // [2][BC][S], as the keys
    const u32 tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const u32 g = lane >> 2, t4 = lane & 3;
    const u64 bh = blockIdx.y, b = bh / hq, h = bh % hq, kvh = h / (hq / hkv);
    // Causal blocks further down see more keys: they start first (see attention.cu).
    const u64 qblock = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const u64 i0 = qblock * MMA_BR;
    const u64 shift = sk > sq ? sk - sq : 0;
    const u64 cap = lens ? (lens[b] < sk ? lens[b] : sk) : sk;
    // Keys every row of the block sees (tiles below it need no mask), and keys any row sees.
    u64 block_visible = cap, all_visible = cap;
    if (causal) {
        const u64 last = (i0 + MMA_BR < sq ? i0 + MMA_BR : sq) - 1;
        if (last + 1 + shift < block_visible) block_visible = last + 1 + shift;
        if (i0 + 1 + shift < all_visible) all_visible = i0 + 1 + shift;
    }
    // This thread's two rows: g and g + 8 of its warp's 16.
    u64 vis[2];
    for (int r = 0; r < 2; ++r) {
        const u64 i = i0 + warp * 16 + g + 8 * r;
        u64 x = cap;
        if (causal && i + 1 + shift < x) x = i + 1 + shift;
        vis[r] = i < sq ? x : 0;
    }
    const TileCopy<D, BC> tc(tid);
    const TileCopy<D, MMA_BR> qc(tid);
    const u32 col = (tid % TileCopy<D, BC>::CH) * 8;
    const char* qb = (const char*)(q + lay.q.offset + b * lay.q.batch + h * lay.q.head + col);
    const char* kb = (const char*)(k + lay.k.offset + b * lay.k.batch + kvh * lay.k.head + col);
    const char* vb = (const char*)(v + lay.v.offset + b * lay.v.batch + kvh * lay.v.head + col);
    constexpr u32 RP = TileCopy<D, BC>::RP;
    const u64 q_step = lay.q.seq * 2 * RP, k_row = lay.k.seq * 2, v_row = lay.v.seq * 2;
    const u64 k_step = k_row * RP, v_step = v_row * RP;
    const u64 k_tile = k_row * BC, v_tile = v_row * BC;
    const char* kt = kb + tc.r0 * k_row; // this thread's first row of the next key tile
    const char* vt = vb + tc.r0 * v_row;
    qc.rows(qs, qb + (i0 + qc.r0) * lay.q.seq * 2, q_step, i0 < sq ? sq - i0 : 0, qb);
    // Keys past what any row of the block sees arrive as zeros (so 0 x garbage never adds).
    tc.rows(ks, kt, k_step, block_visible, kb);
    tc.rows(vs, vt, v_step, block_visible, vb);
    copies_commit();
    const u64 tiles = (block_visible + BC - 1) / BC;
    float sl2 = scale * 1.4426950408889634f;
    // Lane offsets of the fragments' ldmatrix reads (bytes): q and keys non-transposed,
    // values transposed.
    const u32 q_lane = ((warp * 16 + (lane & 7) + (((lane >> 3) & 1) << 3)) * S + ((lane >> 4) << 3)) * 2;
    const u32 k_lane = (((lane & 7) + ((lane >> 4) << 3)) * S + (((lane >> 3) & 1) << 3)) * 2;
    const u32 v_lane = (((lane & 7) + (((lane >> 3) & 1) << 3)) * S + ((lane >> 4) << 3)) * 2;
    u32 qf[D / 16][4];
    float o[D / 8][4];
#pragma unroll
    for (int t = 0; t < D / 8; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};
    for (u64 t = 0; t < tiles; ++t) {
        const u64 j0 = t * BC;
        copies_wait();
        __syncthreads(); // keys t are in; every warp is done with tile t - 1
        if (t == 0) {
            // A negative scale moves into q's signs (exactly), so sl2 >= 0 below: each warp
            // flips its own 16 rows in shared memory.
            if (sl2 < 0.0f) {
                u32* rows = (u32*)smem_mma + warp * 16 * (S / 2);
                for (u32 e = lane; e < 16 * (S / 2); e += 32) rows[e] ^= 0x80008000u;
                __syncwarp();
                sl2 = -sl2;
            }
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) ldsm4(qs + q_lane + kk * 32, qf[kk]);
        }
        const u32 kcur = ks + (u32)(t & 1) * TILE, vcur = vs + (u32)(t & 1) * TILE;
        const u32 knext = ks + (u32)((t + 1) & 1) * TILE, vnext = vs + (u32)((t + 1) & 1) * TILE;
        // Keys and values t + 1 arrive while tile t is worked on, into the buffers tile t - 1
        // used (every warp is past it: the barrier above); the keys now, the values after the
        // scores, so the two bursts of copies do not queue behind each other.
        if (t + 1 < tiles) {
            kt += k_tile;
            tc.rows(knext, kt, k_step, block_visible - j0 - BC, kb);
            copies_commit();
        }
        float s[BC / 8][4];
#pragma unroll
        for (int n = 0; n < BC / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            u32 bk[BC / 16][4]; // the fragments first, then the products
#pragma unroll
            for (int n = 0; n < BC / 8; n += 2) ldsm4(kcur + k_lane + (n * 8 * S + kk * 16) * 2, bk[n / 2]);
#pragma unroll
            for (int n = 0; n < BC / 8; n += 2) {
                mma16816<BF>(s[n], qf[kk], bk[n / 2][0], bk[n / 2][1]);
                mma16816<BF>(s[n + 1], qf[kk], bk[n / 2][2], bk[n / 2][3]);
            }
        }
        if (t + 1 < tiles) {
            vt += v_tile;
            tc.rows(vnext, vt, v_step, block_visible - j0 - BC, vb);
            copies_commit();
        }
        float corr[2];
        if (j0 + BC <= all_visible) {
            const int none[2] = {BC, BC};
            tile_softmax<BC, false>(s, none, sl2, t4, m, l, corr);
        } else {
            // Keys of this tile each row sees: scores past the limit become -inf.
            int lim[2];
            for (int r = 0; r < 2; ++r)
                lim[r] = vis[r] <= j0 ? 0 : (vis[r] - j0 >= BC ? BC : (int)(vis[r] - j0));
            tile_softmax<BC, true>(s, lim, sl2, t4, m, l, corr);
        }
#pragma unroll
        for (int t8 = 0; t8 < D / 8; ++t8) {
            o[t8][0] *= corr[0];
            o[t8][1] *= corr[0];
            o[t8][2] *= corr[1];
            o[t8][3] *= corr[1];
        }
#pragma unroll
        for (int kk = 0; kk < BC / 16; ++kk) {
            const u32 a[4] = {pack2<BF>(s[2 * kk][0], s[2 * kk][1]),
                              pack2<BF>(s[2 * kk][2], s[2 * kk][3]),
                              pack2<BF>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack2<BF>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            u32 bv[D / 16][4];
#pragma unroll
            for (int n = 0; n < D / 8; n += 2) ldsm4_trans(vcur + v_lane + (kk * 16 * S + n * 8) * 2, bv[n / 2]);
#pragma unroll
            for (int n = 0; n < D / 8; n += 2) {
                mma16816<BF>(o[n], a, bv[n / 2][0], bv[n / 2][1]);
                mma16816<BF>(o[n + 1], a, bv[n / 2][2], bv[n / 2][3]);
            }
        }
    }
    copies_wait();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        const u64 i = i0 + warp * 16 + g + 8 * r;
        if (i >= sq) continue;
        h16* orow = out + (lay.out_bshd ? (b * sq + i) * hq + h : bh * sq + i) * D;
        const float inv = 1.0f / l[r];
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            float x0, x1;
            if (vis[r] == 0) {
                x0 = x1 = 0.0f;
            } else if (m[r] == NEG_INF) {
                x0 = x1 = QNAN;
            } else {
                x0 = o[n][2 * r] * inv;
                x1 = o[n][2 * r + 1] * inv;
            }
            *(u32*)(orow + n * 8 + 2 * t4) = pack2<BF>(x0, x1);
        }
    }
}

// Blocks an SM the compiler fits registers for: three up to head width 64 (168 registers; left
// alone it took 201, two blocks an SM, and A1 at 2048-4096 keys ran 5-8% slower), two at 128.
#define FLASH_MMA(NAME, D, BF)                                                                     \
    extern "C" __global__ void __launch_bounds__(128, (D) <= 64 ? 3 : 2) NAME(                     \
        AttnLayout lay, const h16* __restrict__ q, const h16* __restrict__ k,                      \
        const h16* __restrict__ v, const u32* __restrict__ lens, u64 hq, u64 hkv, u64 sq, u64 sk,  \
        u32 causal, float scale, h16* __restrict__ out) {                                          \
        WAIT_PRIOR();                                                                              \
        flash_mma<D, BF>(lay, q, k, v, lens, hq, hkv, sq, sk, causal, scale, out);                 \
    }

FLASH_MMA(flash_mma_f16_32, 32, false)
FLASH_MMA(flash_mma_f16_64, 64, false)
FLASH_MMA(flash_mma_f16_128, 128, false)
FLASH_MMA(flash_mma_bf16_32, 32, true)
FLASH_MMA(flash_mma_bf16_64, 64, true)
FLASH_MMA(flash_mma_bf16_128, 128, true)
