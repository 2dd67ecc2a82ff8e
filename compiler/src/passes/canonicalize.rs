//! Canonicalization: local rewrites to one normal form, each exact bit for bit.
//!
//! Rules, applied to every node in order:
//! - a commutative op with a constant first operand takes it second;
//! - `iota` along an axis of size 1 is the constant 0;
//! - `x + 0`, `x * 1` on integers, and `x * 1.0`, `x + -0.0` on f32 are `x` when the result
//!   has `x`'s type (a broadcast would change it);
//! - `reshape` to the operand's own type is the operand; `reshape (reshape x)` reshapes `x`.

use crate::Result;
use poot_ir::{BinaryOp, Graph, Op, Scalar, Value};

/// Runs the rules over `g`.
pub fn run(g: &mut Graph) -> Result<()> {
    let values: Vec<Value> = g.nodes.keys().collect();
    for v in values {
        rewrite(g, v);
    }
    Ok(())
}

fn constant(g: &Graph, v: Value) -> Option<Scalar> {
    match g.nodes[v].op {
        Op::Const(s) => Some(s),
        _ => None,
    }
}

fn is_identity(op: BinaryOp, s: Scalar) -> bool {
    match (op, s) {
        (BinaryOp::Add, Scalar::I32(0) | Scalar::U32(0)) => true,
        (BinaryOp::Mul, Scalar::I32(1) | Scalar::U32(1)) => true,
        (BinaryOp::Mul, Scalar::F32(x)) => x.to_bits() == 1f32.to_bits(),
        (BinaryOp::Add, Scalar::F32(x)) => x.to_bits() == (-0f32).to_bits(),
        _ => false,
    }
}

fn rewrite(g: &mut Graph, v: Value) {
    let node = g.nodes[v].clone();
    match node.op {
        Op::Binary(op) if op.is_commutative() => {
            let (a, b) = (node.args[0], node.args[1]);
            if constant(g, a).is_some() && constant(g, b).is_none() {
                g.nodes[v].args = vec![b, a];
            }
            let (a, b) = (g.nodes[v].args[0], g.nodes[v].args[1]);
            if constant(g, b).is_some_and(|s| is_identity(op, s)) && g.ty(a) == &node.ty {
                g.replace_uses(v, a);
            }
        }
        Op::Iota { axis } if node.ty.shape.dims()[axis] == 1 => {
            g.nodes[v].op = Op::Const(Scalar::I32(0));
        }
        Op::Reshape => {
            let x = node.args[0];
            if g.ty(x) == &node.ty {
                g.replace_uses(v, x);
            } else if g.nodes[x].op == Op::Reshape {
                g.nodes[v].args = vec![g.nodes[x].args[0]];
                if g.ty(g.nodes[v].args[0]) == &node.ty {
                    g.replace_uses(v, g.nodes[v].args[0]);
                }
            }
        }
        _ => {}
    }
}
