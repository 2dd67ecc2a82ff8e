//! The evaluator's error type.

use crate::Tensor;
use poot_ir::Value;

/// What went wrong while evaluating a graph.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// An input is missing or does not match the graph's declaration.
    #[error("bad input: {0}")]
    Input(String),
    /// An index read from the data is out of range (gather id, update start, scatter row).
    #[error("index out of range: {0}")]
    Index(String),
    /// An operand has a dtype the op cannot evaluate.
    #[error("{op} cannot evaluate a {ty} operand")]
    DType {
        /// The op.
        op: String,
        /// The operand's type.
        ty: String,
    },
    /// An op failed; `node` is the node in text form.
    #[error("{value}: {source}\n  at: {node}")]
    At {
        /// The failing node.
        value: Value,
        /// The node in text form.
        node: String,
        /// What went wrong.
        source: Box<EvalError>,
    },
}

impl EvalError {
    pub(crate) fn dtype(op: &str, t: &Tensor) -> EvalError {
        EvalError::DType {
            op: op.to_string(),
            ty: t.ty.to_string(),
        }
    }
}

/// Result alias for the evaluator.
pub type Result<T, E = EvalError> = std::result::Result<T, E>;
