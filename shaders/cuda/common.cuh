// Shared by every CUDA kernel file of gpukit (src/backend/cuda/module.rs puts it in front of
// each file before NVRTC compiles it). No headers: NVRTC has none without a toolkit.

typedef unsigned int u32;
typedef unsigned long long u64;

// Programmatic dependent launch (sm_90 and later): src/backend/cuda/mod.rs lets a kernel start
// while the one before it in the stream finishes, so its launch overlaps that kernel's tail.
// Every kernel waits here, first, for the grid before it to complete and its writes to show;
// before sm_90 launches are serial and this is nothing.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define WAIT_PRIOR() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define WAIT_PRIOR()
#endif

// After WAIT_PRIOR: lets the grid after this one launch now rather than when this one ends, so
// its blocks take free slots and run up to their own wait (its launch, and any WARM_L2, overlap
// this kernel's body). Only for grids of one wave: a longer grid's last wave would share its
// SMs with the waiting blocks (on an H100 that made decode attention and a 14336-row GEMV
// 4-10% slower when every kernel did it).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define LAUNCH_NEXT() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#else
#define LAUNCH_NEXT()
#endif

// Before WAIT_PRIOR only: asks L2 for `bytes` from `p` (lines of 128 bytes spread over the
// block's threads). A hint, never a read into registers, and L2 is coherent for every SM, so
// it cannot see stale data; kernels use it for weights, whose loads then meet L2 rather than
// memory once the kernel before finishes.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define WARM_L2(p, bytes)                                                                         \
    do {                                                                                          \
        const char* warm_at = (const char*)(p);                                                   \
        const u64 warm_n = (u64)(bytes);                                                          \
        for (u64 o = (u64)threadIdx.x * 128; o < warm_n; o += (u64)blockDim.x * 128)             \
            asm volatile("prefetch.global.L2 [%0];" ::"l"(warm_at + o));                          \
    } while (0)
#else
#define WARM_L2(p, bytes)
#endif

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

// Half-precision bits and f32, by integer operations (the same results as the CPU's `half`
// crate and shaders/include/dtype.wgsl): round to nearest even, overflow to inf, NaN kept.
__device__ __forceinline__ unsigned short f16_bits(float x) {
    const u32 b = __float_as_uint(x);
    const u32 sign = (b >> 16) & 0x8000u;
    const int e = (int)((b >> 23) & 0xffu);
    u32 m = b & 0x7fffffu;
    if (e == 255) return (unsigned short)(sign | 0x7c00u | (m ? 0x200u | (m >> 13) : 0u));
    const int he = e - 112;
    if (he >= 31) return (unsigned short)(sign | 0x7c00u);
    if (he <= 0) {
        if (he < -10) return (unsigned short)sign;
        m |= 0x800000u;
        const u32 shift = (u32)(14 - he);
        u32 h = m >> shift;
        const u32 rem = m & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (h & 1u))) h += 1u;
        return (unsigned short)(sign | h);
    }
    u32 h = ((u32)he << 10) | (m >> 13);
    const u32 rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h += 1u;
    return (unsigned short)(sign | h);
}
__device__ __forceinline__ float f16_float(unsigned short h) {
    const u32 sign = ((u32)h & 0x8000u) << 16;
    const u32 e = ((u32)h >> 10) & 0x1fu, m = (u32)h & 0x3ffu;
    if (e == 0) return __uint_as_float(sign) + (sign ? -1.0f : 1.0f) * (float)m * 5.9604644775390625e-8f;
    if (e == 31) return __uint_as_float(sign | 0x7f800000u | (m << 13));
    return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}
__device__ __forceinline__ unsigned short bf16_bits(float x) {
    const u32 b = __float_as_uint(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((b >> 16) | 0x40u);
    return (unsigned short)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float bf16_float(unsigned short h) { return __uint_as_float((u32)h << 16); }

// Attention operands (attention.cu, attention_mma.cu): row (b, h, i) starts at offset +
// b * batch + h * head + i * seq elements (the row's elements are contiguous), so heads-first,
// sequence-first and packed QKV layouts are read alike.
struct RowStrides {
    u64 offset, batch, head, seq;
};
struct AttnLayout {
    RowStrides q, k, v;
    u64 out_bshd; // the output is [b, sq, hq, dv] (else [b, hq, sq, dv])
};

// The keys query row i of batch entry b sees (attention's causal and length masks).
__device__ __forceinline__ u64 visible_keys(const u32* lens, u64 b, u64 i, u64 sq, u64 sk,
                                            u32 causal) {
    u64 visible = lens ? (lens[b] < sk ? lens[b] : sk) : sk;
    if (causal) {
        const u64 last = i + 1 + (sk > sq ? sk - sq : 0);
        visible = last < visible ? last : visible;
    }
    return visible;
}

// Element e of a buffer of f32 (elem 0), f16 (1) or bf16 (2) values, as f32; and the store.
__device__ __forceinline__ float load_elem(const void* p, u64 e, u32 elem) {
    if (elem == 0) return ((const float*)p)[e];
    const unsigned short h = ((const unsigned short*)p)[e];
    return elem == 1 ? f16_float(h) : bf16_float(h);
}
__device__ __forceinline__ void store_elem(void* p, u64 e, u32 elem, float x) {
    if (elem == 0) ((float*)p)[e] = x;
    else ((unsigned short*)p)[e] = elem == 1 ? f16_bits(x) : bf16_bits(x);
}
