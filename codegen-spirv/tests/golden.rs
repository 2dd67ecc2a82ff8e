//! Golden SPIR-V: every case in `common` rendered for `vulkan12()` and `lavapipe()` and
//! compared with `snapshots/spirv/<case>-<target>.snap` (bless with `INSTA_UPDATE=always` or
//! `cargo insta review`). A golden is the kernel's kir text, then rspirv's disassembly of the
//! words; `validate.rs` runs spirv-val and naga on the same modules. Rendering is
//! deterministic.

mod common;

use poot_codegen_spirv::{disassemble, render};
use poot_kir::Kernel;

#[test]
fn goldens() {
    for (case, kernel) in common::cases() {
        for (tag, target) in common::targets() {
            let Ok(words) = render(&kernel, &target) else {
                // Refusals (f32 atomics without the capability) are checked in `errors.rs`.
                assert!(case.starts_with("atomics_f32"), "{case} on {tag}");
                continue;
            };
            assert_eq!(
                render(&kernel, &target).ok(),
                Some(words.clone()),
                "not deterministic"
            );
            let text = format!("{}\n{}", poot_kir::print(&kernel), disassemble(&words));
            insta::with_settings!({
                snapshot_path => "../../snapshots/spirv",
                prepend_module_to_snapshot => false,
                omit_expression => true,
            }, {
                insta::assert_snapshot!(format!("{case}-{tag}"), text);
            });
        }
    }
}

#[test]
fn fallback_only_where_the_widths_differ() {
    for (case, kernel) in common::cases() {
        for (tag, target) in common::targets() {
            let Ok(words) = render(&kernel, &target) else {
                continue;
            };
            let text = disassemble(&words);
            let fallback = target.uses_fallback(&kernel);
            assert_eq!(
                text.contains("poot_subgroup_scratch"),
                fallback,
                "{case} on {tag}"
            );
            assert_eq!(
                fallback,
                kernel.subgroup > 1
                    && target.subgroup != Some(kernel.subgroup)
                    && text.contains("OpControlBarrier"),
                "{case} on {tag}"
            );
            if fallback {
                assert!(!text.contains("OpGroupNonUniform"), "{case} on {tag}");
            }
        }
    }
}

#[test]
fn cases_cover_kir() {
    let kernels: Vec<Kernel> = common::cases().into_iter().map(|(_, k)| k).collect();
    let missing = poot_kir::conformance::missing_coverage(&kernels);
    assert!(missing.is_empty(), "not covered: {missing:?}");
}
