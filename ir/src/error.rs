//! The IR's error type.

use crate::Value;

/// What went wrong in building, verifying or parsing a graph.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum IrError {
    /// A node breaks a rule; `node` is its text form.
    #[error("graph `{graph}`: {value}: {msg}\n  at: {node}")]
    Verify {
        /// Graph name.
        graph: String,
        /// The offending node.
        value: Value,
        /// The node in text form.
        node: String,
        /// What is wrong.
        msg: String,
    },
    /// A graph-level rule is broken (outputs, state updates).
    #[error("graph `{graph}`: {msg}")]
    Graph {
        /// Graph name.
        graph: String,
        /// What is wrong.
        msg: String,
    },
    /// The builder was asked for an ill-typed node.
    #[error("cannot build {op}: {msg}")]
    Build {
        /// The op's name.
        op: &'static str,
        /// What is wrong.
        msg: String,
    },
    /// The text form does not parse.
    #[error("line {line}: {msg}\n  {text}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// The line's text.
        text: String,
        /// What is wrong.
        msg: String,
    },
}

/// Result alias for the IR.
pub type Result<T, E = IrError> = std::result::Result<T, E>;
