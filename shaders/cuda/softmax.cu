// Softmax and log-softmax: whole rows per block, or long rows in chunks of (max, sum of exp)
// partials merged exactly.
// One block per row (a grid-stride loop over rows), each thread striding along the row, then a
// block reduction.

// softmax (or log-softmax) of each row, with the CPU backend's formulas: exp(v - max) / sum,
// or v - max - log(sum). A NaN anywhere, a +inf maximum or a row of only -inf gives NaN.
extern "C" __global__ void softmax_rows(const float* __restrict__ x, u64 rows, u64 cols, u32 log,
                                        float* __restrict__ out) {
    WAIT_PRIOR();
    __shared__ float scratch[32];
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* row = x + r * cols;
        float* o = out + r * cols;
        float m = NEG_INF;
        for (u64 c = threadIdx.x; c < cols; c += blockDim.x) m = nan_max(m, row[c]);
        m = block_reduce(m, 1, scratch);
        float s = 0.0f;
        for (u64 c = threadIdx.x; c < cols; c += blockDim.x) s += expf(row[c] - m);
        s = block_reduce(s, 0, scratch);
        if (log) {
            float ls = logf(s);
            for (u64 c = threadIdx.x; c < cols; c += blockDim.x) o[c] = row[c] - m - ls;
        } else {
            for (u64 c = threadIdx.x; c < cols; c += blockDim.x) o[c] = expf(row[c] - m) / s;
        }
    }
}

// Softmax of a few long rows, in two launches over blocks of `chunk` elements (grid: chunks x
// rows). First each block writes its chunk's maximum and its sum of exp(v - that maximum)
// (0 when the chunk is all -inf); then each block combines its row's pairs and writes its
// chunk. The result is the one-block formula's: NaN anywhere, a +inf maximum, or a row of only
// -inf gives NaN.
extern "C" __global__ void softmax_partial(const float* __restrict__ x, u64 cols, u64 chunk,
                                           float* __restrict__ pairs) {
    WAIT_PRIOR();
    __shared__ float scratch[32];
    const u64 r = blockIdx.y, c0 = (u64)blockIdx.x * chunk;
    const u64 c1 = c0 + chunk < cols ? c0 + chunk : cols;
    const float* row = x + r * cols;
    float m = NEG_INF;
    for (u64 c = c0 + threadIdx.x; c < c1; c += blockDim.x) m = nan_max(m, row[c]);
    m = block_reduce(m, 1, scratch);
    float s = 0.0f;
    if (m != NEG_INF) {
        for (u64 c = c0 + threadIdx.x; c < c1; c += blockDim.x) s += expf(row[c] - m);
    }
    s = block_reduce(s, 0, scratch);
    if (threadIdx.x == 0) {
        float* p = pairs + 2 * (r * gridDim.x + blockIdx.x);
        p[0] = m;
        p[1] = s;
    }
}

extern "C" __global__ void softmax_finish(const float* __restrict__ x, u64 cols, u64 chunk,
                                          const float* __restrict__ pairs, u32 log,
                                          float* __restrict__ out) {
    WAIT_PRIOR();
    __shared__ float scratch[32];
    const u64 r = blockIdx.y, chunks = gridDim.x;
    const float* p = pairs + 2 * r * chunks;
    float m = NEG_INF;
    for (u64 b = threadIdx.x; b < chunks; b += blockDim.x) m = nan_max(m, p[2 * b]);
    m = block_reduce(m, 1, scratch);
    float s = 0.0f;
    for (u64 b = threadIdx.x; b < chunks; b += blockDim.x) {
        const float mb = p[2 * b];
        if (mb != NEG_INF) s += p[2 * b + 1] * expf(mb - m);
    }
    s = block_reduce(s, 0, scratch);
    if (m == NEG_INF) s = QNAN; // only -inf: exp(-inf - -inf) is NaN in the one-block formula
    const u64 c0 = (u64)blockIdx.x * chunk;
    const u64 c1 = c0 + chunk < cols ? c0 + chunk : cols;
    const float* row = x + r * cols;
    float* o = out + r * cols;
    if (log) {
        const float ls = logf(s);
        for (u64 c = c0 + threadIdx.x; c < c1; c += blockDim.x) o[c] = row[c] - m - ls;
    } else {
        for (u64 c = c0 + threadIdx.x; c < c1; c += blockDim.x) o[c] = expf(row[c] - m) / s;
    }
}
