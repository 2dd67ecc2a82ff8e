//! Common-subexpression elimination: a node equal in op, operands and type to an earlier one
//! is replaced by it. All ops are pure (state updates produce new values), so this is exact.

use crate::Result;
use poot_ir::{Graph, Node, Value};
use std::collections::HashMap;

/// Merges equal nodes of `g` into their first occurrence.
pub fn run(g: &mut Graph) -> Result<()> {
    let mut seen: HashMap<Node, Value> = HashMap::new();
    let values: Vec<Value> = g.nodes.keys().collect();
    for v in values {
        let node = g.nodes[v].clone();
        match seen.get(&node) {
            Some(&first) => g.replace_uses(v, first),
            None => {
                seen.insert(node, v);
            }
        }
    }
    Ok(())
}
