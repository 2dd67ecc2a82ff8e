//! The manifest's invariants, checked by `write` before encoding and by `open` after decoding,
//! so the runtime can index kernels, arenas and weights without fallible lookups.

use std::collections::BTreeSet;
use std::path::Path;

use crate::error::{BundleError, Result};
use crate::format::WEIGHT_ALIGN;
use crate::types::{Arena, Manifest};

/// Checks every invariant listed in the crate docs against a weights section of
/// `weights_len` bytes; the first violation is the error.
pub(crate) fn validate(manifest: &Manifest, weights_len: u64, path: &Path) -> Result<()> {
    let check = Checker { path };
    let arenas = &manifest.arenas;
    if arenas.weights != weights_len {
        return Err(check.invalid(
            "the weights arena",
            format!(
                "it is {} bytes, the weights section {weights_len}",
                arenas.weights
            ),
        ));
    }

    let mut seen_targets = BTreeSet::new();
    let first = manifest.targets.first();
    for code in &manifest.targets {
        let what = || format!("target {}", code.target);
        if !seen_targets.insert(code.target) {
            return Err(check.invalid(&what(), "it appears twice".to_string()));
        }
        let Some(first) = first else { continue };
        if code.kernels.len() != first.kernels.len() {
            let problem = format!(
                "it has {} kernels, target {} has {}",
                code.kernels.len(),
                first.target,
                first.kernels.len()
            );
            return Err(check.invalid(&what(), problem));
        }
        for (i, (kernel, reference)) in code.kernels.iter().zip(&first.kernels).enumerate() {
            if kernel.name != reference.name {
                let problem = format!(
                    "kernel {i} is `{}`, in target {} it is `{}`",
                    kernel.name, first.target, reference.name
                );
                return Err(check.invalid(&what(), problem));
            }
        }
    }
    let kernel_count = first.map_or(0, |code| code.kernels.len());

    for weight in &manifest.weights {
        let what = format!("weight `{}`", weight.role);
        if weight.offset % WEIGHT_ALIGN != 0 {
            let problem = format!(
                "it starts at offset {}, which is not a multiple of {WEIGHT_ALIGN}",
                weight.offset
            );
            return Err(check.invalid(&what, problem));
        }
        check.range(
            &what,
            "weights section",
            weight.offset,
            weight.len,
            weights_len,
        )?;
    }

    let mut seen_keys = BTreeSet::new();
    for entry in &manifest.entries {
        let name = format!("entry `{}`", entry.key);
        if !seen_keys.insert(&entry.key) {
            return Err(check.invalid(&name, "it appears twice".to_string()));
        }
        if entry.scratch_bytes > arenas.scratch {
            let problem = format!(
                "it uses {} scratch bytes, the scratch arena has {}",
                entry.scratch_bytes, arenas.scratch
            );
            return Err(check.invalid(&name, problem));
        }
        for (d, dispatch) in entry.dispatches.iter().enumerate() {
            let what = format!("{name} dispatch {d}");
            let in_range = usize::try_from(dispatch.kernel).is_ok_and(|k| k < kernel_count);
            if !in_range {
                let problem = format!(
                    "it launches kernel {}, the bundle has {kernel_count} kernels",
                    dispatch.kernel
                );
                return Err(check.invalid(&what, problem));
            }
            for (b, binding) in dispatch.bindings.iter().enumerate() {
                let what = format!("{what} binding {b}");
                if binding.arena == Arena::Weights && binding.writes {
                    let problem = "it writes the weights arena, which is read-only".to_string();
                    return Err(check.invalid(&what, problem));
                }
                let region = format!("{} arena", binding.arena);
                let limit = arenas.size(binding.arena);
                check.range(&what, &region, binding.offset, binding.len, limit)?;
            }
        }
        for slot in &entry.slots {
            let what = format!("{name} slot {:?}", slot.kind);
            check.range(&what, "slots arena", slot.offset, slot.len, arenas.slots)?;
        }
        for out in &entry.readback {
            let what = format!("{name} readback `{}`", out.name);
            check.range(
                &what,
                "readback arena",
                out.offset,
                out.len,
                arenas.readback,
            )?;
        }
        for state in &entry.state {
            let what = format!("{name} state `{}`", state.name);
            check.range(&what, "state arena", state.offset, state.len, arenas.state)?;
        }
    }
    Ok(())
}

/// Builds errors that name the bundle.
struct Checker<'a> {
    path: &'a Path,
}

impl Checker<'_> {
    fn invalid(&self, what: &str, problem: String) -> BundleError {
        BundleError::Invalid {
            path: self.path.to_path_buf(),
            what: what.to_string(),
            problem,
        }
    }

    /// `offset..offset + len` must lie inside `0..limit`.
    fn range(&self, what: &str, region: &str, offset: u64, len: u64, limit: u64) -> Result<()> {
        if offset.checked_add(len).is_some_and(|end| end <= limit) {
            return Ok(());
        }
        Err(BundleError::OutOfRange {
            path: self.path.to_path_buf(),
            what: what.to_string(),
            region: region.to_string(),
            offset,
            len,
            limit,
        })
    }
}
