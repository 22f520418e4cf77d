// What the attention shaders share (attention.wgsl, attention_split.wgsl): the parameters and
// the lengths' binding, where a row of q, k, v or the output starts, scores with NaN made
// +inf, and the keys a query row sees.

// Infinity and NaN bits live in private variables: WGSL has no constant for them, and Chrome's
// compiler rejects a bitcast of constant bits that would give one.
var<private> neg_inf_bits: u32 = 0xff800000u;
var<private> pos_inf_bits: u32 = 0x7f800000u;
var<private> nan_bits: u32 = 0x7fc00000u;

fn is_finite(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7f800000u) != 0x7f800000u;
}

// A score, with NaN turned into +inf so that the running maximum keeps it.
fn score(dot: f32) -> f32 {
    let s = dot * params.scale;
    let nan = (bitcast<u32>(s) & 0x7fffffffu) > 0x7f800000u;
    return select(s, bitcast<f32>(pos_inf_bits), nan);
}

override CAUSAL: bool = false;
override HAS_LENS: bool = false;

const WG: u32 = 256u;

// Row (b, h, i) of q, k or v starts at off + b * sb + h * sh + i * ss (its elements are
// contiguous): heads-first, sequence-first and packed QKV layouts alike. The output is
// [b, sq, hq, dv] when out_bshd is 1, else [b, hq, sq, dv].
struct Params {
    hq: u32,
    hkv: u32,
    sq: u32,
    sk: u32,
    d: u32,
    dv: u32,
    scale: f32,
    out_bshd: u32,
    q_off: u32,
    q_sb: u32,
    q_sh: u32,
    q_ss: u32,
    k_off: u32,
    k_sb: u32,
    k_sh: u32,
    k_ss: u32,
    v_off: u32,
    v_sb: u32,
    v_sh: u32,
    v_ss: u32,
}

fn q_row_at(b: u32, h: u32, i: u32) -> u32 {
    return params.q_off + b * params.q_sb + h * params.q_sh + i * params.q_ss;
}

fn out_row_at(b: u32, h: u32, i: u32) -> u32 {
    if (params.out_bshd == 1u) {
        return ((b * params.sq + i) * params.hq + h) * params.dv;
    }
    return ((b * params.hq + h) * params.sq + i) * params.dv;
}

// q, k, v (bindings 1-3) and the output (5) are each shader's own: f32 elements in
// attention.wgsl, u32 words in attention_split.wgsl (f32 bits, or two halves).
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(4) var<storage, read> lens: array<u32>;

// How many keys query row i sees (0 for a row past the end).
fn visible_keys(i: u32, b: u32) -> u32 {
    if (i >= params.sq) {
        return 0u;
    }
    var n = params.sk;
    if (CAUSAL) {
        n = min(n, i + 1u + (params.sk - min(params.sk, params.sq)));
    }
    if (HAS_LENS) {
        n = min(n, lens[b]);
    }
    return n;
}
