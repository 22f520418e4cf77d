// max / average pooling over NCHW, one invocation per output element. MAX propagates NaN (on
// the bits, never through max()) and skips padding; the average divides by the full window,
// padding counted as zeros (PyTorch's default count_include_pad).

// Infinity and NaN bits live in private variables: WGSL has no constant for them, and Chrome's
// compiler rejects a bitcast of constant bits that would give one.
var<private> nan_bits: u32 = 0x7fc00000u;
var<private> neg_inf_bits: u32 = 0xff800000u;

override MAX: bool = true;

const WG: u32 = 256u;

struct Params {
    planes: u32,
    h: u32,
    w: u32,
    oh: u32,
    ow: u32,
    kh: u32,
    kw: u32,
    sh: u32,
    sw: u32,
    ph: u32,
    pw: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

// @include nan

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    let pix = params.oh * params.ow;
    if (i >= params.planes * pix) {
        return;
    }
    let plane = i / pix;
    let oy = (i % pix) / params.ow;
    let ox = i % params.ow;
    var m = bitcast<f32>(neg_inf_bits);
    var nan = false;
    var s = 0.0;
    for (var ky = 0u; ky < params.kh; ky = ky + 1u) {
        let iy = i32(oy * params.sh + ky) - i32(params.ph);
        for (var kx = 0u; kx < params.kw; kx = kx + 1u) {
            let ix = i32(ox * params.sw + kx) - i32(params.pw);
            if (iy >= 0 && ix >= 0 && iy < i32(params.h) && ix < i32(params.w)) {
                let v = x[(plane * params.h + u32(iy)) * params.w + u32(ix)];
                nan = nan || is_nan(v);
                m = max(m, v);
                s = s + v;
            }
        }
    }
    if (MAX) {
        out[i] = select(m, bitcast<f32>(nan_bits), nan);
    } else {
        out[i] = s / f32(params.kh * params.kw);
    }
}
