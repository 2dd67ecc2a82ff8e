//! The crate's one error type: every variant names the kernel, and the target where the
//! target is what refuses it.

use poot_kir::VerifyError;

/// Why a kernel cannot be rendered as PTX.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PtxError {
    /// The kernel breaks a kir rule.
    #[error("invalid kernel: {0}")]
    Verify(#[from] VerifyError),
    /// The kernel name cannot be a PTX entry name.
    #[error("kernel `{kernel}`: the name is not a PTX identifier")]
    Name {
        /// The kernel.
        kernel: String,
    },
    /// The kernel's subgroup operations assume a width other than the warp.
    #[error("kernel `{kernel}`: subgroup width {subgroup} is not the {target} warp width {warp}")]
    Subgroup {
        /// The kernel.
        kernel: String,
        /// The width it declares.
        subgroup: u32,
        /// The target's warp width.
        warp: u32,
        /// The target (`sm_90`).
        target: String,
    },
    /// The shared arrays do not fit.
    #[error(
        "kernel `{kernel}`: {bytes} bytes of shared memory exceed the {max} bytes {target} allows"
    )]
    Shared {
        /// The kernel.
        kernel: String,
        /// Bytes it declares.
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
    /// Too many parameters.
    #[error(
        "kernel `{kernel}`: {params} parameters need {bytes} bytes, over the {max} bytes {target} allows"
    )]
    Params {
        /// The kernel.
        kernel: String,
        /// Its parameter count.
        params: usize,
        /// Bytes they take.
        bytes: u64,
        /// The target's limit.
        max: u32,
        /// The target.
        target: String,
    },
    /// An operation the target has no instruction for.
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
pub type Result<T> = std::result::Result<T, PtxError>;
