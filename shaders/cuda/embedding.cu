// Embedding lookups: out[i] = table[ids[i / dim] * dim + i % dim], rows of 32-bit words (two f16
// or bf16 elements a word for half tables). An id at or above vocab (a device tensor is not
// checked on the host) gives MISSING_ROW words: NaN in every float dtype.

extern "C" __global__ void embedding(const u32* __restrict__ table, const u32* __restrict__ ids,
                                     u64 count, u64 dim, u64 vocab, u32* __restrict__ out) {
    WAIT_PRIOR();
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < count * dim;
         i += (u64)gridDim.x * blockDim.x) {
        const u64 id = ids[i / dim];
        out[i] = id < vocab ? table[id * dim + i % dim] : 0x7fff7fffu;
    }
}

// The other way: rows written into dst (capacity rows of width words) from the row *at names,
// in place (a KV cache's store, replayed with a new position each run), the source rows stride
// words apart from offset; rows that would land past the end are dropped.
extern "C" __global__ void write_rows(const u32* __restrict__ src, const u32* __restrict__ at,
                                      u64 rows, u64 width, u64 capacity, u64 offset, u64 stride,
                                      u32* __restrict__ dst) {
    WAIT_PRIOR();
    const u64 first = at[0];
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < rows * width;
         i += (u64)gridDim.x * blockDim.x) {
        const u64 r = i / width;
        const u64 c = i % width;
        if (first < capacity && r < capacity - first) dst[(first + r) * width + c] = src[offset + r * stride + c];
    }
}
