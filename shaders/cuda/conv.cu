// conv2d's im2col (the product itself is cuBLAS's).

struct Im2colParams {
    u64 c, h, w, kh, kw, ow;
    u64 sh, sw, ph, pw, dh, dw;
    u64 groups, cg, oy0, rows;
};

// For one image: cols[g][(c * kh + ky) * kw + kx][(oy - oy0) * ow + ox] = the pixel under that
// tap of output (oy, ox), zero in the padding; output rows oy0 .. oy0 + rows.
extern "C" __global__ void im2col(Im2colParams p, const float* __restrict__ x,
                                  float* __restrict__ cols) {
    WAIT_PRIOR();
    const u64 width = p.rows * p.ow, depth = p.cg * p.kh * p.kw;
    const u64 total = p.groups * depth * width;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (u64)gridDim.x * blockDim.x) {
        const u64 col = i % width, rowi = (i / width) % depth, g = i / (width * depth);
        const u64 c = rowi / (p.kh * p.kw), rem = rowi % (p.kh * p.kw);
        const u64 ky = rem / p.kw, kx = rem % p.kw;
        const u64 oy = p.oy0 + col / p.ow, ox = col % p.ow;
        long long iy = (long long)(oy * p.sh + ky * p.dh) - (long long)p.ph;
        long long ix = (long long)(ox * p.sw + kx * p.dw) - (long long)p.pw;
        float v = 0.0f;
        if (iy >= 0 && iy < (long long)p.h && ix >= 0 && ix < (long long)p.w) {
            v = x[((g * p.cg + c) * p.h + iy) * p.w + ix];
        }
        cols[i] = v;
    }
}
