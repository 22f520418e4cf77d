// f32 matmul: out[b] = A[b] (m x k) * B[b] (k x n), row-major, batched along workgroup z.
//
// A workgroup of 16 x 16 invocations computes a 64 x 64 tile of the output; each invocation
// holds a 4 x 4 block in four vec4 registers (named, not an indexed array, so nothing spills).
// The k axis advances 16 at a time through workgroup memory: A's tile stored k-major as vec4s
// of four consecutive rows, B's tile as vec4s of four consecutive columns, so the inner loop is
// four vec4 multiply-adds per k. Bounds are checked only when loading tiles and storing results.
// A stride of 0 broadcasts that operand over the batch.
//
// Specialisation: TRANS_A reads A stored as [k, m], TRANS_B reads B stored as [n, k] (no
// transposed copy is made). The epilogue adds a bias row (HAS_BIAS) and applies ACT
// (0 none, 1 relu, 2 gelu, 3 gelu_tanh, 4 silu; `Activation` in src/ops/matmul.rs) before the
// store, so a linear layer is one dispatch.

override TRANS_A: bool = false;
override TRANS_B: bool = false;
override HAS_BIAS: bool = false;
override ACT: u32 = 0u;

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
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

const TILE: u32 = 64u;
const TK: u32 = 16u;

// [kk][row / 4], component row % 4.
var<workgroup> a_tile: array<vec4<f32>, 256>;
// [kk][col / 4], component col % 4.
var<workgroup> b_tile: array<vec4<f32>, 256>;

fn load_a(base: u32, r: u32, kk: u32) -> f32 {
    if (TRANS_A) {
        return a[base + kk * params.m + r];
    }
    return a[base + r * params.k + kk];
}

fn load_b(base: u32, kk: u32, c: u32) -> f32 {
    if (TRANS_B) {
        return b[base + c * params.k + kk];
    }
    return b[base + kk * params.n + c];
}

fn is_nan4(v: vec4<f32>) -> vec4<bool> {
    return (bitcast<vec4<u32>>(v) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u);
}

// The same formulas as shaders/unary.wgsl (WGSL has no includes).
fn erf4(v: vec4<f32>) -> vec4<f32> {
    let x = abs(v);
    let t = 1.0 / (1.0 + 0.3275911 * x);
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    let r = 1.0 - poly * exp(-x * x);
    return select(r, -r, v < vec4<f32>(0.0));
}

fn safe_tanh(v: vec4<f32>) -> vec4<f32> {
    return select(tanh(v), sign(v), abs(v) > vec4<f32>(10.0));
}

fn activate(v: vec4<f32>) -> vec4<f32> {
    let zero = vec4<f32>(0.0);
    var r = v;
    switch ACT {
        case 1u: { r = select(v, zero, v < zero); }
        case 2u: { r = 0.5 * v * (1.0 + erf4(v * 0.7071067812)); }
        case 3u: { r = 0.5 * v * (1.0 + safe_tanh(0.7978845608 * (v + 0.044715 * v * v * v))); }
        case 4u: { r = v / (1.0 + exp(-v)); }
        default: {}
    }
    return select(r, v, is_nan4(v));
}

fn epilogue(c0: u32, v: vec4<f32>) -> vec4<f32> {
    var x = v;
    if (HAS_BIAS) {
        let n = params.n;
        var bv = vec4<f32>(0.0);
        if (c0 < n) { bv.x = bias[c0]; }
        if (c0 + 1u < n) { bv.y = bias[c0 + 1u]; }
        if (c0 + 2u < n) { bv.z = bias[c0 + 2u]; }
        if (c0 + 3u < n) { bv.w = bias[c0 + 3u]; }
        x = x + bv;
    }
    return activate(x);
}

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
                v = load_a(a_base, gr, gk);
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
                v = load_b(b_base, gk, gc);
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
    store_row(out_base, r0, c0, epilogue(c0, acc0));
    store_row(out_base, r0 + 1u, c0, epilogue(c0, acc1));
    store_row(out_base, r0 + 2u, c0, epilogue(c0, acc2));
    store_row(out_base, r0 + 3u, c0, epilogue(c0, acc3));
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
