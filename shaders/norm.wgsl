// layernorm / rmsnorm along rows: one workgroup per row (2-D grid for many rows).
// layernorm: mean in one pass, the variance of (x - mean) in a second (no cancellation), then
// the write; rmsnorm: mean of squares, then the write. The optional weight and bias have one
// value per column. A NaN in the row reaches every output of the row through the sums.

override RMS: bool = false;
override HAS_WEIGHT: bool = false;
override HAS_BIAS: bool = false;

const WG: u32 = 256u;

struct Params {
    rows: u32,
    cols: u32,
    eps: f32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

var<workgroup> partial: array<f32, WG>;

fn row_sum(lid: u32, v: f32) -> f32 {
    partial[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            partial[lid] = partial[lid] + partial[lid + s];
        }
        workgroupBarrier();
    }
    let total = partial[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= params.rows) {
        return;
    }
    let cols = params.cols;
    let base = row * cols;
    let n = f32(cols);
    var mean = 0.0;
    if (!RMS) {
        var s = 0.0;
        for (var i = lid; i < cols; i = i + WG) {
            s = s + x[base + i];
        }
        mean = row_sum(lid, s) / n;
    }
    var q = 0.0;
    for (var i = lid; i < cols; i = i + WG) {
        let d = x[base + i] - mean;
        q = q + d * d;
    }
    let inv = inverseSqrt(row_sum(lid, q) / n + params.eps);
    for (var i = lid; i < cols; i = i + WG) {
        var y = (x[base + i] - mean) * inv;
        if (HAS_WEIGHT) {
            y = y * weight[i];
        }
        if (HAS_BIAS) {
            y = y + bias[i];
        }
        out[base + i] = y;
    }
}
