//! poot-codegen-spirv: renders `kir::Kernel` to SPIR-V words (rspirv) for Vulkan and wgpu, with
//! the target's capabilities as data; `trap(code)` becomes an atomic OR into the reserved error
//! word and an early return. Filled by the SPIR-V issue.
