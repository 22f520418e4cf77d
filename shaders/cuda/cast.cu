// Conversions between dtypes, one element per thread. Dtype codes (DType::code): 0 f32,
// 1 f16, 2 bf16, 3 i32, 4 u32. The rules are those of src/dtype.rs: halves round to nearest
// even, floats truncate into integers and saturate (NaN gives 0), integers keep their bits.

extern "C" __global__ void cast(const void* __restrict__ x, u32 from, void* __restrict__ out,
                                u32 to, u64 n) {
    WAIT_PRIOR();
    const unsigned short* xh = (const unsigned short*)x;
    const u32* xw = (const u32*)x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        float f = 0.0f;
        u32 bits = 0;
        const bool integer = from >= 3;
        switch (from) {
        case 0: f = __uint_as_float(xw[i]); break;
        case 1: f = f16_float(xh[i]); break;
        case 2: f = bf16_float(xh[i]); break;
        default: bits = xw[i]; break;
        }
        if (integer) f = from == 3 ? __int2float_rn((int)bits) : __uint2float_rn(bits);
        switch (to) {
        case 0: ((float*)out)[i] = f; break;
        case 1: ((unsigned short*)out)[i] = f16_bits(f); break;
        case 2: ((unsigned short*)out)[i] = bf16_bits(f); break;
        case 3:
            if (!integer) bits = is_nan(f) ? 0u : (f >= 2147483648.0f ? 0x7fffffffu : (f <= -2147483648.0f ? 0x80000000u : (u32)(int)f));
            ((u32*)out)[i] = bits;
            break;
        default:
            if (!integer) bits = is_nan(f) || f <= 0.0f ? 0u : (f >= 4294967296.0f ? 0xffffffffu : (u32)f);
            ((u32*)out)[i] = bits;
            break;
        }
    }
}
