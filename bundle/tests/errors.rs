//! Every way a bundle is refused: the typed error and the message that says what is wrong.

mod common;

use common::{
    CURRENT, MANIFEST_OFFSET, assemble, assemble_unchecked, encode, key, manifest_range, read_u64,
    sample, sample_bytes, table_field, weights_range, write_u64,
};
use poot_bundle::{
    BundleError, SectionKind, StepKind, Target, open, open_bytes, write, write_file,
};

/// A way to break a manifest, and the part of the message that must say so.
type Breakage = (&'static str, fn(&mut poot_bundle::Manifest));

/// The error `open_bytes` gives for `bytes`.
fn refused(bytes: Vec<u8>) -> BundleError {
    open_bytes(bytes).expect_err("the bundle should be refused")
}

#[test]
fn wrong_magic() {
    let mut bytes = sample_bytes();
    bytes[..8].copy_from_slice(b"GGUF\x03\0\0\0");
    let err = refused(bytes);
    assert!(matches!(err, BundleError::Magic { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        r#"bundle <memory>: not a poot bundle: it starts with GGUF\x03\x00\x00\x00, expected "POOTBNDL""#
    );
    // A short file that is not a bundle is named as such, not as truncated.
    let err = refused(b"{}".to_vec());
    assert_eq!(
        err.to_string(),
        r#"bundle <memory>: not a poot bundle: it starts with {}, expected "POOTBNDL""#
    );
}

#[test]
fn truncated_at_several_lengths() {
    let bytes = sample_bytes();
    let manifest = manifest_range(&bytes);
    let weights = weights_range(&bytes);
    let cases = [
        (0, "the header"),
        (5, "the header"),
        (15, "the header"),
        (16, "the section table"),
        (50, "the section table"),
        (MANIFEST_OFFSET, "the manifest section"),
        (manifest.start + manifest.len() / 2, "the manifest section"),
        (manifest.end, "the weights section"),
        (weights.start, "the weights section"),
        (weights.end - 1, "the weights section"),
    ];
    for (len, what) in cases {
        let err = refused(bytes[..len].to_vec());
        let BundleError::Truncated {
            what: found,
            needed,
            len: file_len,
            ..
        } = &err
        else {
            panic!("truncated to {len}: {err:?}");
        };
        assert_eq!((found.as_str(), *file_len), (what, len as u64), "{err}");
        let message = format!(
            "bundle <memory>: truncated: {what} needs bytes up to offset {needed}, the file has {len}"
        );
        assert_eq!(err.to_string(), message);
    }
}

#[test]
fn truncated_file_on_disk_names_the_path() {
    let dir = std::env::temp_dir().join(format!("poot-bundle-trunc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cut.pbundle");
    std::fs::write(&path, &sample_bytes()[..100]).unwrap();
    let err = open(&path).unwrap_err();
    assert!(
        err.to_string().starts_with(&format!(
            "bundle {}: truncated: the manifest section needs bytes up to offset",
            path.display()
        )),
        "{err}"
    );
    std::fs::write(&path, b"").unwrap();
    let err = open(&path).unwrap_err();
    assert!(
        matches!(
            err,
            BundleError::Truncated {
                needed: 16,
                len: 0,
                ..
            }
        ),
        "{err:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_file_is_an_io_error_with_the_path() {
    let err = open(std::path::Path::new("/nonexistent/model.pbundle")).unwrap_err();
    assert!(matches!(err, BundleError::Io { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("bundle /nonexistent/model.pbundle: "),
        "{err}"
    );
}

#[test]
fn checksum_mismatch_in_manifest() {
    let mut bytes = sample_bytes();
    let at = manifest_range(&bytes).start + 10;
    bytes[at] ^= 0x01;
    let expected = read_u64(&bytes, table_field(0, 20));
    let err = refused(bytes.clone());
    let found = xxhash_rust::xxh3::xxh3_64(&bytes[manifest_range(&bytes)]);
    assert!(
        matches!(
            err,
            BundleError::Checksum {
                section: SectionKind::Manifest,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "bundle <memory>: manifest section is corrupt: its xxh3-64 checksum is {found:#018x}, \
             the section table says {expected:#018x}"
        )
    );
}

#[test]
fn checksum_mismatch_in_weights() {
    let mut bytes = sample_bytes();
    let at = weights_range(&bytes).start + 1200;
    bytes[at] ^= 0x80;
    let err = refused(bytes);
    assert!(
        matches!(
            err,
            BundleError::Checksum {
                section: SectionKind::Weights,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("bundle <memory>: weights section is corrupt: its xxh3-64 checksum is 0x"),
        "{err}"
    );
}

#[test]
fn wrong_major_version() {
    let (manifest, weights) = sample();
    let err = refused(assemble((3, 0), &encode(&manifest), &weights));
    let BundleError::Version {
        found, supported, ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(
        (found.major, found.minor, supported.major, supported.minor),
        (3, 0, 2, 3)
    );
    assert_eq!(
        err.to_string(),
        "bundle <memory>: format version 3.0 is not supported: this poot reads 2.0 to 2.3; \
         recompile the bundle with a matching poot-compile"
    );
    let err = refused(assemble((1, 0), &encode(&manifest), &weights));
    assert!(
        err.to_string()
            .contains("format version 1.0 is not supported"),
        "{err}"
    );
}

#[test]
fn newer_minor_version() {
    let (manifest, weights) = sample();
    let err = refused(assemble((2, 4), &encode(&manifest), &weights));
    assert!(matches!(err, BundleError::Version { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "bundle <memory>: format version 2.4 is not supported: this poot reads 2.0 to 2.3; \
         recompile the bundle with a matching poot-compile"
    );
}

/// A bundle of an older minor version of the same major opens (minor versions only add).
#[test]
fn older_minor_version_opens() {
    let (manifest, weights) = sample();
    let bundle =
        open_bytes(assemble((2, 0), &encode(&manifest), &weights)).expect("a 2.0 bundle opens");
    assert_eq!((bundle.version().major, bundle.version().minor), (2, 0));
}

#[test]
fn no_accepted_target() {
    let bundle = open_bytes(sample_bytes()).unwrap();
    let err = bundle
        .target(&[
            Target::Spirv {
                native_subgroups: false,
            },
            Target::Ptx { sm: 80 },
        ])
        .unwrap_err();
    assert!(matches!(err, BundleError::NoTarget { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "the bundle has no code for this device: it has [ptx-sm90, reference], the device accepts \
         [spirv, ptx-sm80]; recompile for one of the accepted targets"
    );
    let err = bundle.target(&[]).unwrap_err();
    assert!(
        err.to_string().contains("the device accepts none;"),
        "{err}"
    );
}

#[test]
fn missing_entry_names_the_flag() {
    let bundle = open_bytes(sample_bytes()).unwrap();
    let message = |kind, rows, cap| bundle.entry(&key(kind, rows, cap)).unwrap_err().to_string();
    assert_eq!(
        message(StepKind::Decode, 8, 64),
        "the bundle has no entry `generate decode rows=8 cap=64 greedy`; \
         recompile with --batch 8 to add it"
    );
    assert_eq!(
        message(StepKind::Prefill { tokens: 128 }, 1, 64),
        "the bundle has no entry `generate prefill tokens=128 rows=1 cap=64 greedy`; \
         recompile with --prefill-chunks 128 to add it"
    );
    assert_eq!(
        message(StepKind::Decode, 1, 4096),
        "the bundle has no entry `generate decode rows=1 cap=4096 greedy`; \
         recompile with --cap 4096 to add it"
    );
    assert_eq!(
        message(StepKind::Decode, 2, 4096),
        "the bundle has no entry `generate decode rows=2 cap=4096 greedy`; \
         recompile with --batch 2 --cap 4096 to add it"
    );
    // Prefill with 4 rows: 4 rows exist only for decode.
    assert_eq!(
        message(StepKind::Prefill { tokens: 16 }, 4, 64),
        "the bundle has no entry `generate prefill tokens=16 rows=4 cap=64 greedy`; \
         recompile with --batch 4 to add it"
    );
    let mut other = key(StepKind::Decode, 1, 64);
    other.program = "encode".to_string();
    let err = bundle.entry(&other).unwrap_err();
    assert!(matches!(err, BundleError::NoEntry { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "the bundle has no entry `encode decode rows=1 cap=64 greedy`: it has no program `encode` \
         at all (it has: generate); recompile with --batch 1 --cap 64 to add it"
    );
}

#[test]
fn out_of_range_binding_refused_at_write_and_open() {
    let (mut manifest, weights) = sample();
    manifest.entries[1].dispatches[2].bindings[0].offset = 1000;
    let message = "bundle <memory>: entry `generate decode rows=4 cap=64 greedy` dispatch 2 \
                   binding 0 (offset 1000, len 512) does not fit in the scratch arena of 1024 bytes";
    let err = write(&manifest, &weights).unwrap_err();
    assert!(matches!(err, BundleError::OutOfRange { .. }), "{err:?}");
    assert_eq!(err.to_string(), message);
    let err = refused(assemble_unchecked(&manifest, &weights));
    assert_eq!(err.to_string(), message);
    // An offset + len that overflows u64 is out of range, not a wrap-around.
    manifest.entries[1].dispatches[2].bindings[0].offset = u64::MAX;
    let err = refused(assemble_unchecked(&manifest, &weights));
    assert!(
        matches!(
            err,
            BundleError::OutOfRange {
                offset: u64::MAX,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn out_of_range_slot_readback_state_and_weight() {
    let (manifest, weights) = sample();
    let cases: [Breakage; 4] = [
        (
            "slot Pos (offset 24, len 16) does not fit in the slots arena of 32 bytes",
            |m| m.entries[0].slots[1].offset = 24,
        ),
        (
            "readback `token` (offset 0, len 17) does not fit in the readback arena of 16 bytes",
            |m| m.entries[0].readback[0].len = 17,
        ),
        (
            "state `blk.0.k` (offset 1, len 4096) does not fit in the state arena of 4096 bytes",
            |m| m.entries[0].state[0].offset = 1,
        ),
        (
            "weight `output_norm` (offset 1536, len 18) does not fit in the weights section",
            |m| m.weights[2].len = 18,
        ),
    ];
    for (problem, mutate) in cases {
        let mut bad = manifest.clone();
        mutate(&mut bad);
        let err = refused(assemble_unchecked(&bad, &weights));
        assert!(matches!(err, BundleError::OutOfRange { .. }), "{err:?}");
        assert!(err.to_string().contains(problem), "{err}");
    }
    let bundle = open_bytes(sample_bytes()).unwrap();
    let mut far = manifest.weights[0].clone();
    far.offset = 4096;
    let err = bundle.weight(&far).unwrap_err();
    assert_eq!(
        err.to_string(),
        "bundle <memory>: weight `token_embd` (offset 4096, len 1000) does not fit in the weights \
         section of 1553 bytes"
    );
}

#[test]
fn inconsistent_manifests_refused() {
    let (manifest, weights) = sample();
    let cases: [Breakage; 8] = [
        (
            "target reference: kernel 1 is `gemm`, in target ptx-sm90 it is `matmul_q8`",
            |m| m.targets[1].kernels[1].name = "gemm".into(),
        ),
        (
            "target reference: it has 2 kernels, target ptx-sm90 has 3",
            |m| {
                m.targets[1].kernels.pop();
            },
        ),
        ("target ptx-sm90: it appears twice", |m| {
            m.targets[1].target = Target::Ptx { sm: 90 }
        }),
        (
            "dispatch 1: it launches kernel 3, the bundle has 3 kernels",
            |m| m.entries[2].dispatches[1].kernel = 3,
        ),
        (
            "entry `generate decode rows=4 cap=64 greedy`: it appears twice",
            |m| m.entries[0].key.rows = 4,
        ),
        (
            "weight `blk.0.attn_q`: it starts at offset 1100, which is not a multiple of 256",
            |m| m.weights[1].offset = 1100,
        ),
        (
            "dispatch 0 binding 0: it writes the weights arena, which is read-only",
            |m| m.entries[0].dispatches[0].bindings[0].writes = true,
        ),
        (
            "the weights arena: it is 4096 bytes, the weights section 1553",
            |m| m.arenas.weights = 4096,
        ),
    ];
    for (problem, mutate) in cases {
        let mut bad = manifest.clone();
        mutate(&mut bad);
        let err = write(&bad, &weights).unwrap_err();
        assert!(matches!(err, BundleError::Invalid { .. }), "{err:?}");
        assert!(err.to_string().contains(problem), "{err}");
        let err = refused(assemble_unchecked(&bad, &weights));
        assert!(err.to_string().contains(problem), "{err}");
    }
}

#[test]
fn weights_that_do_not_fit_are_refused_at_write() {
    let (manifest, weights) = sample();
    let err = write(&manifest, &weights[..1000]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "bundle <memory>: the weights arena: it is 1553 bytes, the weights section 1000"
    );
    let dir = std::env::temp_dir().join(format!("poot-bundle-write-{}", std::process::id()));
    let path = dir.join("never.pbundle");
    let err = write_file(&path, &manifest, &weights[..1000]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("bundle {}: ", path.display())),
        "{err}"
    );
    assert!(!path.exists());
}

#[test]
fn garbage_manifest_with_a_valid_checksum() {
    let (_, weights) = sample();
    let err = refused(assemble(CURRENT, &[0xff; 40], &weights));
    assert!(matches!(err, BundleError::Decode { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("bundle <memory>: the manifest section does not decode: "),
        "{err}"
    );
    let (manifest, weights) = sample();
    let mut encoded = encode(&manifest);
    encoded.push(0);
    let err = refused(assemble(CURRENT, &encoded, &weights));
    let len = encoded.len();
    assert_eq!(
        err.to_string(),
        format!(
            "bundle <memory>: the manifest section does not decode: the manifest ends after {} \
             of the section's {len} bytes",
            len - 1
        )
    );
}

#[test]
fn malformed_section_tables() {
    let bytes = sample_bytes();
    let weights_at = weights_range(&bytes).start as u64;
    let section = |mutate: &dyn Fn(&mut Vec<u8>)| {
        let mut bad = bytes.clone();
        mutate(&mut bad);
        let err = refused(bad);
        assert!(matches!(err, BundleError::Section { .. }), "{err:?}");
        err.to_string()
    };
    assert_eq!(
        section(&|b| b[table_field(1, 0)] = 7),
        "bundle <memory>: section kind 7: row 1 has unknown section kind 7 (1 = manifest, 2 = weights)"
    );
    assert_eq!(
        section(&|b| b[table_field(1, 0)] = 1),
        "bundle <memory>: section manifest: appears twice (again in row 1)"
    );
    assert_eq!(
        section(&|b| b[12] = 1),
        "bundle <memory>: section weights: is missing from the section table"
    );
    assert_eq!(
        section(&|b| write_u64(b, table_field(1, 4), weights_at + 256)),
        format!(
            "bundle <memory>: section weights: starts at offset {}, which is not a multiple of 4096",
            weights_at + 256
        )
    );
    assert_eq!(
        section(&|b| write_u64(b, table_field(0, 4), 8)),
        "bundle <memory>: section manifest: starts at offset 8, inside the header that ends at 72"
    );
    assert_eq!(
        section(&|b| b.extend_from_slice(&[0; 3])),
        format!(
            "bundle <memory>: section weights: ends at offset {}, but the bundle has 3 more bytes \
             after it",
            bytes.len()
        )
    );
    let padding_at = manifest_range(&bytes).end + 5;
    assert_eq!(
        section(&|b| b[padding_at] = 0xaa),
        format!(
            "bundle <memory>: section padding: byte {padding_at} before the weights section is \
             0xaa; padding between sections is zero"
        )
    );
    let manifest_len = manifest_range(&bytes).len() as u64;
    assert_eq!(
        section(&|b| write_u64(b, table_field(0, 4), weights_at - manifest_len + 1)),
        format!(
            "bundle <memory>: section manifest: ends at offset {}, past the start of the weights \
             section at {weights_at}",
            weights_at + 1
        )
    );
}

#[test]
fn errors_and_bundles_cross_threads() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<BundleError>();
    assert_send_sync::<poot_bundle::OpenedBundle>();
}
