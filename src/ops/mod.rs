//! The operations, one file per family. Each op validates its input here, in one place, and
//! then dispatches to the tensor's backend; backends never see a malformed request.
//!
//! A family's name is the same in every tree: `src/ops/<family>.rs`,
//! `src/backend/wgpu/kernels/<family>.rs`, `shaders/<family>*.wgsl`,
//! `shaders/cuda/<family>.cu`, `src/backend/cpu/<family>.rs` and
//! `tests/common/suite/<family>.rs` (ARCHITECTURE.md has the index).

use crate::profile::Work;

/// The parameters of one op, as one struct goes from `ops/` through `BackendImpl` to every
/// backend; the storages (and host data such as token ids) travel beside it.
pub(crate) trait OpSpec {
    /// The op's name in profiles.
    fn name(&self) -> &'static str;
    /// What it reads, writes and computes (the one place each op's formula lives).
    fn work(&self) -> Work;
}

pub mod attention;
pub(crate) mod cast;
pub mod compare;
pub mod conv;
pub mod elementwise;
pub mod embedding;
pub(crate) mod fused;
pub mod layout;
pub mod matmul;
pub mod norm;
pub mod pool;
pub mod quant;
pub mod reduce;
pub mod rope;
pub mod softmax;
pub mod topk;

pub use attention::{AttentionLayout, AttentionOptions};
pub use compare::CompareOp;
pub use conv::Conv2dOptions;
pub use elementwise::{BinaryOp, UnaryOp};
pub use matmul::{Activation, MatmulOptions, MatmulTile, Precision};
pub use pool::Pool2dOptions;
pub use reduce::ReduceOp;
pub use rope::RopeLayout;
