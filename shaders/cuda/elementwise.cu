// Elementwise kernels: unary ops and broadcasting binary ops (`unary_op` and `binary_op` are
// in common.cuh, which fused kernels share).

// out[i] = unary(x[i]); each thread does four elements, as one float4 where it can.
extern "C" __global__ void unary(u32 kind, float p0, float p1, const float* __restrict__ x,
                                 float* __restrict__ out, u64 n) {
    WAIT_PRIOR();
    for (u64 i = 4 * ((u64)blockIdx.x * blockDim.x + threadIdx.x); i < n;
         i += 4 * (u64)gridDim.x * blockDim.x) {
        if (i + 4 <= n) {
            float4 v = *reinterpret_cast<const float4*>(x + i);
            v.x = unary_op(kind, v.x, p0, p1);
            v.y = unary_op(kind, v.y, p0, p1);
            v.z = unary_op(kind, v.z, p0, p1);
            v.w = unary_op(kind, v.w, p0, p1);
            *reinterpret_cast<float4*>(out + i) = v;
        } else {
            for (u64 j = i; j < n; ++j) out[j] = unary_op(kind, x[j], p0, p1);
        }
    }
}

// out[i] = a[i % la] op b[i % lb]: full operands, rows and scalars.
extern "C" __global__ void binary(u32 op, const float* __restrict__ a, u64 la,
                                  const float* __restrict__ b, u64 lb, float* __restrict__ out,
                                  u64 n) {
    WAIT_PRIOR();
    const bool full = la == n && lb == n;
    for (u64 i = 4 * ((u64)blockIdx.x * blockDim.x + threadIdx.x); i < n;
         i += 4 * (u64)gridDim.x * blockDim.x) {
        if (full && i + 4 <= n) {
            float4 va = *reinterpret_cast<const float4*>(a + i);
            float4 vb = *reinterpret_cast<const float4*>(b + i);
            float4 r;
            r.x = binary_op(op, va.x, vb.x);
            r.y = binary_op(op, va.y, vb.y);
            r.z = binary_op(op, va.z, vb.z);
            r.w = binary_op(op, va.w, vb.w);
            *reinterpret_cast<float4*>(out + i) = r;
        } else {
            u64 end = i + 4 < n ? i + 4 : n;
            for (u64 j = i; j < end; ++j) {
                float x = la == 1 ? a[0] : a[j % la];
                float y = lb == 1 ? b[0] : b[j % lb];
                out[j] = binary_op(op, x, y);
            }
        }
    }
}

// where(cond, a, b): out[i] = cond[i % lc] != 0 ? a[i % la] : b[i % lb] (NaN counts as true).
extern "C" __global__ void where_select(const float* __restrict__ c, u64 lc,
                                        const float* __restrict__ a, u64 la,
                                        const float* __restrict__ b, u64 lb,
                                        float* __restrict__ out, u64 n) {
    WAIT_PRIOR();
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        const float v = c[lc == n ? i : i % lc];
        out[i] = v != 0.0f || is_nan(v) ? a[la == n ? i : i % la] : b[lb == n ? i : i % lb];
    }
}

#define STRIDED_RANK 8

// Where each operand of `strided` lies: element c of the output (row-major over `shape`) is
// a[a_offset + c . a_strides] and b[b_offset + c . b_strides]; a zero stride broadcasts.
struct StridedParams {
    u64 n, rank, a_offset, b_offset;
    u64 shape[STRIDED_RANK], a_strides[STRIDED_RANK], b_strides[STRIDED_RANK];
};

// out[i] = unary(a[..]) when `binary` is 0xffffffff, else a[..] op b[..] (unary(a[..]) op b[..]
// when `gate`: SwiGLU): operands that are views or broadcast along any axis, read in place.
extern "C" __global__ void strided(StridedParams p, u32 kind, u32 binary, u32 gate, float p0, float p1,
                                   const float* __restrict__ a, const float* __restrict__ b,
                                   float* __restrict__ out) {
    WAIT_PRIOR();
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < p.n;
         i += (u64)gridDim.x * blockDim.x) {
        u64 rem = i, ia = p.a_offset, ib = p.b_offset;
        for (int d = (int)p.rank - 1; d >= 0; --d) {
            u64 c = rem % p.shape[d];
            rem /= p.shape[d];
            ia += c * p.a_strides[d];
            ib += c * p.b_strides[d];
        }
        if (binary == 0xffffffffu) {
            out[i] = unary_op(kind, a[ia], p0, p1);
        } else {
            const float x = gate ? unary_op(kind, a[ia], p0, p1) : a[ia];
            out[i] = binary_op(binary, x, b[ib]);
        }
    }
}
