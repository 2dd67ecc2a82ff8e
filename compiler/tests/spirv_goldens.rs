//! Golden SPIR-V (disassembled) of every kernel of the tiny llama and qwen2 bundles, for both
//! SPIR-V targets a bundle can carry: `spirv` (portable, subgroups emulated in shared memory)
//! and `spirv-sg32` (native 32-wide subgroups). The same modules pass spirv-val and naga in
//! `codegen-spirv/tests/tiny.rs`, and run on lavapipe and the H200 in `tests/tests/{vulkan,wgpu}.rs`.

use poot_bundle::Target;
use poot_compiler::compile::{CompileOptions, compile};
use poot_compiler::families::Family;
use poot_compiler::plan::Readback;
use poot_compiler::tiny::tiny_model;

fn goldens(family: Family) {
    let model = tiny_model(family, 7).unwrap();
    let targets = [(false, "portable"), (true, "sg32")];
    let opts = CompileOptions {
        cap: 16,
        rows: 2,
        prefill_chunks: vec![4],
        targets: targets
            .iter()
            .map(|&(native_subgroups, _)| Target::Spirv { native_subgroups })
            .collect(),
        readback: Readback::Sampled,
    };
    let (manifest, _) = compile(&model, &opts, &mut |_, _, _| {}).unwrap();
    for (code, (_, tag)) in manifest.targets.iter().zip(targets) {
        for k in &code.kernels {
            let words: Vec<u32> = k
                .code
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let text = poot_codegen_spirv::disassemble(&words);
            insta::with_settings!({
                snapshot_path => "../../snapshots/spirv",
                prepend_module_to_snapshot => false,
                omit_expression => true,
            }, {
                insta::assert_snapshot!(format!("tiny-{}-{}-{tag}", family.name(), k.name), text);
            });
        }
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
