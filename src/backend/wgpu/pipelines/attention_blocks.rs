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
    /// query rows, where the adapter has the workgroup memory (`FLASH_WORKGROUP_BYTES`).
    Flash,
    /// `main_split` (attention_split.wgsl): a chunk of 256 keys of one KV head for all the
    /// query rows that read it (decoding: the GQA group times sq, at most 8, rounded up to
    /// `rows`, a power of two), writing partials.
    Split { rows: u8 },
    /// `main_merge`: a row's partials from `Split` folded into its output.
    Merge,
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
            AttentionBlocks::Flash => 64,
            AttentionBlocks::Split { .. } | AttentionBlocks::Merge => 1,
        }
    }
}

/// Workgroup memory `main_flash` declares (its key, value and probability tiles and the rows'
/// shares): under the 32 KB browsers give on desktop GPUs.
pub(crate) const FLASH_WORKGROUP_BYTES: u32 =
    32 * 17 * 16 + 32 * 16 * 16 + 64 * 33 * 4 + 256 * 4 + 4;
