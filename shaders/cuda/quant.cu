// Quantized weights (GGUF blocks of 32 along each row): dequantization, and the matrix-vector
// product that dequantizes inside the kernel (the weights never exist as f32).

// One element of a quantized matrix (GGUF blocks of 32): format 0 Q8_0, 1 Q4_0, 2 Q4_1.
__device__ __forceinline__ float dequant_at(u32 format, const float* __restrict__ scales,
                                            const float* __restrict__ mins,
                                            const u32* __restrict__ words, u64 row, u64 cols,
                                            u64 e) {
    const u64 blocks = cols / 32, b = e / 32, j = e % 32;
    const float d = scales[row * blocks + b];
    if (format == 0) {
        const u32 w = words[row * blocks * 8 + b * 8 + j / 4];
        return d * (float)(signed char)(w >> (8 * (j % 4)));
    }
    const u32 w = words[row * blocks * 4 + b * 4 + j / 8];
    const float q = (float)((w >> (4 * (j % 8))) & 0xfu);
    return mins ? d * q + mins[row * blocks + b] : d * (q - 8.0f);
}

extern "C" __global__ void dequantize(u32 format, const float* __restrict__ scales,
                                      const float* __restrict__ mins, const u32* __restrict__ words,
                                      u64 rows, u64 cols, float* __restrict__ out) {
    WAIT_PRIOR();
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < rows * cols;
         i += (u64)gridDim.x * blockDim.x) {
        out[i] = dequant_at(format, scales, mins, words, i / cols, cols, i % cols);
    }
}

// out[i, j] = sum_e x[i, e] * w[j, e] with w quantized [n, k] (k a multiple of 32, buffers
// whole allocations, so quant blocks and rows of x are 16-byte aligned). A block's 4 warps form
// 4 / kw groups of ROWS outputs (8 for Q4, 4 for Q8_0) of one row of x; the kw warps of a group
// split the row's quant blocks and add their sums in shared memory. A lane takes whole quant
// blocks and loads its ROWS rows' words (128 bytes), scales and minimums before using any, so
// each lane keeps a round of loads in flight; the block's 32 values of x are read once for
// all ROWS rows, from shared memory where the row of x fits 48 KB (`qgemv_staged`: see
// stage_x; a Q4_1 4096 x 4096 GEMV on an H100 went from 11.0 to 9.9-10.2 us). Codes become
// floats exactly by the exponent trick (0x4B000000 | c is
// 2^23 + c), a byte permute and a subtraction, rather than integer conversions; a Q4 block's
// sum is d * (x . codes) + (min or -8 d) * sum(x) while sum(x) is finite. (Loading the next
// round while computing this one, with half the rows, measured slower on an H100.)

// Codes c of 4 bytes (byte b of `w`) as 2^23 + c.
__device__ __forceinline__ float code_at(u32 w, u32 b) {
    return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440u + b));
}

// One round of a lane's loads: ROWS rows' words, scales and minimums of quant block qb.
template <u32 FORMAT, u32 ROWS>
struct QgRound {
    static constexpr u32 WPB = FORMAT == 0 ? 8 : 4; // words a quant block
    static constexpr u32 VPB = WPB / 4;             // 16-byte vectors a quant block
    uint4 w[ROWS][VPB];
    float sc[ROWS], mn[ROWS];

    __device__ __forceinline__ void fetch(const float* __restrict__ scales,
                                          const float* __restrict__ mins,
                                          const u32* __restrict__ words, u64 j0, u64 n,
                                          u64 blocks, u64 qb) {
#pragma unroll
        for (u32 r = 0; r < ROWS; ++r) {
            const u64 row = j0 + r < n ? j0 + r : j0;
            const uint4* src = reinterpret_cast<const uint4*>(words + (row * blocks + qb) * WPB);
#pragma unroll
            for (u32 c = 0; c < VPB; ++c) w[r][c] = __ldg(src + c);
            sc[r] = __ldg(scales + row * blocks + qb);
            mn[r] = FORMAT == 2 ? __ldg(mins + row * blocks + qb) : 0.0f;
        }
    }

    // acc[r] += quant block qb of row r . x's block qb (times the norm's weight `nw` when
    // given, its row scale applied to the sums; silu(x) * up when `up` is given: SwiGLU).
    // With `xs` the block's x is in shared memory, already weighted or gated (see stage_x).
    template <bool STAGED>
    __device__ __forceinline__ void add(const float4* __restrict__ xi,
                                        const float4* __restrict__ nw,
                                        const float4* __restrict__ up,
                                        const float4* __restrict__ xs, u64 qb,
                                        float* acc) const {
        float xv[32];
#pragma unroll
        for (u32 c = 0; c < 8; ++c) {
            if constexpr (STAGED) {
                const float4 t = xs[qb * 8 + (c ^ (qb & 7))];
                xv[4 * c] = t.x;
                xv[4 * c + 1] = t.y;
                xv[4 * c + 2] = t.z;
                xv[4 * c + 3] = t.w;
                continue;
            } else {
            float4 t = xi[qb * 8 + c];
            if (nw) {
                const float4 g = __ldg(nw + qb * 8 + c);
                t = make_float4(t.x * g.x, t.y * g.y, t.z * g.z, t.w * g.w);
            }
            if (up) {
                const float4 u = up[qb * 8 + c];
                t = make_float4(unary_op(5, t.x, 0.0f, 0.0f) * u.x,
                                unary_op(5, t.y, 0.0f, 0.0f) * u.y,
                                unary_op(5, t.z, 0.0f, 0.0f) * u.z,
                                unary_op(5, t.w, 0.0f, 0.0f) * u.w);
            }
            xv[4 * c] = t.x;
            xv[4 * c + 1] = t.y;
            xv[4 * c + 2] = t.z;
            xv[4 * c + 3] = t.w;
            }
        }
        float sx = 0.0f;
#pragma unroll
        for (u32 e = 0; e < 32; ++e) sx += xv[e];
#pragma unroll
        for (u32 r = 0; r < ROWS; ++r) {
            float d0 = 0.0f, d1 = 0.0f;
            const u32 wr[8] = {w[r][0].x, w[r][0].y, w[r][0].z, w[r][0].w,
                               w[r][VPB - 1].x, w[r][VPB - 1].y, w[r][VPB - 1].z, w[r][VPB - 1].w};
            if (FORMAT == 0) {
                // Word c holds elements 4c .. 4c + 3, signed bytes: biased by 128.
#pragma unroll
                for (u32 c = 0; c < 8; ++c) {
                    const u32 b = wr[c] ^ 0x80808080u;
                    d0 = fmaf(xv[4 * c], code_at(b, 0) - 8388736.0f, d0);
                    d1 = fmaf(xv[4 * c + 1], code_at(b, 1) - 8388736.0f, d1);
                    d0 = fmaf(xv[4 * c + 2], code_at(b, 2) - 8388736.0f, d0);
                    d1 = fmaf(xv[4 * c + 3], code_at(b, 3) - 8388736.0f, d1);
                }
                acc[r] += sc[r] * (d0 + d1);
            } else {
                // Word c holds elements 8c .. 8c + 7, element 8c + e at nibble e.
#pragma unroll
                for (u32 c = 0; c < 4; ++c) {
                    const u32 lo = wr[c] & 0x0f0f0f0fu, hi = (wr[c] >> 4) & 0x0f0f0f0fu;
#pragma unroll
                    for (u32 b = 0; b < 4; ++b) {
                        d0 = fmaf(xv[8 * c + 2 * b], code_at(lo, b) - 8388608.0f, d0);
                        d1 = fmaf(xv[8 * c + 2 * b + 1], code_at(hi, b) - 8388608.0f, d1);
                    }
                }
                if (fabsf(sx) < POS_INF) {
                    const float base = FORMAT == 2 ? mn[r] : -8.0f * sc[r];
                    acc[r] += sc[r] * (d0 + d1) + base * sx;
                } else {
                    // An infinite or NaN x: weight by weight, as the reference does (a zero code
                    // times inf is not the weight's product).
                    float a = 0.0f;
#pragma unroll
                    for (u32 e = 0; e < 32; ++e) {
                        const float c = (float)((wr[e / 8] >> (4 * (e % 8))) & 0xfu);
                        a += xv[e] * (FORMAT == 2 ? sc[r] * c + mn[r] : sc[r] * (c - 8.0f));
                    }
                    acc[r] += a;
                }
            }
        }
    }
};

// Output `at` of a product rotated as interleaved RoPE rows of `dim` values: `v` is its sum,
// `other` its pair's (at ^ 1), turned by cos and sin[row, i] as rope.cu turns them.
__device__ __forceinline__ float rotate(float v, float other, u64 at, u32 dim,
                                        const float* __restrict__ cos_t,
                                        const float* __restrict__ sin_t) {
    const u64 t = (at / dim) * (dim / 2) + (at % dim) / 2;
    const float c = cos_t[t], s = sin_t[t];
    return (at & 1) == 0 ? v * c - other * s : other * s + v * c;
}

// The block's row of x into shared memory `xs` (k / 4 vec4s), times the norm's weight `nw`
// or as silu(gate) * up (`up`): loads neighbouring in memory, and each quant block's 8 vec4s
// at slots turned by the block's index, so the 8 lanes of a quarter warp reading their own
// blocks' vec4 c meet 8 different bank groups (read as global memory, each lane's 128 bytes
// took 32 transactions a warp instruction).
__device__ __forceinline__ void stage_x(const float4* __restrict__ xi,
                                        const float4* __restrict__ nw,
                                        const float4* __restrict__ up, u64 k,
                                        float4* __restrict__ xs) {
    __syncthreads();
    for (u64 j = threadIdx.x; j < k / 4; j += blockDim.x) {
        float4 t = xi[j];
        if (nw) {
            const float4 g = __ldg(nw + j);
            t = make_float4(t.x * g.x, t.y * g.y, t.z * g.z, t.w * g.w);
        }
        if (up) {
            const float4 u = up[j];
            t = make_float4(unary_op(5, t.x, 0.0f, 0.0f) * u.x, unary_op(5, t.y, 0.0f, 0.0f) * u.y,
                            unary_op(5, t.z, 0.0f, 0.0f) * u.z, unary_op(5, t.w, 0.0f, 0.0f) * u.w);
        }
        const u64 q = j / 8;
        xs[q * 8 + ((j % 8) ^ (q & 7))] = t;
    }
    __syncthreads();
}

template <u32 FORMAT, u32 ROWS, bool STAGED>
__device__ __forceinline__ void qgemv_rows(const float* __restrict__ scales,
                                           const float* __restrict__ mins,
                                           const u32* __restrict__ words,
                                           const float* __restrict__ x, u64 m, u64 n, u64 k,
                                           u32 kw, float (*red)[8],
                                           const float* __restrict__ residual,
                                           const float* __restrict__ norm_w, float eps,
                                           u32 swiglu, const float* __restrict__ cos_t,
                                           const float* __restrict__ sin_t, u32 rope_dim,
                                           float4* __restrict__ xs, float* __restrict__ out) {
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const u32 g = warp / kw, part = warp % kw;
    const u64 j0 = ((u64)blockIdx.x * (4 / kw) + g) * ROWS;
    const u64 blocks = k / 32, step = 32 * (u64)kw;
    for (u64 i = blockIdx.y; i < m; i += gridDim.y) {
        // With swiglu a row of x is 2k values: gate (read as x), then up.
        const float4* __restrict__ xi = reinterpret_cast<const float4*>(x + i * k * (1 + swiglu));
        const float4* __restrict__ up = swiglu ? xi + k / 4 : nullptr;
        const float4* __restrict__ nw = reinterpret_cast<const float4*>(norm_w);
        // The row's RMS scale, each warp on its own (the row is in L1 or L2 after the first).
        float scale = 1.0f;
        if (norm_w) {
            float q = 0.0f;
            for (u64 j = lane; j < k / 4; j += 32) {
                const float4 v = xi[j];
                q += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
            }
            scale = rsqrtf(warp_sum(q) / (float)k + eps);
        }
        if (STAGED) stage_x(xi, nw, up, k, xs);
        float acc[ROWS];
#pragma unroll
        for (u32 r = 0; r < ROWS; ++r) acc[r] = 0.0f;
        for (u64 qb = (u64)part * 32 + lane; j0 < n && qb < blocks; qb += step) {
            QgRound<FORMAT, ROWS> round;
            round.fetch(scales, mins, words, j0, n, blocks, qb);
            round.template add<STAGED>(xi, nw, up, xs, qb, acc);
        }
#pragma unroll
        for (u32 r = 0; r < ROWS; ++r) acc[r] = warp_sum(acc[r]) * scale;
        // j0 and ROWS are even: both outputs of a rotated pair are this group's.
        if (kw == 1) {
#pragma unroll
            for (u32 r = 0; r < ROWS; ++r) {
                if (lane == 0 && j0 + r < n) {
                    const u64 at = i * n + j0 + r;
                    float v = acc[r];
                    if (cos_t) v = rotate(v, acc[r ^ 1], at, rope_dim, cos_t, sin_t);
                    out[at] = residual ? v + residual[at] : v;
                }
            }
            continue;
        }
        if (lane == 0) {
#pragma unroll
            for (u32 r = 0; r < ROWS; ++r) red[warp][r] = acc[r];
        }
        __syncthreads();
        if (part == 0) {
            float t = 0.0f;
            if (lane < ROWS) {
                for (u32 p = 0; p < kw; ++p) t += red[warp + p][lane];
            }
            const float other = __shfl_xor_sync(0xffffffffu, t, 1);
            if (lane < ROWS && j0 + lane < n) {
                const u64 at = i * n + j0 + lane;
                if (cos_t) t = rotate(t, other, at, rope_dim, cos_t, sin_t);
                out[at] = residual ? t + residual[at] : t;
            }
        }
        __syncthreads();
    }
}

// The product's variant by format and rows a group (`few`: 2 outputs a group, for matrices
// too small to fill the GPU with groups of 8: a small GEMV waits on its slowest warp's
// arithmetic), x in shared memory (STAGED) or not.
template <bool STAGED>
__device__ __forceinline__ void qgemv_any(u32 format, u32 few, const float* __restrict__ scales,
                                          const float* __restrict__ mins,
                                          const u32* __restrict__ words,
                                          const float* __restrict__ x, u64 m, u64 n, u64 k, u32 kw,
                                          float (*red)[8], const float* __restrict__ residual,
                                          const float* __restrict__ norm_w, float eps, u32 swiglu,
                                          const float* __restrict__ cos_t,
                                          const float* __restrict__ sin_t, u32 rope_dim,
                                          float4* __restrict__ xs, float* __restrict__ out) {
    if (few) {
        if (format == 0) qgemv_rows<0, 2, STAGED>(scales, mins, words, x, m, n, k, kw, red, residual, norm_w, eps, swiglu, cos_t, sin_t, rope_dim, xs, out);
        else if (mins) qgemv_rows<2, 2, STAGED>(scales, mins, words, x, m, n, k, kw, red, residual, norm_w, eps, swiglu, cos_t, sin_t, rope_dim, xs, out);
        else qgemv_rows<1, 2, STAGED>(scales, mins, words, x, m, n, k, kw, red, residual, norm_w, eps, swiglu, cos_t, sin_t, rope_dim, xs, out);
        return;
    }
    if (format == 0) qgemv_rows<0, 4, STAGED>(scales, mins, words, x, m, n, k, kw, red, residual, norm_w, eps, swiglu, cos_t, sin_t, rope_dim, xs, out);
    else if (mins) qgemv_rows<2, 8, STAGED>(scales, mins, words, x, m, n, k, kw, red, residual, norm_w, eps, swiglu, cos_t, sin_t, rope_dim, xs, out);
    else qgemv_rows<1, 8, STAGED>(scales, mins, words, x, m, n, k, kw, red, residual, norm_w, eps, swiglu, cos_t, sin_t, rope_dim, xs, out);
}

// Format 0 Q8_0, 1 Q4_0, 2 Q4_1 (mins present); kw warps (1, 2 or 4) share a group's row;
// `residual` (or null), of out's shape, is added to each output; with `norm_w` (or null) x's
// rows are RMS-normalised first (eps, then norm_w per column); with `swiglu` x's rows are 2k
// values and the product reads silu(gate) * up (UnaryKind 5 is silu); with `cos_t` (or null)
// the outputs are rotated as interleaved RoPE rows of `rope_dim` values (n a multiple of it)
// before the residual is added. `launch_next`: the grid is one wave (see LAUNCH_NEXT).
// `qgemv_staged` reads x from shared memory (k * 4 bytes of it; see stage_x), `qgemv` from
// global memory: two kernels, so each gets its own registers (one kernel of both spilled).
// A grid of one wave asks L2 for the block's rows of weights while the kernel before
// finishes (weights are never written by the kernels before a product): prefetch hints only,
// before WAIT_PRIOR. In a longer grid the requests only delay the loads (a 14336-row GEMV
// took 10% longer).
__device__ __forceinline__ void qgemv_warm(u32 format, u32 few, u32 kw, u64 n, u64 k,
                                           const u32* __restrict__ words,
                                           const float* __restrict__ scales,
                                           const float* __restrict__ mins) {
    const u64 rows = (4 / kw) * (few ? 2 : (format == 0 ? 4 : 8)), first = blockIdx.x * rows;
    const u64 take = first < n ? (n - first < rows ? n - first : rows) : 0;
    const u64 blocks = k / 32, words_a = format == 0 ? 8 : 4;
    WARM_L2(words + first * blocks * words_a, take * blocks * words_a * 4);
    WARM_L2(scales + first * blocks, take * blocks * 4);
    if (mins) WARM_L2(mins + first * blocks, take * blocks * 4);
}

extern "C" __global__ void __launch_bounds__(128, 4) qgemv(u32 format, const float* __restrict__ scales,
    const float* __restrict__ mins, const u32* __restrict__ words, const float* __restrict__ x,
    u64 m, u64 n, u64 k, u32 kw, u32 few, const float* __restrict__ residual,
    const float* __restrict__ norm_w, float eps, u32 swiglu, const float* __restrict__ cos_t,
    const float* __restrict__ sin_t, u32 rope_dim, u32 launch_next, float* __restrict__ out) {
    if (launch_next && blockIdx.y == 0) {
        qgemv_warm(format, few, kw, n, k, words, scales, mins);
    }
    WAIT_PRIOR();
    if (launch_next) LAUNCH_NEXT();
    __shared__ float red[4][8];
    qgemv_any<false>(format, few, scales, mins, words, x, m, n, k, kw, red, residual, norm_w, eps,
                     swiglu, cos_t, sin_t, rope_dim, nullptr, out);
}

extern "C" __global__ void __launch_bounds__(128, 4) qgemv_staged(u32 format, const float* __restrict__ scales,
    const float* __restrict__ mins, const u32* __restrict__ words, const float* __restrict__ x,
    u64 m, u64 n, u64 k, u32 kw, u32 few, const float* __restrict__ residual,
    const float* __restrict__ norm_w, float eps, u32 swiglu, const float* __restrict__ cos_t,
    const float* __restrict__ sin_t, u32 rope_dim, u32 launch_next, float* __restrict__ out) {
    if (launch_next && blockIdx.y == 0) {
        qgemv_warm(format, few, kw, n, k, words, scales, mins);
    }
    WAIT_PRIOR();
    if (launch_next) LAUNCH_NEXT();
    __shared__ float red[4][8];
    // The dynamic shared memory holds a row of x (k floats; see stage_x).
    extern __shared__ float4 x_shared[];
    qgemv_any<true>(format, few, scales, mins, words, x, m, n, k, kw, red, residual, norm_w, eps,
                     swiglu, cos_t, sin_t, rope_dim, x_shared, out);
}
