// quant.wgsl's GEMV, shared with quant_cached.wgsl: the overrides, parameters, input
// bindings (0-7) and `gemv`, which leaves each output's value for the entry point to write.

override FORMAT: u32 = 0u;
override HAS_RESIDUAL: bool = false;
override HAS_NORM: bool = false;
// HAS_SWIGLU: x's rows hold 2k values, gate then up, and the product reads silu(gate) * up
// (silu as the unary kernel computes it; a NaN gate gives NaN through the division).
override HAS_SWIGLU: bool = false;
override HAS_ROPE: bool = false;

const WG: u32 = 256u;

struct Params {
    m: u32,
    n: u32,
    k: u32,
    eps_bits: u32, // the norm's eps (HAS_NORM)
    rope_dim: u32, // values per RoPE row (HAS_ROPE)
    transposed: u32, // `dequant` writes [k, n]
    cache_from: u32, // quant_cached.wgsl: the first column that goes to the cache
    capacity: u32, // quant_cached.wgsl: the cache's rows
}

@group(0) @binding(0) var<uniform> params: Params;
// k is a multiple of 32, so each row of x is whole vec4s.
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> scales: array<f32>;
@group(0) @binding(3) var<storage, read> mins: array<f32>;
@group(0) @binding(4) var<storage, read> words: array<u32>;
// Read only when HAS_RESIDUAL; with HAS_ROPE (never both) the cos table. Another input stands
// in otherwise.
@group(0) @binding(5) var<storage, read> residual: array<f32>;
// Read only when HAS_NORM: one value per column of x.
@group(0) @binding(6) var<storage, read> norm_w: array<vec4<f32>>;
// Read only when HAS_ROPE: the sin table.
@group(0) @binding(7) var<storage, read> sin_t: array<f32>;

var<workgroup> partial: array<f32, WG>;

// Element e of weight row `row`.
fn weight(row: u32, e: u32) -> f32 {
    let b = row * (params.k / 32u) + e / 32u;
    let j = e % 32u;
    let d = scales[b];
    var v: f32;
    switch FORMAT {
        case 0u: {
            let byte = (words[b * 8u + j / 4u] >> (8u * (j % 4u))) & 0xffu;
            v = d * f32(bitcast<i32>(byte << 24u) >> 24u);
        }
        case 1u: {
            let q = (words[b * 4u + j / 8u] >> (4u * (j % 8u))) & 0xfu;
            v = d * (f32(q) - 8.0);
        }
        default: {
            let q = (words[b * 4u + j / 8u] >> (4u * (j % 8u))) & 0xfu;
            v = d * f32(q) + mins[b];
        }
    }
    return v;
}

// Words per block: 8 of four bytes (Q8_0), 4 of eight nibbles (Q4_0, Q4_1).
fn words_per_block() -> u32 {
    return select(4u, 8u, FORMAT == 0u);
}

// The j-th vec4 of x's row r: times the norm's weight when HAS_NORM (its row scale is applied
// to the sum), silu(gate) * up of the row's halves when HAS_SWIGLU.
fn xv(r: u32, j: u32) -> vec4<f32> {
    let k4 = params.k / 4u;
    if (HAS_SWIGLU) {
        let gate = x[2u * r * k4 + j];
        return gate / (1.0 + exp(-gate)) * x[2u * r * k4 + k4 + j];
    }
    var v = x[r * k4 + j];
    if (HAS_NORM) {
        v = v * norm_w[j];
    }
    return v;
}

// Word w of weight row c dequantised (as `weight` does, exactly) and dotted with the matching
// elements of x's row r: word w holds elements 32 / words_per_block() * w onwards.
fn part(r: u32, c: u32, w: u32) -> f32 {
    let wpb = words_per_block();
    let blocks = params.k / 32u;
    let b = c * blocks + w / wpb;
    let word = words[c * blocks * wpb + w];
    let d = vec4<f32>(scales[b]);
    if (FORMAT == 0u) {
        let q = vec4<i32>(
            bitcast<i32>(word << 24u) >> 24u,
            bitcast<i32>(word << 16u) >> 24u,
            bitcast<i32>(word << 8u) >> 24u,
            bitcast<i32>(word) >> 24u,
        );
        return dot(xv(r, w), d * vec4<f32>(q));
    }
    // Q4: nibbles 0-3 are elements 0-3 of the word, nibbles 4-7 elements 4-7.
    let lo = vec4<f32>((vec4<u32>(word) >> vec4<u32>(0u, 4u, 8u, 12u)) & vec4<u32>(0xfu));
    let hi = vec4<f32>((vec4<u32>(word) >> vec4<u32>(16u, 20u, 24u, 28u)) & vec4<u32>(0xfu));
    var w_lo = d * (lo - 8.0);
    var w_hi = d * (hi - 8.0);
    if (FORMAT == 2u) {
        let mn = vec4<f32>(mins[b]);
        w_lo = fma(d, lo, mn);
        w_hi = fma(d, hi, mn);
    }
    return dot(xv(r, 2u * w), w_lo) + dot(xv(r, 2u * w + 1u), w_hi);
}

// What an invocation of the GEMV leaves: whether it writes output `at` (column c of its
// row), the output's value (normalised as asked; not rotated, no residual) and its RoPE
// partner's (column c ^ 1, of the same workgroup).
struct Output {
    write: bool,
    at: u32,
    c: u32,
    v: f32,
    pair: f32,
}

fn gemv(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> Output {
    // 8 outputs per workgroup, 32 lanes each striding along the weight row.
    let groups_per_row = (params.n + 7u) / 8u;
    let g = wid.x + wid.y * nwg.x;
    if (g >= params.m * groups_per_row) {
        return Output(false, 0u, 0u, 0.0, 0.0);
    }
    let r = g / groups_per_row;
    let lane = lid % 32u;
    let c = (g % groups_per_row) * 8u + lid / 32u;
    // The row's RMS scale: every output of the workgroup is of row r.
    var scale = 1.0;
    if (HAS_NORM) {
        let k4 = params.k / 4u;
        var q = 0.0;
        for (var j = lid; j < k4; j = j + WG) {
            let v = x[r * k4 + j];
            q = q + dot(v, v);
        }
        partial[lid] = q;
        workgroupBarrier();
        for (var s = WG / 2u; s > 0u; s = s >> 1u) {
            if (lid < s) {
                partial[lid] = partial[lid] + partial[lid + s];
            }
            workgroupBarrier();
        }
        scale = inverseSqrt(partial[0] / f32(params.k) + bitcast<f32>(params.eps_bits));
        workgroupBarrier();
    }
    var acc = 0.0;
    if (c < params.n) {
        let row_words = (params.k / 32u) * words_per_block();
        let last = row_words - 1u;
        // Four words per lane per step, loaded before any is used, so four loads are in
        // flight (one at a time left the loop waiting on memory); clamped indices past the
        // row's end are read but their parts are dropped.
        for (var w = lane; w < row_words; w = w + 128u) {
            let p0 = part(r, c, w);
            let p1 = part(r, c, min(w + 32u, last));
            let p2 = part(r, c, min(w + 64u, last));
            let p3 = part(r, c, min(w + 96u, last));
            acc = acc + p0 + select(0.0, p1, w + 32u < row_words)
                + select(0.0, p2, w + 64u < row_words) + select(0.0, p3, w + 96u < row_words);
        }
    }
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = 16u; s > 0u; s = s >> 1u) {
        if (lane < s) {
            partial[lid] = partial[lid] + partial[lid + s];
        }
        workgroupBarrier();
    }
    let at = r * params.n + c;
    let write = lane == 0u && c < params.n;
    var v = partial[lid];
    // The pair's other output is the neighbouring group of 32 lanes.
    var other = partial[lid ^ 32u];
    if (HAS_NORM) {
        v = v * scale;
        other = other * scale;
    }
    return Output(write, at, c, v, other);
}

// The rope table entry of output `at`: its pair's index in the cos and sin tables.
fn rope_entry(at: u32) -> u32 {
    let dim = params.rope_dim;
    return (at / dim) * (dim / 2u) + (at % dim) / 2u;
}
