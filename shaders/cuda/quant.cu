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
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < rows * cols;
         i += (u64)gridDim.x * blockDim.x) {
        out[i] = dequant_at(format, scales, mins, words, i / cols, cols, i % cols);
    }
}

// out[i, j] = sum_e x[i, e] * w[j, e] with w quantized [n, k]: one warp per output, lanes
// striding along k (so x and the quant words are read in runs), then a warp sum.
extern "C" __global__ void qgemv(u32 format, const float* __restrict__ scales,
                                 const float* __restrict__ mins, const u32* __restrict__ words,
                                 const float* __restrict__ x, u64 m, u64 n, u64 k,
                                 float* __restrict__ out) {
    const u64 warps = blockDim.x >> 5;
    const u64 j = (u64)blockIdx.x * warps + (threadIdx.x >> 5);
    const u32 lane = threadIdx.x & 31;
    if (j >= n) return;
    for (u64 i = blockIdx.y; i < m; i += gridDim.y) {
        const float* xi = x + i * k;
        float acc = 0.0f;
        for (u64 e = lane; e < k; e += 32) acc += dequant_at(format, scales, mins, words, j, k, e) * xi[e];
        acc = warp_sum(acc);
        if (lane == 0) out[i * n + j] = acc;
    }
}
