// conv2d (NCHW) as an implicit GEMM, with the tiling of matmul.wgsl: per group g,
//   out[n, g*og + r, oy, ox] = sum_kk W[g*og + r, kk] * col[kk, (n, oy, ox)] (+ bias)
// where kk runs over (c, ky, kx) of the group's cg input channels and the column `col` is
// read straight from the input (zero in the padding): the im2col matrix is never stored.
// Grid: x over output pixels (n, oy, ox) in tiles of 64, y over output channels of the group in
// tiles of 64, z over groups.

override HAS_BIAS: bool = false;

struct Params {
    n: u32,
    c: u32,
    h: u32,
    w: u32,
    o: u32,
    kh: u32,
    kw: u32,
    oh: u32,
    ow: u32,
    sh: u32,
    sw: u32,
    ph: u32,
    pw: u32,
    dh: u32,
    dw: u32,
    cg: u32,
    og: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

const TILE: u32 = 64u;
const TK: u32 = 16u;

var<workgroup> a_tile: array<vec4<f32>, 256>;
var<workgroup> b_tile: array<vec4<f32>, 256>;

// Element kk of the column for output pixel p of group g (0 in the padding).
fn column(g: u32, kk: u32, p: u32) -> f32 {
    let area = params.kh * params.kw;
    let c = g * params.cg + kk / area;
    let ky = (kk % area) / params.kw;
    let kx = kk % params.kw;
    let pix = params.oh * params.ow;
    let n = p / pix;
    let oy = (p % pix) / params.ow;
    let ox = p % params.ow;
    // Signed: the window can start above or left of the image.
    let iy = i32(oy * params.sh + ky * params.dh) - i32(params.ph);
    let ix = i32(ox * params.sw + kx * params.dw) - i32(params.pw);
    if (iy < 0 || ix < 0 || iy >= i32(params.h) || ix >= i32(params.w)) {
        return 0.0;
    }
    return x[((n * params.c + c) * params.h + u32(iy)) * params.w + u32(ix)];
}

fn store(g: u32, r: u32, p0: u32, v: vec4<f32>) {
    if (r >= params.og) {
        return;
    }
    let oc = g * params.og + r;
    var b = 0.0;
    if (HAS_BIAS) {
        b = bias[oc];
    }
    let pix = params.oh * params.ow;
    let total = params.n * pix;
    for (var i = 0u; i < 4u; i = i + 1u) {
        let p = p0 + i;
        if (p < total) {
            let n = p / pix;
            out[(n * params.o + oc) * pix + p % pix] = v[i] + b;
        }
    }
}

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = wid.z;
    let k = params.cg * params.kh * params.kw;
    let total = params.n * params.oh * params.ow;
    let row0 = wid.y * TILE;
    let col0 = wid.x * TILE;
    let tid = lid.y * 16u + lid.x;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < k; k0 = k0 + TK) {
        for (var i = 0u; i < 4u; i = i + 1u) {
            let e = tid + i * 256u;
            let r = e / TK;
            let kk = e % TK;
            var v = 0.0;
            if (row0 + r < params.og && k0 + kk < k) {
                v = weight[(g * params.og + row0 + r) * k + k0 + kk];
            }
            a_tile[kk * 16u + r / 4u][r % 4u] = v;
        }
        for (var i = 0u; i < 4u; i = i + 1u) {
            let e = tid + i * 256u;
            let kk = e / TILE;
            let c = e % TILE;
            var v = 0.0;
            if (k0 + kk < k && col0 + c < total) {
                v = column(g, k0 + kk, col0 + c);
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
    let r0 = row0 + lid.y * 4u;
    let p0 = col0 + lid.x * 4u;
    store(g, r0, p0, acc0);
    store(g, r0 + 1u, p0, acc1);
    store(g, r0 + 2u, p0, acc2);
    store(g, r0 + 3u, p0, acc3);
}
