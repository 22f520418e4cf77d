//! How the attention kernels group query rows and keys per workgroup.

/// How attention.wgsl groups query rows per workgroup, by head width (d and dv).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum AttentionBlocks {
    /// `main_tiled`, 16 rows: heads up to 64 wide.
    Narrow,
    /// `main_tiled` with WIDE, 8 rows: heads 65-128 wide.
    Wide,
    /// `main`, one row: wider heads.
    Row,
    /// `main_flash`, 64 rows, four invocations a row: heads up to 64 wide with at least 32
    /// query rows, where the adapter has the workgroup memory (`FLASH_WORKGROUP_BYTES`). With
    /// `split` > 0 (a multiple of 32 keys) each workgroup takes one chunk of `split` keys of its
    /// block and writes partials for `Merge { keys: split }`: a grid of few blocks then fills
    /// the GPU (see [`flash_split`]).
    Flash { split: u16 },
    /// `main_split` (attention_split.wgsl): a chunk of 256 keys of one KV head for all the
    /// query rows that read it (decoding: the GQA group times sq, at most 8, rounded up to
    /// `rows`, a power of two), writing partials.
    Split { rows: u8 },
    /// `main_merge`: a row's partials folded into its output, each partial covering `keys`
    /// keys (256 for `Split`'s, the split for `Flash`'s).
    Merge { keys: u16 },
}

impl AttentionBlocks {
    /// The blocking for heads of width `d.max(dv)`.
    pub(crate) fn for_width(width: u64) -> AttentionBlocks {
        match width {
            0..=64 => AttentionBlocks::Narrow,
            65..=128 => AttentionBlocks::Wide,
            _ => AttentionBlocks::Row,
        }
    }

    /// Query rows per workgroup.
    pub(crate) fn rows(self) -> u64 {
        match self {
            AttentionBlocks::Narrow => 16,
            AttentionBlocks::Wide => 8,
            AttentionBlocks::Row => 1,
            AttentionBlocks::Flash { .. } => 64,
            AttentionBlocks::Split { .. } | AttentionBlocks::Merge { .. } => 1,
        }
    }
}

/// Workgroup memory `main_flash` declares (its key, value and probability tiles and the rows'
/// shares): under the 32 KB browsers give on desktop GPUs.
pub(crate) const FLASH_WORKGROUP_BYTES: u32 =
    32 * 17 * 16 + 32 * 16 * 16 + 64 * 33 * 4 + 256 * 4 + 4;

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
