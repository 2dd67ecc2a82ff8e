//! Dead-code elimination: drops nodes that no output or state update needs, then renumbers.
//!
//! Invariant: state and slot inputs are the step's interface and always stay, used or not;
//! an unused weight or computation goes.

use crate::Result;
use cranelift_entity::SecondaryMap;
use poot_ir::{Graph, Op, Value};

/// Removes dead nodes from `g`.
pub fn run(g: &mut Graph) -> Result<()> {
    let mut live: SecondaryMap<Value, bool> = SecondaryMap::with_capacity(g.nodes.len());
    for (_, v) in g.outputs.iter().chain(&g.state_updates) {
        live[*v] = true;
    }
    for (v, node) in g.nodes.iter() {
        if matches!(node.op, Op::State(_) | Op::Slot(_)) {
            live[v] = true;
        }
    }
    let values: Vec<Value> = g.nodes.keys().rev().collect();
    for v in values {
        if live[v] {
            for &a in &g.nodes[v].args {
                live[a] = true;
            }
        }
    }
    g.retain(&live);
    Ok(())
}
