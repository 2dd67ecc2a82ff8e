//! The weights section holds every tensor the model reads, in the kernels' device layout.

use poot_bundle::Target;
use poot_compiler::compile::{CompileOptions, compile};
use poot_compiler::families::Family;
use poot_compiler::lower::layout::{device_bytes, regions};
use poot_compiler::plan::Readback;
use poot_compiler::tiny::tiny_model;
use poot_ir::{DType, role_text};
use std::collections::BTreeSet;

/// Both tiny families together store every block format: each weight in the bundle is its
/// checkpoint tensor in the device layout (a moved format's bytes differ from the GGUF
/// order, a kept one's are the same), and no role is missing.
#[test]
fn bundle_weights_are_the_checkpoint_in_device_layout() {
    let mut moved = BTreeSet::new();
    for family in [Family::Llama, Family::Qwen2] {
        let model = tiny_model(family, 3).unwrap();
        let opts = CompileOptions {
            cap: 16,
            rows: 1,
            prefill_chunks: vec![4],
            targets: vec![Target::Reference],
            readback: Readback::Sampled,
        };
        let (manifest, weights) = compile(&model, &opts, &mut |_, _, _| {}).unwrap();
        let bundle =
            poot_bundle::open_bytes(poot_bundle::write(&manifest, &weights).unwrap()).unwrap();
        for (role, name) in &model.map {
            let view = model.store.view(name).unwrap();
            let info = bundle
                .manifest()
                .weights
                .iter()
                .find(|w| w.role == role_text(*role))
                .unwrap_or_else(|| panic!("{family:?}: no weight {}", role_text(*role)));
            assert_eq!(info.dtype, view.dtype.name());
            let got = bundle.weight(info).unwrap();
            assert_eq!(got, &device_bytes(view.dtype, view.bytes)[..], "{name}");
            if regions(view.dtype).len() > 1 {
                assert_ne!(got, view.bytes, "{name}: {:?} moved", view.dtype);
                moved.insert(format!("{:?}", view.dtype));
            } else {
                assert_eq!(got, view.bytes, "{name}");
            }
        }
    }
    let all: BTreeSet<String> = [DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q6K]
        .iter()
        .map(|d| format!("{d:?}"))
        .collect();
    assert_eq!(moved, all, "the tiny models cover every moved format");
}
