// Top-k of rows by a total order on floats.

// A total order on floats as u32 keys: NaN above +inf, -0 below +0.
__device__ __forceinline__ u32 order_key(float v) {
    u32 b = __float_as_uint(v);
    if (is_nan(v)) return 0xffffffffu;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The composite key of column c: its value's key above, then the lower index first.
__device__ __forceinline__ u64 column_key(float v, u64 c) {
    return ((u64)order_key(v) << 32) | (u64)(0xffffffffu - (u32)c);
}

// Calls f(value, column) for every column of `row` the calling thread owns, four loads in
// flight a thread before any is used: one row of 49,152 logits took 85 us on an H100 with each
// load waited for in turn.
template <typename F>
__device__ __forceinline__ void each_column(const float* __restrict__ row, u64 cols, F f) {
    for (u64 c0 = threadIdx.x; c0 < cols; c0 += 4 * (u64)blockDim.x) {
        float v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const u64 c = c0 + u * (u64)blockDim.x;
            v[u] = c < cols ? row[c] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const u64 c = c0 + u * (u64)blockDim.x;
            if (c < cols) f(v[u], c);
        }
    }
}

// Top-k of one row by rounds of a block arg-max (up to 1024 threads, 32 warps): round r takes
// the best element ordered strictly after round r - 1's choice (key, then lower index first),
// so nothing is marked. k passes over the row: the path for k = 1 and the fallback of
// topk_select.
__device__ void topk_rounds(const float* __restrict__ row, u64 cols, u64 k, float* __restrict__ values,
                            float* __restrict__ indices, u64* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    u64 bound = ~0ull;
    for (u64 round = 0; round < k; ++round) {
        u64 best = 0;
        each_column(row, cols, [&](float v, u64 c) {
            const u64 key = column_key(v, c);
            // Round 0 has no bound: a NaN in column 0 has the all-ones key.
            if ((round == 0 || key < bound) && key > best) best = key;
        });
        for (int o = 16; o > 0; o >>= 1) {
            u64 other = __shfl_xor_sync(0xffffffffu, best, o);
            best = other > best ? other : best;
        }
        __syncthreads();
        if (lane == 0) scratch[warp] = best;
        __syncthreads();
        if (threadIdx.x == 0) {
            u64 b = 0;
            for (int w = 0; w < warps; ++w) b = scratch[w] > b ? scratch[w] : b;
            scratch[0] = b;
        }
        __syncthreads();
        bound = scratch[0];
        if (threadIdx.x == 0) {
            u32 c = 0xffffffffu - (u32)(bound & 0xffffffffu);
            values[round] = row[c];
            indices[round] = (float)c;
        }
    }
    __syncthreads();
}

// Radix selection: the keys' top 11 bits counted in shared memory find the bin that holds the
// k-th largest; while more than TK_CAP elements lie at or above it, the next 11 (then 10) bits
// of that bin are counted. Then every element at or above the threshold (at most TK_CAP) is
// gathered and sorted in shared memory (bitonic, by composite key) and the first k written.
// Two or three passes over the row whatever k is. Returns false, having written nothing, when
// more than TK_CAP elements share the k-th largest key (ties), for the rounds to take.
#define TK_CAP 2048
#define TK_BINS 2048
__device__ bool topk_select(const float* __restrict__ row, u64 cols, u64 k, float* __restrict__ values,
                            float* __restrict__ indices, u32* hist, u64* cand, u32* info) {
    const u32 tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    u32 prefix = 0, fixed = 0, above = 0, need = (u32)k, in_b = 0;
    bool resolved = false;
    for (int level = 0; level < 3 && !resolved; ++level) {
        const u32 bits = level < 2 ? 11 : 10, nb = 1u << bits, shift = 32 - fixed - bits;
        for (u32 i = tid; i < nb; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        each_column(row, cols, [&](float v, u64) {
            const u32 key = order_key(v);
            if (fixed == 0 || (key >> (32 - fixed)) == prefix) {
                atomicAdd(&hist[(key >> shift) & (nb - 1)], 1u);
            }
        });
        __syncthreads();
        // Warp 0 finds the bin b with fewer than `need` elements above it and at least `need`
        // from it up: lane l sums bins from the top, l * nb / 32 down; a scan over the lanes.
        if (warp == 0) {
            const u32 per = nb / 32, hi = nb - lane * per;
            u32 sum = 0;
            for (u32 j = hi - per; j < hi; ++j) sum += hist[j];
            u32 incl = sum;
            for (int o = 1; o < 32; o <<= 1) {
                const u32 t = __shfl_up_sync(0xffffffffu, incl, o);
                if ((int)lane >= o) incl += t;
            }
            const u32 excl = incl - sum;
            if (excl < need && need <= incl) {
                u32 acc = excl;
                for (u32 j = hi; j-- > hi - per;) {
                    if (acc + hist[j] >= need) {
                        info[0] = j;
                        info[1] = acc;
                        info[2] = hist[j];
                        break;
                    }
                    acc += hist[j];
                }
            }
        }
        __syncthreads();
        const u32 b = info[0], over = info[1];
        in_b = info[2];
        above += over;
        need -= over;
        prefix = (prefix << bits) | b;
        fixed += bits;
        resolved = above + in_b <= TK_CAP;
        __syncthreads();
    }
    if (!resolved) return false;
    const u32 threshold = fixed == 32 ? prefix : prefix << (32 - fixed);
    if (tid == 0) info[3] = 0;
    __syncthreads();
    each_column(row, cols, [&](float v, u64 c) {
        if (order_key(v) >= threshold) cand[atomicAdd(&info[3], 1u)] = column_key(v, c);
    });
    __syncthreads();
    const u32 n = info[3];
    u32 size = 2;
    while (size < n) size <<= 1;
    // Key 0 is no float's (the smallest, -inf's, is 0x007fffff): padding sorts last.
    for (u32 i = n + tid; i < size; i += blockDim.x) cand[i] = 0;
    __syncthreads();
    for (u32 span = 2; span <= size; span <<= 1) {
        for (u32 stride = span >> 1; stride > 0; stride >>= 1) {
            for (u32 i = tid; i < size / 2; i += blockDim.x) {
                const u32 lo = 2 * stride * (i / stride) + i % stride, hi = lo + stride;
                const bool down = (lo & span) == 0;
                const u64 a = cand[lo], z = cand[hi];
                if ((a < z) == down) {
                    cand[lo] = z;
                    cand[hi] = a;
                }
            }
            __syncthreads();
        }
    }
    for (u64 i = tid; i < k; i += blockDim.x) {
        const u32 c = 0xffffffffu - (u32)(cand[i] & 0xffffffffu);
        values[i] = row[c];
        indices[i] = (float)c;
    }
    __syncthreads();
    return true;
}

// Top-k of each row (a block a row, up to 1024 threads): radix selection for 2 <= k <= TK_CAP,
// rounds otherwise and where selection gives up.
extern "C" __global__ void topk_rows(const float* __restrict__ x, u64 rows, u64 cols, u64 k,
                                     float* __restrict__ values, float* __restrict__ indices) {
    WAIT_PRIOR();
    __shared__ u64 scratch[32];
    __shared__ u32 hist[TK_BINS];
    __shared__ u64 cand[TK_CAP];
    __shared__ u32 info[4];
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* row = x + r * cols;
        float* vr = values + r * k;
        float* ir = indices + r * k;
        const bool selected = k >= 2 && k <= TK_CAP && topk_select(row, cols, k, vr, ir, hist, cand, info);
        if (!selected) topk_rounds(row, cols, k, vr, ir, scratch);
    }
}
