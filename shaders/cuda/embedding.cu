// Embedding lookups: out[i] = table[ids[i / dim] * dim + i % dim], rows of 32-bit words (two f16
// or bf16 elements a word for half tables). An id at or above vocab (a device tensor is not
// checked on the host) gives MISSING_ROW words: NaN in every float dtype.

extern "C" __global__ void embedding(const u32* __restrict__ table, const u32* __restrict__ ids,
                                     u64 count, u64 dim, u64 vocab, u32* __restrict__ out) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < count * dim;
         i += (u64)gridDim.x * blockDim.x) {
        const u64 id = ids[i / dim];
        out[i] = id < vocab ? table[id * dim + i % dim] : 0x7fff7fffu;
    }
}
