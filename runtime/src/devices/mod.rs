//! The devices. The reference and Vulkan devices are always built (Vulkan's loader is opened
//! at run time); CUDA and wgpu sit behind the
//! `cuda` and `wgpu` features.

#[cfg(feature = "cuda")]
pub mod cuda;
pub mod reference;
mod spirv;
pub mod vulkan;
#[cfg(feature = "wgpu")]
pub mod wgpu;
