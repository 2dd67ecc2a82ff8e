//! poot-codegen-spirv: renders one `kir::Kernel` to SPIR-V words (a module with one
//! `GLCompute` entry point) for Vulkan 1.2 and for wgpu (through naga's SPIR-V front end),
//! with the target's capabilities as data ([`SpirvTarget`]).
//!
//! Design invariants:
//! - One entry point, [`render`]: it verifies the kernel with `kir::verify`, checks it against
//!   the target (SPIR-V version, threads, shared memory, storage buffers, subgroup width),
//!   then writes the module. Anything the target cannot express is a [`SpirvError`] naming
//!   the kernel; the renderer never panics on a verified kernel.
//! - The output is a pure function of `(kernel, target)`: ids are allocated in program order
//!   and no hash map is iterated, so the same kernel gives the same words.
//! - The same words pass `spirv-val --target-env vulkan1.2` and naga's SPIR-V front end and
//!   validator (so: structured control flow with `OpPhi`, no float-controls execution modes,
//!   which naga refuses; see `ops` for how NaN semantics survive without them).
//! - Floating point follows kir, with the exceptions and accuracies listed in `ops`.
//!
//! # Binding model
//! - Descriptor set 0. Binding `i` is kir parameter `i`: a `StorageBuffer` variable of a
//!   `Block` struct whose one member (offset 0) is a runtime array of the parameter's element
//!   type (`u32`, `i32`, `f32`; `ArrayStride 4`) or, where the kernel's widest access to it
//!   is a vector of 2 or 4 lanes and it has no atomics, of such vectors (`ArrayStride` 8 or
//!   16: one variable per binding, since naga refuses aliased bindings); `Access::Read`
//!   parameters are `NonWritable`. The variables are named after the parameters.
//! - Binding `params.len()` ([`error_binding`]) is always declared: the reserved error words,
//!   a `u32` runtime array named `poot_error`. `trap(code)` does a device-scope `OpAtomicOr`
//!   of `code` into word 0; the runtime zeroes it before a replay and raises a fault naming
//!   the kernel when it reads it non-zero (codes of different traps OR together). A trapping
//!   thread returns early when the kernel has no work-group barrier, and otherwise carries on
//!   (see `writer`): the dispatch's results are discarded either way, and robust buffer
//!   access keeps its accesses in bounds.
//! - The work-group size is the `LocalSize` execution mode; shared arrays are `Workgroup`
//!   arrays (`s0`, `s1`, ..); a kernel using the subgroup fallback adds one more,
//!   `poot_subgroup_scratch`, of `SpirvTarget::scratch_words` `u32` rows of one word per
//!   thread ([`SpirvTarget::shared_bytes`]).
//! - Thread coordinates are the `LocalInvocationId`, `WorkgroupId` built-ins; `lane` is
//!   `SubgroupLocalInvocationId` natively in a one-dimensional work-group, and
//!   `LocalInvocationIndex % subgroup` with the fallback or in a work-group of more than one
//!   dimension (naga refuses the subgroup built-in there; the target requires subgroups laid
//!   out over consecutive indices, so both are the same lane). See `subgroup`.
//! - A load or store as wide as its parameter's array elements moves one whole element
//!   (element `index / lanes`: kir aligns vector accesses to their width), so the device
//!   issues one vector access. Narrower accesses, and vector accesses of shared memory, are
//!   scalar accesses of single components (`OpAccessChain` into the element), composed with
//!   `OpCompositeConstruct` / split with `OpCompositeExtract`.
//! - Atomics are relaxed `OpAtomic*` at device scope on buffers and work-group scope on shared
//!   arrays; f32 `add` needs `SpirvTarget::atomic_float_add` (`SPV_EXT_shader_atomic_float_add`)
//!   and other f32 atomics are refused. `fence` is `OpMemoryBarrier` at device scope with
//!   acquire-release semantics over uniform (buffer) memory.

#![deny(missing_docs)]

mod analysis;
mod error;
mod module;
mod ops;
mod subgroup;
mod target;
mod writer;

pub use error::{Result, SpirvError};
pub use target::SpirvTarget;

use poot_kir::Kernel;

/// The descriptor set every binding of a rendered kernel is in.
pub const DESCRIPTOR_SET: u32 = 0;

/// The binding of `kernel`'s error words (one past its parameters).
pub fn error_binding(kernel: &Kernel) -> u32 {
    kernel.params.len() as u32
}

/// Renders `kernel` as a SPIR-V module for `target`.
pub fn render(kernel: &Kernel, target: &SpirvTarget) -> Result<Vec<u32>> {
    poot_kir::verify(kernel)?;
    let kernel = &poot_kir::without_matrix(&poot_kir::without_clusters(kernel));
    target.check(kernel)?;
    writer::Writer::new(kernel, target).write()
}

/// The text form of a module's words (rspirv's disassembler), for goldens and debugging.
pub fn disassemble(words: &[u32]) -> String {
    use rspirv::binary::Disassemble;
    match rspirv::dr::load_words(words) {
        Ok(m) => m.disassemble(),
        Err(e) => format!("; not a SPIR-V module: {e}"),
    }
}
