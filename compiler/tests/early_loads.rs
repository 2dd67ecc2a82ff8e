//! What kernels read before their grid wait, beyond the weights of the decode matmuls: a
//! decode attention that writes the new K/V rows itself issues its cache loads and its reads
//! of the position slot before its wait (it is the only dispatch of the step that writes
//! those caches), and no other kernel reads a state or a computed value there. The goldens
//! show the same in the kernels' text; this says which bindings, so a change that drops the
//! early loads, or reads something unsafe early, fails here by name. The decode attention
//! also reads the position slot only before its wait (its rope positions included), so
//! nothing it loads after the wait waits on a slot read.

use poot_compiler::families::{Family, StepShape, trace};
use poot_compiler::lower::{Buf, LowerTarget, Program, Tables, lower};
use poot_compiler::passes::{PassOptions, optimize};
use poot_compiler::tiny::tiny_model;
use poot_ir::{Op, SlotKind};
use poot_kir::{Expr, Inst, Mem};

/// The parameters `insts` load after a grid wait (`waited`: entered after one).
fn loaded_after_wait(insts: &[Inst], mut waited: bool, out: &mut Vec<u32>) -> bool {
    for i in insts {
        match i {
            Inst::GridWait { .. } => waited = true,
            Inst::Let(_, Expr::Load(Mem::Param(p), _, _)) if waited => out.push(*p),
            Inst::If { then, els, .. }
            | Inst::Clustered { then, els, .. }
            | Inst::Matrix { then, els } => {
                let a = loaded_after_wait(then, waited, out);
                waited = loaded_after_wait(els, waited, out) && a;
            }
            Inst::For { body, .. } => {
                loaded_after_wait(body, waited, out);
            }
            _ => {}
        }
    }
    waited
}

/// A dispatch's kernel name, the ops bound to the parameters its waits list (but compile-time
/// tables, which no dispatch writes), and those of what it loads after its wait.
type Dispatched = (String, Vec<Op>, Vec<Op>);

/// The step lowered as tier 2 compiles it (a 300-position cache), each dispatch as
/// `Dispatched`.
fn early(family: Family, shape: StepShape) -> Vec<Dispatched> {
    let model = tiny_model(family, 7).unwrap();
    let mut g = trace(&model, shape).unwrap();
    optimize(&mut g, PassOptions::default()).unwrap();
    let p: Program = lower(&g, LowerTarget { subgroup: 32 }, &mut Tables::new(300)).unwrap();
    p.dispatches
        .iter()
        .map(|d| {
            let k = &p.kernels[d.kernel];
            let mut params: Vec<u32> = poot_kir::early_params(&k.body).into_iter().collect();
            params.sort();
            let ops = |params: &[u32]| -> Vec<Op> {
                params
                    .iter()
                    .filter_map(|&i| match d.args[i as usize].0 {
                        Buf::Value(v) => Some(p.graph.nodes[v].op.clone()),
                        _ => None,
                    })
                    .collect()
            };
            for &i in &params {
                let b = d.args[i as usize].0;
                assert!(
                    matches!(b, Buf::Value(_) | Buf::Table(_)),
                    "{}: early parameter {i} bound to {b:?}",
                    k.name
                );
            }
            let mut late = Vec::new();
            loaded_after_wait(&k.body, false, &mut late);
            (k.name.clone(), ops(&params), ops(&late))
        })
        .collect()
}

/// The attention dispatches of `all`, of which there must be at least one.
fn attentions(family: Family, all: &[Dispatched]) -> Vec<&Dispatched> {
    let found: Vec<_> = all
        .iter()
        .filter(|(n, _, _)| n.starts_with("attention"))
        .collect();
    assert!(!found.is_empty(), "{family:?}: no attention in {all:?}");
    found
}

#[test]
fn decode_attentions_load_their_caches_and_position_before_the_wait() {
    for family in [Family::Llama, Family::Qwen2] {
        let all = early(family, StepShape::decode(2, 300));
        for (name, ops, late) in attentions(family, &all) {
            assert!(
                !late.contains(&Op::Slot(SlotKind::Pos)),
                "{family:?} {name} reads the position slot after its wait: {late:?}"
            );
            let states = ops.iter().filter(|o| matches!(o, Op::State(_))).count();
            assert_eq!(states, 2, "{family:?} {name}: {ops:?}");
            assert!(
                ops.contains(&Op::Slot(SlotKind::Pos)),
                "{family:?} {name}: {ops:?}"
            );
        }
        for (name, ops, _) in &all {
            let safe = |o: &Op| match o {
                Op::Weight(_) | Op::Slot(_) => true,
                Op::State(_) => name.starts_with("attention"),
                _ => false,
            };
            assert!(ops.iter().all(safe), "{family:?} {name}: {ops:?}");
        }
    }
}

#[test]
fn prefill_attentions_wait_first() {
    for family in [Family::Llama, Family::Qwen2] {
        let all = early(family, StepShape::prefill(2, 20, 300));
        for (name, ops, _) in attentions(family, &all) {
            assert!(ops.is_empty(), "{family:?} {name}: {ops:?}");
        }
    }
}
