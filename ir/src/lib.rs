//! poot-ir: the graph IR every step shape is traced into.
//!
//! Design invariants:
//! - Values are typed entity handles (`Value`, printed `v12`); side tables are `SecondaryMap`s.
//! - Every value has a dtype and a fully static shape. Anything that changes per step (token,
//!   position, row count in use) is a `slot` input read on the device, never a graph constant.
//! - Storage is derived from the op: weights by role, carried state by name, slots by kind,
//!   constants, outputs, temporaries. State is read at step start and its new value named by a
//!   state update.
//! - GGUF block formats stay packed in the graph; `matmul` and `gather` dequantize.
//! - The text form round-trips exactly: `print(parse(print(g))) == print(g)`.

#![deny(missing_docs)]

mod builder;
mod dtype;
mod error;
mod graph;
mod op;
mod parse;
mod print;
mod types;
mod verify;

pub use builder::Builder;
pub use dtype::{ALL_DTYPES, DType};
pub use error::{IrError, Result};
pub use graph::{Graph, Node, Storage, Value};
pub use op::{
    BinaryOp, CmpOp, F32Bits, Op, ReduceOp, RoleKind, RopeLayout, Scalar, SlotKind, UnaryOp,
    WeightRole,
};
pub use parse::{parse, parse_type};
pub use print::{node_text, print, role_text};
pub use types::{Shape, Type};
pub use verify::verify;
