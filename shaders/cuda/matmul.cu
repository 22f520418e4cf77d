// Around cuBLAS's products: the bias and activation epilogue of matmul and conv2d, and the
// conversions to f16/bf16 for reduced-precision products.

// In place: out[i] = act(out[i] + bias[(i / inner) % channels]) (bias may be null; act 0 = none,
// otherwise the UnaryKind + 1). Matmul rows use inner = 1, channels = n; conv planes use
// inner = oh * ow, channels = o.
extern "C" __global__ void epilogue(float* out, const float* __restrict__ bias, u64 inner,
                                    u64 channels, u32 act, u64 n) {
    WAIT_PRIOR();
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        float v = out[i];
        if (bias) v += bias[(i / inner) % channels];
        if (act) v = unary_op(act - 1, v, 0.0f, 0.0f);
        out[i] = v;
    }
}

// f32 to f16 (round to nearest even), for cuBLAS's half-precision products.
extern "C" __global__ void to_f16(const float* __restrict__ x, unsigned short* __restrict__ out,
                                  u64 n) {
    WAIT_PRIOR();
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        unsigned short h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x[i]));
        out[i] = h;
    }
}

// f32 to bf16 (round to nearest even; NaN stays a quiet NaN), by bits so any architecture runs it.
extern "C" __global__ void to_bf16(const float* __restrict__ x, unsigned short* __restrict__ out,
                                   u64 n) {
    WAIT_PRIOR();
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        u32 b = __float_as_uint(x[i]);
        if ((b & 0x7fffffffu) > 0x7f800000u) {
            out[i] = (unsigned short)((b >> 16) | 0x40u);
        } else {
            out[i] = (unsigned short)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
        }
    }
}
