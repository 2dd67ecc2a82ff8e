//! Shared by the bundle tests: a small but complete sample bundle, and an independent
//! assembler of the documented layout that skips the manifest checks, so tests can build
//! bundles `write` would refuse (bad ranges, bad versions, garbage manifests).

#![allow(dead_code)]

use poot_bundle::{
    Arena, ArenaSizes, Binding, Dispatch, Entry, EntryKey, FORMAT_VERSION, KernelCode, Manifest,
    ModelInfo, ReadbackInfo, Sampling, SlotInfo, SlotKind, StateInfo, StepKind, Target, TargetCode,
    TextInfo, WeightPacker,
};

/// Offset of the manifest in a two-section bundle (header 16 + two 28-byte rows).
pub const MANIFEST_OFFSET: usize = 72;

/// The key of an entry of the sample.
pub fn key(kind: StepKind, rows: u32, cap: u32) -> EntryKey {
    EntryKey {
        program: "generate".to_string(),
        kind,
        rows,
        cap,
        sampling: Sampling::Greedy,
    }
}

fn kernels(prefix: &str) -> Vec<KernelCode> {
    ["embed", "matmul_q8", "argmax"]
        .iter()
        .enumerate()
        .map(|(i, name)| KernelCode {
            name: name.to_string(),
            code: format!("{prefix} code of {name}")
                .repeat(i + 1)
                .into_bytes(),
            workgroup: [64 << i, 1, 1],
            shared_bytes: 1024 * i as u32,
            dependent_launch: i == 1,
        })
        .collect()
}

fn entry(key: EntryKey, bytes_read: u64) -> Entry {
    let bind = |arena, offset, len, writes| Binding {
        arena,
        offset,
        len,
        writes,
    };
    Entry {
        key,
        dispatches: vec![
            Dispatch {
                kernel: 0,
                grid: [1, 1, 1],
                bindings: vec![
                    bind(Arena::Weights, 0, 1000, false),
                    bind(Arena::Slots, 0, 16, false),
                    bind(Arena::Scratch, 0, 512, true),
                ],
                work: 10,
            },
            Dispatch {
                kernel: 1,
                grid: [4, 1, 1],
                bindings: vec![
                    bind(Arena::Weights, 1024, 300, false),
                    bind(Arena::State, 0, 4096, true),
                    bind(Arena::Scratch, 512, 512, true),
                ],
                work: 40,
            },
            Dispatch {
                kernel: 2,
                grid: [1, 1, 1],
                bindings: vec![
                    bind(Arena::Scratch, 512, 512, false),
                    bind(Arena::Readback, 0, 16, true),
                ],
                work: 1,
            },
        ],
        slots: vec![
            SlotInfo {
                kind: SlotKind::Token,
                offset: 0,
                len: 16,
                dtype: "i32".to_string(),
                dims: vec![4],
            },
            SlotInfo {
                kind: SlotKind::Pos,
                offset: 16,
                len: 16,
                dtype: "i32".to_string(),
                dims: vec![4],
            },
        ],
        readback: vec![ReadbackInfo {
            name: "token".to_string(),
            offset: 0,
            len: 16,
            dtype: "i32".to_string(),
            dims: vec![4],
        }],
        state: vec![StateInfo {
            name: "blk.0.k".to_string(),
            offset: 0,
            len: 4096,
            dims: vec![1, 64, 2, 8],
        }],
        scratch_bytes: 1024,
        bytes_read,
    }
}

/// A two-target, three-entry, three-weight manifest and its weights section.
pub fn sample() -> (Manifest, Vec<u8>) {
    let mut packer = WeightPacker::new();
    let tensor = |n: usize, seed: u8| -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
    };
    packer.push("token_embd", "q8_0", &[1000], &tensor(1000, 1));
    packer.push("blk.0.attn_q", "f32", &[5, 15], &tensor(300, 2));
    packer.push("output_norm", "u8", &[17], &tensor(17, 3));
    let (weights_map, weights) = packer.finish();
    let manifest = Manifest {
        compiler_version: "poot-compile test".to_string(),
        model: ModelInfo {
            family: "llama".to_string(),
            n_layers: 1,
            d_model: 16,
            vocab: 32,
            context: 64,
        },
        text: TextInfo {
            tokenizer_json: r#"{"model":{"type":"BPE"}}"#.to_string(),
            chat_template: Some("{{ messages }}".to_string()),
            bos: Some(1),
            eos: Some(2),
            add_bos: true,
        },
        targets: vec![
            TargetCode {
                target: Target::Ptx { sm: 90 },
                kernels: kernels("ptx"),
            },
            TargetCode {
                target: Target::Reference,
                kernels: kernels("kernel ir"),
            },
        ],
        entries: vec![
            entry(key(StepKind::Decode, 1, 64), 5396),
            entry(key(StepKind::Decode, 4, 64), 5396),
            entry(key(StepKind::Prefill { tokens: 16 }, 1, 64), 5396),
        ],
        arenas: ArenaSizes {
            weights: weights.len() as u64,
            state: 4096,
            slots: 32,
            scratch: 1024,
            readback: 16,
        },
        weights: weights_map,
    };
    (manifest, weights)
}

/// The sample, written.
pub fn sample_bytes() -> Vec<u8> {
    let (manifest, weights) = sample();
    poot_bundle::write(&manifest, &weights).expect("the sample is valid")
}

/// The bincode encoding the format uses for the manifest.
pub fn encode(manifest: &Manifest) -> Vec<u8> {
    bincode::serde::encode_to_vec(manifest, bincode::config::standard()).expect("encodes")
}

/// Lays out a bundle per the crate docs from raw parts, with no manifest checks.
pub fn assemble(version: (u16, u16), manifest: &[u8], weights: &[u8]) -> Vec<u8> {
    let weights_offset = (MANIFEST_OFFSET + manifest.len()).div_ceil(4096) * 4096;
    let mut out = b"POOTBNDL".to_vec();
    out.extend_from_slice(&version.0.to_le_bytes());
    out.extend_from_slice(&version.1.to_le_bytes());
    out.extend_from_slice(&2u32.to_le_bytes());
    for (kind, offset, bytes) in [
        (1u32, MANIFEST_OFFSET, manifest),
        (2, weights_offset, weights),
    ] {
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&(offset as u64).to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(bytes).to_le_bytes());
    }
    out.extend_from_slice(manifest);
    out.resize(weights_offset, 0);
    out.extend_from_slice(weights);
    out
}

/// The format version this crate writes, as `assemble` takes it.
pub const CURRENT: (u16, u16) = (FORMAT_VERSION.major, FORMAT_VERSION.minor);

/// `manifest` and `weights` as a bundle of the current format, skipping the checks `write`
/// makes.
pub fn assemble_unchecked(manifest: &Manifest, weights: &[u8]) -> Vec<u8> {
    assemble(CURRENT, &encode(manifest), weights)
}

/// Reads the little-endian `u64` at `at`.
pub fn read_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// Overwrites the little-endian `u64` at `at`.
pub fn write_u64(bytes: &mut [u8], at: usize, value: u64) {
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

/// Byte offset of field `field` (0 kind, 4 offset, 12 len, 20 checksum) of table row `row`.
pub fn table_field(row: usize, field: usize) -> usize {
    16 + 28 * row + field
}

/// The manifest section's byte range in a bundle `write` made.
pub fn manifest_range(bytes: &[u8]) -> std::ops::Range<usize> {
    let len = read_u64(bytes, table_field(0, 12)) as usize;
    MANIFEST_OFFSET..MANIFEST_OFFSET + len
}

/// The weights section's byte range in a bundle `write` made.
pub fn weights_range(bytes: &[u8]) -> std::ops::Range<usize> {
    let offset = read_u64(bytes, table_field(1, 4)) as usize;
    let len = read_u64(bytes, table_field(1, 12)) as usize;
    offset..offset + len
}

/// Deterministic pseudo-random numbers (splitmix64), so failures reproduce.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}
