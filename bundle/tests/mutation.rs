//! Opening never panics: 20,000 seeded variants of a valid bundle (byte flips, truncations,
//! section-table corruptions, mutated manifests re-sealed with correct checksums, and manifests
//! with corrupted ranges and indices) are each opened, and every one that opens is fully
//! queried. The deterministic companion of the `cargo fuzz` targets in `fuzz/` (which need
//! nightly): it runs in every `cargo test`.

mod common;

use common::{CURRENT, Rng, assemble, assemble_unchecked, encode, sample, sample_bytes};
use poot_bundle::{
    BundleError, FORMAT_VERSION, Manifest, OpenedBundle, Target, inspect, open_bytes,
};

/// Values that sit on the edges of the checks.
fn interesting(rng: &mut Rng, len: usize) -> u64 {
    let len = len as u64;
    let values = [
        0,
        1,
        2,
        8,
        16,
        72,
        255,
        256,
        4095,
        4096,
        len.saturating_sub(1),
        len,
        len + 1,
        u64::from(u32::MAX),
        1 << 63,
        u64::MAX - 7,
        u64::MAX,
    ];
    match rng.below(values.len() + 1) {
        i if i < values.len() => values[i],
        _ => rng.next() >> rng.below(64),
    }
}

/// Queries everything an opened bundle offers; none of it may panic.
fn exercise(bundle: &OpenedBundle) {
    let manifest = bundle.manifest();
    let _ = inspect(bundle);
    for info in &manifest.weights {
        bundle.weight(info).expect("a validated weight is readable");
    }
    for entry in &manifest.entries {
        bundle.entry(&entry.key).expect("a listed entry is found");
    }
    let all = [
        Target::Ptx { sm: 90 },
        Target::Spirv {
            native_subgroups: false,
        },
        Target::Reference,
    ];
    let _ = bundle.target(&all);
    let _ = format!("{bundle:?}");
}

/// Opens `bytes`, exercising the bundle if it opens; returns whether it opened.
fn try_open(bytes: Vec<u8>) -> Result<(), BundleError> {
    let bundle = open_bytes(bytes)?;
    exercise(&bundle);
    Ok(())
}

/// Mutations of the encoded manifest: flips, edge bytes (bincode varint markers), inserts,
/// deletions, duplications and cuts.
fn mutate_bytes(rng: &mut Rng, bytes: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(3) {
        if bytes.is_empty() {
            bytes.push(rng.next() as u8);
            continue;
        }
        let at = rng.below(bytes.len());
        match rng.below(6) {
            0 => bytes[at] ^= 1 << rng.below(8),
            1 => bytes[at] = [0, 1, 0x7f, 0x80, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff][rng.below(10)],
            2 => {
                let insert: Vec<u8> = (0..1 + rng.below(8)).map(|_| rng.next() as u8).collect();
                bytes.splice(at..at, insert);
            }
            3 => {
                let end = (at + 1 + rng.below(16)).min(bytes.len());
                bytes.drain(at..end);
            }
            4 => {
                let end = (at + 1 + rng.below(64)).min(bytes.len());
                let copy = bytes[at..end].to_vec();
                let to = rng.below(bytes.len());
                bytes.splice(to..to, copy);
            }
            _ => bytes.truncate(at),
        }
    }
}

/// Corrupts one range, index or size of the manifest.
fn mutate_manifest(rng: &mut Rng, m: &mut Manifest, weights_len: usize) {
    let value = interesting(rng, weights_len);
    let entry = rng.below(m.entries.len());
    let entry = &mut m.entries[entry];
    match rng.below(12) {
        0 | 1 => {
            let d = rng.below(entry.dispatches.len());
            let b = rng.below(entry.dispatches[d].bindings.len());
            let binding = &mut entry.dispatches[d].bindings[b];
            if rng.below(2) == 0 {
                binding.offset = value;
            } else {
                binding.len = value;
            }
        }
        2 => {
            let d = rng.below(entry.dispatches.len());
            entry.dispatches[d].kernel = value as u32;
        }
        3 => {
            let s = rng.below(entry.slots.len());
            entry.slots[s].offset = value;
        }
        4 => entry.readback[0].len = value,
        5 => entry.state[0].offset = value,
        6 => entry.scratch_bytes = value,
        7 => {
            let w = rng.below(m.weights.len());
            if rng.below(2) == 0 {
                m.weights[w].offset = value;
            } else {
                m.weights[w].len = value;
            }
        }
        8 => match rng.below(5) {
            0 => m.arenas.weights = value,
            1 => m.arenas.state = value,
            2 => m.arenas.slots = value,
            3 => m.arenas.scratch = value,
            _ => m.arenas.readback = value,
        },
        9 if !m.targets.is_empty() => {
            let t = rng.below(m.targets.len());
            let kernels = &mut m.targets[t].kernels;
            if rng.below(2) == 0 || kernels.len() < 2 {
                kernels.pop();
            } else {
                kernels.swap(0, 1);
            }
        }
        10 => {
            let d = rng.below(entry.dispatches.len());
            entry.dispatches[d].bindings[0].arena = poot_bundle::Arena::Weights;
        }
        _ => m.targets.clear(),
    }
}

#[test]
fn twenty_thousand_variants_never_panic() {
    let original = sample_bytes();
    let (manifest, weights) = sample();
    let encoded = encode(&manifest);
    let mut rng = Rng(0x5eed_b0d1e);
    let mut opened = [0usize; 5];
    let mut refused = [0usize; 5];
    let mut count = |category: usize, result: Result<(), BundleError>| match result {
        Ok(()) => opened[category] += 1,
        Err(err) => {
            assert!(!err.to_string().is_empty());
            refused[category] += 1;
        }
    };

    // 0: byte flips anywhere, no re-sealing: every changed byte of a bundle matters.
    for _ in 0..6000 {
        let mut bytes = original.clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(bytes.len());
            bytes[at] ^= 1 + rng.below(255) as u8;
        }
        let changed = bytes != original;
        let result = try_open(bytes);
        assert!(!changed || result.is_err(), "a corrupted bundle opened");
        count(0, result);
    }
    // 1: truncations: always the typed truncation error.
    for _ in 0..2000 {
        let len = rng.below(original.len());
        let err = try_open(original[..len].to_vec()).expect_err("a truncated bundle opened");
        assert!(
            matches!(err, BundleError::Truncated { .. }),
            "cut at {len}: {err:?}"
        );
        count(1, Err(err));
    }
    // 2: header and section-table fields set to edge values.
    for _ in 0..2000 {
        let mut bytes = original.clone();
        let value = interesting(&mut rng, bytes.len());
        let (at, width) = match rng.below(6) {
            0 => (8 + 2 * rng.below(2), 2),
            1 => (12, 4),
            2 => (16 + 28 * rng.below(2), 4),
            _ => (20 + 28 * rng.below(2) + 8 * rng.below(3), 8),
        };
        bytes[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
        // An older minor version of the same major is not corruption: it must open.
        let older_minor = at == 10 && value & 0xffff <= u64::from(FORMAT_VERSION.minor);
        let changed = bytes != original && !older_minor;
        let result = try_open(bytes);
        assert!(!changed || result.is_err(), "a corrupted header opened");
        assert!(
            !older_minor || result.is_ok(),
            "an older minor version was refused"
        );
        count(2, result);
    }
    // 3: mutated manifest bytes with correct checksums: the decoder and validator see them.
    for _ in 0..6000 {
        let mut bytes = encoded.clone();
        mutate_bytes(&mut rng, &mut bytes);
        count(3, try_open(assemble(CURRENT, &bytes, &weights)));
    }
    // 4: well-encoded manifests with out-of-range or inconsistent fields.
    for _ in 0..4000 {
        let mut bad = manifest.clone();
        for _ in 0..1 + rng.below(2) {
            mutate_manifest(&mut rng, &mut bad, weights.len());
        }
        count(4, try_open(assemble_unchecked(&bad, &weights)));
    }

    eprintln!("opened per category: {opened:?}, refused: {refused:?}");
    assert_eq!(
        opened.iter().sum::<usize>() + refused.iter().sum::<usize>(),
        20_000
    );
    // The decoder and validator paths were really reached, both ways.
    assert!(refused[3] > 1000 && refused[4] > 1000);
    assert!(opened[3] > 0 && opened[4] > 0);
}

/// Seeds the fuzz targets' corpora (`cargo test -p poot-bundle --test mutation -- --ignored`)
/// with the sample, so libFuzzer starts from a valid bundle instead of discovering the layout:
/// `corpus/open` gets the bundle, `corpus/open_sealed` its weights length and manifest bytes.
#[test]
#[ignore]
fn write_fuzz_seed() {
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let corpus = std::path::Path::new(&root).join("../fuzz/corpus");
    let (manifest, weights) = sample();
    let mut sealed = (weights.len() as u16).to_le_bytes().to_vec();
    sealed.extend_from_slice(&encode(&manifest));
    for (target, bytes) in [("open", sample_bytes()), ("open_sealed", sealed)] {
        std::fs::create_dir_all(corpus.join(target)).unwrap();
        std::fs::write(corpus.join(target).join("sample"), bytes).unwrap();
    }
}
