//! The evaluation walk: nodes in order, each operand freed after its last use.
//!
//! Invariants: the graph is verified before the walk; state updates never alias their input
//! (the input state map is borrowed, an updated state is a fresh tensor); every state the
//! graph reads comes back in `Evaluation::state`, updated or carried unchanged.

use crate::ops::{elementwise as ew, linalg, nn};
use crate::tensor::{Tensor, WeightView};
use crate::{EvalError, Result};
use cranelift_entity::{EntityRef, SecondaryMap};
use poot_ir::{Graph, Op, SlotKind, Value, WeightRole, node_text, verify};
use std::borrow::Cow;
use std::collections::HashMap;

/// Everything a step reads from outside the graph.
#[derive(Default)]
pub struct Inputs<'a> {
    /// Weights by role (borrowed; packed formats stay packed).
    pub weights: HashMap<WeightRole, WeightView<'a>>,
    /// Carried state by name.
    pub state: HashMap<String, Tensor>,
    /// Slot contents by kind.
    pub slots: HashMap<SlotKind, Tensor>,
}

/// Evaluation switches.
#[derive(Clone, Copy, Debug, Default)]
pub struct EvalOptions {
    /// Keep every intermediate value in `Evaluation::env`.
    pub keep_env: bool,
}

/// What a step produced.
#[derive(Debug)]
pub struct Evaluation {
    /// Named outputs, in the graph's order.
    pub outputs: Vec<(String, Tensor)>,
    /// Every state the graph reads: its new value, or the old one carried.
    pub state: HashMap<String, Tensor>,
    /// Every computed value, when `keep_env` was set (weights are not copied in).
    pub env: Option<SecondaryMap<Value, Option<Tensor>>>,
}

impl Evaluation {
    /// The primary output (the first one), if any.
    pub fn primary(&self) -> Option<&Tensor> {
        self.outputs.first().map(|(_, t)| t)
    }
    /// The output named `name`.
    pub fn output(&self, name: &str) -> Option<&Tensor> {
        self.outputs.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
}

enum Slot<'a> {
    Empty,
    Tensor(Tensor),
    Weight(WeightView<'a>),
}

/// Evaluates one step of `graph` on `inputs`.
pub fn eval(graph: &Graph, inputs: &Inputs<'_>, opts: EvalOptions) -> Result<Evaluation> {
    verify(graph).map_err(|e| EvalError::Input(e.to_string()))?;
    let mut uses = graph.use_counts();
    let mut env: SecondaryMap<Value, Option<Tensor>> = SecondaryMap::new();
    let mut vals: Vec<Slot> = Vec::with_capacity(graph.nodes.len());
    for (v, node) in graph.nodes.iter() {
        let val = step(graph, v, inputs, &vals).map_err(|e| EvalError::At {
            value: v,
            node: node_text(graph, v),
            source: Box::new(e),
        })?;
        vals.push(val);
        if !opts.keep_env {
            for &a in &node.args {
                uses[a] -= 1;
                if uses[a] == 0 {
                    vals[a.index()] = Slot::Empty;
                }
            }
        }
    }
    let take = |v: Value| -> Result<Tensor> {
        match &vals[v.index()] {
            Slot::Tensor(t) => Ok(t.clone()),
            Slot::Weight(_) => Err(EvalError::Input(format!("{v} is a weight, not a result"))),
            Slot::Empty => Err(EvalError::Input(format!("{v} was freed"))),
        }
    };
    let outputs = graph
        .outputs
        .iter()
        .map(|(n, v)| Ok((n.clone(), take(*v)?)))
        .collect::<Result<_>>()?;
    let mut state = HashMap::new();
    for (_, name) in graph.states() {
        let upd = graph.state_updates.iter().find(|(n, _)| n == name);
        let t = match upd {
            Some((_, v)) => take(*v)?,
            None => inputs.state[name].clone(),
        };
        state.insert(name.to_string(), t);
    }
    let env = opts.keep_env.then(|| {
        for (i, s) in vals.into_iter().enumerate() {
            if let Slot::Tensor(t) = s {
                env[Value::from_u32(i as u32)] = Some(t);
            }
        }
        env
    });
    Ok(Evaluation {
        outputs,
        state,
        env,
    })
}

fn step<'a>(g: &Graph, v: Value, inputs: &Inputs<'a>, vals: &[Slot<'a>]) -> Result<Slot<'a>> {
    let node = &g.nodes[v];
    let ty = &node.ty;
    // A weight used as a plain operand (a norm weight, a bias) is dequantized to f32.
    let t = |i: usize| -> Result<Cow<'_, Tensor>> {
        match &vals[node.args[i].index()] {
            Slot::Tensor(t) => Ok(Cow::Borrowed(t)),
            Slot::Weight(w) => {
                let mut out = vec![0f32; w.dims.iter().product()];
                crate::dequant::dequantize(w.dtype, w.bytes, &mut out);
                Ok(Cow::Owned(Tensor::f32(w.dims.to_vec(), out)?))
            }
            Slot::Empty => Err(EvalError::Input(format!(
                "operand {} was freed",
                node.args[i]
            ))),
        }
    };
    let w = |i: usize| -> Result<WeightView<'a>> {
        match &vals[node.args[i].index()] {
            Slot::Weight(w) => Ok(*w),
            _ => Err(EvalError::Input(format!(
                "operand {} is not a weight",
                node.args[i]
            ))),
        }
    };
    let checked = |x: &Tensor, what: &str| -> Result<Tensor> {
        if &x.ty != ty {
            return Err(EvalError::Input(format!(
                "{what} is {}, the graph declares {ty}",
                x.ty
            )));
        }
        Ok(x.clone())
    };
    let out = match &node.op {
        Op::Weight(role) => {
            let wv = inputs.weights.get(role).ok_or_else(|| {
                EvalError::Input(format!("weight {} is not bound", poot_ir::role_text(*role)))
            })?;
            let ok = wv.dtype == ty.dtype
                && wv.dims == ty.shape.dims()
                && wv.dtype.bytes_for(ty.shape.numel()) == Some(wv.bytes.len());
            if !ok {
                return Err(EvalError::Input(format!(
                    "weight {} is {}{:?} in {} bytes, the graph declares {ty}",
                    poot_ir::role_text(*role),
                    wv.dtype,
                    wv.dims,
                    wv.bytes.len()
                )));
            }
            return Ok(Slot::Weight(*wv));
        }
        Op::State(name) => {
            let s = inputs.state.get(name);
            checked(
                s.ok_or_else(|| EvalError::Input(format!("state {name} is missing")))?,
                name,
            )?
        }
        Op::Slot(kind) => {
            let s = inputs.slots.get(kind);
            let s =
                s.ok_or_else(|| EvalError::Input(format!("slot {} is missing", kind.name())))?;
            checked(s, kind.name())?
        }
        Op::Const(s) => ew::constant(*s, ty),
        Op::Iota { axis } => ew::iota(ty, *axis),
        Op::Unary(u) => ew::unary(*u, &*t(0)?)?,
        Op::Binary(b) => ew::binary(*b, &*t(0)?, &*t(1)?, ty)?,
        Op::Compare(c) => ew::compare(*c, &*t(0)?, &*t(1)?, ty)?,
        Op::Select => ew::select(&*t(0)?, &*t(1)?, &*t(2)?, ty)?,
        Op::Cast => ew::cast(&*t(0)?, ty)?,
        Op::Reshape => Tensor {
            ty: ty.clone(),
            data: t(0)?.data.clone(),
        },
        Op::Reduce { op, axis } => nn::reduce(*op, &*t(0)?, *axis, ty)?,
        Op::Softmax { axis } => nn::softmax(&*t(0)?, *axis)?,
        Op::RmsNorm { eps } => nn::rms_norm(&*t(0)?, &*t(1)?, eps.0)?,
        Op::MatMul => linalg::matmul(&*t(0)?, &w(1)?, ty)?,
        Op::Gather => match w(0) {
            Ok(table) => linalg::gather(&table, &*t(1)?, ty)?,
            Err(_) => linalg::gather_rows(&*t(0)?, &*t(1)?, ty)?,
        },
        Op::Rope { layout, base, dims } => nn::rope(&*t(0)?, &*t(1)?, *layout, base.0, *dims)?,
        Op::AttnScores => linalg::attn_scores(&*t(0)?, &*t(1)?, ty)?,
        Op::AttnMix => linalg::attn_mix(&*t(0)?, &*t(1)?, ty)?,
        Op::DynamicUpdateSlice { axis } => {
            let mut x = t(0)?.into_owned();
            let start = t(2)?;
            let start = start
                .as_i32()
                .ok_or_else(|| EvalError::dtype("dus", &start))?;
            ew::dynamic_update_slice(&mut x, &*t(1)?, start, *axis)?;
            x
        }
        Op::ScatterUpdate => {
            let mut x = t(0)?.into_owned();
            let idx = t(2)?;
            let idx = idx
                .as_i32()
                .ok_or_else(|| EvalError::dtype("scatter", &idx))?;
            ew::scatter_update(&mut x, &*t(1)?, idx)?;
            x
        }
        Op::ArgMax { axis } => nn::argmax(&*t(0)?, *axis, ty)?,
        Op::AnyNonFinite => nn::any_nonfinite(&*t(0)?, ty)?,
    };
    Ok(Slot::Tensor(out))
}
