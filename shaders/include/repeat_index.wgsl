// Element `i` of this chunk of an operand read by repetition: `(base + i) % len`, counted from
// the start of the whole tensor, or `i` for a full operand (`len` 0, bound at the chunk).
// The including shader's `params` has `base`.
fn index(i: u32, len: u32) -> u32 {
    if (len == 0u) {
        return i;
    }
    return (params.base + i) % len;
}
