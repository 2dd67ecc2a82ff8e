//! Golden text of every kernel of the tiny llama and qwen2 bundles (decode and prefill
//! chunks of 4, 12 and 36 tokens, the last two with tiled matmuls of one and four rows a
//! thread; a 300-position cache so attention splits in three), for each code target a bundle
//! can carry, from one compile per family:
//! - PTX for sm_90 in `snapshots/ptx/`, beside the renderer's own goldens, where
//!   `codegen-ptx/tests/ptxas.rs` assembles each one with `ptxas -arch=sm_90`;
//! - disassembled SPIR-V in `snapshots/spirv/` for `spirv` (portable, subgroups emulated in
//!   shared memory) and `spirv-sg32` (native 32-wide subgroups); the same modules pass
//!   spirv-val and naga in `codegen-spirv/tests/tiny.rs`, and run on lavapipe and the H200 in
//!   `tests/tests/{vulkan,wgpu}.rs`.
//!
//! The attention kernels of a tiny llama with 64-wide heads (SmolLM2's and Qwen2.5's width),
//! whose scores go by lane groups, get goldens of their own (`tiny-llama-h64-*`).
//!
//! A change in lowering or rendering shows as a readable diff of the generated kernels.

use poot_bundle::Target;
use poot_compiler::compile::{CompileOptions, compile};
use poot_compiler::families::{Family, Model, ModelSpec};
use poot_compiler::plan::Readback;
use poot_compiler::tiny::{tiny_model, tiny_model_of, tiny_spec};

/// Each target's snapshot folder and name suffix, and how its code reads as text.
fn golden_text(target: Target, code: &[u8]) -> (&'static str, &'static str, String) {
    match target {
        Target::Ptx { .. } => ("ptx", "sm90", String::from_utf8(code.to_vec()).unwrap()),
        Target::Spirv { native_subgroups } => {
            let words: Vec<u32> = code
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let tag = if native_subgroups { "sg32" } else { "portable" };
            ("spirv", tag, poot_codegen_spirv::disassemble(&words))
        }
        Target::Reference => unreachable!("the reference target carries kir, not text"),
    }
}

/// Snapshots, as `tiny-{name}-{kernel}-{tag}`, every kernel of `model` that `keep` names.
fn goldens(model: &Model, name: &str, keep: impl Fn(&str) -> bool) {
    let opts = CompileOptions {
        cap: 300,
        rows: 2,
        prefill_chunks: vec![4, 12, 36],
        targets: vec![
            Target::Ptx { sm: 90 },
            Target::Spirv {
                native_subgroups: false,
            },
            Target::Spirv {
                native_subgroups: true,
            },
        ],
        readback: Readback::Sampled,
    };
    let (manifest, _) = compile(model, &opts, &mut |_, _, _| {}).unwrap();
    for code in &manifest.targets {
        for k in code.kernels.iter().filter(|k| keep(&k.name)) {
            let (dir, tag, text) = golden_text(code.target, &k.code);
            insta::with_settings!({
                snapshot_path => format!("../../snapshots/{dir}"),
                prepend_module_to_snapshot => false,
                omit_expression => true,
            }, {
                insta::assert_snapshot!(format!("tiny-{name}-{}-{tag}", k.name), text);
            });
        }
    }
}

#[test]
fn llama_kernels() {
    goldens(&tiny_model(Family::Llama, 7).unwrap(), "llama", |_| true);
}

#[test]
fn qwen2_kernels() {
    goldens(&tiny_model(Family::Qwen2, 7).unwrap(), "qwen2", |_| true);
}

#[test]
fn llama_h64_attention_kernels() {
    let spec = ModelSpec {
        head_dim: 64,
        rope_dims: 64,
        ..tiny_spec(Family::Llama)
    };
    let model = tiny_model_of(spec, 7).unwrap();
    goldens(&model, "llama-h64", |k| k.starts_with("attention"));
}
