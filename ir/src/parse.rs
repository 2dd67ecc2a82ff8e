//! Parser for the text form written by `print`.
//!
//! Invariant: a parsed graph is verified before it is returned, so a parse error and a verify
//! error are the only ways text is refused. Values are renumbered densely in definition order.

use crate::{
    BinaryOp, CmpOp, DType, F32Bits, Graph, IrError, Node, Op, ReduceOp, Result, RoleKind,
    RopeLayout, Scalar, Shape, SlotKind, Type, UnaryOp, Value, WeightRole, verify,
};
use std::collections::HashMap;

/// Parses one graph.
pub fn parse(text: &str) -> Result<Graph> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let err = |line: usize, text: &str, msg: &str| IrError::Parse {
        line: line + 1,
        text: text.trim().to_string(),
        msg: msg.to_string(),
    };
    let (n0, head) = lines.next().ok_or_else(|| err(0, "", "empty text"))?;
    let name = head
        .trim()
        .strip_prefix("graph ")
        .and_then(|s| s.strip_suffix(" {"))
        .ok_or_else(|| err(n0, head, "expected `graph NAME {`"))?;
    let mut g = Graph::new(name);
    let mut names: HashMap<String, Value> = HashMap::new();
    let mut closed = false;
    for (n, line) in lines {
        let l = line.trim();
        if closed {
            return Err(err(n, line, "text after the closing brace"));
        }
        if l == "}" {
            closed = true;
            continue;
        }
        let fail = |msg: &str| err(n, line, msg);
        if let Some(rest) = l
            .strip_prefix("output ")
            .or_else(|| l.strip_prefix("state "))
        {
            let (key, val) = rest
                .split_once(" = ")
                .ok_or_else(|| fail("expected `NAME = vN`"))?;
            let v = *names.get(val.trim()).ok_or_else(|| fail("unknown value"))?;
            if l.starts_with("output ") {
                g.outputs.push((key.to_string(), v));
            } else {
                g.state_updates.push((key.to_string(), v));
            }
            continue;
        }
        let (lhs, rhs) = l
            .split_once(" = ")
            .ok_or_else(|| fail("expected `vN = op ...`"))?;
        let (body, ty) = rhs
            .rsplit_once(" : ")
            .ok_or_else(|| fail("missing ` : type`"))?;
        let ty = parse_type(ty).ok_or_else(|| fail("bad type"))?;
        let node = parse_node(body, ty, &names).map_err(|m| fail(&m))?;
        if names.contains_key(lhs) {
            return Err(fail("value defined twice"));
        }
        names.insert(lhs.to_string(), g.nodes.push(node));
    }
    if !closed {
        return Err(err(text.lines().count(), "", "missing closing brace"));
    }
    verify(&g)?;
    Ok(g)
}

/// Parses `f32[1,576]`.
pub fn parse_type(s: &str) -> Option<Type> {
    let (d, rest) = s.split_once('[')?;
    let dims = rest.strip_suffix(']')?;
    let dims = if dims.is_empty() {
        Vec::new()
    } else {
        dims.split(',')
            .map(|x| x.parse().ok())
            .collect::<Option<Vec<usize>>>()?
    };
    Some(Type {
        dtype: DType::from_name(d)?,
        shape: Shape::new(dims),
    })
}

fn parse_role(s: &str) -> Option<WeightRole> {
    let (kind, layer) = match s.split_once('.') {
        Some((k, l)) => (k, Some(l.parse().ok()?)),
        None => (s, None),
    };
    Some(WeightRole {
        kind: RoleKind::from_name(kind)?,
        layer,
    })
}

fn parse_node(body: &str, ty: Type, names: &HashMap<String, Value>) -> Result<Node, String> {
    let mut toks = body.split_whitespace();
    let opname = toks.next().ok_or("missing op")?;
    let mut imm = || toks.next().ok_or(format!("`{opname}` needs an operand"));
    let mut op = match opname {
        "weight" => Op::Weight(parse_role(imm()?).ok_or("bad weight role")?),
        "state" => Op::State(imm()?.to_string()),
        "slot" => Op::Slot(SlotKind::from_name(imm()?).ok_or("bad slot kind")?),
        "const" => Op::Const(Scalar::parse(ty.dtype, imm()?).ok_or("bad constant")?),
        "iota" => Op::Iota { axis: 0 },
        "select" => Op::Select,
        "cast" => Op::Cast,
        "reshape" => Op::Reshape,
        "softmax" => Op::Softmax { axis: 0 },
        "rms_norm" => Op::RmsNorm { eps: F32Bits(0.0) },
        "matmul" => Op::MatMul,
        "gather" => Op::Gather,
        "rope" => Op::Rope {
            layout: RopeLayout::Pairs,
            base: F32Bits(0.0),
            dims: 0,
        },
        "attn_scores" => Op::AttnScores,
        "attn_mix" => Op::AttnMix,
        "dynamic_update_slice" => Op::DynamicUpdateSlice { axis: 0 },
        "scatter_update" => Op::ScatterUpdate,
        "argmax" => Op::ArgMax { axis: 0 },
        "any_nonfinite" => Op::AnyNonFinite,
        other => {
            if let Some(u) = UnaryOp::from_name(other) {
                Op::Unary(u)
            } else if let Some(b) = BinaryOp::from_name(other) {
                Op::Binary(b)
            } else if let Some(c) = CmpOp::from_name(other) {
                Op::Compare(c)
            } else if let Some(r) = ReduceOp::from_name(other) {
                Op::Reduce { op: r, axis: 0 }
            } else {
                return Err(format!("unknown op `{other}`"));
            }
        }
    };
    let mut args = Vec::new();
    for t in toks {
        if let Some((k, v)) = t.split_once('=') {
            set_attr(&mut op, k, v).ok_or(format!("bad attribute `{t}`"))?;
        } else {
            let name = t.trim_end_matches(',');
            args.push(*names.get(name).ok_or(format!("unknown value `{name}`"))?);
        }
    }
    Ok(Node { op, args, ty })
}

fn set_attr(op: &mut Op, k: &str, v: &str) -> Option<()> {
    match (op, k) {
        (
            Op::Iota { axis }
            | Op::Reduce { axis, .. }
            | Op::Softmax { axis }
            | Op::ArgMax { axis }
            | Op::DynamicUpdateSlice { axis },
            "axis",
        ) => *axis = v.parse().ok()?,
        (Op::RmsNorm { eps }, "eps") => eps.0 = v.parse().ok()?,
        (Op::Rope { layout, .. }, "layout") => *layout = RopeLayout::from_name(v)?,
        (Op::Rope { base, .. }, "base") => base.0 = v.parse().ok()?,
        (Op::Rope { dims, .. }, "dims") => *dims = v.parse().ok()?,
        _ => return None,
    }
    Some(())
}
