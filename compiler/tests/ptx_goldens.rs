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
