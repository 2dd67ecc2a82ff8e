//! Golden SPIR-V: every case in `common` rendered for `vulkan12()` and `lavapipe()` and
//! compared with `snapshots/spirv/<case>-<target>.snap` (bless with `INSTA_UPDATE=always` or
//! `cargo insta review`). A golden is the kernel's kir text, then rspirv's disassembly of the
//! words; `validate.rs` runs spirv-val and naga on the same modules. Rendering is
//! deterministic.

mod common;

use poot_codegen_spirv::{disassemble, render};
use poot_kir::{Expr, Inst, Kernel};
use std::collections::BTreeSet;

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

fn walk(insts: &[Inst], seen: &mut BTreeSet<String>) {
    for i in insts {
        let name = match i {
            Inst::Let(_, e) => {
                let (kind, op) = match e {
                    Expr::Const(_) => ("Const", String::new()),
                    Expr::Special(s) => ("Special", s.name().to_string()),
                    Expr::Unary(op, _) => ("Unary", op.name().to_string()),
                    Expr::Binary(op, _, _) => ("Binary", op.name().to_string()),
                    Expr::Fma(..) => ("Fma", String::new()),
                    Expr::Cmp(op, _, _) => ("Cmp", op.name().to_string()),
                    Expr::Select(..) => ("Select", String::new()),
                    Expr::Convert(..) => ("Convert", String::new()),
                    Expr::Bitcast(..) => ("Bitcast", String::new()),
                    Expr::HalfToF32(_, hi) => ("HalfToF32", hi.to_string()),
                    Expr::Bf16ToF32(_, hi) => ("Bf16ToF32", hi.to_string()),
                    Expr::Load(_, _, n) => ("Load", n.to_string()),
                    Expr::Extract(..) => ("Extract", String::new()),
                    Expr::SubgroupReduce(op, _) => ("SubgroupReduce", op.name().to_string()),
                    Expr::ShuffleXor(..) => ("ShuffleXor", String::new()),
                };
                seen.insert(kind.to_string());
                if !op.is_empty() {
                    seen.insert(format!("{kind}.{op}"));
                }
                "Let"
            }
            Inst::Store { .. } => "Store",
            Inst::Atomic { op, .. } => {
                seen.insert(format!("Atomic.{}", op.name()));
                "Atomic"
            }
            Inst::Barrier => "Barrier",
            Inst::If { then, els, .. } => {
                walk(then, seen);
                walk(els, seen);
                "If"
            }
            Inst::For { body, .. } => {
                walk(body, seen);
                "For"
            }
            Inst::Trap(_) => "Trap",
        };
        seen.insert(name.to_string());
    }
}

#[test]
fn cases_cover_kir() {
    let mut seen = BTreeSet::new();
    let kernels: Vec<Kernel> = common::cases().into_iter().map(|(_, k)| k).collect();
    for k in &kernels {
        walk(&k.body, &mut seen);
    }
    let mut want: Vec<String> = [
        "Let",
        "Store",
        "Atomic",
        "Barrier",
        "If",
        "For",
        "Trap",
        "Const",
        "Special",
        "Unary",
        "Binary",
        "Fma",
        "Cmp",
        "Select",
        "Convert",
        "Bitcast",
        "HalfToF32",
        "Bf16ToF32",
        "Load",
        "Extract",
        "SubgroupReduce",
        "ShuffleXor",
    ]
    .map(String::from)
    .to_vec();
    let ops = |kind: &str, names: &[&str]| -> Vec<String> {
        names.iter().map(|n| format!("{kind}.{n}")).collect()
    };
    want.extend(ops(
        "Special",
        &[
            "local_id.x",
            "local_id.y",
            "group_id.x",
            "group_id.y",
            "group_id.z",
            "lane",
        ],
    ));
    want.extend(ops(
        "Unary",
        &[
            "neg",
            "not",
            "exp",
            "sqrt",
            "rsqrt",
            "recip",
            "sin",
            "cos",
            "abs",
            "is_finite",
            "is_nan",
        ],
    ));
    want.extend(ops(
        "Binary",
        &[
            "add", "sub", "mul", "div", "rem", "min", "max", "and", "or", "xor", "shl", "shr",
        ],
    ));
    want.extend(ops("Cmp", &["lt", "le", "eq", "ne", "gt", "ge"]));
    want.extend(ops("SubgroupReduce", &["add", "max", "min", "or"]));
    want.extend(ops("Atomic", &["add", "max", "min", "or"]));
    want.extend(ops("HalfToF32", &["false", "true"]));
    want.extend(ops("Bf16ToF32", &["false", "true"]));
    want.extend(ops("Load", &["1", "2", "4"]));
    let missing: Vec<&String> = want.iter().filter(|w| !seen.contains(*w)).collect();
    assert!(missing.is_empty(), "not covered: {missing:?}");
}
