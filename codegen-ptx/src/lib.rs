//! poot-codegen-ptx: renders `kir::Kernel` to PTX text for sm_80 and sm_90, with the target's
//! capabilities as data. Filled by the bundle/CUDA issue.
