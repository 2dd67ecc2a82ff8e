//! Every case in `common`, rendered for every target, must pass `spirv-val --target-env
//! vulkan1.2` (skipped with `SKIP spirv-val not found` when the tool is missing, unless
//! `POOT_REQUIRE_SPIRV_VAL=1`) and naga's SPIR-V front end and validator (always run).

mod common;

use poot_codegen_spirv::render;

/// (case, target tag, words) for every case a target can render (f32 atomics need
/// `atomic_float_add`; `errors.rs` checks the refusal).
fn modules() -> Vec<(String, Vec<u32>)> {
    let mut out = Vec::new();
    for (case, kernel) in common::cases() {
        for (tag, target) in common::targets() {
            if case == "atomics_f32" && !target.atomic_float_add {
                continue;
            }
            let words = render(&kernel, &target).unwrap_or_else(|e| panic!("{case} on {tag}: {e}"));
            out.push((format!("{case}-{tag}"), words));
        }
    }
    out
}

#[test]
fn spirv_val_accepts_every_case() {
    let Some(tool) = common::spirv_val() else {
        return;
    };
    let mut failures = Vec::new();
    for (name, words) in modules() {
        match common::run_spirv_val(&tool, &words, &name) {
            Ok(()) => println!("ok spirv-val {name}"),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "spirv-val rejected:\n{}",
        failures.join("\n")
    );
}

#[test]
fn naga_accepts_every_case() {
    let mut failures = Vec::new();
    for (name, words) in modules() {
        match common::run_naga(&words) {
            Ok(()) => println!("ok naga {name}"),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "naga rejected:\n{}",
        failures.join("\n")
    );
}

/// f32 atomics on shared memory render where the target allows them and pass spirv-val, but
/// naga (the wgpu path) refuses them, which is why no built-in target turns them on.
#[test]
fn shared_f32_atomics_are_vulkan_only() {
    let target = poot_codegen_spirv::SpirvTarget {
        shared_atomic_float_add: true,
        ..poot_codegen_spirv::SpirvTarget::lavapipe()
    };
    let words = render(&common::atomics_f32_shared(), &target).unwrap();
    let naga = common::run_naga(&words).unwrap_err();
    assert!(naga.contains("InvalidAddressSpace(WorkGroup)"), "{naga}");
    if let Some(tool) = common::spirv_val() {
        common::run_spirv_val(&tool, &words, "atomics_f32_shared").unwrap();
    }
}
