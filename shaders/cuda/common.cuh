// Shared by every CUDA kernel file of gpukit (src/backend/cuda/module.rs puts it in front of
// each file before NVRTC compiles it). No headers: NVRTC has none without a toolkit.

typedef unsigned int u32;
typedef unsigned long long u64;

#define POS_INF __int_as_float(0x7f800000)
#define NEG_INF __int_as_float(0xff800000)
#define QNAN __int_as_float(0x7fc00000)

__device__ __forceinline__ bool is_nan(float v) { return v != v; }

// max and min that let NaN win, as the CPU reference does (fmaxf would drop it).
__device__ __forceinline__ float nan_max(float a, float b) { return (a > b || is_nan(a)) ? a : b; }
__device__ __forceinline__ float nan_min(float a, float b) { return (a < b || is_nan(a)) ? a : b; }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_min(float v) {
    for (int o = 16; o > 0; o >>= 1) v = nan_min(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Combines one value per thread of the block (blockDim.x a multiple of 32, at most 1024) with
// op 0 = sum, 1 = max, 2 = min; every thread gets the result. `scratch` holds 32 floats.
__device__ float block_reduce(float v, int op, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = op == 0 ? warp_sum(v) : (op == 1 ? warp_max(v) : warp_min(v));
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float init = op == 0 ? 0.0f : (op == 1 ? NEG_INF : POS_INF);
        float w = lane < warps ? scratch[lane] : init;
        w = op == 0 ? warp_sum(w) : (op == 1 ? warp_max(w) : warp_min(w));
        if (lane == 0) scratch[0] = w;
    }
    __syncthreads();
    return scratch[0];
}

// The unary ops of gpukit::UnaryOp, by UnaryKind code, with the formulas of the CPU backend
// (IEEE arithmetic: NaN in gives NaN out, log(0) = -inf, log(x < 0) = NaN).
__device__ __forceinline__ float unary_op(u32 kind, float v, float p0, float p1) {
    switch (kind) {
    case 0: return v < 0.0f ? 0.0f : v;
    case 1: return v < 0.0f ? p0 * v : v;
    case 2: return v > 0.0f ? v : p0 * (expf(v) - 1.0f);
    case 3: return 1.0f / (1.0f + expf(-v));
    case 4: return tanhf(v);
    case 5: return v / (1.0f + expf(-v));
    case 6: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    case 7: return 0.5f * v * (1.0f + tanhf(0.7978846f * (v + 0.044715f * v * v * v)));
    case 8: return v < p0 ? p0 : (v > p1 ? p1 : v);
    case 9: return v * p0;
    case 10: return expf(v);
    case 11: return logf(v);
    case 12: return sqrtf(v);
    case 13: return -v;
    default: return fabsf(v);
    }
}

__device__ __forceinline__ float binary_op(u32 op, float a, float b) {
    switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    default: return a / b;
    }
}
