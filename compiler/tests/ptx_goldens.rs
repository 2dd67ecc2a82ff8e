//! Golden PTX of every kernel of the tiny llama and qwen2 bundles (decode and a prefill
//! chunk), in `snapshots/ptx/` beside the renderer's own goldens, where
//! `codegen-ptx/tests/ptxas.rs` assembles each one with `ptxas -arch=sm_90`. A change in
//! lowering or rendering shows as a readable diff of the generated kernels.

use poot_bundle::Target;
use poot_compiler::compile::{CompileOptions, compile};
use poot_compiler::families::Family;
use poot_compiler::plan::Readback;
use poot_compiler::tiny::tiny_model;

fn goldens(family: Family) {
    let model = tiny_model(family, 7).unwrap();
    let opts = CompileOptions {
        cap: 16,
        rows: 2,
        prefill_chunks: vec![4],
        targets: vec![Target::Ptx { sm: 90 }],
        readback: Readback::Sampled,
    };
    let (manifest, _) = compile(&model, &opts, &mut |_, _, _| {}).unwrap();
    for k in &manifest.targets[0].kernels {
        let text = String::from_utf8(k.code.clone()).unwrap();
        insta::with_settings!({
            snapshot_path => "../../snapshots/ptx",
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, {
            insta::assert_snapshot!(format!("tiny-{}-{}-sm90", family.name(), k.name), text);
        });
    }
}

#[test]
fn llama_kernels() {
    goldens(Family::Llama);
}

#[test]
fn qwen2_kernels() {
    goldens(Family::Qwen2);
}

/// A bundle may carry several targets: PTX, SPIR-V and the reference kir share one kernel
/// order, and each kernel's SPIR-V is a whole number of words starting with the magic.
#[test]
fn three_targets_in_one_bundle() {
    let model = tiny_model(Family::Qwen2, 7).unwrap();
    let targets = vec![
        Target::Ptx { sm: 90 },
        Target::Spirv {
            native_subgroups: false,
        },
        Target::Reference,
    ];
    let opts = CompileOptions {
        cap: 16,
        rows: 1,
        prefill_chunks: vec![4],
        targets,
        readback: Readback::Sampled,
    };
    let (manifest, weights) = compile(&model, &opts, &mut |_, _, _| {}).unwrap();
    let bundle = poot_bundle::open_bytes(poot_bundle::write(&manifest, &weights).unwrap()).unwrap();
    let spirv = bundle
        .target(&[Target::Spirv {
            native_subgroups: false,
        }])
        .unwrap();
    assert_eq!(spirv.kernels.len(), manifest.targets[0].kernels.len());
    for k in &spirv.kernels {
        assert_eq!(k.code.len() % 4, 0, "{}", k.name);
        assert_eq!(k.code[..4], 0x0723_0203u32.to_le_bytes(), "{}", k.name);
    }
}
