//! The operations, one file per family. Each op validates its input here, in one place, and
//! then dispatches to the tensor's backend; backends never see a malformed request.
//!
//! A family's name is the same in every tree: `src/ops/<family>.rs`,
//! `src/backend/wgpu/kernels/<family>.rs`, `shaders/<family>*.wgsl`,
//! `shaders/cuda/<family>.cu`, `src/backend/cpu/<family>.rs` and
//! `tests/common/suite/<family>.rs` (ARCHITECTURE.md has the index).

pub mod attention;
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

pub use attention::AttentionOptions;
pub use conv::Conv2dOptions;
pub use elementwise::{BinaryOp, UnaryOp};
pub use matmul::{Activation, MatmulOptions, MatmulTile, Precision};
pub use pool::Pool2dOptions;
pub use reduce::ReduceOp;
pub use rope::RopeLayout;
