//! The verifier: the rules every pass must keep.
//!
//! Checks that operands are defined before use, types equal `Op::infer`, computed values have a
//! computable dtype, inputs are unique (one node per weight role, state name and slot kind),
//! outputs are uniquely named, and each state update targets a state input of the same type.

use crate::{Graph, IrError, Op, Result, print::node_text};
use std::collections::HashSet;

/// Verifies `g`; the error names the first offending node and prints it.
pub fn verify(g: &Graph) -> Result<()> {
    let mut roles = HashSet::new();
    let mut states = HashSet::new();
    let mut slots = HashSet::new();
    for (v, node) in g.nodes.iter() {
        let fail = |msg: String| IrError::Verify {
            graph: g.name.clone(),
            value: v,
            node: node_text(g, v),
            msg,
        };
        if let Some(a) = node.args.iter().find(|a| **a >= v) {
            return Err(fail(format!("operand {a} is not defined before use")));
        }
        let args: Vec<_> = node.args.iter().map(|a| g.ty(*a)).collect();
        let ty = node.op.infer(&args, &node.ty).map_err(fail)?;
        if ty != node.ty {
            return Err(fail(format!("result type should be {ty}")));
        }
        let fresh = match &node.op {
            Op::Weight(r) => roles.insert(*r),
            Op::State(s) => states.insert(s.clone()),
            Op::Slot(k) => slots.insert(*k),
            _ => true,
        };
        if !fresh {
            return Err(fail("input declared twice".into()));
        }
        let input = node.op.is_input() || matches!(node.op, Op::Const(_));
        if !input && !node.ty.dtype.is_computable() {
            return Err(fail(format!("{} values cannot be computed", node.ty.dtype)));
        }
    }
    let graph_err = |msg: String| IrError::Graph {
        graph: g.name.clone(),
        msg,
    };
    let mut names = HashSet::new();
    for (name, r) in &g.outputs {
        if !names.insert(name) {
            return Err(graph_err(format!("output `{name}` is defined twice")));
        }
        if !g.nodes.is_valid(*r) {
            return Err(graph_err(format!("output `{name}` refers to missing {r}")));
        }
    }
    let mut updated = HashSet::new();
    for (name, r) in &g.state_updates {
        let Some((sv, _)) = g.states().find(|(_, s)| s == name) else {
            return Err(graph_err(format!("update of unknown state `{name}`")));
        };
        if !g.nodes.is_valid(*r) || g.ty(*r) != g.ty(sv) {
            return Err(graph_err(format!(
                "update of state `{name}` by {r} does not match its type {}",
                g.ty(sv)
            )));
        }
        if !updated.insert(name) {
            return Err(graph_err(format!("state `{name}` is updated twice")));
        }
    }
    Ok(())
}
