//! The compiler's error type: every refusal names the file, tensor, key or limit at fault.

use std::path::PathBuf;

/// What went wrong while loading, tracing or running a model on the CPU reference.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file ends before a structure it declares.
    #[error("{path}: truncated: {what} needs bytes up to offset {needed}, the file has {len}")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// What was being read.
        what: String,
        /// End offset that was needed.
        needed: u64,
        /// File length.
        len: u64,
    },
    /// The file is not the format it was opened as.
    #[error("{path}: not a {format} file: {detail}")]
    BadFormat {
        /// The file.
        path: PathBuf,
        /// The expected format.
        format: &'static str,
        /// What was found.
        detail: String,
    },
    /// A GGUF version this reader does not know.
    #[error("{path}: GGUF version {version} is not supported (2 and 3 are)")]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version found.
        version: u32,
    },
    /// The checkpoint's architecture has no family here.
    #[error("{path}: unknown architecture `{arch}` (supported: llama, qwen2)")]
    UnknownArchitecture {
        /// The file.
        path: PathBuf,
        /// The architecture named by the file.
        arch: String,
    },
    /// A tensor is stored in a format poot cannot read.
    #[error("{path}: tensor `{tensor}` has unsupported type {kind}")]
    UnsupportedType {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// The type found (GGUF type id and name, or safetensors dtype).
        kind: String,
    },
    /// A metadata key is missing or has the wrong type.
    #[error("{path}: metadata `{key}` {problem}")]
    Metadata {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The family needs a tensor the checkpoint lacks.
    #[error("{path}: missing tensor `{tensor}`")]
    MissingTensor {
        /// The file.
        path: PathBuf,
        /// The tensor name.
        tensor: String,
    },
    /// A tensor's shape is not what the model's dimensions imply.
    #[error("{path}: tensor `{tensor}` has shape {found:?}, expected {expected:?}")]
    TensorShape {
        /// The file.
        path: PathBuf,
        /// The tensor name.
        tensor: String,
        /// The shape implied by the metadata (outermost first).
        expected: Vec<usize>,
        /// The shape in the file (outermost first).
        found: Vec<usize>,
    },
    /// A prompt and its generation do not fit the KV cache.
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
    /// The tokenizer could not be built or failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template could not be rendered.
    #[error("chat template: {0}")]
    Template(String),
    /// The graph has no kernel lowering (names the node).
    #[error("lowering: {0}")]
    Lower(String),
    /// The traced graph was refused.
    #[error(transparent)]
    Ir(#[from] poot_ir::IrError),
    /// The CPU reference failed.
    #[error(transparent)]
    Eval(#[from] poot_eval::EvalError),
}

/// Result alias for the compiler.
pub type Result<T, E = CompileError> = std::result::Result<T, E>;
