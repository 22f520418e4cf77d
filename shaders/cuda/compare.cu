// Comparisons (a u32 mask) and integer arithmetic on 32-bit elements, read by repetition:
// out[i] = op(a[i % la], b[i % lb]). Kind: 0 f32, 3 i32, 4 u32 (DType::code). Op codes
// (WordOp::code): 0 add, 1 sub, 2 mul (wrapping), 3 equal, 4 not_equal, 5 less, 6 less_equal,
// 7 greater, 8 greater_equal. Float comparisons are IEEE's (NaN unordered).

extern "C" __global__ void compare(u32 op, u32 kind, const u32* __restrict__ a, u64 la,
                                   const u32* __restrict__ b, u64 lb, u32* __restrict__ out,
                                   u64 n) {
    WAIT_PRIOR();
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        const u32 x = a[la == n ? i : i % la], y = b[lb == n ? i : i % lb];
        u32 r;
        if (op <= 2) {
            r = op == 0 ? x + y : (op == 1 ? x - y : x * y);
        } else {
            bool lt, eq, unordered = false;
            if (kind == 0) {
                const float fx = __uint_as_float(x), fy = __uint_as_float(y);
                unordered = is_nan(fx) || is_nan(fy);
                lt = fx < fy;
                eq = fx == fy;
            } else if (kind == 3) {
                lt = (int)x < (int)y;
                eq = x == y;
            } else {
                lt = x < y;
                eq = x == y;
            }
            const bool gt = !unordered && !lt && !eq;
            switch (op) {
            case 3: r = eq; break;
            case 4: r = !eq; break;
            case 5: r = lt; break;
            case 6: r = lt || eq; break;
            case 7: r = gt; break;
            default: r = gt || eq; break;
            }
        }
        out[i] = r;
    }
}
