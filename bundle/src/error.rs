//! [`BundleError`]: every way writing, opening or querying a bundle can fail. Each variant
//! carries the bundle's path (`<memory>` for bytes that came from no file) and what was
//! expected against what was found, so the message alone says what is wrong.

use std::fmt;
use std::path::PathBuf;

use crate::format::{FormatVersion, SectionKind};
use crate::types::{EntryKey, Target};

/// A `Result` whose error is [`BundleError`].
pub type Result<T, E = BundleError> = std::result::Result<T, E>;

/// What went wrong with a bundle.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The file could not be opened, mapped or written.
    #[error("bundle {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The bundle ends before a structure it declares.
    #[error(
        "bundle {path}: truncated: {what} needs bytes up to offset {needed}, the file has {len}"
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// What was being read (`header`, `section table`, `manifest section`).
        what: String,
        /// End offset that was needed.
        needed: u64,
        /// The bundle's length.
        len: u64,
    },
    /// The first eight bytes are not `POOTBNDL`.
    #[error("bundle {path}: not a poot bundle: it starts with {found}, expected \"POOTBNDL\"")]
    Magic {
        /// The file.
        path: PathBuf,
        /// The bytes found, escaped.
        found: String,
    },
    /// A format version this reader cannot read.
    #[error(
        "bundle {path}: format version {found} is not supported: this poot reads {}.0 to {supported}; \
         recompile the bundle with a matching poot-compile",
        supported.major
    )]
    Version {
        /// The file.
        path: PathBuf,
        /// The version in the file.
        found: FormatVersion,
        /// The newest version this reader reads.
        supported: FormatVersion,
    },
    /// The section table is malformed: an unknown, missing, duplicated, overlapping or
    /// misaligned section, or bytes after the last one.
    #[error("bundle {path}: section {section}: {problem}")]
    Section {
        /// The file.
        path: PathBuf,
        /// The section's name, or its kind number when unknown.
        section: String,
        /// What is wrong.
        problem: String,
    },
    /// A section's bytes do not match the checksum in the section table.
    #[error(
        "bundle {path}: {section} section is corrupt: its xxh3-64 checksum is {found:#018x}, \
         the section table says {expected:#018x}"
    )]
    Checksum {
        /// The file.
        path: PathBuf,
        /// The section.
        section: SectionKind,
        /// The checksum in the section table.
        expected: u64,
        /// The checksum of the bytes.
        found: u64,
    },
    /// The manifest section is not a bincode-encoded manifest.
    #[error("bundle {path}: the manifest section does not decode: {problem}")]
    Decode {
        /// The file.
        path: PathBuf,
        /// What the decoder said.
        problem: String,
    },
    /// The manifest could not be encoded.
    #[error("bundle {path}: the manifest does not encode: {problem}")]
    Encode {
        /// The file being written.
        path: PathBuf,
        /// What the encoder said.
        problem: String,
    },
    /// A byte range lies outside the arena or section it indexes.
    #[error(
        "bundle {path}: {what} (offset {offset}, len {len}) does not fit in the {region} of {limit} bytes"
    )]
    OutOfRange {
        /// The file.
        path: PathBuf,
        /// The range's owner (`entry generate decode rows=1 cap=64 greedy dispatch 3 binding 1`).
        what: String,
        /// Where it is checked against (`scratch arena`, `weights section`).
        region: String,
        /// Start of the range.
        offset: u64,
        /// Length of the range.
        len: u64,
        /// Size of the region.
        limit: u64,
    },
    /// The manifest breaks an invariant of the format (see the crate docs).
    #[error("bundle {path}: {what}: {problem}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is at fault (`target spirv`, `entry ...`, `weight blk.0.attn_q`).
        what: String,
        /// Expected against found.
        problem: String,
    },
    /// None of the bundle's targets is one the device accepts.
    #[error(
        "the bundle has no code for this device: it has {}, the device accepts {}; \
         recompile for one of the accepted targets",
        list(.available),
        list(.accepted)
    )]
    NoTarget {
        /// The bundle's targets.
        available: Vec<Target>,
        /// What the device accepts.
        accepted: Vec<Target>,
    },
    /// The bundle was not compiled with the requested entry.
    #[error("the bundle has no entry `{key}`{detail}; recompile with {flags} to add it")]
    NoEntry {
        /// The requested key.
        key: EntryKey,
        /// Context, such as the program being absent (empty or starting with `: `).
        detail: String,
        /// The `poot-compile` flags that would add it (`--batch 4`).
        flags: String,
    },
    /// A target name that is not `ptx-smNN`, `spirv` or `reference`.
    #[error("unknown target `{name}`: expected ptx-smNN (e.g. ptx-sm90), spirv or reference")]
    TargetName {
        /// The name given.
        name: String,
    },
}

/// `[a, b]`, or `none` for an empty list.
fn list<T: fmt::Display>(items: &[T]) -> String {
    if items.is_empty() {
        return "none".to_string();
    }
    let names: Vec<String> = items.iter().map(ToString::to_string).collect();
    format!("[{}]", names.join(", "))
}
