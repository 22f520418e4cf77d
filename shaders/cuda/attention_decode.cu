// Attention for a few query rows against many keys (decoding), compiled after common.cuh as
// its own module: the split kernels and the merge of their partials.

// Decode attention (flash-decoding): few query rows against many keys. Block (s, r) takes
// query row r (of batch x heads x sq) and the `chunk` keys from s * chunk (32, or 16 for heads
// past 128 wide): the block copies their key and value rows to shared memory with coalesced
// loads, warp 0 scores them (lane j key j) and takes their softmax statistics, and every
// thread adds the weighted values for its output elements. One block writes the row; several
// write (max, sum, output) partials that attention_merge joins. Memory latency, not
// arithmetic, bounds a decoding step, so each block waits on one round of loads. The same
// semantics as attention.cu's kernels (NaN or +inf scores give NaN, only -inf gives NaN, no
// visible key gives zeros).

extern "C" __global__ void attention_split(AttnLayout lay, const float* __restrict__ q,
                                           const float* __restrict__ k, const float* __restrict__ v,
                                           const u32* __restrict__ lens, u64 hq, u64 hkv, u64 sq,
                                           u64 sk, u64 d, u64 dv, u32 causal, float scale,
                                           u64 chunk, float* __restrict__ partial,
                                           float* __restrict__ out) {
    WAIT_PRIOR();
    extern __shared__ float smem[];
    const u32 dd = (u32)d, dvv = (u32)dv, ch = (u32)chunk;
    float* qs = smem;                   // [d]
    float* ks = qs + dd;                // [chunk][d + 1]
    float* vs = ks + ch * (dd + 1);     // [chunk][dv]
    float* ps = vs + ch * dvv;          // [chunk]
    __shared__ float stats[2];
    const u32 tid = threadIdx.x, lane = tid & 31;
    const u64 row = blockIdx.y, i = row % sq, bh = row / sq, b = bh / hq, h = bh % hq;
    const u64 kvh = h / (hq / hkv);
    const u64 visible = visible_keys(lens, b, i, sq, sk, causal);
    const u64 begin = (u64)blockIdx.x * chunk;
    const u32 count = begin >= visible ? 0 : (u32)(visible - begin < chunk ? visible - begin : chunk);
    const float* qi = q + lay.q.offset + b * lay.q.batch + h * lay.q.head + i * lay.q.seq;
    const float* kb = k + lay.k.offset + b * lay.k.batch + kvh * lay.k.head + begin * lay.k.seq;
    const float* vb = v + lay.v.offset + b * lay.v.batch + kvh * lay.v.head + begin * lay.v.seq;
    for (u32 c = tid; c < dd; c += blockDim.x) qs[c] = qi[c] * scale;
    for (u32 e = tid; e < count * dd; e += blockDim.x) {
        const u32 r = e / dd, c = e - r * dd;
        ks[r * (dd + 1) + c] = kb[r * lay.k.seq + c];
    }
    for (u32 e = tid; e < count * dvv; e += blockDim.x) {
        const u32 r = e / dvv, c = e - r * dvv;
        vs[e] = vb[r * lay.v.seq + c];
    }
    __syncthreads();
    if (tid < 32) {
        float s = NEG_INF;
        if (lane < count) {
            const float* kr = ks + lane * (dd + 1);
            float dotp = 0.0f;
            for (u32 c = 0; c < dd; ++c) dotp += qs[c] * kr[c];
            s = dotp;
        }
        const float m = warp_max(s);
        const float p = (lane < count && m != NEG_INF) ? expf(s - m) : 0.0f;
        const float l = warp_sum(p);
        if (lane < ch) ps[lane] = p;
        if (lane == 0) {
            stats[0] = m;
            stats[1] = l;
        }
    }
    __syncthreads();
    const float m = stats[0], l = stats[1];
    const bool whole = gridDim.x == 1;
    float* o = out + (lay.out_bshd ? (b * sq + i) * hq + h : bh * sq + i) * dv;
    float* part = partial + (row * gridDim.x + blockIdx.x) * (dv + 2);
    for (u32 c = tid; c < dvv; c += blockDim.x) {
        float a = 0.0f;
        for (u32 j = 0; j < count; ++j) a += ps[j] * vs[j * dvv + c];
        if (whole) o[c] = visible == 0 ? 0.0f : (m == NEG_INF ? QNAN : a / l);
        else part[2 + c] = a;
    }
    if (!whole && tid == 0) {
        part[0] = m;
        part[1] = l;
    }
}

// Decoding (flash-decoding): block (split, b * hkv + kvh) takes keys [split * chunk, + chunk)
// of one KV head for every query row that reads that head (the group's hq / hkv heads x sq
// rows, at most DEC_ROWS), 32 keys at a time staged in shared memory, so each key and value is
// read from memory once however many query heads share it. A warp scores one row's 32 keys (a
// lane a key), the softmax runs online across the tiles, and the block's threads own the rows'
// output columns in registers. Partials (m, l, acc[dv]) per row and split go to `partial` in
// attention_split's layout, which attention_merge joins; with one split the rows finish here.
#define DEC_ROWS 16
#define DEC_TILE 32
#define DEC_ACC 16 // accumulators a thread holds: DEC_ROWS x 256 columns / 256 threads
#define DEC_BATCH 4 // vectors of k and of v a thread loads at once (a 32 x 128 tile: all)
// q, k, v and out hold f32 (elem 0), f16 (1) or bf16 (2) values; the arithmetic is f32.
extern "C" __global__ void attention_decode(AttnLayout lay, const void* __restrict__ q,
                                            const void* __restrict__ k,
                                            const void* __restrict__ v,
                                            const u32* __restrict__ lens, u64 hq, u64 hkv, u64 sq,
                                            u64 sk, u64 d, u64 dv, u32 causal, float scale,
                                            u64 chunk, u32 elem, float* __restrict__ partial,
                                            void* __restrict__ out) {
    WAIT_PRIOR();
    extern __shared__ float smem[];
    const u32 dd = (u32)d, dvv = (u32)dv;
    const u32 group = (u32)(hq / hkv), rows = group * (u32)sq;
    float* qs = smem;                      // [rows][d]
    float* ks = qs + rows * dd;            // [DEC_TILE][d + 1]
    float* vs = ks + DEC_TILE * (dd + 1);  // [DEC_TILE][dv]
    float* ps = vs + DEC_TILE * dvv;       // [rows][DEC_TILE]
    float* ms = ps + rows * DEC_TILE;      // [rows]: running max
    float* ls = ms + rows;                 // [rows]: running sum
    float* sc = ls + rows;                 // [rows]: this tile's rescale of the accumulators
    const u32 tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
    const u64 b = blockIdx.y / hkv, kvh = blockIdx.y % hkv;
    const u64 begin = (u64)blockIdx.x * chunk;
    u64 stop = 0; // past the last key any row of the group sees
    for (u32 r = 0; r < rows; ++r) {
        const u64 vis = visible_keys(lens, b, r % sq, sq, sk, causal);
        stop = vis > stop ? vis : stop;
    }
    stop = begin + chunk < stop ? begin + chunk : stop;
    for (u32 e = tid; e < rows * dd; e += blockDim.x) {
        const u32 r = e / dd, c = e - r * dd;
        const u64 h = kvh * group + r / sq, i = r % sq;
        qs[e] = load_elem(q, lay.q.offset + b * lay.q.batch + h * lay.q.head + i * lay.q.seq + c,
                          elem) *
                scale;
    }
    for (u32 r = tid; r < rows; r += blockDim.x) {
        ms[r] = NEG_INF;
        ls[r] = 0.0f;
    }
    float acc[DEC_ACC];
#pragma unroll
    for (u32 t = 0; t < DEC_ACC; ++t) acc[t] = 0.0f;
    const u64 kbase = lay.k.offset + b * lay.k.batch + kvh * lay.k.head;
    const u64 vbase = lay.v.offset + b * lay.v.batch + kvh * lay.v.head;
    const float* kb = (const float*)k + kbase;
    const float* vb = (const float*)v + vbase;
    const unsigned short* kh = (const unsigned short*)k + kbase;
    const unsigned short* vh = (const unsigned short*)v + vbase;
    // Vector staging where every row starts on 16 bytes (f32) or 8 bytes (4 halves).
    const bool k4 = elem == 0 && dd % 4 == 0 && lay.k.seq % 4 == 0 && ((size_t)kb & 15) == 0;
    const bool v4 = elem == 0 && dvv % 4 == 0 && lay.v.seq % 4 == 0 && ((size_t)vb & 15) == 0;
    const bool kh4 = elem != 0 && dd % 4 == 0 && lay.k.seq % 4 == 0 && ((size_t)kh & 7) == 0;
    const bool vh4 = elem != 0 && dvv % 4 == 0 && lay.v.seq % 4 == 0 && ((size_t)vh & 7) == 0;
    const auto halves4 = [&](uint2 x, float* dst) {
        const u32 w[4] = {x.x & 0xffffu, x.x >> 16, x.y & 0xffffu, x.y >> 16};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            dst[j] = elem == 1 ? f16_float((unsigned short)w[j]) : bf16_float((unsigned short)w[j]);
        }
    };
    // A tile's vectors (4 values each) are loaded DEC_BATCH a thread at a time, all issued
    // before any is stored, so a tile costs one memory latency rather than one a vector.
    const u32 d4 = dd / 4, dv4 = dvv / 4;
    __syncthreads();
    for (u64 t0 = begin; t0 < stop; t0 += DEC_TILE) {
        const u32 n = stop - t0 < DEC_TILE ? (u32)(stop - t0) : DEC_TILE;
        const u32 nk = (k4 || kh4) ? n * d4 : 0, nv = (v4 || vh4) ? n * dv4 : 0;
        for (u32 e0 = 0; e0 < (nk > nv ? nk : nv); e0 += DEC_BATCH * blockDim.x) {
            // Raw words: a float4, or 4 halves in .x and .y.
            uint4 kr[DEC_BATCH], vr[DEC_BATCH];
            const auto fetch = [&](const void* base, bool h, u64 at) {
                uint4 x;
                if (h) {
                    const uint2 y = *reinterpret_cast<const uint2*>((const unsigned short*)base + at);
                    x = make_uint4(y.x, y.y, 0u, 0u);
                } else {
                    x = *reinterpret_cast<const uint4*>((const float*)base + at);
                }
                return x;
            };
            const auto put = [&](uint4 x, bool h, float* dst) {
                if (h) {
                    halves4(make_uint2(x.x, x.y), dst);
                } else {
                    dst[0] = __uint_as_float(x.x);
                    dst[1] = __uint_as_float(x.y);
                    dst[2] = __uint_as_float(x.z);
                    dst[3] = __uint_as_float(x.w);
                }
            };
#pragma unroll
            for (u32 j = 0; j < DEC_BATCH; ++j) {
                const u32 e = e0 + tid + j * blockDim.x;
                if (e < nk) {
                    const u32 r = e / d4, c = (e - r * d4) * 4;
                    kr[j] = fetch(kh4 ? (const void*)kh : (const void*)kb, kh4, (t0 + r) * lay.k.seq + c);
                }
                if (e < nv) {
                    const u32 r = e / dv4, c = (e - r * dv4) * 4;
                    vr[j] = fetch(vh4 ? (const void*)vh : (const void*)vb, vh4, (t0 + r) * lay.v.seq + c);
                }
            }
#pragma unroll
            for (u32 j = 0; j < DEC_BATCH; ++j) {
                const u32 e = e0 + tid + j * blockDim.x;
                if (e < nk) {
                    const u32 r = e / d4, c = (e - r * d4) * 4;
                    put(kr[j], kh4, ks + r * (dd + 1) + c);
                }
                if (e < nv) {
                    const u32 r = e / dv4, c = (e - r * dv4) * 4;
                    put(vr[j], vh4, vs + r * dvv + c);
                }
            }
        }
        if (!(k4 || kh4)) {
            for (u32 e = tid; e < n * dd; e += blockDim.x) {
                const u32 r = e / dd, c = e - r * dd;
                ks[r * (dd + 1) + c] = load_elem(k, kbase + (t0 + r) * lay.k.seq + c, elem);
            }
        }
        if (!(v4 || vh4)) {
            for (u32 e = tid; e < n * dvv; e += blockDim.x) {
                const u32 r = e / dvv, c = e - r * dvv;
                vs[e] = load_elem(v, vbase + (t0 + r) * lay.v.seq + c, elem);
            }
        }
        __syncthreads();
        for (u32 r = warp; r < rows; r += warps) {
            const u64 vis = visible_keys(lens, b, r % sq, sq, sk, causal);
            float s = NEG_INF;
            if (lane < n && t0 + lane < vis) {
                const float* qr = qs + r * dd;
                const float* kr = ks + lane * (dd + 1);
                // Four partial sums, so the products do not wait on one another.
                float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
                u32 c = 0;
                for (; c + 4 <= dd; c += 4) {
                    d0 += qr[c] * kr[c];
                    d1 += qr[c + 1] * kr[c + 1];
                    d2 += qr[c + 2] * kr[c + 2];
                    d3 += qr[c + 3] * kr[c + 3];
                }
                for (; c < dd; ++c) d0 += qr[c] * kr[c];
                s = (d0 + d1) + (d2 + d3);
            }
            const float mo = ms[r];
            const float mn = nan_max(mo, warp_max(s));
            const float p = mn == NEG_INF ? 0.0f : expf(s - mn);
            const float lt = warp_sum(p);
            ps[r * DEC_TILE + lane] = p;
            if (lane == 0) {
                const float f = mo == NEG_INF ? 0.0f : expf(mo - mn);
                ms[r] = mn;
                ls[r] = ls[r] * f + lt;
                sc[r] = f;
            }
        }
        __syncthreads();
#pragma unroll
        for (u32 t = 0; t < DEC_ACC; ++t) {
            const u32 idx = tid + t * blockDim.x;
            if (idx < rows * dvv) {
                const u32 r = idx / dvv, c = idx - r * dvv;
                const float* pr = ps + r * DEC_TILE;
                float a = acc[t] * sc[r];
                for (u32 j = 0; j < n; ++j) a += pr[j] * vs[j * dvv + c];
                acc[t] = a;
            }
        }
        __syncthreads();
    }
    const bool whole = gridDim.x == 1;
#pragma unroll
    for (u32 t = 0; t < DEC_ACC; ++t) {
        const u32 idx = tid + t * blockDim.x;
        if (idx < rows * dvv) {
            const u32 r = idx / dvv, c = idx - r * dvv;
            const u64 h = kvh * group + r / sq, i = r % sq, row = (b * hq + h) * sq + i;
            if (whole) {
                const u64 vis = visible_keys(lens, b, i, sq, sk, causal);
                const u64 o = (lay.out_bshd ? (b * sq + i) * hq + h : row) * dv + c;
                store_elem(out, o, elem,
                           vis == 0 ? 0.0f : (ms[r] == NEG_INF ? QNAN : acc[t] / ls[r]));
            } else {
                partial[(row * gridDim.x + blockIdx.x) * (dv + 2) + 2 + c] = acc[t];
            }
        }
    }
    if (!whole) {
        for (u32 r = tid; r < rows; r += blockDim.x) {
            const u64 h = kvh * group + r / sq, i = r % sq, row = (b * hq + h) * sq + i;
            float* part = partial + (row * gridDim.x + blockIdx.x) * (dv + 2);
            part[0] = ms[r];
            part[1] = ls[r];
        }
    }
}

// Joins the partials of attention_split, attention_decode and attention_rows (value widths up
// to 256): a block of MERGE_WARPS warps takes 32 columns of one query row (grid y: the
// column groups), a lane a column. Warp w folds splits w, w + MERGE_WARPS, ... in batches of
// MERGE_BATCH, every load of a batch issued before any is used (64 splits: one batch), keeping
// a running maximum, sum and weighted column; the warps' results join in shared memory. Four
// blocks a row at width 128 rather than one: on an H200 the one-block merge took about 4 us
// of A3's call.
#define MERGE_WARPS 8
#define MERGE_BATCH 8
extern "C" __global__ void __launch_bounds__(256) attention_merge(
    AttnLayout lay, const float* __restrict__ partial, const u32* __restrict__ lens, u64 hq,
    u64 sq, u64 sk, u64 dv, u32 causal, u64 splits, u32 elem, void* __restrict__ out) {
    WAIT_PRIOR();
    __shared__ float sm[MERGE_WARPS][2 + 32];
    const u32 tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const u64 row = blockIdx.x, i = row % sq, bh = row / sq, b = bh / hq, h = bh % hq;
    const u64 col = (u64)blockIdx.y * 32 + lane;
    const bool live = col < dv;
    const u64 visible = visible_keys(lens, b, i, sq, sk, causal);
    const float* part = partial + row * splits * (dv + 2);
    const u64 o = (lay.out_bshd ? (b * sq + i) * hq + h : bh * sq + i) * dv;
    float mm = NEG_INF, ll = 0.0f, a = 0.0f;
    for (u64 s0 = warp; s0 < splits; s0 += MERGE_WARPS * MERGE_BATCH) {
        float ms[MERGE_BATCH], ls[MERGE_BATCH], xs[MERGE_BATCH];
#pragma unroll
        for (u32 j = 0; j < MERGE_BATCH; ++j) {
            const u64 s = s0 + j * MERGE_WARPS;
            const float* ps = part + s * (dv + 2);
            ms[j] = s < splits ? ps[0] : NEG_INF;
            ls[j] = s < splits ? ps[1] : 0.0f;
            xs[j] = s < splits && live ? ps[2 + col] : 0.0f;
        }
        float mb = mm;
#pragma unroll
        for (u32 j = 0; j < MERGE_BATCH; ++j) mb = nan_max(mb, ms[j]);
        const float f = mm == NEG_INF ? 0.0f : expf(mm - mb);
        ll *= f;
        a *= f;
#pragma unroll
        for (u32 j = 0; j < MERGE_BATCH; ++j) {
            const float w = (mb == NEG_INF || ms[j] == NEG_INF) ? 0.0f : expf(ms[j] - mb);
            if (w != 0.0f) {
                ll += w * ls[j];
                a += w * xs[j];
            }
        }
        mm = mb;
    }
    if (lane == 0) {
        sm[warp][0] = mm;
        sm[warp][1] = ll;
    }
    sm[warp][2 + lane] = a;
    __syncthreads();
    if (warp != 0 || !live) return;
    float m_all = NEG_INF, l_all = 0.0f, t = 0.0f;
#pragma unroll
    for (u32 w = 0; w < MERGE_WARPS; ++w) m_all = nan_max(m_all, sm[w][0]);
#pragma unroll
    for (u32 w = 0; w < MERGE_WARPS; ++w) {
        const float f = (m_all == NEG_INF || sm[w][0] == NEG_INF) ? 0.0f : expf(sm[w][0] - m_all);
        if (f != 0.0f) {
            l_all += f * sm[w][1];
            t += f * sm[w][2 + lane];
        }
    }
    store_elem(out, o + col, elem, visible == 0 ? 0.0f : (m_all == NEG_INF ? QNAN : t / l_all));
}
