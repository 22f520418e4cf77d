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

// A block's (batch x head, query block of MMA_BR rows). The grid is one-dimensional and goes
// through the heads fastest: every head's first query block, then every head's second, and so
// on. Under a causal mask the blocks further down see more keys, so they come first: every
// head's heaviest block before any lighter one, which leaves the lightest for the last wave.
// (Heads slowest, the blocks of the last heads to start included their heaviest: at A2, 32
// heads x 2048 x 128, SMs then sat idle 19% of the kernel's time.)
__device__ __forceinline__ void block_of(u64 sq, u32 causal, u64& bh, u64& qblock) {
    const u64 blocks = (sq + MMA_BR - 1) / MMA_BR, heads = gridDim.x / blocks;
    const u64 rank = blockIdx.x / heads;
    bh = blockIdx.x % heads;
    qblock = causal ? blocks - 1 - rank : rank;
}

// Rows [r0 + RP i] of a tile of CH 16-byte chunks a row, for the 128 threads of a block:
// thread `tid` copies chunk tid % CH of rows tid / CH + RP i. Shared
// addresses and the row step are worked out once; a tile then costs a pointer add a row.
template <u32 CH_, u32 ROWS, u32 ROW_BYTES>
struct TileCopy {
    static constexpr u32 CH = CH_, RP = 128 / CH, PASSES = ROWS / RP;
    u32 r0, dst; // this thread's first row, and its byte offset in a shared tile
    __device__ __forceinline__ TileCopy(u32 tid) {
        r0 = tid / CH;
        dst = r0 * ROW_BYTES + (tid % CH) * 16;
    }
    // `src` is row 0 of the tile (with this thread's column added), `step` RP rows in bytes;
    // rows from `rows` on arrive as zeros (read from `fallback`, which is never read).
    template <bool FULL>
    __device__ __forceinline__ void copy(u32 tile, const char* src, u64 step, u64 rows,
                                         const char* fallback) const {
#pragma unroll
        for (u32 i = 0; i < PASSES; ++i) {
            const u32 to = tile + dst + i * RP * ROW_BYTES;
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
template <int BC, bool MASK, bool PERM = false>
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
                    const int key = PERM ? n * 8 + (int)t4 + 4 * e : n * 8 + 2 * (int)t4 + e;
                    if (key >= lim[r]) x = NEG_INF;
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
    u64 bh, qblock;
    block_of(sq, causal, bh, qblock);
    const u64 b = bh / hq, h = bh % hq, kvh = h / (hq / hkv);
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
    typedef TileCopy<D / 8, BC, S * 2> Tiles;
    const Tiles tc(tid);
    const TileCopy<D / 8, MMA_BR, S * 2> qc(tid);
    const u32 col = (tid % Tiles::CH) * 8;
    const char* qb = (const char*)(q + lay.q.offset + b * lay.q.batch + h * lay.q.head + col);
    const char* kb = (const char*)(k + lay.k.offset + b * lay.k.batch + kvh * lay.k.head + col);
    const char* vb = (const char*)(v + lay.v.offset + b * lay.v.batch + kvh * lay.v.head + col);
    constexpr u32 RP = Tiles::RP;
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

// ---------------------------------------------------------------------------------------------
// f32 operands on tensor cores at f32 accuracy ("3xTF32"). Each operand x splits into
// hi = x with its 13 low mantissa bits cleared (a tf32 value) and lo = x - hi (exact in f32,
// read by the tensor core as tf32, so 21-22 bits of x survive), and a product a b takes three
// m16n8k8 tf32 products: hi hi + lo hi + hi lo (the dropped lo lo is 2^-22 of it). Special
// values: lo is NaN exactly where x is not finite. A score's hi hi part alone is not finite
// whenever an input of its row or key is not (or the sum overflows), and then it is the score
// as f32 arithmetic would give it (inf, or NaN for inf - inf and 0 x inf); the lo parts join
// only finite ones. Values' lo and, in the lo hi product, their hi are zero where the value is
// not finite, so p v keeps f32's semantics (inf for p > 0, NaN for p = 0 or a NaN).
//
// The layout is the f16 kernel's with f32 rows (padded by 16 bytes for q and keys, whose
// fragments ldmatrix reads as pairs of 16-bit halves, by 32 bytes for values, which each
// lane reads by single words without bank conflicts). The keys of an 8-key column block are
// read in the order 0 4 1 5 2 6 3 7, so the scores' accumulator layout (columns 2t, 2t + 1)
// holds keys t and t + 4: the A-operand layout of P for the values' product, no shuffles.

__device__ __forceinline__ float tf32_hi(float x) { return __uint_as_float(__float_as_uint(x) & 0xffffe000u); }

// c += a b for a 16 x 8 A fragment and an 8 x 8 B fragment (b0, b1), tf32, f32 accumulators.
__device__ __forceinline__ void mma1688(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four words' hi and lo parts.
__device__ __forceinline__ void split4(const u32 (&x)[4], u32 (&hi)[4], u32 (&lo)[4]) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const float h = tf32_hi(__uint_as_float(x[e]));
        hi[e] = __float_as_uint(h);
        lo[e] = __float_as_uint(__uint_as_float(x[e]) - h);
    }
}

template <int D, int BC>
__device__ __forceinline__ void flash_tc32(const AttnLayout& lay, const float* __restrict__ q,
                                           const float* __restrict__ k, const float* __restrict__ v,
                                           const u32* __restrict__ lens, u64 hq, u64 hkv, u64 sq,
                                           u64 sk, u32 causal, float scale, float* __restrict__ out) {
    constexpr u32 S = D + 4, SV = D + 8;      // shared rows in words: q and keys, values
    constexpr u32 KT = BC * S * 4, VT = BC * SV * 4; // a key and a value tile, in bytes
    extern __shared__ uint4 smem_mma[];
    const u32 qs = shared_addr(smem_mma); // [MMA_BR][S]
    const u32 ks = qs + MMA_BR * S * 4;   // [2][BC][S]
    const u32 vs = ks + 2 * KT;           // [2][BC][SV]
    const float* vsm = (const float*)smem_mma + MMA_BR * S + 2 * BC * S;
    const u32 tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const u32 g = lane >> 2, t4 = lane & 3;
    u64 bh, qblock;
    block_of(sq, causal, bh, qblock);
    const u64 b = bh / hq, h = bh % hq, kvh = h / (hq / hkv);
    const u64 i0 = qblock * MMA_BR;
    const u64 shift = sk > sq ? sk - sq : 0;
    const u64 cap = lens ? (lens[b] < sk ? lens[b] : sk) : sk;
    u64 block_visible = cap, all_visible = cap;
    if (causal) {
        const u64 last = (i0 + MMA_BR < sq ? i0 + MMA_BR : sq) - 1;
        if (last + 1 + shift < block_visible) block_visible = last + 1 + shift;
        if (i0 + 1 + shift < all_visible) all_visible = i0 + 1 + shift;
    }
    u64 vis[2];
    for (int r = 0; r < 2; ++r) {
        const u64 i = i0 + warp * 16 + g + 8 * r;
        u64 x = cap;
        if (causal && i + 1 + shift < x) x = i + 1 + shift;
        vis[r] = i < sq ? x : 0;
    }
    typedef TileCopy<D / 4, BC, S * 4> KTiles;
    typedef TileCopy<D / 4, BC, SV * 4> VTiles;
    const KTiles kc(tid);
    const VTiles vc(tid);
    const TileCopy<D / 4, MMA_BR, S * 4> qc(tid);
    const u32 col = (tid % KTiles::CH) * 4;
    const char* qb = (const char*)(q + lay.q.offset + b * lay.q.batch + h * lay.q.head + col);
    const char* kb = (const char*)(k + lay.k.offset + b * lay.k.batch + kvh * lay.k.head + col);
    const char* vb = (const char*)(v + lay.v.offset + b * lay.v.batch + kvh * lay.v.head + col);
    constexpr u32 RP = KTiles::RP;
    const u64 k_row = lay.k.seq * 4, v_row = lay.v.seq * 4;
    const u64 k_step = k_row * RP, v_step = v_row * RP;
    const char* kt = kb + kc.r0 * k_row;
    const char* vt = vb + vc.r0 * v_row;
    qc.rows(qs, qb + (i0 + qc.r0) * lay.q.seq * 4, lay.q.seq * 4 * RP, i0 < sq ? sq - i0 : 0, qb);
    kc.rows(ks, kt, k_step, block_visible, kb);
    vc.rows(vs, vt, v_step, block_visible, vb);
    copies_commit();
    const u64 tiles = (block_visible + BC - 1) / BC;
    float sl2 = scale * 1.4426950408889634f;
    // ldmatrix lanes: q as the A operand (rows g, g + 8; columns t, t + 4), keys as the B
    // operand of two 8-key column blocks, their rows in the order 0 4 1 5 2 6 3 7.
    const u32 q_lane = ((warp * 16 + (lane & 7) + (((lane >> 3) & 1) << 3)) * S + ((lane >> 4) << 2)) * 4;
    const u32 kr = lane & 7;
    const u32 k_lane = (((kr >> 1) + ((kr & 1) << 2) + ((lane >> 4) << 3)) * S + (((lane >> 3) & 1) << 2)) * 4;
    float o[D / 8][4];
#pragma unroll
    for (int t = 0; t < D / 8; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};
    for (u64 t = 0; t < tiles; ++t) {
        const u64 j0 = t * BC;
        copies_wait();
        __syncthreads(); // tile t is in; every warp is done with tile t - 1
        if (t == 0 && sl2 < 0.0f) { // a negative scale moves into q's signs (exactly)
            u32* rows = (u32*)smem_mma + warp * 16 * S;
            for (u32 e = lane; e < 16 * S; e += 32) rows[e] ^= 0x80000000u;
            __syncwarp();
            sl2 = -sl2;
        }
        const u32 kcur = ks + (u32)(t & 1) * KT;
        const float* vrow = vsm + (u32)(t & 1) * (BC * SV);
        if (t + 1 < tiles) {
            kt += (u64)BC * k_row;
            kc.rows(ks + (u32)((t + 1) & 1) * KT, kt, k_step, block_visible - j0 - BC, kb);
            copies_commit();
        }
        float sh[BC / 8][4], sl[BC / 8][4];
#pragma unroll
        for (int n = 0; n < BC / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) sh[n][e] = sl[n][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 8; ++kk) {
            u32 qa[4], qh[4], ql[4];
            ldsm4(qs + q_lane + kk * 32, qa);
            split4(qa, qh, ql);
#pragma unroll
            for (int n = 0; n < BC / 8; n += 2) {
                u32 kx[4], kh[4], kl[4];
                ldsm4(kcur + k_lane + (n * 8 * S + kk * 8) * 4, kx);
                split4(kx, kh, kl);
                mma1688(sh[n], qh, kh[0], kh[1]);
                mma1688(sh[n + 1], qh, kh[2], kh[3]);
                mma1688(sl[n], ql, kh[0], kh[1]);
                mma1688(sl[n + 1], ql, kh[2], kh[3]);
                mma1688(sl[n], qh, kl[0], kl[1]);
                mma1688(sl[n + 1], qh, kl[2], kl[3]);
            }
        }
        if (t + 1 < tiles) {
            vt += (u64)BC * v_row;
            vc.rows(vs + (u32)((t + 1) & 1) * VT, vt, v_step, block_visible - j0 - BC, vb);
            copies_commit();
        }
        // The lo parts join finite scores only (see above).
#pragma unroll
        for (int n = 0; n < BC / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float x = sh[n][e];
                sh[n][e] = fabsf(x) < POS_INF ? x + sl[n][e] : x;
            }
        float corr[2];
        if (j0 + BC <= all_visible) {
            const int none[2] = {BC, BC};
            tile_softmax<BC, false, true>(sh, none, sl2, t4, m, l, corr);
        } else {
            int lim[2];
            for (int r = 0; r < 2; ++r)
                lim[r] = vis[r] <= j0 ? 0 : (vis[r] - j0 >= BC ? BC : (int)(vis[r] - j0));
            tile_softmax<BC, true, true>(sh, lim, sl2, t4, m, l, corr);
        }
#pragma unroll
        for (int t8 = 0; t8 < D / 8; ++t8) {
            o[t8][0] *= corr[0];
            o[t8][1] *= corr[0];
            o[t8][2] *= corr[1];
            o[t8][3] *= corr[1];
        }
#pragma unroll
        for (int kk = 0; kk < BC / 8; ++kk) {
            // P's A fragment: keys t and t + 4 of rows g and g + 8.
            const u32 p[4] = {__float_as_uint(sh[kk][0]), __float_as_uint(sh[kk][2]),
                              __float_as_uint(sh[kk][1]), __float_as_uint(sh[kk][3])};
            u32 ph[4], pl[4];
            split4(p, ph, pl);
            const float* v0 = vrow + (kk * 8 + t4) * SV + g;
#pragma unroll
            for (int n = 0; n < D / 8; ++n) {
                const float a = v0[n * 8], c = v0[4 * SV + n * 8];
                const float ah = tf32_hi(a), ch = tf32_hi(c);
                const float al = a - ah, cl = c - ch;
                const bool af = al == al, cf = cl == cl; // finite values
                mma1688(o[n], ph, __float_as_uint(ah), __float_as_uint(ch));
                mma1688(o[n], pl, __float_as_uint(af ? ah : 0.0f), __float_as_uint(cf ? ch : 0.0f));
                mma1688(o[n], ph, __float_as_uint(af ? al : 0.0f), __float_as_uint(cf ? cl : 0.0f));
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
        float* orow = out + (lay.out_bshd ? (b * sq + i) * hq + h : bh * sq + i) * D;
        const float inv = 1.0f / l[r];
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            float2 x;
            if (vis[r] == 0) {
                x = make_float2(0.0f, 0.0f);
            } else if (m[r] == NEG_INF) {
                x = make_float2(QNAN, QNAN);
            } else {
                x = make_float2(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
            }
            *(float2*)(orow + n * 8 + 2 * t4) = x;
        }
    }
}

// Keys a tile for f32: 64 up to head width 64, 32 at 128 (shared memory for two blocks an SM).
#define FLASH_TC32(NAME, D)                                                                        \
    extern "C" __global__ void __launch_bounds__(128, 2) NAME(                                     \
        AttnLayout lay, const float* __restrict__ q, const float* __restrict__ k,                  \
        const float* __restrict__ v, const u32* __restrict__ lens, u64 hq, u64 hkv, u64 sq,        \
        u64 sk, u32 causal, float scale, float* __restrict__ out) {                                \
        WAIT_PRIOR();                                                                              \
        flash_tc32<D, (D) <= 64 ? 64 : 32>(lay, q, k, v, lens, hq, hkv, sq, sk, causal, scale, out); \
    }

FLASH_TC32(flash_tc32_32, 32)
FLASH_TC32(flash_tc32_64, 64)
FLASH_TC32(flash_tc32_128, 128)

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
