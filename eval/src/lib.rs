//! poot-eval: the CPU reference every device result is checked against.
//!
//! `eval(&graph, &inputs, EvalOptions) -> Evaluation` walks a verified graph once, in node
//! order, in f32 (integers for index work). The floating-point order of every op is part of
//! its documented semantics (see `ops`), so two evaluations of equal graphs on equal inputs
//! are bit-identical, and device kernels can state a tolerance derived from how far they
//! reassociate from it. Generation never calls this crate; tests and device checks do.

#![deny(missing_docs)]

pub mod dequant;
mod error;
mod eval;
pub mod ops;
mod tensor;

pub use error::{EvalError, Result};
pub use eval::{EvalOptions, Evaluation, Inputs, eval};
pub use tensor::{Data, Tensor, WeightView, broadcast_index};
