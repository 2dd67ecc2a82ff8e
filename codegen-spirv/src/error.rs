//! The crate's one error type: every variant names the kernel, and the target where the
//! target is what refuses it.

use poot_kir::VerifyError;

/// Why a kernel cannot be rendered as SPIR-V.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpirvError {
    /// The kernel breaks a kir rule.
    #[error("invalid kernel: {0}")]
    Verify(#[from] VerifyError),
    /// The subgroup width the kernel assumes cannot be honoured.
    #[error("kernel `{kernel}`: subgroup width {subgroup} {why} on {target}")]
    Subgroup {
        /// The kernel.
        kernel: String,
        /// The width it declares.
        subgroup: u32,
        /// Why it cannot be honoured.
        why: String,
        /// The target.
        target: String,
    },
    /// The shared arrays (plus the subgroup fallback's scratch) do not fit.
    #[error(
        "kernel `{kernel}`: {bytes} bytes of shared memory exceed the {max} bytes {target} allows"
    )]
    Shared {
        /// The kernel.
        kernel: String,
        /// Bytes it needs, the fallback scratch included.
        bytes: u64,
        /// The target's limit.
        max: u32,
        /// The target.
        target: String,
    },
    /// Too many threads per work-group.
    #[error("kernel `{kernel}`: {threads} threads per work-group exceed the {max} {target} allows")]
    Threads {
        /// The kernel.
        kernel: String,
        /// Threads it declares.
        threads: u32,
        /// The target's limit.
        max: u32,
        /// The target.
        target: String,
    },
    /// Too many storage buffers (the parameters plus the error word buffer).
    #[error(
        "kernel `{kernel}`: {bindings} storage buffers ({params} parameters and the error words) exceed the {max} {target} allows"
    )]
    Bindings {
        /// The kernel.
        kernel: String,
        /// Its parameter count.
        params: usize,
        /// Bindings it needs.
        bindings: usize,
        /// The target's limit.
        max: u32,
        /// The target.
        target: String,
    },
    /// An operation or a target setting this renderer cannot express.
    #[error("kernel `{kernel}`: {what} is not supported on {target}")]
    Unsupported {
        /// The kernel.
        kernel: String,
        /// The operation, with the kir values involved.
        what: String,
        /// The target.
        target: String,
    },
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, SpirvError>;
