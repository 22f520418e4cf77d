// Matmul with GGUF-quantized weights, dequantised in the kernel: out[r, c] = sum_e x[r, e] *
// W[c, e], W stored as unpacked blocks of 32 along e: f32 scales (and mins), quants in u32
// words in element order (src/quant.rs). FORMAT: 0 Q8_0, 1 Q4_0, 2 Q4_1.
// `main`: 8 outputs per workgroup, 32 lanes per output striding over the row's quant words
// (the 32 lanes read 32 consecutive words, so reads are coalesced; each lane takes four words
// 32 apart per step). A lane unpacks a whole word (4 bytes of Q8_0, 8 nibbles of Q4),
// dequantises it into one or two vec4s with the block's scale (and min) exactly as `weight`
// does, and takes their dot products with the matching vec4s of x; then a 5-step sum.
// HAS_NORM: `main` RMS-normalises x's row first (scale s = 1 / sqrt(mean(x^2) + eps), then
// norm_w per column): the workgroup sums the row's squares, the dot products read x * norm_w,
// and the sum is multiplied by s. HAS_RESIDUAL: `main` adds residual[r, c] to each output (a
// projection and the residual connection around it, one dispatch). HAS_ROPE: `main` rotates
// the outputs as interleaved RoPE rows of params.rope_dim values (output t = r * n + c is
// element t % dim of rope row t / dim; pairs (2i, 2i + 1) turn by cos and sin[row, i]), as
// rope.wgsl does: the two outputs of a pair are of one workgroup (8 even-aligned outputs), so
// each reads its partner's sum from workgroup memory. `dequant`: one invocation per weight
// element, written as the weight's [n, k], or, when params.transposed is 1, one invocation per
// word as its transpose [k, n] (the layout the tiled matmul's vec4 loads read, for a prompt's
// product).

// @include quant_gemv

@group(0) @binding(8) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let o = gemv(wid, nwg, lid);
    if (o.write) {
        var v = o.v;
        if (HAS_ROPE) {
            let t = rope_entry(o.at);
            if ((o.c & 1u) == 0u) {
                v = v * residual[t] - o.pair * sin_t[t];
            } else {
                v = o.pair * sin_t[t] + v * residual[t];
            }
        } else if (HAS_RESIDUAL) {
            v = v + residual[o.at];
        }
        out[o.at] = v;
    }
}

@compute @workgroup_size(256)
fn dequant(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    let n = params.n;
    if (params.transposed == 1u) {
        // An invocation a word (its 4 or 8 consecutive elements of row i % n, which reads each
        // word once), writing [k, n]: neighbouring invocations write neighbouring columns.
        let per = 32u / words_per_block();
        let e = i / n * per;
        if (e < params.k) {
            for (var j = 0u; j < per; j++) {
                out[(e + j) * n + i % n] = weight(i % n, e + j);
            }
        }
    } else if (i < n * params.k) {
        out[i] = weight(i / params.k, i % params.k);
    }
}
