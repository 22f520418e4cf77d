//! The operations, one file per family. Each op validates its input here, in one place, and
//! then dispatches to the tensor's backend; backends never see a malformed request.

pub mod attention;
pub mod conv;
pub mod elementwise;
pub mod embed;
pub(crate) mod fused;
pub mod layout;
pub mod matmul;
pub mod norm;
pub mod reduce;
pub mod select;
pub mod softmax;

pub use attention::AttentionOptions;
pub use conv::{Conv2dOptions, Pool2dOptions};
pub use elementwise::{BinaryOp, UnaryOp};
pub use embed::RopeLayout;
pub use matmul::{Activation, MatmulOptions, MatmulTile, Precision};
pub use reduce::ReduceOp;
