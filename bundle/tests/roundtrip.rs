//! What a valid bundle gives back: the same manifest and weights, byte-identical output for
//! the same inputs, the documented layout, target and entry lookups, and `inspect`.

mod common;

use common::{
    MANIFEST_OFFSET, assemble_unchecked, key, read_u64, sample, sample_bytes, table_field,
};
use poot_bundle::{
    FORMAT_VERSION, SECTION_ALIGN, StepKind, Target, WEIGHT_ALIGN, WeightPacker, dispatches,
    inspect, kernel_files, open, open_bytes, write, write_file,
};

#[test]
fn round_trip_in_memory() {
    let (manifest, weights) = sample();
    let bundle = open_bytes(write(&manifest, &weights).unwrap()).unwrap();
    assert_eq!(bundle.manifest(), &manifest);
    assert_eq!(bundle.weights(), &weights[..]);
    assert_eq!(bundle.version(), FORMAT_VERSION);
    assert_eq!(bundle.path().to_str(), Some("<memory>"));
    for info in &manifest.weights {
        let start = info.offset as usize;
        assert_eq!(
            bundle.weight(info).unwrap(),
            &weights[start..start + info.len as usize]
        );
    }
}

#[test]
fn round_trip_through_a_mapped_file() {
    let (manifest, weights) = sample();
    let dir = std::env::temp_dir().join(format!("poot-bundle-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sample.pbundle");
    write_file(&path, &manifest, &weights).unwrap();
    let bundle = open(&path).unwrap();
    assert_eq!(bundle.manifest(), &manifest);
    assert_eq!(bundle.weights(), &weights[..]);
    assert_eq!(bundle.path(), path);
    // The weights section starts on a page of the file, so the mapping puts it on a page.
    assert_eq!(
        bundle.weights().as_ptr() as usize % SECTION_ALIGN as usize,
        0
    );
    assert_eq!(std::fs::read(&path).unwrap(), sample_bytes());
    drop(bundle);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn same_inputs_give_identical_bytes() {
    let (manifest, weights) = sample();
    let first = write(&manifest, &weights).unwrap();
    let (again, again_weights) = sample();
    assert_eq!(first, write(&again, &again_weights).unwrap());
    assert_eq!(first, write(&manifest.clone(), &weights.clone()).unwrap());
}

#[test]
fn layout_is_the_documented_one() {
    let bytes = sample_bytes();
    assert_eq!(&bytes[..8], b"POOTBNDL");
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 2);
    assert_eq!(u16::from_le_bytes([bytes[10], bytes[11]]), 3);
    assert_eq!(u32::from_le_bytes(bytes[12..16].try_into().unwrap()), 2);
    assert_eq!(read_u64(&bytes, table_field(0, 4)), MANIFEST_OFFSET as u64);
    let weights_offset = read_u64(&bytes, table_field(1, 4));
    assert_eq!(weights_offset % SECTION_ALIGN, 0);
    let weights_len = read_u64(&bytes, table_field(1, 12));
    assert_eq!(bytes.len() as u64, weights_offset + weights_len);
    // The test assembler, written from the crate docs alone, produces the same bytes.
    let (manifest, weights) = sample();
    assert_eq!(common::assemble_unchecked(&manifest, &weights), bytes);
}

#[test]
fn packer_aligns_every_weight() {
    let (manifest, weights) = sample();
    assert!(
        manifest
            .weights
            .iter()
            .all(|w| w.offset % WEIGHT_ALIGN == 0)
    );
    assert_eq!(
        manifest
            .weights
            .iter()
            .map(|w| w.offset)
            .collect::<Vec<_>>(),
        [0, 1024, 1536]
    );
    assert_eq!(weights.len(), 1536 + 17);
    assert!(weights[1000..1024].iter().all(|b| *b == 0));
    let mut packer = WeightPacker::new();
    assert!(packer.is_empty());
    let info = packer.push("a", "f32", &[1], &[1, 2, 3, 4]);
    assert_eq!((info.offset, info.len), (0, 4));
    let info = packer.push("b", "f32", &[1], &[5, 6, 7, 8]);
    assert_eq!((info.offset, info.len, packer.len()), (256, 4, 260));
}

#[test]
fn empty_weights_round_trip() {
    let (mut manifest, _) = sample();
    manifest.weights.clear();
    manifest.arenas.weights = 0;
    for entry in &mut manifest.entries {
        for dispatch in &mut entry.dispatches {
            dispatch
                .bindings
                .retain(|b| b.arena != poot_bundle::Arena::Weights);
        }
    }
    let bundle = open_bytes(write(&manifest, &[]).unwrap()).unwrap();
    assert!(bundle.weights().is_empty());
    assert_eq!(bundle.manifest(), &manifest);
}

#[test]
fn target_picks_the_first_bundle_target_the_device_accepts() {
    let bundle = open_bytes(sample_bytes()).unwrap();
    let both = [Target::Reference, Target::Ptx { sm: 90 }];
    assert_eq!(bundle.target(&both).unwrap().target, Target::Ptx { sm: 90 });
    let reference = bundle
        .target(&[
            Target::Spirv {
                native_subgroups: false,
            },
            Target::Reference,
        ])
        .unwrap();
    assert_eq!(reference.target, Target::Reference);
    assert_eq!(reference.kernels[1].name, "matmul_q8");
}

#[test]
fn entry_finds_every_compiled_key() {
    let (manifest, _) = sample();
    let bundle = open_bytes(sample_bytes()).unwrap();
    for entry in &manifest.entries {
        assert_eq!(bundle.entry(&entry.key).unwrap(), entry);
    }
    let prefill = bundle
        .entry(&key(StepKind::Prefill { tokens: 16 }, 1, 64))
        .unwrap();
    assert_eq!(prefill.dispatches.len(), 3);
}

#[test]
fn targets_print_and_parse() {
    for (target, name) in [
        (Target::Ptx { sm: 90 }, "ptx-sm90"),
        (Target::Ptx { sm: 80 }, "ptx-sm80"),
        (
            Target::Spirv {
                native_subgroups: false,
            },
            "spirv",
        ),
        (
            Target::Spirv {
                native_subgroups: true,
            },
            "spirv-sg32",
        ),
        (Target::Reference, "reference"),
    ] {
        assert_eq!(target.to_string(), name);
        assert_eq!(name.parse::<Target>().unwrap(), target);
    }
    let err = "ptx-90".parse::<Target>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown target `ptx-90`: expected ptx-smNN (e.g. ptx-sm90), spirv or reference"
    );
}

#[test]
fn entry_keys_print_as_in_messages() {
    assert_eq!(
        key(StepKind::Decode, 4, 2048).to_string(),
        "generate decode rows=4 cap=2048 greedy"
    );
    assert_eq!(
        key(StepKind::Prefill { tokens: 64 }, 1, 2048).to_string(),
        "generate prefill tokens=64 rows=1 cap=2048 greedy"
    );
}

#[test]
fn inspect_summarizes_the_bundle() {
    let bundle = open_bytes(sample_bytes()).unwrap();
    let expected = "\
bundle <memory>
  format 2.3, written by poot-compile test, 5649 B (5.5 KiB)
model: llama, 1 layers, d_model 16, vocab 32, context 64
text: tokenizer.json 24 B, chat template 14 B, bos 1, eos 2, add_bos true
targets: ptx-sm90, reference
kernels for ptx-sm90: 3, 113 B
     0 embed                                    17 B code, workgroup 64x1x1, shared 0
     1 matmul_q8                                42 B code, workgroup 128x1x1, shared 1024
     2 argmax                                   54 B code, workgroup 256x1x1, shared 2048
kernels for reference: 3, 149 B
     0 embed                                    23 B code, workgroup 64x1x1, shared 0
     1 matmul_q8                                54 B code, workgroup 128x1x1, shared 1024
     2 argmax                                   72 B code, workgroup 256x1x1, shared 2048
arenas: weights 1553 B (1.5 KiB), state 4096 B (4.0 KiB), slots 32 B, scratch 1024 B (1.0 KiB), readback 16 B
weights: 3 tensors, 1317 B (1.3 KiB) of tensor data in a section of 1553 B (1.5 KiB)
entries: 3
  generate decode rows=1 cap=64 greedy: 3 dispatches, reads 5396 B (5.3 KiB) per step, scratch 1024 B (1.0 KiB)
  generate decode rows=4 cap=64 greedy: 3 dispatches, reads 5396 B (5.3 KiB) per step, scratch 1024 B (1.0 KiB)
  generate prefill tokens=16 rows=1 cap=64 greedy: 3 dispatches, reads 5396 B (5.3 KiB) per step, scratch 1024 B (1.0 KiB)
";
    assert_eq!(inspect(&bundle), expected);
}

#[test]
fn dispatches_lists_every_launch_of_every_entry() {
    let bundle = open_bytes(sample_bytes()).unwrap();
    let launches = [
        "     0    0 embed                            grid 1x1x1, work 10\n",
        "     1    1 matmul_q8                        grid 4x1x1, work 40\n",
        "     2    2 argmax                           grid 1x1x1, work 1\n",
    ]
    .concat();
    let expected = format!(
        "generate decode rows=1 cap=64 greedy:\n{launches}\
         generate decode rows=4 cap=64 greedy:\n{launches}\
         generate prefill tokens=16 rows=1 cap=64 greedy:\n{launches}"
    );
    assert_eq!(dispatches(&bundle), expected);
}

#[test]
fn kernel_files_name_every_kernel_of_every_target() {
    let bundle = open_bytes(sample_bytes()).unwrap();
    let files: Vec<(String, Vec<u8>)> = kernel_files(&bundle)
        .into_iter()
        .map(|(p, code)| (p.display().to_string(), code.to_vec()))
        .collect();
    let names: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        names,
        [
            "ptx-sm90/000-embed.ptx",
            "ptx-sm90/001-matmul_q8.ptx",
            "ptx-sm90/002-argmax.ptx",
            "reference/000-embed.kir",
            "reference/001-matmul_q8.kir",
            "reference/002-argmax.kir",
        ]
    );
    let (manifest, _) = sample();
    assert_eq!(files[1].1, manifest.targets[0].kernels[1].code);
    assert_eq!(files[5].1, manifest.targets[1].kernels[2].code);
}

#[test]
fn kernel_file_names_stay_inside_their_target_folder() {
    let (mut manifest, weights) = sample();
    for code in &mut manifest.targets {
        code.kernels[0].name = "../../etc/x y".to_string();
    }
    let bundle = open_bytes(assemble_unchecked(&manifest, &weights)).unwrap();
    let files = kernel_files(&bundle);
    assert_eq!(
        files[0].0,
        std::path::Path::new("ptx-sm90/000-______etc_x_y.ptx")
    );
}
