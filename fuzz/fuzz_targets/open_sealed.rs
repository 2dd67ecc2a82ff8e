//! Fuzzes the manifest decoder and validator behind a well-formed container. Raw bytes rarely
//! get past the checksums, so here the input is `weights_len: u16 LE` then the manifest
//! section's bytes, and the target seals them into a bundle of the version this crate reads
//! (`FORMAT_VERSION`, so a format change cannot leave every input refused at the version
//! check) with correct checksums (the layout of the `poot_bundle` crate docs) before opening
//! it.

#![no_main]

use libfuzzer_sys::fuzz_target;
use poot_bundle::{FORMAT_VERSION, Target, inspect, open_bytes};
use xxhash_rust::xxh3::xxh3_64;

/// The bundle `poot_bundle::write` would lay out for these sections.
fn seal(manifest: &[u8], weights: &[u8]) -> Vec<u8> {
    let weights_offset = (72 + manifest.len()).div_ceil(4096) * 4096;
    let mut out = b"POOTBNDL".to_vec();
    out.extend_from_slice(&FORMAT_VERSION.major.to_le_bytes());
    out.extend_from_slice(&FORMAT_VERSION.minor.to_le_bytes());
    out.extend_from_slice(&2u32.to_le_bytes());
    for (kind, offset, bytes) in [(1u32, 72, manifest), (2, weights_offset, weights)] {
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&(offset as u64).to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(&xxh3_64(bytes).to_le_bytes());
    }
    out.extend_from_slice(manifest);
    out.resize(weights_offset, 0);
    out.extend_from_slice(weights);
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((len, manifest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let weights: Vec<u8> = (0..u16::from_le_bytes(*len)).map(|i| i as u8).collect();
    let Ok(bundle) = open_bytes(seal(manifest, &weights)) else {
        return;
    };
    let manifest = bundle.manifest();
    for info in &manifest.weights {
        assert!(
            bundle.weight(info).is_ok(),
            "a validated weight is readable"
        );
    }
    for entry in &manifest.entries {
        assert!(bundle.entry(&entry.key).is_ok(), "a listed entry is found");
    }
    let _ = bundle.target(&[Target::Ptx { sm: 90 }, Target::Spirv { native_subgroups: false }, Target::Reference]);
    let _ = inspect(&bundle);
});
