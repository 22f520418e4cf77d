// f32 matmul for larger matrices: out[b] = A[b] (m x k) * B[b] (k x n), row-major, batched
// along workgroup z. Same contract and parameters as matmul.wgsl, with a 128 x 128 output tile.
//
// Each of the 16 x 16 invocations computes an 8 x 8 block: rows {4ty..4ty+3, 64+4ty..64+4ty+3}
// and the same split of columns, so neighbouring invocations read neighbouring shared-memory
// vec4s and store neighbouring columns. The block lives in sixteen named vec4 registers (an
// indexed array could be placed in local memory); per step of k the invocation loads four
// vec4s from workgroup memory for 64 fused multiply-adds. Tiles advance 16 along k through
// 16 KiB of workgroup memory (WebGPU's guaranteed minimum). A stride of 0 broadcasts that
// operand over the batch. Bounds are checked only when loading tiles and storing results.

struct Params {
    m: u32,
    n: u32,
    k: u32,
    a_stride: u32,
    b_stride: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const TILE: u32 = 128u;
const TK: u32 = 16u;

// [kk][row / 4], component row % 4.
var<workgroup> a_tile: array<vec4<f32>, 512>;
// [kk][col / 4], component col % 4.
var<workgroup> b_tile: array<vec4<f32>, 512>;

@compute @workgroup_size(16, 16)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let m = params.m;
    let n = params.n;
    let k = params.k;
    let row0 = wid.y * TILE;
    let col0 = wid.x * TILE;
    let a_base = wid.z * params.a_stride;
    let b_base = wid.z * params.b_stride;
    let tid = lid.y * 16u + lid.x;

    var c0a = vec4<f32>(0.0);
    var c0b = vec4<f32>(0.0);
    var c1a = vec4<f32>(0.0);
    var c1b = vec4<f32>(0.0);
    var c2a = vec4<f32>(0.0);
    var c2b = vec4<f32>(0.0);
    var c3a = vec4<f32>(0.0);
    var c3b = vec4<f32>(0.0);
    var c4a = vec4<f32>(0.0);
    var c4b = vec4<f32>(0.0);
    var c5a = vec4<f32>(0.0);
    var c5b = vec4<f32>(0.0);
    var c6a = vec4<f32>(0.0);
    var c6b = vec4<f32>(0.0);
    var c7a = vec4<f32>(0.0);
    var c7b = vec4<f32>(0.0);

    for (var k0 = 0u; k0 < k; k0 = k0 + TK) {
        // A tile: 128 rows x 16 k; consecutive invocations read consecutive k of one row.
        for (var i = 0u; i < 8u; i = i + 1u) {
            let e = tid + i * 256u;
            let r = e / TK;
            let kk = e % TK;
            let gr = row0 + r;
            let gk = k0 + kk;
            var v = 0.0;
            if (gr < m && gk < k) {
                v = a[a_base + gr * k + gk];
            }
            a_tile[kk * 32u + r / 4u][r % 4u] = v;
        }
        // B tile: 16 k x 128 columns; consecutive invocations read consecutive columns.
        for (var i = 0u; i < 8u; i = i + 1u) {
            let e = tid + i * 256u;
            let kk = e / TILE;
            let c = e % TILE;
            let gk = k0 + kk;
            let gc = col0 + c;
            var v = 0.0;
            if (gk < k && gc < n) {
                v = b[b_base + gk * n + gc];
            }
            b_tile[kk * 32u + c / 4u][c % 4u] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk = kk + 1u) {
            let av0 = a_tile[kk * 32u + lid.y];
            let av1 = a_tile[kk * 32u + 16u + lid.y];
            let bv0 = b_tile[kk * 32u + lid.x];
            let bv1 = b_tile[kk * 32u + 16u + lid.x];
            c0a = fma(vec4<f32>(av0.x), bv0, c0a);
            c0b = fma(vec4<f32>(av0.x), bv1, c0b);
            c1a = fma(vec4<f32>(av0.y), bv0, c1a);
            c1b = fma(vec4<f32>(av0.y), bv1, c1b);
            c2a = fma(vec4<f32>(av0.z), bv0, c2a);
            c2b = fma(vec4<f32>(av0.z), bv1, c2b);
            c3a = fma(vec4<f32>(av0.w), bv0, c3a);
            c3b = fma(vec4<f32>(av0.w), bv1, c3b);
            c4a = fma(vec4<f32>(av1.x), bv0, c4a);
            c4b = fma(vec4<f32>(av1.x), bv1, c4b);
            c5a = fma(vec4<f32>(av1.y), bv0, c5a);
            c5b = fma(vec4<f32>(av1.y), bv1, c5b);
            c6a = fma(vec4<f32>(av1.z), bv0, c6a);
            c6b = fma(vec4<f32>(av1.z), bv1, c6b);
            c7a = fma(vec4<f32>(av1.w), bv0, c7a);
            c7b = fma(vec4<f32>(av1.w), bv1, c7b);
        }
        workgroupBarrier();
    }

    let out_base = wid.z * m * n;
    let c0 = col0 + lid.x * 4u;
    let r0 = row0 + lid.y * 4u;
    store_row(out_base, r0 + 0u, c0, c0a);
    store_row(out_base, r0 + 0u, c0 + 64u, c0b);
    store_row(out_base, r0 + 1u, c0, c1a);
    store_row(out_base, r0 + 1u, c0 + 64u, c1b);
    store_row(out_base, r0 + 2u, c0, c2a);
    store_row(out_base, r0 + 2u, c0 + 64u, c2b);
    store_row(out_base, r0 + 3u, c0, c3a);
    store_row(out_base, r0 + 3u, c0 + 64u, c3b);
    store_row(out_base, r0 + 64u, c0, c4a);
    store_row(out_base, r0 + 64u, c0 + 64u, c4b);
    store_row(out_base, r0 + 65u, c0, c5a);
    store_row(out_base, r0 + 65u, c0 + 64u, c5b);
    store_row(out_base, r0 + 66u, c0, c6a);
    store_row(out_base, r0 + 66u, c0 + 64u, c6b);
    store_row(out_base, r0 + 67u, c0, c7a);
    store_row(out_base, r0 + 67u, c0 + 64u, c7b);
}

fn store_row(base: u32, r: u32, c0: u32, v: vec4<f32>) {
    let m = params.m;
    let n = params.n;
    if (r >= m) {
        return;
    }
    let o = base + r * n;
    if (c0 < n) { out[o + c0] = v.x; }
    if (c0 + 1u < n) { out[o + c0 + 1u] = v.y; }
    if (c0 + 2u < n) { out[o + c0 + 2u] = v.z; }
    if (c0 + 3u < n) { out[o + c0 + 3u] = v.w; }
}
