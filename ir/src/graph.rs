//! The graph: nodes in definition order, named outputs and state updates.
//!
//! Invariants (checked by `verify`): every operand of a node is defined before it, so node order
//! is a topological order; each node's type is what `Op::infer` gives; each `state` input is
//! read once by name and updated at most once, with the same type.

use crate::{Op, RoleKind, SlotKind, Type, WeightRole};
use cranelift_entity::{PrimaryMap, entity_impl};

/// A value, which is also the node that defines it. Prints as `v12`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value(u32);
entity_impl!(Value, "v");

/// A node: one op, its operands and its result type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    /// The operation.
    pub op: Op,
    /// Operands, in the order the op documents.
    pub args: Vec<Value>,
    /// Result type.
    pub ty: Type,
}

/// Where a value lives, as the planner will see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Storage {
    /// A model weight.
    Weight(WeightRole),
    /// Carried state, read at step start.
    State(String),
    /// A per-step slot.
    Slot(SlotKind),
    /// A constant.
    Const,
    /// A named output of the step (or a state update).
    Output,
    /// An intermediate.
    Temp,
}

/// One step shape's computation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    /// A name for the step (`llama.decode.r1`).
    pub name: String,
    /// Nodes in definition order.
    pub nodes: PrimaryMap<Value, Node>,
    /// Named step outputs.
    pub outputs: Vec<(String, Value)>,
    /// New values of carried state, by state name.
    pub state_updates: Vec<(String, Value)>,
}

impl Graph {
    /// An empty graph.
    pub fn new(name: impl Into<String>) -> Graph {
        Graph {
            name: name.into(),
            ..Graph::default()
        }
    }

    /// The type of `v`.
    pub fn ty(&self, v: Value) -> &Type {
        &self.nodes[v].ty
    }

    /// Where `v` lives.
    pub fn storage(&self, v: Value) -> Storage {
        match &self.nodes[v].op {
            Op::Weight(r) => Storage::Weight(*r),
            Op::State(s) => Storage::State(s.clone()),
            Op::Slot(k) => Storage::Slot(*k),
            Op::Const(_) => Storage::Const,
            _ if self.is_result(v) => Storage::Output,
            _ => Storage::Temp,
        }
    }

    /// True when `v` is an output or a state update.
    pub fn is_result(&self, v: Value) -> bool {
        self.outputs
            .iter()
            .chain(&self.state_updates)
            .any(|(_, r)| *r == v)
    }

    /// The output named `name`.
    pub fn output(&self, name: &str) -> Option<Value> {
        self.outputs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }

    /// State inputs by name, in node order.
    pub fn states(&self) -> impl Iterator<Item = (Value, &str)> {
        self.nodes.iter().filter_map(|(v, n)| match &n.op {
            Op::State(s) => Some((v, s.as_str())),
            _ => None,
        })
    }

    /// Weight roles the graph reads, in node order.
    pub fn weights(&self) -> impl Iterator<Item = (Value, WeightRole)> {
        self.nodes.iter().filter_map(|(v, n)| match n.op {
            Op::Weight(r) => Some((v, r)),
            _ => None,
        })
    }

    /// Slots the graph reads, in node order.
    pub fn slots(&self) -> impl Iterator<Item = (Value, SlotKind)> {
        self.nodes.iter().filter_map(|(v, n)| match n.op {
            Op::Slot(k) => Some((v, k)),
            _ => None,
        })
    }

    /// Replaces every use of `old` (operands, outputs, state updates) by `new`.
    pub fn replace_uses(&mut self, old: Value, new: Value) {
        for node in self.nodes.values_mut() {
            for a in &mut node.args {
                if *a == old {
                    *a = new;
                }
            }
        }
        for (_, r) in self.outputs.iter_mut().chain(&mut self.state_updates) {
            if *r == old {
                *r = new;
            }
        }
    }

    /// Number of uses of each value (operands, outputs and state updates).
    pub fn use_counts(&self) -> cranelift_entity::SecondaryMap<Value, u32> {
        let mut uses = cranelift_entity::SecondaryMap::with_capacity(self.nodes.len());
        for node in self.nodes.values() {
            for &a in &node.args {
                uses[a] += 1;
            }
        }
        for (_, r) in self.outputs.iter().chain(&self.state_updates) {
            uses[*r] += 1;
        }
        uses
    }

    /// Keeps only the nodes `keep` marks, renumbering values densely in their old order.
    pub fn retain(&mut self, keep: &cranelift_entity::SecondaryMap<Value, bool>) {
        let mut map = cranelift_entity::SecondaryMap::<Value, Option<Value>>::new();
        let mut nodes = PrimaryMap::with_capacity(self.nodes.len());
        for (v, node) in std::mem::take(&mut self.nodes) {
            if keep[v] {
                let mut node = node;
                for a in &mut node.args {
                    *a = map[*a].expect("operand of a kept node was dropped");
                }
                map[v] = Some(nodes.push(node));
            }
        }
        self.nodes = nodes;
        for (_, r) in self.outputs.iter_mut().chain(&mut self.state_updates) {
            *r = map[*r].expect("a result was dropped");
        }
    }

    /// True when the graph reads a weight of this kind.
    pub fn reads_weight_kind(&self, kind: RoleKind) -> bool {
        self.weights().any(|(_, r)| r.kind == kind)
    }
}
