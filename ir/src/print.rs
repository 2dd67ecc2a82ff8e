//! The text form: `v12 = matmul v3, v4 : f32[1,576]`.
//!
//! Invariant: `parse(&print(g))` rebuilds `g` exactly, and printing it again gives the same text.
//! Attributes follow the operands as `key=value`; f32 values print in Rust's shortest
//! round-trip form.

use crate::{Graph, Op, Value, WeightRole};
use std::fmt::Write;

/// The text of a weight role: `token_embd`, `attn_q.3`.
pub fn role_text(r: WeightRole) -> String {
    match r.layer {
        Some(l) => format!("{}.{l}", r.kind.name()),
        None => r.kind.name().to_string(),
    }
}

/// One node in text form, without indentation.
pub fn node_text(g: &Graph, v: Value) -> String {
    let node = &g.nodes[v];
    let mut s = format!("{v} = {}", node.op.name());
    match &node.op {
        Op::Weight(r) => write!(s, " {}", role_text(*r)),
        Op::State(name) => write!(s, " {name}"),
        Op::Slot(k) => write!(s, " {}", k.name()),
        Op::Const(c) => write!(s, " {c}"),
        _ => Ok(()),
    }
    .ok();
    for (i, a) in node.args.iter().enumerate() {
        s.push_str(if i == 0 { " " } else { ", " });
        write!(s, "{a}").ok();
    }
    match &node.op {
        Op::Iota { axis }
        | Op::Reduce { axis, .. }
        | Op::Softmax { axis }
        | Op::ArgMax { axis }
        | Op::DynamicUpdateSlice { axis } => write!(s, " axis={axis}"),
        Op::RmsNorm { eps } => write!(s, " eps={:?}", eps.0),
        Op::Rope { layout, base, dims } => {
            write!(s, " layout={} base={:?} dims={dims}", layout.name(), base.0)
        }
        _ => Ok(()),
    }
    .ok();
    write!(s, " : {}", node.ty).ok();
    s
}

/// The whole graph in text form.
pub fn print(g: &Graph) -> String {
    let mut s = format!("graph {} {{\n", g.name);
    for v in g.nodes.keys() {
        writeln!(s, "  {}", node_text(g, v)).ok();
    }
    for (name, v) in &g.outputs {
        writeln!(s, "  output {name} = {v}").ok();
    }
    for (name, v) in &g.state_updates {
        writeln!(s, "  state {name} = {v}").ok();
    }
    s.push_str("}\n");
    s
}
