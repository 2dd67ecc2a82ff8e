//! poot-compiler: checkpoint readers, model families, graph passes and the CPU oracle.
pub mod compile;
mod error;
pub mod families;
pub mod load;
pub mod lower;
pub mod oracle;
pub mod passes;
pub mod plan;
pub mod tiny;
pub mod tokenizer;
pub use error::{CompileError, Result};
