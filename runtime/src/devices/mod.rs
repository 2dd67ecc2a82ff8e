//! The devices. The reference device is always built; GPU devices sit behind cargo features.

#[cfg(feature = "cuda")]
pub mod cuda;
pub mod reference;
