//! Constant folding: an element-wise op or reshape whose operands are all constant splats
//! becomes a constant splat.
//!
//! Invariant: the folded value is computed by `poot_eval`'s own kernels on one element, so it
//! equals bit for bit what evaluation would have produced for every element of the splat.

use crate::Result;
use poot_eval::ops::elementwise as ew;
use poot_eval::{Data, Tensor};
use poot_ir::{Graph, Op, Scalar, Type, Value};

/// Folds every foldable node of `g`, in order (so chains fold completely).
pub fn run(g: &mut Graph) -> Result<()> {
    let values: Vec<Value> = g.nodes.keys().collect();
    for v in values {
        if let Some(s) = fold(g, v)? {
            let node = &mut g.nodes[v];
            node.op = Op::Const(s);
            node.args.clear();
        }
    }
    Ok(())
}

fn scalar_tensor(s: Scalar) -> Tensor {
    ew::constant(s, &Type::scalar(s.dtype()))
}

fn fold(g: &Graph, v: Value) -> Result<Option<Scalar>> {
    let node = &g.nodes[v];
    let consts: Option<Vec<Tensor>> = node
        .args
        .iter()
        .map(|a| match g.nodes[*a].op {
            Op::Const(s) => Some(scalar_tensor(s)),
            _ => None,
        })
        .collect();
    let Some(c) = consts.filter(|c| !c.is_empty()) else {
        return Ok(None);
    };
    let one = Type::scalar(node.ty.dtype);
    let t = match node.op {
        Op::Unary(u) => ew::unary(u, &c[0])?,
        Op::Binary(b) => ew::binary(b, &c[0], &c[1], &one)?,
        Op::Compare(k) => ew::compare(k, &c[0], &c[1], &one)?,
        Op::Select => ew::select(&c[0], &c[1], &c[2], &one)?,
        Op::Cast => ew::cast(&c[0], &one)?,
        Op::Reshape => c[0].clone(),
        _ => return Ok(None),
    };
    Ok(Some(match t.data {
        Data::F32(v) => Scalar::F32(v[0]),
        Data::I32(v) => Scalar::I32(v[0]),
        Data::U32(v) => Scalar::U32(v[0]),
        Data::U8(v) => Scalar::U8(v[0]),
        Data::Bool(v) => Scalar::Bool(v[0]),
    }))
}
