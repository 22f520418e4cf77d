// Data movement and small per-element kernels: strided copies (permute, slice, concat),
// embedding, RoPE, pooling, top-k and conv2d's im2col.

#define MAX_RANK 8

struct CopyParams {
    u64 n, rank, in_offset, out_offset;
    u64 shape[MAX_RANK], in_strides[MAX_RANK], out_strides[MAX_RANK];
};

// out[out_offset + c . out_strides] = x[in_offset + c . in_strides] for every coordinate c.
extern "C" __global__ void copy_strided(CopyParams p, const float* __restrict__ x,
                                        float* __restrict__ out) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < p.n;
         i += (u64)gridDim.x * blockDim.x) {
        u64 rem = i, src = p.in_offset, dst = p.out_offset;
        for (int d = (int)p.rank - 1; d >= 0; --d) {
            u64 c = rem % p.shape[d];
            rem /= p.shape[d];
            src += c * p.in_strides[d];
            dst += c * p.out_strides[d];
        }
        out[dst] = x[src];
    }
}

extern "C" __global__ void embedding(const float* __restrict__ table, const u32* __restrict__ ids,
                                     u64 count, u64 dim, float* __restrict__ out) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < count * dim;
         i += (u64)gridDim.x * blockDim.x) {
        out[i] = table[(u64)ids[i / dim] * dim + i % dim];
    }
}

// RoPE over n elements in rows of dim; row r uses table row r % seq (half = dim / 2 entries).
extern "C" __global__ void rope(const float* __restrict__ x, const float* __restrict__ cs,
                                const float* __restrict__ sn, u64 n, u64 seq, u64 dim,
                                u32 interleaved, float* __restrict__ out) {
    const u64 half = dim / 2;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        const u64 r = i / dim, e = i % dim;
        const float* row = x + r * dim;
        if (e >= 2 * half) {
            out[i] = row[e];
            continue;
        }
        const u64 t = (r % seq) * half;
        u64 j;
        float x0, x1;
        bool first;
        if (interleaved) {
            j = e / 2;
            x0 = row[2 * j];
            x1 = row[2 * j + 1];
            first = (e & 1) == 0;
        } else {
            j = e < half ? e : e - half;
            x0 = row[j];
            x1 = row[j + half];
            first = e < half;
        }
        const float c = cs[t + j], s = sn[t + j];
        out[i] = first ? x0 * c - x1 * s : x0 * s + x1 * c;
    }
}

struct PoolParams {
    u64 planes, h, w, oh, ow;
    u64 kh, kw, sh, sw, ph, pw;
    u32 max, _pad;
};

// Max pooling (NaN in the window gives NaN) or average pooling (padding counts as zero).
extern "C" __global__ void pool2d(PoolParams p, const float* __restrict__ x, float* __restrict__ out) {
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

// A total order on floats as u32 keys: NaN above +inf, -0 below +0.
__device__ __forceinline__ u32 order_key(float v) {
    u32 b = __float_as_uint(v);
    if (is_nan(v)) return 0xffffffffu;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Top-k of each row by rounds of a block arg-max: round r takes the best element ordered
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
            for (u64 c = threadIdx.x; c < cols; c += blockDim.x) {
                u64 key = ((u64)order_key(row[c]) << 32) | (u64)(0xffffffffu - (u32)c);
                if (key < bound && key > best) best = key;
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

struct Im2colParams {
    u64 c, h, w, kh, kw, ow;
    u64 sh, sw, ph, pw, dh, dw;
    u64 groups, cg, oy0, rows;
};

// For one image: cols[g][(c * kh + ky) * kw + kx][(oy - oy0) * ow + ox] = the pixel under that
// tap of output (oy, ox), zero in the padding; output rows oy0 .. oy0 + rows.
extern "C" __global__ void im2col(Im2colParams p, const float* __restrict__ x,
                                  float* __restrict__ cols) {
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
