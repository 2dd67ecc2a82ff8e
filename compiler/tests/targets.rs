//! A bundle may carry several targets at once.

use poot_bundle::Target;
use poot_compiler::compile::{CompileOptions, compile};
use poot_compiler::families::Family;
use poot_compiler::plan::Readback;
use poot_compiler::tiny::tiny_model;

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
