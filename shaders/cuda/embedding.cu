// Embedding lookups: out[i] = table[ids[i / dim] * dim + i % dim].

extern "C" __global__ void embedding(const float* __restrict__ table, const u32* __restrict__ ids,
                                     u64 count, u64 dim, float* __restrict__ out) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < count * dim;
         i += (u64)gridDim.x * blockDim.x) {
        out[i] = table[(u64)ids[i / dim] * dim + i % dim];
    }
}
