// Top-k of rows by a total order on floats.

// A total order on floats as u32 keys: NaN above +inf, -0 below +0.
__device__ __forceinline__ u32 order_key(float v) {
    u32 b = __float_as_uint(v);
    if (is_nan(v)) return 0xffffffffu;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Top-k of each row by rounds of a block arg-max (up to 1024 threads, 32 warps): round r takes the best element ordered
// strictly after round r - 1's choice (key, then lower index first), so nothing is marked.
extern "C" __global__ void topk_rows(const float* __restrict__ x, u64 rows, u64 cols, u64 k,
                                     float* __restrict__ values, float* __restrict__ indices) {
    __shared__ u64 scratch[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* row = x + r * cols;
        u64 bound = ~0ull;
        for (u64 round = 0; round < k; ++round) {
            u64 best = 0;
            // Four loads in flight a thread before any is compared: one row of 49,152 logits
            // took 85 us on an H100 with each load waited for in turn.
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
                    u64 key = ((u64)order_key(v[u]) << 32) | (u64)(0xffffffffu - (u32)c);
                    // Round 0 has no bound: a NaN in column 0 has the all-ones key.
                    if (c < cols && (round == 0 || key < bound) && key > best) best = key;
                }
            }
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
                values[r * k + round] = row[c];
                indices[r * k + round] = (float)c;
            }
        }
    }
}
