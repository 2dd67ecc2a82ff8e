//! poot-compiler: checkpoint readers, model families, graph passes and the CPU oracle.
mod error;
pub mod families;
pub mod load;
pub mod oracle;
pub mod passes;
pub mod tiny;
pub mod tokenizer;
pub use error::{CompileError, Result};
