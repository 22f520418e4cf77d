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
// striding over the row's quant words (32 consecutive words per step, so reads are coalesced),
// then a warp sum. A lane dequantizes a whole word (4 bytes of Q8_0, 8 nibbles of Q4) exactly
// as dequant_at does and dots it with the matching float4s of x (k is a multiple of 32 and
// buffers are whole allocations, so rows of x are float4-aligned); the loop is unrolled so
// several words are in flight per lane.
extern "C" __global__ void qgemv(u32 format, const float* __restrict__ scales,
                                 const float* __restrict__ mins, const u32* __restrict__ words,
                                 const float* __restrict__ x, u64 m, u64 n, u64 k,
                                 float* __restrict__ out) {
    const u64 warps = blockDim.x >> 5;
    const u64 j = (u64)blockIdx.x * warps + (threadIdx.x >> 5);
    const u32 lane = threadIdx.x & 31;
    if (j >= n) return;
    const u64 blocks = k / 32;
    const u32 wpb = format == 0 ? 8 : 4;
    const u64 row_words = blocks * wpb;
    const u32* __restrict__ wr = words + j * row_words;
    const float* __restrict__ sr = scales + j * blocks;
    const float* __restrict__ mr = mins ? mins + j * blocks : nullptr;
    for (u64 i = blockIdx.y; i < m; i += gridDim.y) {
        const float4* __restrict__ xi = reinterpret_cast<const float4*>(x + i * k);
        float acc = 0.0f;
#pragma unroll 4
        for (u64 w = lane; w < row_words; w += 32) {
            const u32 q = wr[w];
            const float d = sr[w / wpb];
            if (format == 0) {
                const float4 v = xi[w];
                acc += v.x * (d * (float)(signed char)q) + v.y * (d * (float)(signed char)(q >> 8)) +
                       v.z * (d * (float)(signed char)(q >> 16)) +
                       v.w * (d * (float)(signed char)(q >> 24));
            } else {
                const float mn = mr ? mr[w / wpb] : 0.0f;
                const auto at = [&](u32 shift) {
                    const float v = (float)((q >> shift) & 0xfu);
                    return mr ? d * v + mn : d * (v - 8.0f);
                };
                const float4 a = xi[2 * w], b = xi[2 * w + 1];
                acc += a.x * at(0) + a.y * at(4) + a.z * at(8) + a.w * at(12) + b.x * at(16) +
                       b.y * at(20) + b.z * at(24) + b.w * at(28);
            }
        }
        acc = warp_sum(acc);
        if (lane == 0) out[i * n + j] = acc;
    }
}
