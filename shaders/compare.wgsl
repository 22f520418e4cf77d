// Comparisons (a u32 mask) and integer arithmetic on 32-bit elements, read by repetition:
// out[i] = op(a[i % la], b[i % lb]). Kind: 0 f32, 3 i32, 4 u32 (DType::code). Op codes
// (WordOp::code): 0 add, 1 sub, 2 mul (wrapping), 3 equal, 4 not_equal, 5 less, 6 less_equal,
// 7 greater, 8 greater_equal. Float comparisons are IEEE's, NaN decided on its bits (WGSL lets
// drivers assume floats are never NaN).

const WG: u32 = 256u;

struct Params {
    n: u32,
    la: u32,
    lb: u32,
    op: u32,
    kind: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> a: array<u32>;
@group(0) @binding(2) var<storage, read> b: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;

fn nan_bits(v: u32) -> bool {
    return (v & 0x7fffffffu) > 0x7f800000u;
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= params.n) {
        return;
    }
    let x = a[select(i % params.la, i, params.la == params.n)];
    let y = b[select(i % params.lb, i, params.lb == params.n)];
    let op = params.op;
    if (op <= 2u) {
        var r = x * y;
        if (op == 0u) {
            r = x + y;
        } else if (op == 1u) {
            r = x - y;
        }
        out[i] = r;
        return;
    }
    var lt = x < y;
    var eq = x == y;
    var unordered = false;
    if (params.kind == 0u) {
        unordered = nan_bits(x) || nan_bits(y);
        let fx = bitcast<f32>(x);
        let fy = bitcast<f32>(y);
        lt = !unordered && fx < fy;
        eq = !unordered && fx == fy;
    } else if (params.kind == 3u) {
        lt = bitcast<i32>(x) < bitcast<i32>(y);
    }
    let gt = !unordered && !lt && !eq;
    var r = false;
    switch op {
        case 3u: {
            r = eq;
        }
        case 4u: {
            r = !eq;
        }
        case 5u: {
            r = lt;
        }
        case 6u: {
            r = lt || eq;
        }
        case 7u: {
            r = gt;
        }
        default: {
            r = gt || eq;
        }
    }
    out[i] = u32(r);
}
