// RoPE: each element rotated with its pair by its row's position.

// RoPE over n elements in rows of dim; row r uses table row r % seq (half = dim / 2 entries).
extern "C" __global__ void rope(const float* __restrict__ x, const float* __restrict__ cs,
                                const float* __restrict__ sn, u64 n, u64 seq, u64 dim,
                                u32 interleaved, float* __restrict__ out) {
    WAIT_PRIOR();
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
