// Conversions between dtypes: one invocation per output word (two elements of a half-precision
// output, one of any other). Dtype codes (DType::code): 0 f32, 1 f16, 2 bf16, 3 i32, 4 u32. The
// rules are those of src/dtype.rs: halves round to nearest even, floats truncate into integers
// and saturate (NaN gives 0), integers keep their bits.

// @include dtype

const WG: u32 = 256u;

struct Params {
    n: u32,
    src_type: u32,
    dst_type: u32,
    words: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

// One input element: its value as f32, and an integer's own bits.
struct Elem {
    f: f32,
    bits: u32,
    integer: bool,
}

fn half_at(i: u32) -> u32 {
    return (x[i / 2u] >> (16u * (i % 2u))) & 0xffffu;
}

// Integers to f32 rounded to nearest even, by bits: WGSL lets a conversion beyond 2^24 take
// either neighbour (SwiftShader truncates), and every backend must give the same bits.
fn u32_to_f32(v: u32) -> f32 {
    if (v < 0x1000000u) {
        return f32(v);
    }
    let shift = 8u - countLeadingZeros(v);
    var m = v >> shift;
    let rem = v & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (m & 1u) == 1u)) {
        m = m + 1u;
    }
    // m is below 2^24, or 2^24 itself after rounding up: exact in f32, and so is its product
    // with a power of two.
    return f32(m) * f32(1u << shift);
}

fn i32_to_f32(v: u32) -> f32 {
    let negative = (v & 0x80000000u) != 0u;
    let f = u32_to_f32(select(v, 0u - v, negative));
    return select(f, -f, negative);
}

fn load(i: u32) -> Elem {
    switch params.src_type {
        case 0u: {
            return Elem(bitcast<f32>(x[i]), 0u, false);
        }
        case 1u: {
            return Elem(f16_to_f32(half_at(i)), 0u, false);
        }
        case 2u: {
            return Elem(bf16_to_f32(half_at(i)), 0u, false);
        }
        case 3u: {
            return Elem(i32_to_f32(x[i]), x[i], true);
        }
        default: {
            return Elem(u32_to_f32(x[i]), x[i], true);
        }
    }
}

fn is_nan_bits(f: f32) -> bool {
    return (bitcast<u32>(f) & 0x7fffffffu) > 0x7f800000u;
}

fn store(e: Elem) -> u32 {
    switch params.dst_type {
        case 0u: {
            return bitcast<u32>(e.f);
        }
        case 1u: {
            return f32_to_f16(e.f);
        }
        case 2u: {
            return f32_to_bf16(e.f);
        }
        case 3u: {
            if (e.integer) {
                return e.bits;
            }
            if (is_nan_bits(e.f)) {
                return 0u;
            }
            if (e.f >= 2147483648.0) {
                return 0x7fffffffu;
            }
            if (e.f <= -2147483648.0) {
                return 0x80000000u;
            }
            return bitcast<u32>(i32(e.f));
        }
        default: {
            if (e.integer) {
                return e.bits;
            }
            if (is_nan_bits(e.f) || e.f <= 0.0) {
                return 0u;
            }
            if (e.f >= 4294967296.0) {
                return 0xffffffffu;
            }
            return u32(e.f);
        }
    }
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = gid.x + gid.y * nwg.x * WG;
    if (w >= params.words) {
        return;
    }
    if (params.dst_type == 1u || params.dst_type == 2u) {
        let i = 2u * w;
        var word = store(load(i));
        if (i + 1u < params.n) {
            word = word | (store(load(i + 1u)) << 16u);
        }
        out[w] = word;
    } else {
        out[w] = store(load(w));
    }
}
