//! poot-kir: the target-neutral kernel IR every renderer and the reference device consume.
//!
//! Design invariants:
//! - A kernel is structured (`if`, `for`; no gotos) and SSA: values are typed handles
//!   (`Val`, printed `%3`) defined once; loops carry values explicitly.
//! - It is explicit about what GPUs care about: work-group size, the subgroup width its
//!   subgroup operations assume, shared arrays, the lane count of every load and store,
//!   barriers, atomics (optionally returning the old value), a device-scope fence, prefetch
//!   hints, `trap(code)`, and where it waits for the previous dispatch (`GridWait`, with the
//!   parameters it may read before: a kernel can load its weights while the dispatch before
//!   it still runs).
//! - Target-neutral does not mean lowest common denominator: `clustered` holds two forms of
//!   one computation, with thread-block clusters (cluster arrivals and waits, stores into
//!   another work-group's shared memory) and without, binding the same parameters, and each
//!   renderer emits the form its capabilities allow (`without_clusters` gives the other, with
//!   only the shared arrays that form uses), so one plan serves every target. `matrix` does the
//!   same for subgroup matrix multiply-accumulate (`mma`, tensor cores; `without_matrix`).
//! - Buffers are arrays of 32-bit elements bound in parameter order; every shape is baked
//!   into the kernel, and anything that changes per step is loaded from a slot buffer.
//! - Kernels serialize (serde), so a bundle's reference target carries them as they are.

#![deny(missing_docs)]

mod builder;
#[cfg(feature = "conformance")]
pub mod conformance;
mod forms;
mod kernel;
mod print;
mod types;
mod verify;

pub use builder::KernelBuilder;
pub use forms::{cluster_dims, has_matrix, without_clusters, without_matrix};
pub use kernel::{Access, Carried, Expr, Inst, Kernel, Mem, Param, SharedArray, Val};
pub use print::{expr_text, mem_text, print};
pub use types::{BinOp, CmpOp, Const, ReduceOp, Scalar, Special, Ty, UnOp};
pub use verify::{VerifyError, early_params, has_wait, verify};
