// Reductions and the dot product.
// One block per row (a grid-stride loop over rows), each thread striding along the row, then a
// block reduction.

// op: 0 sum, 1 mean, 2 max, 3 min (ReduceOp order). Max and min let NaN win.
extern "C" __global__ void reduce_rows(u32 op, const float* __restrict__ x, u64 rows, u64 cols,
                                       float* __restrict__ out) {
    WAIT_PRIOR();
    __shared__ float scratch[32];
    const int kind = op <= 1 ? 0 : (op == 2 ? 1 : 2);
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* row = x + r * cols;
        float acc = kind == 0 ? 0.0f : (kind == 1 ? NEG_INF : POS_INF);
        for (u64 c = threadIdx.x; c < cols; c += blockDim.x) {
            float v = row[c];
            acc = kind == 0 ? acc + v : (kind == 1 ? nan_max(acc, v) : nan_min(acc, v));
        }
        float total = block_reduce(acc, kind, scratch);
        if (threadIdx.x == 0) out[r] = op == 1 ? total / (float)cols : total;
    }
}

// out[block] = partial sums of a[i] * b[i]; a second launch of reduce_rows adds them.
extern "C" __global__ void dot_partial(const float* __restrict__ a, const float* __restrict__ b,
                                       u64 n, float* __restrict__ out) {
    WAIT_PRIOR();
    __shared__ float scratch[32];
    float acc = 0.0f;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        acc += a[i] * b[i];
    }
    float total = block_reduce(acc, 0, scratch);
    if (threadIdx.x == 0) out[blockIdx.x] = total;
}
