//! The runtime's error type. Device errors are converted at the device boundary and name the
//! device and, for a fault, the kernel and its code.

use poot_bundle::BundleError;

/// What a device reported.
#[derive(Clone, Debug, thiserror::Error, PartialEq)]
pub enum DeviceError {
    /// A kernel check failed (a trap), or an access left its binding.
    #[error("kernel `{kernel}` faulted with code {code}: {detail}")]
    Fault {
        /// The kernel.
        kernel: String,
        /// Its trap code.
        code: u32,
        /// What happened.
        detail: String,
    },
    /// The device or its context is lost; nothing more can run on it.
    #[error("device lost: {0}")]
    Lost(String),
    /// A wait outlasted its bound.
    #[error("device did not finish within {0:?}")]
    Timeout(std::time::Duration),
    /// The device cannot be used here (no driver library, no device).
    #[error("device unavailable: {0}")]
    Unavailable(String),
    /// Anything else the driver refused, with its message.
    #[error("{0}")]
    Other(String),
}

impl DeviceError {
    /// True when the context cannot be used again.
    pub fn poisons(&self) -> bool {
        matches!(self, DeviceError::Lost(_) | DeviceError::Timeout(_))
    }
}

/// What went wrong in the runtime.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The bundle was refused.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// The device failed; `device` names it.
    #[error("{device}: {source}")]
    Device {
        /// The device.
        device: String,
        /// What it reported.
        source: DeviceError,
    },
    /// An earlier device failure poisoned the context; nothing runs on it again.
    #[error("the executor is poisoned by an earlier failure ({0}); create a new one")]
    Poisoned(String),
    /// A step failed after replay; the state must be reset before the next step.
    #[error("a previous step failed ({0}); call reset_state before stepping again")]
    NeedsReset(String),
    /// The caller broke the contract (unknown entry, wrong slot data, no weights loaded).
    #[error("{0}")]
    Usage(String),
    /// Text in or out failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A prompt does not fit.
    #[error(
        "prompt of {prompt} tokens plus {new} new tokens exceeds the cache capacity of {cap} positions"
    )]
    PromptTooLong {
        /// Prompt tokens.
        prompt: usize,
        /// Tokens to generate.
        new: usize,
        /// Cache capacity.
        cap: usize,
    },
}

/// Result alias for the runtime.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
