//! How the attention kernels group query rows and keys per workgroup.

/// How attention.wgsl groups query rows per workgroup, by head width (d and dv).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum AttentionBlocks {
    /// `main`, one row: a few query rows, heads over 128 wide, or adapters without the
    /// workgroup memory `Flash` needs.
    Row,
    /// `main_flash`, register tiles: heads up to `width` wide (32, 64 or 128), in blocks of
    /// `tile` (the most query rows the adapter's workgroup memory holds, then the larger key
    /// tile; see [`flash_tile`]). With `split` > 0 (a multiple of 64 keys) each workgroup takes one chunk
    /// of `split` keys of its block and writes partials for `Merge { keys: split }`: a grid of
    /// few blocks then fills the GPU (see [`flash_split`]).
    Flash {
        split: u16,
        width: u8,
        tile: FlashTile,
    },
    /// `main_split` (attention_split.wgsl): a chunk of keys ([`split_chunk`]) of one KV head
    /// for all the query rows that read it (decoding: the GQA group times sq, at most 8,
    /// rounded up to `rows`, a power of two), writing partials; q, k and v stored as `kv`
    /// ([`kv_code`]). With `k_vec4` every key row starts at a multiple of 16 bytes and the
    /// kernel loads keys 4 words at a time.
    Split { rows: u8, kv: u8, k_vec4: bool },
    /// `main_merge`: a row's partials folded into its output (stored as `kv`), each partial
    /// covering `keys` keys (`Split`'s chunk, or `Flash`'s split).
    Merge { keys: u16, kv: u8 },
}

impl AttentionBlocks {
    /// Query rows per workgroup.
    pub(crate) fn rows(self) -> u64 {
        match self {
            AttentionBlocks::Flash { tile, .. } => u64::from(tile.rows()),
            _ => 1,
        }
    }

    /// The keys of a split flash grid's chunks (0: not split).
    pub(crate) fn split_keys(self) -> u16 {
        match self {
            AttentionBlocks::Flash { split, .. } => split,
            _ => 0,
        }
    }
}

/// attention_split.wgsl's KV override for operands stored as `dtype`: 0 f32, 1 f16, 2 bf16.
/// Always 0 in the browser build, whose split kernel is left out (its merge then writes f32
/// only), so that build's code for halves folds away.
pub(crate) fn kv_code(dtype: crate::DType) -> u8 {
    if cfg!(web) {
        return 0;
    }
    match dtype {
        crate::DType::F16 => 1,
        crate::DType::BF16 => 2,
        _ => 0,
    }
}

/// Keys a `Split` workgroup takes, by how the cache is stored (`kv`): 256 of f32 (a key an
/// invocation), 128 of halves (two invocations a key). On an H200, A3 (32 heads over 8 KV
/// heads x 4096 x 128) took 35-36 us in f32 with 256, 37-38 with 128 and 45 with 64, and
/// 40 us in f16 with 128, 47-49 with 256 or 64 (BENCHMARKS.md, "Split decode attention over
/// halves as stored").
pub(crate) fn split_chunk(kv: u8) -> u16 {
    if kv == 0 {
        256
    } else {
        128
    }
}

/// Key words a `Split` invocation loads before their products, by how the cache is stored
/// (`kv`): 16 of f32, 8 of halves. On an H200 with key rows at 16-byte multiples (vec4 loads),
/// A3 took 23.7-23.9 us in f32 with 16 and 24.8-26.1 with 8, and 34.1-34.5 us in f16 with 8
/// and 42.5-43.2 with 16 (BENCHMARKS.md, "Split decode attention: vector key loads").
pub(crate) fn split_key_words(kv: u8) -> u8 {
    if kv == 0 {
        16
    } else {
        8
    }
}

/// The head width `main_flash` is compiled for that holds heads `width` wide (`d.max(dv)`), or
/// None above 128.
pub(crate) fn flash_width(width: u64) -> Option<u8> {
    match width {
        0..=32 => Some(32),
        33..=64 => Some(64),
        65..=128 => Some(128),
        _ => None,
    }
}

/// A `main_flash` workgroup's block: `rows` query rows (16, 32 or 64), tiles of `keys` keys (16
/// or 32), and with `share` the value tile stored where the key tile was once the tile's
/// scores are taken. Packed in one byte (rows / 16 in bits 0-2, keys / 16 in bits 3-4, share
/// in bit 5): a `Kernel`, which every dispatch hashes and compares, then stays as small as it
/// was, and the browser package too (a field more cost it 0.4 KB gzipped).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FlashTile(u8);

impl FlashTile {
    /// The block of `rows` and `keys` (multiples of 16: rows up to 64, keys up to 32).
    pub(crate) const fn new(rows: u8, keys: u8, share: bool) -> FlashTile {
        FlashTile((rows / 16) | ((keys / 16) << 3) | ((share as u8) << 5))
    }

    /// Query rows a workgroup.
    pub(crate) const fn rows(self) -> u8 {
        (self.0 & 7) * 16
    }

    /// Keys a tile.
    pub(crate) const fn keys(self) -> u8 {
        ((self.0 >> 3) & 3) * 16
    }

    /// Whether the value tile shares the key tile's memory.
    pub(crate) const fn share(self) -> bool {
        self.0 & 32 != 0
    }
}

impl std::fmt::Debug for FlashTile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let share = if self.share() { " shared" } else { "" };
        write!(f, "{}x{}{share}", self.rows(), self.keys())
    }
}

/// The block of a `main_flash` workgroup compiled for `width` within `storage` bytes of
/// workgroup memory, or None when 16 rows do not fit: the most query rows (64, 32 or 16), then
/// the larger key tile (32 or 16, natively; see [`FLASH_KEYS`]) at those rows, each with a
/// value tile of its own where that fits and natively, where only that fits, with the values
/// over the key tile (`share`). Native Vulkan on NVIDIA (48 KB) takes 64 rows and 32 keys at
/// widths up to 64 and 64 rows, 16 keys, shared, at 128; a native adapter with 32 KB
/// (lavapipe) 64 and 32 at width 32, 64 and 16 at 64, 32 and 16 shared at 128. In the
/// browser, 48 KB (Dawn on NVIDIA) gives 64 rows at widths up to 64 and 32 at 128, 32 KB 64,
/// 64 and 16, and WebGPU's default 16 KB 32 rows at width 32, 16 at 64, and the row kernel at
/// 128. Rows come first: at width 128 on an H200, 64 rows over a shared tile ran A2 (32 heads x
/// 2048 x 128) 2.5x faster than 32 rows with a tile each, and 32 rows with 32 shared keys
/// 1.1x slower (BENCHMARKS.md, "Values over the key tile"); 32-key tiles halve a block's
/// barriers (A1 4096 11% faster).
pub(crate) fn flash_tile(width: u8, storage: u32) -> Option<FlashTile> {
    for rows in [64, 32, 16] {
        for &keys in FLASH_KEYS {
            // An invocation prefetches keys x width / (2 rows) keys and as many values into
            // private arrays of 64.
            if u32::from(keys) * u32::from(width) > 128 * u32::from(rows) {
                continue;
            }
            for &share in FLASH_SHARE {
                let tile = FlashTile::new(rows, keys, share);
                if flash_workgroup_bytes(width, tile) <= storage {
                    return Some(tile);
                }
            }
        }
    }
    None
}

/// The key tiles `flash_tile` tries, the larger first. The browser build takes 16 only:
/// through Dawn (Chrome's WebGPU) on an H200, 32-key tiles made A1 (16 heads x 2048 x 64) 5-7%
/// slower, where native Vulkan on the same GPU ran 12-16% faster with them (BENCHMARKS.md,
/// "32-key tiles").
const FLASH_KEYS: &[u8] = if cfg!(web) { &[16] } else { &[32, 16] };

/// Whether `flash_tile` tries a value tile of its own, then one over the key tile's memory.
/// The browser build keeps its own: the shared tile (whose values are loaded later in a
/// tile's steps) has not been measured through Dawn, whose timings moved against native
/// Vulkan's before (see [`FLASH_KEYS`]).
const FLASH_SHARE: &[bool] = if cfg!(web) { &[false] } else { &[false, true] };

/// Workgroup memory `main_flash` declares (q^T, the key tile transposed, the probabilities,
/// the value tile unless shared, the rows' shares and the visible count): with 16-key tiles
/// 30 KB at width 64 and 64 rows, 35 KB at 128 and 32, 25.5 KB at 128 and 16; with 32-key
/// tiles 43 KB at 64 and 64.
pub(crate) fn flash_workgroup_bytes(width: u8, tile: FlashTile) -> u32 {
    let (d, rows, keys) = (
        u32::from(width),
        u32::from(tile.rows()),
        u32::from(tile.keys()),
    );
    // A shared tile leaves `fv` one vec4 long.
    let values = if tile.share() { 4 } else { keys * d };
    (d * rows + keys * d + values + keys * rows + rows * 8) * 4 + 4
}

/// Workgroups from which `main_flash` takes its blocks whole: about two for each SM of the
/// largest GPUs (132 on an H100). WebGPU does not tell how many SMs an adapter has; a smaller
/// GPU runs a split grid in more waves, which costs it only the merge.
const FLASH_FULL_GRID: u64 = 256;

/// Workgroups a split grid aims at: four for each SM of the largest GPUs. On an H200 over
/// Vulkan SmolLM2's prompt attention took 106 us aiming at 256 (chunks of 128 keys) and 100 us
/// aiming at 512 or 1024 (chunks of 64), against 175 us unsplit (BENCHMARKS.md, A4).
const FLASH_SPLIT_GRID: u64 = 512;

/// The keys a chunk of `main_flash`'s split takes for a grid of `blocks` workgroups (blocks of
/// 64 rows x heads x batch) over `sk` keys, or 0 to take each block whole: a grid of fewer
/// than `FLASH_FULL_GRID` workgroups splits its keys into chunks of 64, 128, 256, ... keys,
/// the smallest power of two that brings it to `FLASH_SPLIT_GRID` workgroups, so that a short
/// prompt's few heads (SmolLM2's 512 tokens: 8 blocks x 9 heads) keep every SM busy.
pub(crate) fn flash_split(blocks: u64, sk: u64) -> u16 {
    if blocks == 0 || blocks >= FLASH_FULL_GRID {
        return 0;
    }
    let splits = FLASH_SPLIT_GRID.div_ceil(blocks);
    let keys = sk.div_ceil(splits).next_power_of_two().max(64);
    if keys >= sk || keys > u64::from(u16::MAX) {
        return 0;
    }
    keys as u16
}
