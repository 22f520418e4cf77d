// matmul: out[b] = A[b] (m x k) * B[b] (k x n), row-major, batched along workgroup z.
//
// A template: `matmul_source` in src/backend/wgpu/matmul_template.rs rewrites the `const` lines
// marked `tile:` for each tile configuration (and `T` to f16, after an `enable f16;`, for the
// f16 variant) and replaces each `@generate` line with the unrolled statements it describes,
// so the autotuner (src/backend/wgpu/tuner.rs) can time several shapes of the same kernel.
//
// A workgroup of 16 x 16 invocations computes a TILE_M x TILE_N tile of the output; each
// invocation holds RM rows x RN columns in registers: RM * RN / 4 vec4 accumulators, each a
// named variable (an array indexed in a loop spilled to local memory on NVIDIA, 8x slower,
// even with constant bounds). The k axis
// advances TK at a time through workgroup memory, each tile's global loads issued into
// registers while the tile before it is multiplied: A's tile stored k-major as vec4s of four
// consecutive rows, B's as vec4s of four consecutive columns, so the inner loop is RM * RN / 4
// vec4 multiply-adds per k. An invocation's columns are 64 apart (vec4 column lx + 16 j), so
// the 16 invocations of a row read 16 consecutive vec4s of B's tile. Bounds are checked only
// when loading tiles and storing results. A stride of 0 broadcasts that operand over the
// batch.
//
// f16 variant: tiles hold f16 and the products are f16 multiply-adds summed over one k tile,
// then added into f32 accumulators, so rounding grows with TK, not with k. Where the adapter
// has no shader-f16, ROUND16 rounds the inputs the same way with bit arithmetic and the
// arithmetic stays f32.
//
// Specialisation: TRANS_A reads A stored as [k, m], TRANS_B reads B stored as [n, k] (no
// transposed copy is made); WEIGHT reads B as f16 or bf16 bits (include/weight_at.wgsl). The
// epilogue adds a bias row (HAS_BIAS) and applies ACT (0 none, 1 relu, 2 gelu, 3 gelu_tanh,
// 4 silu; `Activation` in src/ops/matmul.rs) before the store, so a linear layer is one
// dispatch.

// Infinity and NaN bits live in private variables: WGSL has no constant for them, and Chrome's
// compiler rejects a bitcast of constant bits that would give one.
var<private> inf_bits: u32 = 0x7f800000u;

alias T = f32;
const RM: u32 = 4u; // tile: rows per invocation (4 or 8)
const RN: u32 = 4u; // tile: columns per invocation (4 or 8)
const TK: u32 = 16u; // tile: k per workgroup-memory tile
const SPLIT: bool = false; // tile: sum each k tile in T, then in f32 (the f16 variant)
const ROUND16: bool = false; // tile: round inputs to f16, f32 arithmetic (no shader-f16)

// @include matmul_params
@group(0) @binding(1) var<storage, read> a: array<f32>;
// The weight (B), read as words: f32 bits, or f16/bf16 bits under f32 rows (`weight_at`).
override WEIGHT: u32 = 0u;
@group(0) @binding(2) var<storage, read> w: array<u32>;
// @include weight_at
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

const TILE_M: u32 = 16u * RM;
const TILE_N: u32 = 16u * RN;
const AV: u32 = TILE_M / 4u;
const BV: u32 = TILE_N / 4u;
const RV: u32 = RM / 4u;
const CV: u32 = RN / 4u;

// [kk][row / 4], component row % 4.
var<workgroup> a_tile: array<vec4<T>, TK * AV>;
// [kk][col / 4], component col % 4.
var<workgroup> b_tile: array<vec4<T>, TK * BV>;

// The value a tile stores: rounded to f16 first under ROUND16 (to nearest even on the 11-bit
// significand, overflow to infinity; f16's subnormal range keeps more bits). Bit arithmetic,
// not pack2x16float, which some adapters lack.
fn stage(v: f32) -> T {
    if (ROUND16) {
        let bits = bitcast<u32>(v);
        if ((bits & 0x7f800000u) == 0x7f800000u) {
            return T(v);
        }
        let r = bitcast<f32>((bits + 0xfffu + ((bits >> 13u) & 1u)) & 0xffffe000u);
        if (abs(r) > 65504.0) {
            return T(sign(r) * bitcast<f32>(inf_bits));
        }
        return T(r);
    }
    return T(v);
}

// @include matmul_loads

// @include matmul_epilogue

// An invocation's share of a k tile, loaded into registers (`fetch`) one tile ahead of its
// store into workgroup memory (`put`), so global loads overlap the products. A tile's element
// e = tid + 256 i: for A, consecutive invocations take consecutive k of one row (consecutive
// rows of one k when A is stored transposed); for B, consecutive columns (consecutive k of one
// column when B is stored transposed, as a linear layer's weight is): coalesced either way.
const AL: u32 = TILE_M * TK / 256u;
const BL: u32 = TILE_N * TK / 256u;
var<private> pa: array<f32, AL>;
var<private> pb: array<f32, BL>;

// (row, k) in the tile of A's element e.
fn a_at(e: u32) -> vec2<u32> {
    if (TRANS_A) {
        return vec2<u32>(e % TILE_M, e / TILE_M);
    }
    return vec2<u32>(e / TK, e % TK);
}

// (column, k) in the tile of B's element e.
fn b_at(e: u32) -> vec2<u32> {
    if (TRANS_B) {
        return vec2<u32>(e / TK, e % TK);
    }
    return vec2<u32>(e % TILE_N, e / TILE_N);
}

fn fetch(k0: u32, row0: u32, col0: u32, a_base: u32, b_base: u32, tid: u32) {
    for (var i = 0u; i < AL; i = i + 1u) {
        let rk = a_at(tid + i * 256u);
        let gr = row0 + rk.x;
        let gk = k0 + rk.y;
        var v = 0.0;
        if (gr < params.m && gk < params.k) {
            v = load_a(a_base, gr, gk);
        }
        pa[i] = v;
    }
    for (var i = 0u; i < BL; i = i + 1u) {
        let ck = b_at(tid + i * 256u);
        let gk = k0 + ck.y;
        let gc = col0 + ck.x;
        var v = 0.0;
        if (gk < params.k && gc < params.n) {
            v = load_b(b_base, gk, gc);
        }
        pb[i] = v;
    }
}

fn put(tid: u32) {
    for (var i = 0u; i < AL; i = i + 1u) {
        let rk = a_at(tid + i * 256u);
        a_tile[rk.y * AV + rk.x / 4u][rk.x % 4u] = stage(pa[i]);
    }
    for (var i = 0u; i < BL; i = i + 1u) {
        let ck = b_at(tid + i * 256u);
        b_tile[ck.y * BV + ck.x / 4u][ck.x % 4u] = stage(pb[i]);
    }
}

@compute @workgroup_size(16, 16)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let m = params.m;
    let n = params.n;
    let k = params.k;
    let row0 = wid.y * TILE_M;
    let col0 = wid.x * TILE_N;
    let a_base = wid.z * params.a_stride;
    let b_base = wid.z * params.b_stride;
    let tid = lid.y * 16u + lid.x;

    // @generate declare: acc_R_C (row R, vec4 column C) in f32; part_R_C in T when SPLIT

    fetch(0u, row0, col0, a_base, b_base, tid);
    for (var k0 = 0u; k0 < k; k0 = k0 + TK) {
        put(tid);
        workgroupBarrier();
        // The next tile's loads go out now and land while this tile's products run.
        if (k0 + TK < k) {
            fetch(k0 + TK, row0, col0, a_base, b_base, tid);
        }
        // @generate zero: part_R_C = 0 when SPLIT
        // @generate fma: for kk < TK (a loop, or unrolled), b_C = b_tile[kk * BV + 16 C + lid.x]; a_I = a_tile[kk * AV + I + lid.y * RV]; acc (or part) += a x b
        // @generate sum: acc_R_C += part_R_C when SPLIT
        workgroupBarrier();
    }

    let out_base = wid.z * m * n;
    // @generate store: store4(out_base, row0 + lid.y * RM + R, col0 + (lid.x + 16u * C) * 4u, acc_R_C)
}

fn store4(base: u32, r: u32, c0: u32, acc: vec4<f32>) {
    let m = params.m;
    let n = params.n;
    if (r >= m) {
        return;
    }
    let v = epilogue(c0, acc);
    let o = base + r * n;
    if (c0 < n) { out[o + c0] = v.x; }
    if (c0 + 1u < n) { out[o + c0 + 1u] = v.y; }
    if (c0 + 2u < n) { out[o + c0 + 2u] = v.z; }
    if (c0 + 3u < n) { out[o + c0 + 3u] = v.w; }
}
