//! poot-codegen-ptx: renders one `kir::Kernel` to PTX text for sm_80 and sm_90, with the
//! target's capabilities as data ([`PtxTarget`]).
//!
//! Design invariants:
//! - One entry point, [`render`]: it verifies the kernel with `kir::verify`, checks it against
//!   the target (warp width, shared memory, threads, parameter bytes), then writes one module
//!   with one `.visible .entry` named after the kernel. Anything the target cannot express is a
//!   [`PtxError`] naming the kernel; the renderer never panics on a verified kernel.
//! - The output is a pure function of `(kernel, target)`: registers and labels are numbered in
//!   program order, nothing iterates a hash map, so the same kernel gives the same text.
//! - On targets with grid dependency control the kernel's first instruction is
//!   `griddepcontrol.wait`, or, where the kernel places its own (`GridWait`), each wait is
//!   rendered where it stands: nothing but the loads of the parameters its waits list touches
//!   memory before the previous kernel completes, so the runtime may launch kernels as
//!   programmatic dependents ([`PtxTarget::grid_dependency`]). ptxas moves `ld.global.nc`
//!   loads across a wait both ways (above it, it would read the previous kernel's output
//!   early; below it, a load meant to overlap that kernel would not), and keeps plain
//!   `ld.global` loads on their side; so in a kernel with its own wait, loads before a wait
//!   are plain and after it only the listed parameters load through `.nc` (the `ptxas` test
//!   checks every golden's SASS: before the first wait no more plain loads than its PTX has
//!   there, no more read-only ones than it has there plus its listed parameters' after it,
//!   which ptxas may move up, and no other memory instruction but prefetches).
//! - Every kir parameter becomes one `.param .u64` holding a global address (converted once with
//!   `cvta.to.global.u64`); element `i` of a buffer or shared array is at byte `4 * i`. Vector
//!   accesses of 2 and 4 lanes use `.v2` / `.v4`, relying on the planner to align them to 8 and
//!   16 bytes (kir guarantees they are consecutive elements).
//! - Loads from `Access::Read` parameters use `ld.global.nc` when the target allows it (in a
//!   kernel with its own wait, only those its waits list, after the wait); the planner must
//!   then never bind memory that the same dispatch writes to a `Read` parameter.
//! - Subgroup operations assume the kernel's subgroup is the full warp and that all its lanes
//!   reach them converged (poot's lowering guarantees both; a kernel declaring another width is
//!   refused). `trap(code)` becomes PTX `trap`: the dispatch faults, the code survives only as a
//!   comment in the text. `barrier` is `bar.sync 0`, which every thread of the work-group
//!   must reach (kir places barriers in uniform control flow). Atomics are `red`, or `atom`
//!   where the old value is used (both relaxed, at GPU scope); f32 atomics other than `add`
//!   are refused. `fence` is `fence.acq_rel.gpu`. `prefetch` is `cp.async.bulk.prefetch.L2`
//!   where the target has it (skipped for an empty range), else nothing; `launch_dependents`
//!   is `griddepcontrol.launch_dependents` where the target has grid dependency control,
//!   else nothing.
//! - A `clustered` renders one form: on targets with clusters ([`PtxTarget::clusters`]) the
//!   clustered one, and the entry declares its shape (`.reqnctapercluster`, which the driver
//!   honours at any launch); elsewhere `render` takes `poot_kir::without_clusters`' kernel
//!   first, which also drops the shared arrays only the clustered form uses. Cluster
//!   arrivals and waits are `barrier.cluster.arrive{.release,.relaxed}.aligned` and
//!   `barrier.cluster.wait.acquire.aligned` (uniform per warp, like `barrier`), and a remote
//!   store is `mapa.shared::cluster` of the local address, then `st.shared::cluster`.
//! - A `matrix` renders its matrix form where the target has warp matrix multiply-accumulate
//!   ([`PtxTarget::mma`]), else `render` takes `poot_kir::without_matrix`' kernel first; kir's
//!   `mma` is `mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32` on the f32 patterns as they
//!   are (kir requires them exact in tf32, so no conversion is needed).
//! - Each kir `let` becomes its own few instructions, except the patterns `select` recognizes
//!   (a byte of a word, possibly shifted to another byte, or'ed with a constant whose byte
//!   there is zero: one `prmt.b32`) and
//!   `u32` division or remainder by a nonzero constant (a shift, a mask, or a multiply by the
//!   divisor's magic number), which compute exactly the same bits.
//! - Floating point follows kir exactly (`.rn` arithmetic, NaN-propagating min/max, no
//!   contraction, no flush-to-zero) except `exp`, `rsqrt`, `sin` and `cos`, which use the
//!   hardware approximations documented in `ops`.

#![deny(missing_docs)]

mod error;
mod ops;
mod select;
mod target;
mod writer;

pub use error::{PtxError, Result};
pub use target::PtxTarget;

use poot_kir::Kernel;

/// Renders `kernel` as a PTX module for `target`.
pub fn render(kernel: &Kernel, target: &PtxTarget) -> Result<String> {
    poot_kir::verify(kernel)?;
    let (flat, plain);
    let kernel = if target.clusters {
        kernel
    } else {
        flat = poot_kir::without_clusters(kernel);
        &flat
    };
    let kernel = if target.mma {
        kernel
    } else {
        plain = poot_kir::without_matrix(kernel);
        &plain
    };
    target.check(kernel)?;
    writer::Writer::new(kernel, target).write()
}
