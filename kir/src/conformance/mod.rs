//! The conformance suite every renderer runs (IREE's CTS habit): a fixed set of kernels and
//! a check that they cover the whole IR. Built with the `conformance` feature, which the
//! renderers enable for their tests.

mod kernels;

pub use kernels::*;

use crate::{Expr, Inst, Kernel};
use std::collections::BTreeSet;

/// Adds the name of every construct `insts` use to `seen`.
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
                    Expr::Mma { .. } => ("Mma", String::new()),
                };
                seen.insert(kind.to_string());
                if !op.is_empty() {
                    seen.insert(format!("{kind}.{op}"));
                }
                "Let"
            }
            Inst::Store { .. } => "Store",
            Inst::Atomic { op, old, .. } => {
                seen.insert(format!("Atomic.{}", op.name()));
                if old.is_some() {
                    seen.insert("Atomic.old".to_string());
                }
                "Atomic"
            }
            Inst::Barrier => "Barrier",
            Inst::Fence => "Fence",
            Inst::Prefetch { .. } => "Prefetch",
            Inst::If { then, els, .. } => {
                walk(then, seen);
                walk(els, seen);
                "If"
            }
            Inst::Clustered { then, els, .. } => {
                walk(then, seen);
                walk(els, seen);
                "Clustered"
            }
            Inst::Matrix { then, els } => {
                walk(then, seen);
                walk(els, seen);
                "Matrix"
            }
            Inst::ClusterArrive { .. } => "ClusterArrive",
            Inst::ClusterWait => "ClusterWait",
            Inst::StoreRemote { .. } => "StoreRemote",
            Inst::For { body, .. } => {
                walk(body, seen);
                "For"
            }
            Inst::Trap(_) => "Trap",
            Inst::LaunchDependents => "LaunchDependents",
            Inst::GridWait { .. } => "GridWait",
        };
        seen.insert(name.to_string());
    }
}

/// The IR constructs (statements, expressions, operators, specials, load widths, half
/// conversions) that none of `kernels` uses; empty when they cover kir.
pub fn missing_coverage(kernels: &[Kernel]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    for k in kernels {
        walk(&k.body, &mut seen);
    }
    let mut want: Vec<String> = [
        "Let",
        "Store",
        "Atomic",
        "Barrier",
        "Fence",
        "Prefetch",
        "If",
        "For",
        "Trap",
        "Clustered",
        "ClusterArrive",
        "ClusterWait",
        "StoreRemote",
        "Matrix",
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
        "Mma",
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
    want.extend(ops("Atomic", &["add", "max", "min", "or", "old"]));
    want.extend(ops("HalfToF32", &["false", "true"]));
    want.extend(ops("Bf16ToF32", &["false", "true"]));
    want.extend(ops("Load", &["1", "2", "4"]));
    want.into_iter().filter(|w| !seen.contains(w)).collect()
}
