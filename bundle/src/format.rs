//! The byte layout: constants, the fixed header and section table, [`write`] and the parser
//! `open` uses. The layout itself is documented in the crate root.

use std::fmt;
use std::ops::Range;
use std::path::Path;

use xxhash_rust::xxh3::xxh3_64;

use crate::error::{BundleError, Result};
use crate::types::Manifest;
use crate::validate::validate;

/// The first eight bytes of every bundle.
pub const MAGIC: [u8; 8] = *b"POOTBNDL";
/// The format version this crate writes, and the newest it reads (minor 3: kernels may hold
/// kir's `matrix` and `mma`, which a reader of minor 2 cannot decode).
pub const FORMAT_VERSION: FormatVersion = FormatVersion { major: 2, minor: 3 };
/// The weights section starts at a multiple of this many bytes (a page), so a mapped
/// bundle's weights are page-aligned in memory.
pub const SECTION_ALIGN: u64 = 4096;
/// Every weight starts at a multiple of this many bytes of the weights section.
pub const WEIGHT_ALIGN: u64 = 256;
/// The largest manifest section a reader decodes; it bounds what a corrupt length can
/// make the decoder allocate.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 30;

/// Magic, major, minor, section count.
const HEADER_BYTES: u64 = 16;
/// Kind, offset, length, checksum.
const TABLE_ENTRY_BYTES: u64 = 28;
/// What `write` emits: the manifest and the weights.
const SECTION_COUNT: u32 = 2;
/// Where `write` puts the manifest: right after a two-entry section table.
const MANIFEST_OFFSET: u64 = HEADER_BYTES + TABLE_ENTRY_BYTES * SECTION_COUNT as u64;

/// Where bytes came from when no file is involved.
pub(crate) const MEMORY: &str = "<memory>";

/// A bundle format version. A reader reads the same major and any minor up to its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FormatVersion {
    /// Incompatible changes.
    pub major: u16,
    /// Additions an older reader of the same major cannot read either.
    pub minor: u16,
}

impl FormatVersion {
    /// Whether a reader of version `self` reads a bundle of version `found`.
    pub fn reads(self, found: FormatVersion) -> bool {
        found.major == self.major && found.minor <= self.minor
    }
}

impl fmt::Display for FormatVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The sections of a bundle, by their kind number in the section table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SectionKind {
    /// Kind 1: the bincode-encoded [`Manifest`].
    Manifest,
    /// Kind 2: the weight bytes.
    Weights,
}

impl SectionKind {
    /// The number in the section table.
    pub fn code(self) -> u32 {
        match self {
            SectionKind::Manifest => 1,
            SectionKind::Weights => 2,
        }
    }

    /// The kind with number `code`, if there is one.
    pub fn from_code(code: u32) -> Option<SectionKind> {
        match code {
            1 => Some(SectionKind::Manifest),
            2 => Some(SectionKind::Weights),
            _ => None,
        }
    }
}

impl fmt::Display for SectionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SectionKind::Manifest => "manifest",
            SectionKind::Weights => "weights",
        })
    }
}

/// The bincode configuration of the manifest: `standard()` with a decode limit.
fn bincode_config() -> impl bincode::config::Config {
    // ok: 2^30 fits every usize Rust supports.
    bincode::config::standard().with_limit::<{ MAX_MANIFEST_BYTES as usize }>()
}

/// Encodes `manifest` and `weights` (already laid out at the manifest's offsets) as a bundle.
/// The same inputs always give the same bytes.
pub fn write(manifest: &Manifest, weights: &[u8]) -> Result<Vec<u8>> {
    write_to(manifest, weights, Path::new(MEMORY))
}

/// [`write`] to the file `path`.
pub fn write_file(path: &Path, manifest: &Manifest, weights: &[u8]) -> Result<()> {
    let bytes = write_to(manifest, weights, path)?;
    std::fs::write(path, bytes).map_err(|source| BundleError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn write_to(manifest: &Manifest, weights: &[u8], path: &Path) -> Result<Vec<u8>> {
    validate(manifest, len64(weights.len()), path)?;
    let encode_error = |problem: String| BundleError::Encode {
        path: path.to_path_buf(),
        problem,
    };
    let encoded = bincode::serde::encode_to_vec(manifest, bincode_config())
        .map_err(|e| encode_error(e.to_string()))?;
    let manifest_len = len64(encoded.len());
    if manifest_len > MAX_MANIFEST_BYTES {
        return Err(encode_error(format!(
            "it is {manifest_len} bytes, more than the {MAX_MANIFEST_BYTES} a reader accepts"
        )));
    }
    // ok: both terms are at most 2^30 + 72 after the check above.
    let weights_offset = align_up(MANIFEST_OFFSET + manifest_len, SECTION_ALIGN);
    let table = [
        (SectionKind::Manifest, MANIFEST_OFFSET, encoded.as_slice()),
        (SectionKind::Weights, weights_offset, weights),
    ];
    let mut out = Vec::with_capacity(to_usize(weights_offset).saturating_add(weights.len()));
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.major.to_le_bytes());
    out.extend_from_slice(&FORMAT_VERSION.minor.to_le_bytes());
    out.extend_from_slice(&SECTION_COUNT.to_le_bytes());
    for (kind, offset, bytes) in table {
        out.extend_from_slice(&kind.code().to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&len64(bytes.len()).to_le_bytes());
        out.extend_from_slice(&xxh3_64(bytes).to_le_bytes());
    }
    for (_, offset, bytes) in table {
        out.resize(to_usize(offset), 0);
        out.extend_from_slice(bytes);
    }
    Ok(out)
}

/// What [`parse`] finds in a well-formed bundle.
pub(crate) struct Parsed {
    /// The decoded, validated manifest.
    pub manifest: Manifest,
    /// The weights section's byte range.
    pub weights: Range<usize>,
    /// The version in the header.
    pub version: FormatVersion,
}

/// One row of the section table.
#[derive(Clone, Copy)]
struct Section {
    kind: SectionKind,
    offset: u64,
    len: u64,
    checksum: u64,
}

/// Checks `bytes` as a bundle and decodes its manifest; never panics.
pub(crate) fn parse(bytes: &[u8], path: &Path) -> Result<Parsed> {
    let len = len64(bytes.len());
    let truncated = |what: &str, needed: u64| BundleError::Truncated {
        path: path.to_path_buf(),
        what: what.to_string(),
        needed,
        len,
    };
    let prefix = bytes.get(..MAGIC.len()).unwrap_or(bytes);
    if !MAGIC.starts_with(prefix) {
        return Err(BundleError::Magic {
            path: path.to_path_buf(),
            found: prefix.escape_ascii().to_string(),
        });
    }
    let (Some(major), Some(minor), Some(count)) =
        (le_u16(bytes, 8), le_u16(bytes, 10), le_u32(bytes, 12))
    else {
        return Err(truncated("the header", HEADER_BYTES));
    };
    let version = FormatVersion { major, minor };
    if !FORMAT_VERSION.reads(version) {
        return Err(BundleError::Version {
            path: path.to_path_buf(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    // ok: at most 16 + 28 * (2^32 - 1) < 2^37.
    let table_end = HEADER_BYTES + TABLE_ENTRY_BYTES * u64::from(count);
    if table_end > len {
        return Err(truncated("the section table", table_end));
    }
    let [manifest, weights] = read_table(bytes, count, table_end, path)?;
    let section_error = |kind: SectionKind, problem: String| BundleError::Section {
        path: path.to_path_buf(),
        section: kind.to_string(),
        problem,
    };
    if weights.offset % SECTION_ALIGN != 0 {
        let problem = format!(
            "starts at offset {}, which is not a multiple of {SECTION_ALIGN}",
            weights.offset
        );
        return Err(section_error(SectionKind::Weights, problem));
    }
    if manifest.len > MAX_MANIFEST_BYTES {
        let problem = format!(
            "is {} bytes, more than the {MAX_MANIFEST_BYTES} this reader accepts",
            manifest.len
        );
        return Err(section_error(SectionKind::Manifest, problem));
    }
    let manifest_bytes = section_bytes(bytes, manifest, path)?;
    let weights_range = section_range(weights, len, path)?;
    let weights_bytes = bytes.get(weights_range.clone()).unwrap_or_default();
    let (first, second) = if manifest.offset < weights.offset {
        (manifest, weights)
    } else {
        (weights, manifest)
    };
    // ok: section_range checked both ends against the file length.
    let first_end = first.offset + first.len;
    if first_end > second.offset {
        let problem = format!(
            "ends at offset {first_end}, past the start of the {} section at {}",
            second.kind, second.offset
        );
        return Err(section_error(first.kind, problem));
    }
    // ok: as above.
    let end = second.offset + second.len;
    if end != len {
        let problem = format!(
            "ends at offset {end}, but the bundle has {} more bytes after it",
            len.saturating_sub(end)
        );
        return Err(section_error(second.kind, problem));
    }
    for (start, next) in [(table_end, first), (first_end, second)] {
        // ok: both ends lie inside the file and start <= next.offset (checked above).
        let gap = bytes
            .get(to_usize(start)..to_usize(next.offset))
            .unwrap_or_default();
        if let Some(at) = gap.iter().position(|byte| *byte != 0) {
            let problem = format!(
                "byte {} before the {} section is {:#04x}; padding between sections is zero",
                start.saturating_add(len64(at)),
                next.kind,
                gap.get(at).copied().unwrap_or_default()
            );
            return Err(BundleError::Section {
                path: path.to_path_buf(),
                section: "padding".to_string(),
                problem,
            });
        }
    }
    for (section, data) in [(manifest, manifest_bytes), (weights, weights_bytes)] {
        let found = xxh3_64(data);
        if found != section.checksum {
            return Err(BundleError::Checksum {
                path: path.to_path_buf(),
                section: section.kind,
                expected: section.checksum,
                found,
            });
        }
    }
    let decode_error = |problem: String| BundleError::Decode {
        path: path.to_path_buf(),
        problem,
    };
    let (decoded, used): (Manifest, usize) =
        bincode::serde::decode_from_slice(manifest_bytes, bincode_config())
            .map_err(|e| decode_error(e.to_string()))?;
    if used != manifest_bytes.len() {
        return Err(decode_error(format!(
            "the manifest ends after {used} of the section's {} bytes",
            manifest_bytes.len()
        )));
    }
    validate(&decoded, len64(weights_bytes.len()), path)?;
    Ok(Parsed {
        manifest: decoded,
        weights: weights_range,
        version,
    })
}

/// Reads the `count` rows of the section table: exactly one manifest and one weights section,
/// both after the table.
fn read_table(bytes: &[u8], count: u32, table_end: u64, path: &Path) -> Result<[Section; 2]> {
    let mut found: [Option<Section>; 2] = [None, None];
    let table_error = |section: String, problem: String| BundleError::Section {
        path: path.to_path_buf(),
        section,
        problem,
    };
    for row in 0..count {
        // ok: row < count, so at most table_end, which is inside `bytes`.
        let at = to_usize(HEADER_BYTES + TABLE_ENTRY_BYTES * u64::from(row));
        let (Some(code), Some(offset), Some(len), Some(checksum)) = (
            le_u32(bytes, at),
            le_u64(bytes, at.saturating_add(4)),
            le_u64(bytes, at.saturating_add(12)),
            le_u64(bytes, at.saturating_add(20)),
        ) else {
            return Err(table_error(format!("row {row}"), "is cut off".to_string()));
        };
        let Some(kind) = SectionKind::from_code(code) else {
            let problem =
                format!("row {row} has unknown section kind {code} (1 = manifest, 2 = weights)");
            return Err(table_error(format!("kind {code}"), problem));
        };
        if offset < table_end {
            let problem =
                format!("starts at offset {offset}, inside the header that ends at {table_end}");
            return Err(table_error(kind.to_string(), problem));
        }
        let slot = match kind {
            SectionKind::Manifest => &mut found[0],
            SectionKind::Weights => &mut found[1],
        };
        if slot.is_some() {
            return Err(table_error(
                kind.to_string(),
                format!("appears twice (again in row {row})"),
            ));
        }
        *slot = Some(Section {
            kind,
            offset,
            len,
            checksum,
        });
    }
    match found {
        [Some(manifest), Some(weights)] => Ok([manifest, weights]),
        [None, _] => Err(table_error(
            "manifest".into(),
            "is missing from the section table".into(),
        )),
        [_, None] => Err(table_error(
            "weights".into(),
            "is missing from the section table".into(),
        )),
    }
}

/// The byte range of `section`, or the truncation that cuts it off.
fn section_range(section: Section, len: u64, path: &Path) -> Result<Range<usize>> {
    let what = format!("the {} section", section.kind);
    let end = section
        .offset
        .checked_add(section.len)
        .filter(|end| *end <= len);
    let (Some(end), Ok(start)) = (end, usize::try_from(section.offset)) else {
        return Err(BundleError::Truncated {
            path: path.to_path_buf(),
            what,
            needed: section.offset.saturating_add(section.len),
            len,
        });
    };
    Ok(start..to_usize(end))
}

fn section_bytes<'a>(bytes: &'a [u8], section: Section, path: &Path) -> Result<&'a [u8]> {
    let range = section_range(section, len64(bytes.len()), path)?;
    Ok(bytes.get(range).unwrap_or_default())
}

/// `value` rounded up to a multiple of `align`, saturating.
pub(crate) fn align_up(value: u64, align: u64) -> u64 {
    value.div_ceil(align).saturating_mul(align)
}

/// A length as `u64` (lossless on every target Rust supports).
pub(crate) fn len64(len: usize) -> u64 {
    u64::try_from(len).unwrap_or(u64::MAX)
}

/// A `u64` already checked against an in-memory length, as `usize`.
fn to_usize(value: u64) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}

fn le_u16(bytes: &[u8], at: usize) -> Option<u16> {
    let raw = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes(raw.try_into().ok()?))
}

fn le_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let raw = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(raw.try_into().ok()?))
}

fn le_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let raw = bytes.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(raw.try_into().ok()?))
}
