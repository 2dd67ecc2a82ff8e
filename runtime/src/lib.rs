//! poot-runtime: the runtime that replays bundles.
//!
//! It will own the object-safe `Executor`, `Engine<D: Device>`, the thin `Device` trait and the
//! devices behind cargo features (CUDA, Vulkan, wgpu, ROCm, and the reference device that
//! executes kernel IR on the CPU), the `Driver`, the tokenizer and sampling parameters. It links
//! no compiler and no graph IR. Filled by the bundle/CUDA issue.
//!
//! Modules: [`reference`], the reference device's execution core (kir kernels on the CPU).

pub mod reference;
