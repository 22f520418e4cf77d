// 2-D max and average pooling, one thread per output element.

struct PoolParams {
    u64 planes, h, w, oh, ow;
    u64 kh, kw, sh, sw, ph, pw;
    u32 max, _pad;
};

// Max pooling (NaN in the window gives NaN) or average pooling (padding counts as zero).
extern "C" __global__ void pool2d(PoolParams p, const float* __restrict__ x, float* __restrict__ out) {
    WAIT_PRIOR();
    const u64 total = p.planes * p.oh * p.ow;
    const float area = (float)(p.kh * p.kw);
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (u64)gridDim.x * blockDim.x) {
        const u64 plane = i / (p.oh * p.ow), idx = i % (p.oh * p.ow);
        const u64 oy = idx / p.ow, ox = idx % p.ow;
        const float* src = x + plane * p.h * p.w;
        float m = NEG_INF, sum = 0.0f;
        bool nan = false;
        for (u64 ky = 0; ky < p.kh; ++ky) {
            long long iy = (long long)(oy * p.sh + ky) - (long long)p.ph;
            if (iy < 0 || iy >= (long long)p.h) continue;
            for (u64 kx = 0; kx < p.kw; ++kx) {
                long long ix = (long long)(ox * p.sw + kx) - (long long)p.pw;
                if (ix < 0 || ix >= (long long)p.w) continue;
                float v = src[iy * p.w + ix];
                nan |= is_nan(v);
                m = fmaxf(m, v);
                sum += v;
            }
        }
        out[i] = p.max ? (nan ? QNAN : m) : sum / area;
    }
}
