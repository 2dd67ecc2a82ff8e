//! poot-bundle: the `.pbundle` file format, written by `poot-compile` and opened by the runtime.
//!
//! A bundle holds, for each target, the kernels; for every entry (step shape) the dispatch list,
//! slot layout, readback and state; the weight map; and the weights. This crate owns the serde
//! types ([`Manifest`] and its parts), [`write`], [`open`] / [`open_bytes`] with their checks,
//! the lookups the runtime needs ([`OpenedBundle::target`], [`OpenedBundle::entry`],
//! [`OpenedBundle::weight`]) and [`inspect`]. It depends on no other poot crate.
//!
//! # Layout (format 2.3, all integers little-endian)
//!
//! Minor versions only add: 2.1 (kernel IR for the reference target may hold
//! `LaunchDependents`) and 2.2 (it may hold `GridWait`) read every older 2.x bundle, and an
//! older reader refuses a newer bundle by its version instead of failing to decode it.
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 8 | magic `POOTBNDL` |
//! | 8 | 2 | major version (`u16`) |
//! | 10 | 2 | minor version (`u16`) |
//! | 12 | 4 | section count `n` (`u32`) |
//! | 16 + 28 i | 4 | section i: kind (`u32`: 1 = manifest, 2 = weights) |
//! | 20 + 28 i | 8 | section i: offset from the start of the file (`u64`) |
//! | 28 + 28 i | 8 | section i: length (`u64`) |
//! | 36 + 28 i | 8 | section i: xxh3-64 of the section's bytes (`u64`) |
//!
//! The manifest section is `bincode` 2 (serde, `bincode::config::standard()`) of [`Manifest`];
//! the weights section is the weights arena's bytes. [`write`] puts the manifest right after the
//! table (offset 72) and the weights at the next multiple of [`SECTION_ALIGN`], padding with
//! zeros; the file ends where the weights end.
//!
//! # Invariants (checked by [`write`] before encoding and by [`open`] after reading)
//!
//! - Version: a reader reads the same major and any minor up to its own ([`FORMAT_VERSION`]).
//! - Sections: exactly one manifest and one weights section, both after the section table,
//!   not overlapping, inside the file, the last one ending exactly at the end of the file; the
//!   weights section starts at a multiple of [`SECTION_ALIGN`] (4096), so a mapped bundle's
//!   weights are page-aligned for direct upload. The manifest is at most [`MAX_MANIFEST_BYTES`].
//! - Checksums: each section's xxh3-64 matches the table; the error names the section.
//! - The manifest decodes and uses every byte of its section.
//! - `arenas.weights` equals the weights section's length; each weight starts at a multiple of
//!   [`WEIGHT_ALIGN`] (256) and lies inside the section.
//! - Targets are distinct and list the same number of kernels with the same names in the same
//!   order, so `Dispatch::kernel` means the same kernel on every target.
//! - Entry keys are distinct; every dispatch's kernel index is in range; every binding, slot,
//!   readback and state range lies inside its arena (offset + len without overflow); no binding
//!   writes the weights; an entry's `scratch_bytes` fits the scratch arena.
//!
//! Writing is deterministic: the manifest holds only `Vec`s and plain fields (no maps, no
//! timestamps), so the same inputs give byte-identical bundles.
//!
//! # Failure semantics
//!
//! Opening never panics on any input: every malformed, truncated, corrupt, wrong-version or
//! inconsistent bundle is a [`BundleError`] that names the bundle's path, the section or item at
//! fault and what was expected against what was found. Two `cargo fuzz` targets (`fuzz/`:
//! `open` on arbitrary bytes, `open_sealed` on arbitrary manifests behind valid checksums) and
//! a seeded mutation test that runs with every `cargo test` (`tests/mutation.rs`) hold this up.

#![deny(missing_docs)]
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::unreachable,
        clippy::todo
    )
)]

mod error;
mod format;
mod inspect;
mod open;
mod pack;
mod types;
mod validate;

pub use error::{BundleError, Result};
pub use format::{
    FORMAT_VERSION, FormatVersion, MAGIC, MAX_MANIFEST_BYTES, SECTION_ALIGN, SectionKind,
    WEIGHT_ALIGN, write, write_file,
};
pub use inspect::{dispatches, inspect, kernel_files};
pub use open::{OpenedBundle, missing_entry, open, open_bytes};
pub use pack::WeightPacker;
pub use types::{
    Arena, ArenaSizes, Binding, Dispatch, Entry, EntryKey, KernelCode, Manifest, ModelInfo,
    ReadbackInfo, Sampling, SlotInfo, SlotKind, StateInfo, StepKind, Target, TargetCode, TextInfo,
    WeightInfo,
};
