// f32 matmul: out[b] = A[b] (m x k) * B[b] (k x n), row-major, batched along workgroup z.
//
// A workgroup of 16 x 16 invocations computes a 64 x 64 tile of the output; each invocation
// holds a 4 x 4 block in four vec4 registers (named, not an indexed array, so nothing spills).
// The k axis advances 16 at a time through workgroup memory: A's tile stored k-major as vec4s
// of four consecutive rows, B's tile as vec4s of four consecutive columns, so the inner loop is
// four vec4 multiply-adds per k. Bounds are checked only when loading tiles and storing results.
// A stride of 0 broadcasts that operand over the batch.

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

const TILE: u32 = 64u;
const TK: u32 = 16u;

// [kk][row / 4], component row % 4.
var<workgroup> a_tile: array<vec4<f32>, 256>;
// [kk][col / 4], component col % 4.
var<workgroup> b_tile: array<vec4<f32>, 256>;

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

    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);

    for (var k0 = 0u; k0 < k; k0 = k0 + TK) {
        // A tile: 64 rows x 16 k; consecutive invocations read consecutive k of one row.
        for (var i = 0u; i < 4u; i = i + 1u) {
            let e = tid + i * 256u;
            let r = e / TK;
            let kk = e % TK;
            let gr = row0 + r;
            let gk = k0 + kk;
            var v = 0.0;
            if (gr < m && gk < k) {
                v = a[a_base + gr * k + gk];
            }
            a_tile[kk * 16u + r / 4u][r % 4u] = v;
        }
        // B tile: 16 k x 64 columns; consecutive invocations read consecutive columns.
        for (var i = 0u; i < 4u; i = i + 1u) {
            let e = tid + i * 256u;
            let kk = e / TILE;
            let c = e % TILE;
            let gk = k0 + kk;
            let gc = col0 + c;
            var v = 0.0;
            if (gk < k && gc < n) {
                v = b[b_base + gk * n + gc];
            }
            b_tile[kk * 16u + c / 4u][c % 4u] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk = kk + 1u) {
            let av = a_tile[kk * 16u + lid.y];
            let bv = b_tile[kk * 16u + lid.x];
            acc0 = fma(vec4<f32>(av.x), bv, acc0);
            acc1 = fma(vec4<f32>(av.y), bv, acc1);
            acc2 = fma(vec4<f32>(av.z), bv, acc2);
            acc3 = fma(vec4<f32>(av.w), bv, acc3);
        }
        workgroupBarrier();
    }

    let out_base = wid.z * m * n;
    let c0 = col0 + lid.x * 4u;
    let r0 = row0 + lid.y * 4u;
    store_row(out_base, r0, c0, acc0);
    store_row(out_base, r0 + 1u, c0, acc1);
    store_row(out_base, r0 + 2u, c0, acc2);
    store_row(out_base, r0 + 3u, c0, acc3);
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
