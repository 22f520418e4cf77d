// matmul_coop: out[b] = A[b] (m x k) * B[b] (k x n) on cooperative matrices (tensor cores),
// for Precision::F16 where the adapter has wgpu's cooperative-matrix extension with 16x16x16
// f16 products and f32 accumulators, and 32-invocation subgroups (NVIDIA over Vulkan).
//
// A template, like matmul.wgsl: `coop_source` in src/backend/wgpu/matmul_template.rs rewrites
// the `tile:` lines, replaces each `@generate` line with unrolled statements, and keeps one side
// of each `@if vectors` block (its `@include` lines, shared with matmul.wgsl, are assembled by
// build.rs): vec4 loads where the operands allow them, scalar loads (any
// transpose, any k and n) elsewhere.
//
// A workgroup of 2 x WN subgroups computes a BM x BN tile of the output; subgroup (wm, wn)
// holds FM x FN accumulators of 16 x 16 f32, named acc_I_J (BM = 2 * 16 * FM, BN = 16 * FN *
// WN; FN is 4 in 256-column tiles, 2 otherwise). The k axis advances BK at a time. Each step's tiles are read from global memory into
// registers (four consecutive k of a row of A, four consecutive columns of a row of B per
// slot), while the tensor cores multiply the tiles of the step before from workgroup memory;
// then the registers are rounded to f16 and stored into the other of two workgroup buffers,
// so one barrier per step suffices. Rows of the f16 tiles are padded by 8 halves (16 bytes)
// to spread them over the memory banks. Bounds are checked only on the global loads and the
// final stores: loads past an edge give zeros, which add nothing.
//
// The results pass through workgroup memory, one 16 x 16 block per subgroup at a time, to
// apply the epilogue (bias, activation) and to store only what lies inside the output.
//
// Precision: the inputs are rounded to f16 (to nearest even); the products of two f16 values
// are exact in f32 and summed in f32. Inputs beyond f16's range become infinities.

enable f16;
enable wgpu_cooperative_matrix;

const BM: u32 = 128u; // tile: output rows per workgroup (32 * FM)
const BN: u32 = 128u; // tile: output columns per workgroup (16 * FN * WN)
const BK: u32 = 16u; // tile: k per step (a multiple of 16)
const WN: u32 = 4u; // tile: subgroups along n
const FM: u32 = 4u; // tile: 16-row blocks per subgroup
const FN: u32 = 2u; // tile: 16-column blocks per subgroup

const THREADS: u32 = 64u * WN;
const LDA: u32 = BK + 8u;
const LDB: u32 = BN + 8u;

// @include matmul_params
// @if halves: A and B are f16 tensors (k and n multiples of 4: whole vec4s of halves), read and
// kept as halves up to workgroup memory (no conversions: they would cost more than the tensor
// cores' work); the output is f16 too, two halves a word, rounded as `cast` rounds
// @include dtype
@group(0) @binding(1) var<storage, read> a: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read> b: array<vec4<f16>>;
@group(0) @binding(4) var<storage, read_write> out: array<u32>;
alias Slot = vec4<f16>;
// @else
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
alias Slot = vec4<f32>;
// @end
// @if vectors: rows of A and B hold whole vec4s (k and n multiples of 4, neither transposed)
@group(0) @binding(1) var<storage, read> a: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> b: array<vec4<f32>>;
// @end
// @if scalar: any layout
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
fn weight_at(i: u32) -> f32 { return b[i]; }
// @end
@group(0) @binding(3) var<storage, read> bias: array<f32>;

// Two buffers of A's tile (row-major, BM x LDA) and of B's (row-major, BK x LDB).
var<workgroup> a_s: array<f16, 2u * BM * LDA>;
var<workgroup> b_s: array<f16, 2u * BK * LDB>;
// One 16 x 16 f32 block per subgroup, for the epilogue.
var<workgroup> c_s: array<f32, THREADS * 8u>;

// @include matmul_epilogue

// @if halves
// Four consecutive k of row r of A (zeros past the edges, which whole vec4s never straddle).
fn fetch_a(base: u32, r: u32, k0: u32) -> vec4<f16> {
    if (r < params.m && k0 < params.k) {
        return a[(base + r * params.k + k0) / 4u];
    }
    return vec4<f16>(0.0h);
}

// Four consecutive columns of row kk of B (zeros past the edges).
fn fetch_b(base: u32, kk: u32, c0: u32) -> vec4<f16> {
    if (kk < params.k && c0 < params.n) {
        return b[(base + kk * params.n + c0) / 4u];
    }
    return vec4<f16>(0.0h);
}

fn put_a(o: u32, h: vec4<f16>) {
    a_s[o] = h.x;
    a_s[o + 1u] = h.y;
    a_s[o + 2u] = h.z;
    a_s[o + 3u] = h.w;
}

fn put_b(o: u32, h: vec4<f16>) {
    b_s[o] = h.x;
    b_s[o + 1u] = h.y;
    b_s[o + 2u] = h.z;
    b_s[o + 3u] = h.w;
}

// One 16 x 16 block from this subgroup's part of c_s to the output at (r0, c0): two columns a
// word (n is even, and so is c0).
fn store_block(out_base: u32, warp: u32, lane: u32, r0: u32, c0: u32) {
    let m = params.m;
    let n = params.n;
    for (var q = 0u; q < 4u; q = q + 1u) {
        let i = 2u * (lane + q * 32u);
        let r = r0 + i / 16u;
        let c = c0 + i % 16u;
        if (r < m && c < n) {
            let lo = f32_to_f16(c_s[warp * 256u + i]);
            let hi = f32_to_f16(c_s[warp * 256u + i + 1u]);
            out[(out_base + r * n + c) / 2u] = lo | (hi << 16u);
        }
    }
}
// @end
// @if vectors
// Four consecutive k of row r of A (zeros past the edges, which whole vec4s never straddle).
fn fetch_a(base: u32, r: u32, k0: u32) -> vec4<f32> {
    if (r < params.m && k0 < params.k) {
        return a[(base + r * params.k + k0) / 4u];
    }
    return vec4<f32>(0.0);
}

// Four consecutive columns of row kk of B (zeros past the edges).
fn fetch_b(base: u32, kk: u32, c0: u32) -> vec4<f32> {
    if (kk < params.k && c0 < params.n) {
        return b[(base + kk * params.n + c0) / 4u];
    }
    return vec4<f32>(0.0);
}
// @end
// @if scalar
// @include matmul_loads

// Four consecutive k of row r of A (zeros past the edges).
fn fetch_a(base: u32, r: u32, k0: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    if (r < params.m) {
        let k = params.k;
        if (k0 < k) { v.x = load_a(base, r, k0); }
        if (k0 + 1u < k) { v.y = load_a(base, r, k0 + 1u); }
        if (k0 + 2u < k) { v.z = load_a(base, r, k0 + 2u); }
        if (k0 + 3u < k) { v.w = load_a(base, r, k0 + 3u); }
    }
    return v;
}

// Four consecutive columns of row kk of B (zeros past the edges).
fn fetch_b(base: u32, kk: u32, c0: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    if (kk < params.k) {
        let n = params.n;
        if (c0 < n) { v.x = load_b(base, kk, c0); }
        if (c0 + 1u < n) { v.y = load_b(base, kk, c0 + 1u); }
        if (c0 + 2u < n) { v.z = load_b(base, kk, c0 + 2u); }
        if (c0 + 3u < n) { v.w = load_b(base, kk, c0 + 3u); }
    }
    return v;
}
// @end

// @if halves
// @else
fn put_a(o: u32, v: vec4<f32>) {
    let h = vec4<f16>(v);
    a_s[o] = h.x;
    a_s[o + 1u] = h.y;
    a_s[o + 2u] = h.z;
    a_s[o + 3u] = h.w;
}

fn put_b(o: u32, v: vec4<f32>) {
    let h = vec4<f16>(v);
    b_s[o] = h.x;
    b_s[o + 1u] = h.y;
    b_s[o + 2u] = h.z;
    b_s[o + 3u] = h.w;
}
// @end

@compute @workgroup_size(THREADS)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let m = params.m;
    let n = params.n;
    let k = params.k;
    let row0 = wid.y * BM;
    let col0 = wid.x * BN;
    let a_base = wid.z * params.a_stride;
    let b_base = wid.z * params.b_stride;
    let warp = tid / 32u;
    let lane = tid % 32u;
    let wm = warp / WN;
    let wn = warp % WN;

    // @generate declare: acc_I_J (f32 accumulators), pa_S and pb_S (prefetch registers)

    let steps = (k + BK - 1u) / BK;
    // @generate fetch 0u: pa_S, pb_S = step 0's slots
    // @generate put 0u: buffer 0 = pa_S, pb_S
    workgroupBarrier();
    for (var t = 0u; t < steps; t = t + 1u) {
        let s = t & 1u;
        let more = t + 1u < steps;
        if (more) {
            // @generate fetch (t + 1u) * BK: the next step's slots
        }
        let ab = s * BM * LDA + wm * 16u * FM * LDA;
        let bb = s * BK * LDB + wn * 16u * FN;
        // @generate mma: acc_I_J += A block I x B block J, for each 16 of BK
        if (more) {
            // @generate put (1u - s): the other buffer = the next step's slots
        }
        workgroupBarrier();
    }

    let out_base = wid.z * m * n;
    // @generate store: each acc_I_J through c_s, with the epilogue, inside the output
}

// @if halves
// @else
// One 16 x 16 block from this subgroup's part of c_s to the output at (r0, c0).
fn store_block(out_base: u32, warp: u32, lane: u32, r0: u32, c0: u32) {
    let m = params.m;
    let n = params.n;
    for (var q = 0u; q < 8u; q = q + 1u) {
        let i = lane + q * 32u;
        let r = r0 + i / 16u;
        let c = c0 + i % 16u;
        if (r < m && c < n) {
            out[out_base + r * n + c] = epilogue(c, vec4<f32>(c_s[warp * 256u + i], 0.0, 0.0, 0.0)).x;
        }
    }
}
// @end
