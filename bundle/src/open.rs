//! [`OpenedBundle`]: a checked bundle, mapped from a file or owned in memory, with the
//! lookups the runtime needs (target, entry, weight bytes).

use std::fmt;
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::error::{BundleError, Result};
use crate::format::{FormatVersion, MEMORY, len64, parse};
use crate::types::{Entry, EntryKey, Manifest, StepKind, Target, TargetCode, WeightInfo};

/// The bytes of an open bundle.
enum Storage {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(map) => map,
            Storage::Owned(bytes) => bytes,
        }
    }
}

/// A bundle whose header, checksums and manifest invariants have been checked.
pub struct OpenedBundle {
    storage: Storage,
    manifest: Manifest,
    weights: Range<usize>,
    version: FormatVersion,
    path: PathBuf,
}

/// Opens, maps and checks the bundle at `path`. The file must not change while it is open
/// (it is mapped, not read); everything else about it is checked, and a bad bundle is an error,
/// never a panic. Checking reads every byte once (the checksums).
pub fn open(path: &Path) -> Result<OpenedBundle> {
    let io = |source| BundleError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let storage = if len == 0 {
        // An empty file cannot be mapped; it is reported as truncated like any short file.
        Storage::Owned(Vec::new())
    } else {
        // SAFETY: the mapping is read-only and lives as long as the `OpenedBundle`; the one
        // hazard, another process changing the file meanwhile, is excluded by `open`'s contract.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Storage::Mapped(map)
    };
    from_storage(storage, path.to_path_buf())
}

/// Checks `bytes` as a bundle. Errors name the bundle `<memory>`. The weights keep their
/// 4096-byte offset inside `bytes`, but a `Vec` itself is not page-aligned: use [`open`] where
/// the weights must be page-aligned in memory.
pub fn open_bytes(bytes: Vec<u8>) -> Result<OpenedBundle> {
    from_storage(Storage::Owned(bytes), PathBuf::from(MEMORY))
}

fn from_storage(storage: Storage, path: PathBuf) -> Result<OpenedBundle> {
    let parsed = parse(storage.bytes(), &path)?;
    Ok(OpenedBundle {
        storage,
        manifest: parsed.manifest,
        weights: parsed.weights,
        version: parsed.version,
        path,
    })
}

impl OpenedBundle {
    /// The checked manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The weights section: the weights arena's contents, at a 4096-byte offset of the file.
    pub fn weights(&self) -> &[u8] {
        // ok: `parse` checked the range against these very bytes.
        self.storage
            .bytes()
            .get(self.weights.clone())
            .unwrap_or_default()
    }

    /// The bytes of one weight (from this bundle's manifest or any other `WeightInfo`).
    pub fn weight(&self, info: &WeightInfo) -> Result<&[u8]> {
        let weights = self.weights();
        let range = usize::try_from(info.offset)
            .ok()
            .zip(usize::try_from(info.len).ok())
            .and_then(|(start, len)| Some(start..start.checked_add(len)?));
        range
            .and_then(|range| weights.get(range))
            .ok_or_else(|| BundleError::OutOfRange {
                path: self.path.clone(),
                what: format!("weight `{}`", info.role),
                region: "weights section".to_string(),
                offset: info.offset,
                len: info.len,
                limit: len64(weights.len()),
            })
    }

    /// The first of the bundle's targets (in bundle order) that is in `accepted`.
    pub fn target(&self, accepted: &[Target]) -> Result<&TargetCode> {
        self.manifest
            .targets
            .iter()
            .find(|code| accepted.contains(&code.target))
            .ok_or_else(|| BundleError::NoTarget {
                available: self.manifest.targets.iter().map(|c| c.target).collect(),
                accepted: accepted.to_vec(),
            })
    }

    /// The entry compiled for `key`; its absence names the `poot-compile` flags that would
    /// add it.
    pub fn entry(&self, key: &EntryKey) -> Result<&Entry> {
        let entries = &self.manifest.entries;
        if let Some(entry) = entries.iter().find(|entry| entry.key == *key) {
            return Ok(entry);
        }
        Err(missing_entry(entries, key))
    }

    /// The file the bundle was opened from (`<memory>` for [`open_bytes`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The format version in the header.
    pub fn version(&self) -> FormatVersion {
        self.version
    }

    /// The whole bundle, header included.
    pub fn bytes(&self) -> &[u8] {
        self.storage.bytes()
    }
}

impl fmt::Debug for OpenedBundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let targets: Vec<Target> = self.manifest.targets.iter().map(|c| c.target).collect();
        f.debug_struct("OpenedBundle")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("bytes", &self.bytes().len())
            .field("targets", &targets)
            .field("entries", &self.manifest.entries.len())
            .finish_non_exhaustive()
    }
}

/// The error for a key no entry has. Each part of the key that no entry of the bundle has
/// becomes its compile flag; when every part exists but not together, the flags of the key's
/// shape (step kind, rows, cap).
pub fn missing_entry(entries: &[Entry], key: &EntryKey) -> BundleError {
    let rows_flag = format!("--batch {}", key.rows);
    let cap_flag = format!("--cap {}", key.cap);
    let sampling_flag = format!("--sampling {}", key.sampling);
    let kind_flag = match key.kind {
        StepKind::Decode => None,
        StepKind::Prefill { tokens } => Some(format!("--prefill-chunks {tokens}")),
    };
    let same_kind = |entry: &&Entry| {
        std::mem::discriminant(&entry.key.kind) == std::mem::discriminant(&key.kind)
    };
    let mut flags = Vec::new();
    if !entries.iter().any(|e| e.key.kind == key.kind) {
        flags.extend(kind_flag.clone());
    }
    if !entries
        .iter()
        .filter(same_kind)
        .any(|e| e.key.rows == key.rows)
    {
        flags.push(rows_flag.clone());
    }
    if !entries.iter().any(|e| e.key.cap == key.cap) {
        flags.push(cap_flag.clone());
    }
    if !entries.iter().any(|e| e.key.sampling == key.sampling) {
        flags.push(sampling_flag.clone());
    }
    if flags.is_empty() {
        flags.extend(kind_flag);
        flags.push(rows_flag);
        flags.push(cap_flag);
    }
    let detail = if entries.iter().any(|e| e.key.program == key.program) {
        String::new()
    } else {
        let mut programs: Vec<&str> = entries.iter().map(|e| e.key.program.as_str()).collect();
        programs.sort_unstable();
        programs.dedup();
        let has = if programs.is_empty() {
            "none".to_string()
        } else {
            programs.join(", ")
        };
        format!(
            ": it has no program `{}` at all (it has: {has})",
            key.program
        )
    };
    BundleError::NoEntry {
        key: key.clone(),
        detail,
        flags: flags.join(" "),
    }
}
