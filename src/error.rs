//! The one error type of the crate.
//!
//! Every variant says what went wrong and what the caller can do about it. Library code never
//! panics on bad input; it returns one of these. At the wasm boundary they become JS `Error`s.

use crate::Backend;

/// `Result<T, gpukit::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in gpukit.
///
/// Match on the variant, or use the `is_*` predicates when only the category matters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No adapter of any usable backend was found (and the CPU fallback was not allowed).
    #[cfg_attr(not(web), error("no GPU adapter found: {reason}. Install a Vulkan, Metal or DX12 driver (on Linux without a GPU, Mesa's lavapipe: `apt-get install mesa-vulkan-drivers`), or choose the CPU backend"))]
    #[cfg_attr(web, error("no GPU adapter found: {reason}. Choose the CPU backend"))]
    NoAdapter {
        /// What the search found instead.
        reason: String,
    },

    /// The backend that was asked for explicitly cannot run here.
    #[cfg_attr(not(web), error("backend {backend} is not available: {reason}. Choose another backend (`gpukit backends` lists them) or unset GPUKIT_BACKEND for automatic selection"))]
    #[cfg_attr(
        web,
        error("backend {backend} is not available: {reason}. Choose another backend, or \"auto\"")
    )]
    BackendUnavailable {
        /// The backend that was asked for.
        backend: Backend,
        /// Why it cannot run.
        reason: String,
    },

    /// A backend name that gpukit does not know (in `GPUKIT_BACKEND` or a string given to it).
    #[error("unknown backend {name:?}: expected one of auto, vulkan, metal, dx12, gl, webgpu, cuda, cpu")]
    UnknownBackend {
        /// The name that was given.
        name: String,
    },

    /// Two shapes that an operation needs to agree do not.
    #[error("shape mismatch in {op}: {lhs:?} and {rhs:?} {hint}")]
    ShapeMismatch {
        /// The operation.
        op: &'static str,
        /// The first shape.
        lhs: Vec<usize>,
        /// The second shape.
        rhs: Vec<usize>,
        /// What would be accepted.
        hint: &'static str,
    },

    /// An operation that needs at least one element got none.
    #[error("{op} of an empty tensor (shape {shape:?}) has no value: check for empty input before calling it")]
    Empty {
        /// The operation.
        op: &'static str,
        /// The empty shape.
        shape: Vec<usize>,
    },

    /// A tensor or a dispatch is larger than a limit of the device.
    #[error("{what} needs {needed} but the device's {limit} is {max}: split the work into smaller tensors, or use a device with larger limits")]
    LimitExceeded {
        /// What was too large.
        what: String,
        /// The name of the limit (as wgpu / WebGPU names it).
        limit: &'static str,
        /// What was needed.
        needed: u64,
        /// The device's maximum.
        max: u64,
    },

    /// An argument that no shape or size problem explains (a NaN clip bound, a zero-sized axis...).
    #[error("invalid argument to {op}: {reason}")]
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// What is wrong with the argument.
        reason: String,
    },

    /// Two tensors on different devices were combined.
    #[error("tensors on different devices were combined in {op}: move one of them with `to_device` first")]
    DeviceMismatch {
        /// The operation.
        op: &'static str,
    },

    /// The device ran out of memory.
    #[error("out of device memory: {detail}. Drop tensors you no longer need, call `Device::release_cached_memory`, or work on smaller pieces")]
    OutOfMemory {
        /// What the driver said.
        detail: String,
    },

    /// The device was lost (driver reset, removed GPU, `destroy`).
    #[error("the device was lost: {reason}. Create a new Device; tensors of the lost one cannot be used")]
    DeviceLost {
        /// Why, as the driver reported it.
        reason: String,
    },

    /// A shader failed to compile on this device. This is a gpukit bug or a driver bug.
    #[cfg_attr(
        not(web),
        error("shader {shader} failed to compile: {detail}. Please report it with `gpukit info --json`")
    )]
    #[cfg_attr(
        web,
        error("shader {shader} failed to compile: {detail}. Please report it")
    )]
    ShaderCompilation {
        /// The shader file.
        shader: &'static str,
        /// The compiler's message.
        detail: String,
    },

    /// Verification mode ([`crate::Device::with_verification`]) found an op whose result differs
    /// from the CPU backend's beyond the op's tolerance.
    #[error("verification failed: {op} on {backend} differs from the CPU backend for inputs of shapes {shapes:?}: {detail}. The device or its driver computes this op wrongly: report it with `gpukit info --json` and use another backend meanwhile")]
    Verification {
        /// The op.
        op: &'static str,
        /// The backend that computed it.
        backend: Backend,
        /// The shapes of its inputs.
        shapes: Vec<Vec<usize>>,
        /// The first element out of tolerance.
        detail: String,
    },

    /// The backend rejected a command (a wgpu validation error or a driver error).
    #[cfg_attr(not(web), error("the {backend} backend rejected a command: {detail}. Please report it with `gpukit info --json`"))]
    #[cfg_attr(
        web,
        error("the {backend} backend rejected a command: {detail}. Please report it")
    )]
    Backend {
        /// Which backend.
        backend: Backend,
        /// The backend's message.
        detail: String,
    },
}

impl Error {
    /// No adapter, or an unavailable or unknown backend: choose another backend.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Error::NoAdapter { .. }
                | Error::BackendUnavailable { .. }
                | Error::UnknownBackend { .. }
        )
    }

    /// Bad input from the caller: fix the arguments.
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            Error::ShapeMismatch { .. }
                | Error::Empty { .. }
                | Error::InvalidArgument { .. }
                | Error::DeviceMismatch { .. }
        )
    }

    /// A device limit or memory: make the work smaller.
    pub fn is_resource(&self) -> bool {
        matches!(
            self,
            Error::LimitExceeded { .. } | Error::OutOfMemory { .. }
        )
    }

    /// The device is gone: create a new one.
    pub fn is_device_lost(&self) -> bool {
        matches!(self, Error::DeviceLost { .. })
    }

    pub(crate) fn shape(
        op: &'static str,
        lhs: &[usize],
        rhs: &[usize],
        hint: &'static str,
    ) -> Self {
        Error::ShapeMismatch {
            op,
            lhs: lhs.to_vec(),
            rhs: rhs.to_vec(),
            hint,
        }
    }
}
