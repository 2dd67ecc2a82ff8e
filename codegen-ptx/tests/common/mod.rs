//! The kernels every PTX test renders: the conformance set (`poot_kir::conformance`) minus the
//! cases a PTX target refuses by design (a subgroup width other than the warp's; f32 atomics
//! other than add), which `errors.rs` checks instead.

#![allow(dead_code)]

use poot_kir::Kernel;

#[allow(unused_imports)]
pub use poot_kir::conformance::*;

/// Every case PTX renders, by snapshot name.
pub fn cases() -> Vec<(&'static str, Kernel)> {
    poot_kir::conformance::cases()
        .into_iter()
        .filter(|(name, _)| !matches!(*name, "subgroup8" | "subgroup_guarded_8"))
        .collect()
}
