//! The devices. The reference and Vulkan devices are always built (Vulkan's loader is opened
//! at run time); CUDA sits behind the `cuda` feature.

#[cfg(feature = "cuda")]
pub mod cuda;
pub mod reference;
pub mod vulkan;
