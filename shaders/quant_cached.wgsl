// quant.wgsl's GEMV of one row that also stores its last columns in a KV cache: a LLaMA's
// query, key and value projection (normalised and rotated in the kernel) writing the new key
// and value rows where the step's position says, so no dispatch of its own does. Columns
// params.cache_from.. of the product (n - cache_from values, one cache row) go to row at[0]
// of `cache` (dropped when at[0] >= params.capacity, as write_rows drops them), stored as
// CACHE_KV says: 0 f32 bits, 1 f16 and 2 bf16 two to a word (the even column's invocation
// writes its pair's word, the pair of one workgroup, rounded as cast.wgsl rounds). The whole
// product goes to `out` as in quant.wgsl. Requires m = 1; with halves, even cache_from and n.

// @include quant_gemv
// @include dtype

override CACHE_KV: u32 = 0u;

@group(0) @binding(8) var<storage, read> at: array<u32>;
@group(0) @binding(9) var<storage, read_write> out: array<f32>;
@group(0) @binding(10) var<storage, read_write> cache: array<u32>;

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    var o = gemv(wid, nwg, lid);
    if (!o.write) {
        return;
    }
    if (HAS_ROPE) {
        // Both values of the pair, rotated as quant.wgsl rotates each.
        let t = rope_entry(o.at);
        let cs = residual[t];
        let sn = sin_t[t];
        let even = select(o.pair, o.v, (o.c & 1u) == 0u);
        let odd = select(o.v, o.pair, (o.c & 1u) == 0u);
        let even_r = even * cs - odd * sn;
        let odd_r = even * sn + odd * cs;
        o.v = select(odd_r, even_r, (o.c & 1u) == 0u);
        o.pair = select(even_r, odd_r, (o.c & 1u) == 0u);
    }
    out[o.at] = o.v;
    let first = params.cache_from;
    let row = at[0];
    if (o.c < first || row >= params.capacity) {
        return;
    }
    let e = row * (params.n - first) + (o.c - first);
    if (CACHE_KV == 0u) {
        cache[e] = bitcast<u32>(o.v);
    } else if ((o.c & 1u) == 0u) {
        var lo: u32;
        var hi: u32;
        if (CACHE_KV == 1u) {
            lo = f32_to_f16(o.v);
            hi = f32_to_f16(o.pair);
        } else {
            lo = f32_to_bf16(o.v);
            hi = f32_to_bf16(o.pair);
        }
        cache[e / 2u] = lo | (hi << 16u);
    }
}
