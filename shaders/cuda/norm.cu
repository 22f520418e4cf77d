// layer norm and RMS norm.
// One block per row (a grid-stride loop over rows), each thread striding along the row, then a
// block reduction.

// layer norm (rms = 0) or RMS norm of each row, then * weight + bias (either may be null).
extern "C" __global__ void norm_rows(const float* __restrict__ x, const float* __restrict__ w,
                                     const float* __restrict__ b, u64 rows, u64 cols, u32 rms,
                                     float eps, float* __restrict__ out) {
    WAIT_PRIOR();
    __shared__ float scratch[32];
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* row = x + r * cols;
        float* o = out + r * cols;
        float mean = 0.0f;
        if (!rms) {
            float s = 0.0f;
            for (u64 c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];
            mean = block_reduce(s, 0, scratch) / (float)cols;
        }
        float q = 0.0f;
        for (u64 c = threadIdx.x; c < cols; c += blockDim.x) {
            float d = row[c] - mean;
            q += d * d;
        }
        float inv = 1.0f / sqrtf(block_reduce(q, 0, scratch) / (float)cols + eps);
        for (u64 c = threadIdx.x; c < cols; c += blockDim.x) {
            float v = (row[c] - mean) * inv;
            if (w) v *= w[c];
            if (b) v += b[c];
            o[c] = v;
        }
    }
}
