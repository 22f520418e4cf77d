// Flash attention on tensor cores (the FlashAttention-2 scheme) for f16 and bf16 operands, as
// stored: products on `mma.sync` m16n8k16 with f32 accumulation, the online softmax in f32
// registers. Compiled only for compute capability 8.0 and later (src/backend/cuda/attention.rs
// chooses it; older GPUs and other head widths take the f32 kernels of attention.cu).
//
// A block of 4 warps takes MMA_BR = 64 query rows of one (batch, head), 16 a warp, whose q
// fragments stay in registers. Key and value tiles of MMA_BC = 64 rows are copied into shared
// memory with cp.async, interleaved: tile t's values arrive while its scores are computed and
// tile t + 1's keys while its values are multiplied (faster on an H100 than double-buffering
// both, which took twice the shared memory and 7% more time). Each
// warp computes its 16 x 64 scores (S = q k^T), masks and scales them, updates its rows' running
// maximum and sum, converts the probabilities to the operand dtype in registers (the
// accumulator layout of S is the A-operand layout of P) and adds P v into its 16 x D
// accumulators. Shared rows are padded by 16 bytes, so ldmatrix's eight row reads hit
// different banks.
//
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
template <bool BF>
__device__ __forceinline__ void mma16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    if (BF) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile(
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

template <int D, bool BF>
__device__ __forceinline__ void flash_mma(const AttnLayout& lay, const h16* __restrict__ q,
                                          const h16* __restrict__ k, const h16* __restrict__ v,
                                          const u32* __restrict__ lens, u64 hq, u64 hkv, u64 sq,
                                          u64 sk, u32 causal, float scale, h16* __restrict__ out) {
    constexpr u32 S = D + MMA_PAD; // a shared row, in 16-bit elements
    constexpr u32 CH = D / 8;      // 16-byte chunks a row
    extern __shared__ uint4 smem_mma[];
    h16* qs = (h16*)smem_mma;       // [MMA_BR][S]
    h16* ks = qs + MMA_BR * S;      // [MMA_BC][S]
    h16* vs = ks + MMA_BC * S;      // [MMA_BC][S]
    const u32 tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const u32 g = lane >> 2, t4 = lane & 3;
    const u64 bh = blockIdx.y, b = bh / hq, h = bh % hq, kvh = h / (hq / hkv);
    // Causal blocks further down see more keys: they start first (see attention.cu).
    const u64 qblock = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const u64 i0 = qblock * MMA_BR;
    const u64 shift = sk > sq ? sk - sq : 0;
    const u64 cap = lens ? (lens[b] < sk ? lens[b] : sk) : sk;
    u64 block_visible = cap;
    if (causal) {
        const u64 last = (i0 + MMA_BR < sq ? i0 + MMA_BR : sq) - 1;
        if (last + 1 + shift < block_visible) block_visible = last + 1 + shift;
    }
    // This thread's two rows: g and g + 8 of its warp's 16.
    u64 vis[2];
    for (int r = 0; r < 2; ++r) {
        const u64 i = i0 + warp * 16 + g + 8 * r;
        u64 x = cap;
        if (causal && i + 1 + shift < x) x = i + 1 + shift;
        vis[r] = i < sq ? x : 0;
    }
    const h16* qb = q + lay.q.offset + b * lay.q.batch + h * lay.q.head;
    const h16* kb = k + lay.k.offset + b * lay.k.batch + kvh * lay.k.head;
    const h16* vb = v + lay.v.offset + b * lay.v.batch + kvh * lay.v.head;
    for (u32 e = tid; e < MMA_BR * CH; e += blockDim.x) {
        const u32 r = e / CH, c = (e % CH) * 8;
        const bool in = i0 + r < sq;
        copy16(shared_addr(qs + r * S + c), qb + (in ? i0 + r : 0) * lay.q.seq + c, in ? 16 : 0);
    }
    // Keys past what any row of the block sees arrive as zeros (so 0 x garbage never adds).
    auto load_rows = [&](h16* dst, const h16* src, u64 stride, u64 j0) {
        for (u32 e = tid; e < MMA_BC * CH; e += blockDim.x) {
            const u32 r = e / CH, c = (e % CH) * 8;
            const bool in = j0 + r < block_visible;
            const u64 j = in ? j0 + r : 0;
            copy16(shared_addr(dst + r * S + c), src + j * stride + c, in ? 16 : 0);
        }
    };
    load_rows(ks, kb, lay.k.seq, 0);
    copies_commit();
    const u64 tiles = (block_visible + MMA_BC - 1) / MMA_BC;
    const float sl2 = scale * 1.4426950408889634f;
    u32 qf[D / 16][4];
    float o[D / 8][4];
#pragma unroll
    for (int t = 0; t < D / 8; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};
    for (u64 t = 0; t < tiles; ++t) {
        const u64 j0 = t * MMA_BC;
        copies_wait();
        __syncthreads(); // keys t are in; every warp is done with tile t - 1
        if (t == 0) {
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                const u32 row = warp * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
                const u32 col = kk * 16 + ((lane >> 4) << 3);
                ldsm4(shared_addr(qs + row * S + col), qf[kk]);
            }
        }
        // Values t arrive while the scores are computed, keys t + 1 while P v is.
        load_rows(vs, vb, lay.v.seq, j0);
        copies_commit();
        float s[MMA_BC / 8][4];
#pragma unroll
        for (int n = 0; n < MMA_BC / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
            for (int n = 0; n < MMA_BC / 8; n += 2) {
                u32 bk[4];
                const u32 row = n * 8 + (lane & 7) + ((lane >> 4) << 3);
                const u32 col = kk * 16 + (((lane >> 3) & 1) << 3);
                ldsm4(shared_addr(ks + row * S + col), bk);
                mma16816<BF>(s[n], qf[kk], bk[0], bk[1]);
                mma16816<BF>(s[n + 1], qf[kk], bk[2], bk[3]);
            }
        }
        // Keys of this tile each row sees: all of them but on the causal diagonal and at the
        // end, where scores past the limit become -inf.
        int lim[2];
        for (int r = 0; r < 2; ++r)
            lim[r] = vis[r] <= j0 ? 0 : (vis[r] - j0 >= MMA_BC ? MMA_BC : (int)(vis[r] - j0));
        const bool masked = lim[0] < MMA_BC || lim[1] < MMA_BC;
        float corr[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = NEG_INF;
#pragma unroll
            for (int n = 0; n < MMA_BC / 8; ++n) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float x = s[n][2 * r + e] * sl2;
                    if (masked && n * 8 + 2 * (int)t4 + e >= lim[r]) x = NEG_INF;
                    s[n][2 * r + e] = x;
                    mx = fmaxf(mx, x);
                }
            }
            // fmaxf passes NaN by; a NaN score still makes its row NaN through its
            // probability (exp2(NaN) is NaN), kept even where every other score is -inf.
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float mn = fmaxf(m[r], mx);
            float sum = 0.0f;
            if (mn == NEG_INF) { // every visible score so far is -inf (or NaN)
                corr[r] = 1.0f;
#pragma unroll
                for (int n = 0; n < MMA_BC / 8; ++n) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float x = s[n][2 * r + e];
                        const float p = x != x ? x : 0.0f;
                        s[n][2 * r + e] = p;
                        sum += p;
                    }
                }
            } else {
                corr[r] = exp2_ftz(m[r] - mn); // 0 while m was -inf
#pragma unroll
                for (int n = 0; n < MMA_BC / 8; ++n) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float p = exp2_ftz(s[n][2 * r + e] - mn);
                        s[n][2 * r + e] = p;
                        sum += p;
                    }
                }
            }
            l[r] = l[r] * corr[r] + sum; // this thread's share; the quad adds them at the end
            m[r] = mn;
        }
#pragma unroll
        for (int t8 = 0; t8 < D / 8; ++t8) {
            o[t8][0] *= corr[0];
            o[t8][1] *= corr[0];
            o[t8][2] *= corr[1];
            o[t8][3] *= corr[1];
        }
        copies_wait();
        __syncthreads(); // values t are in; every warp is done with keys t
        if (t + 1 < tiles) {
            load_rows(ks, kb, lay.k.seq, j0 + MMA_BC);
            copies_commit();
        }
#pragma unroll
        for (int kk = 0; kk < MMA_BC / 16; ++kk) {
            const u32 a[4] = {pack2<BF>(s[2 * kk][0], s[2 * kk][1]),
                              pack2<BF>(s[2 * kk][2], s[2 * kk][3]),
                              pack2<BF>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack2<BF>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int n = 0; n < D / 8; n += 2) {
                u32 bv[4];
                const u32 row = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
                const u32 col = n * 8 + ((lane >> 4) << 3);
                ldsm4_trans(shared_addr(vs + row * S + col), bv);
                mma16816<BF>(o[n], a, bv[0], bv[1]);
                mma16816<BF>(o[n + 1], a, bv[2], bv[3]);
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
// alone it took 201, two blocks an SM, and A1 at 2048-4096 keys ran 5-8% slower), two at 128
// (three spilled 88 bytes).
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
