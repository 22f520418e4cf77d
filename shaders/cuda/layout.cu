// Strided copies: permute, slice and concat.

#define MAX_RANK 8

struct CopyParams {
    u64 n, rank, in_offset, out_offset;
    u64 shape[MAX_RANK], in_strides[MAX_RANK], out_strides[MAX_RANK];
};

// out[out_offset + c . out_strides] = x[in_offset + c . in_strides] for every coordinate c.
extern "C" __global__ void copy_strided(CopyParams p, const float* __restrict__ x,
                                        float* __restrict__ out) {
    WAIT_PRIOR();
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
