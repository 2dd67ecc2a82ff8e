//! The devices. The reference device is always built; GPU devices sit behind cargo features.

pub mod reference;
