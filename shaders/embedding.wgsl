// Embedding gather: out[r, c] = table[ids[r], c], over 32-bit words (two f16 or bf16 elements a
// word for half tables). An id at or above vocab (device ids are not checked on the host) gives
// a row of 0x7fff7fff words: NaN in every float dtype.

const WG: u32 = 256u;

struct Params {
    n: u32,
    dim: u32,
    vocab: u32,
    // write_rows: where the rows start in `table`, and how many words apart.
    offset: u32,
    stride: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> table: array<u32>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= params.n) {
        return;
    }
    let r = i / params.dim;
    let c = i % params.dim;
    let id = ids[r];
    if (id < params.vocab) {
        out[i] = table[id * params.dim + c];
    } else {
        out[i] = 0x7fff7fffu;
    }
}

// The other way: src rows written into a tensor of `vocab` rows from the row that `ids[0]`
// names, in place (a KV cache's store, replayed with a new position each run). `table` holds
// the rows (`stride` words apart), `out` the destination; rows that would land past the end are
// dropped.
@compute @workgroup_size(256)
fn write_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= params.n) {
        return;
    }
    let at = ids[0];
    let r = i / params.dim;
    if (at >= params.vocab || r >= params.vocab - at) {
        return;
    }
    let c = i % params.dim;
    out[(at + r) * params.dim + c] = table[params.offset + r * params.stride + c];
}
