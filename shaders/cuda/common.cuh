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
