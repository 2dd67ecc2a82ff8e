//! Every kernel of the tiny llama and qwen2 models (decode and prefill chunks of 4, 12, 20
//! and 36 tokens, the last three with tiled matmuls of one, two and four rows a thread; two
//! rows, a 300-position cache, so attention splits in three), lowered for 32-wide subgroups as `poot-compile` lowers them,
//! rendered for `vulkan12()` (native subgroups) and `lavapipe()` (the shared-memory fallback),
//! must pass spirv-val (when present) and naga. No goldens: `snapshots/ptx` already shows these
//! kernels, and the renderer's own goldens cover the instructions.

mod common;

use poot_codegen_spirv::render;
use poot_compiler::families::{Family, StepShape, trace};
use poot_compiler::lower::{LowerTarget, Tables, lower};
use poot_compiler::passes::{PassOptions, optimize};
use poot_compiler::tiny::tiny_model;
use poot_kir::Kernel;

/// The distinct kernels of one family's decode and prefill steps, by name.
fn kernels(family: Family) -> Vec<Kernel> {
    let model = tiny_model(family, 7).unwrap();
    let (rows, cap) = (2, 300);
    let mut tables = Tables::new(cap);
    let mut out: Vec<Kernel> = Vec::new();
    for step in [
        StepShape::decode(rows, cap),
        StepShape::prefill(rows, 4, cap),
        StepShape::prefill(rows, 12, cap),
        StepShape::prefill(rows, 20, cap),
        StepShape::prefill(rows, 36, cap),
    ] {
        let mut g = trace(&model, step).unwrap();
        optimize(&mut g, PassOptions::default()).unwrap();
        let p = lower(&g, LowerTarget { subgroup: 32 }, &mut tables).unwrap();
        for k in p.kernels {
            if !out.contains(&k) {
                out.push(k);
            }
        }
    }
    out
}

fn check(family: Family) {
    let tool = common::spirv_val();
    let mut failures = Vec::new();
    let mut count = 0;
    for k in kernels(family) {
        for (tag, target) in common::targets() {
            let name = format!("{}-{}-{tag}", family.name(), k.name);
            let words = match render(&k, &target) {
                Ok(w) => w,
                Err(e) => {
                    failures.push(format!("{name}: {e}"));
                    continue;
                }
            };
            count += 1;
            let fallback = if target.uses_fallback(&k) {
                " (fallback)"
            } else {
                ""
            };
            match common::run_naga(&words) {
                Ok(()) => println!("ok naga {name}{fallback}"),
                Err(e) => failures.push(format!("{name}: {e}")),
            }
            if let Some(tool) = &tool {
                match common::run_spirv_val(tool, &words, &name) {
                    Ok(()) => println!("ok spirv-val {name}{fallback}"),
                    Err(e) => failures.push(format!("{name}: spirv-val: {e}")),
                }
            }
        }
    }
    assert!(count > 0, "no kernels");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn llama_kernels_validate() {
    check(Family::Llama);
}

#[test]
fn qwen2_kernels_validate() {
    check(Family::Qwen2);
}
