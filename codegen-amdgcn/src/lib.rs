//! poot-codegen-amdgcn: renders `kir::Kernel` to an AMDGCN code object, with the target's
//! capabilities as data. Filled by a later issue.
