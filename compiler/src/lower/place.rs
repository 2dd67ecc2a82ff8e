//! Placement: which graph values get a buffer, which are computed inline inside the kernels
//! that read them, and which disappear into a fused kernel. This is the fusion pass.
//!
//! Rules, in order:
//! - weights, state and slots are input buffers; constants and `iota` are always inline;
//! - `reshape` of a buffer aliases it (row-major views share memory);
//! - index-local ops (element-wise, `select`, `cast`, `rope`, `gather` from a computed table)
//!   are inline, unless the value is a step result, is read by an op that needs a buffer
//!   (the `x` of `matmul`, an attention `k`/`v`, an `argmax`, the input of an RMS norm, so
//!   the norm can move into the matmuls that read it), or has several readers and
//!   reads a computed buffer (recomputing it would repeat memory traffic, and chains of
//!   residual adds would nest without bound);
//! - every other op gets its own kernel, except the attention chain
//!   `attn_mix(softmax(select(mask, mul(attn_scores(q, k), scale), -inf)), v)`, which is one
//!   fused kernel, and a `matmul` whose single reader is a materialized element-wise value of
//!   its own shape, which becomes that value's kernel epilogue.

use crate::{CompileError, Result};
use cranelift_entity::SecondaryMap;
use poot_ir::{BinaryOp, Graph, Op, Scalar, Value};

/// Where a value lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Place {
    /// Not yet decided, or unused.
    #[default]
    None,
    /// A weight, state or slot buffer.
    Input,
    /// Recomputed by each reader.
    Inline,
    /// The buffer of another value (a `reshape` view).
    Alias(Value),
    /// Written to its own buffer by its own kernel.
    Buffer,
    /// Computed inside the kernel of another value.
    Fused(Value),
    /// An RMS norm recomputed in the prologue of each matmul that reads it as `x`.
    Prologue,
}

/// The matched parts of a fused attention chain rooted at `attn_mix`.
#[derive(Clone, Copy, Debug)]
pub struct Attention {
    /// `[r, t, h, d]` queries.
    pub q: Value,
    /// `[r, c, g, d]` keys.
    pub k: Value,
    /// `[r, c, g, d]` values.
    pub v: Value,
    /// The scale applied to the scores.
    pub scale: f32,
    /// The boolean mask, broadcast to `[r, h, t, c]`.
    pub mask: Value,
}

/// The placement of every value.
pub struct Placement {
    /// Per value.
    pub place: SecondaryMap<Value, Place>,
    /// Readers of each value.
    pub users: SecondaryMap<Value, Vec<Value>>,
}

impl Placement {
    /// The RMS norm behind `v` (through reshapes) when it is computed in a matmul prologue.
    pub fn prologue_of(&self, g: &poot_ir::Graph, v: Value) -> Option<Value> {
        match self.place[v] {
            Place::Prologue => Some(v),
            Place::Alias(a) if g.nodes[v].op == Op::Reshape => self.prologue_of(g, a),
            _ => None,
        }
    }

    /// The value whose buffer backs `v` (following aliases), if `v` has one.
    pub fn buffer_of(&self, v: Value) -> Option<Value> {
        match self.place[v] {
            Place::Input | Place::Buffer => Some(v),
            Place::Alias(a) => self.buffer_of(a),
            _ => None,
        }
    }
}

fn index_local(g: &Graph, v: Value) -> bool {
    match &g.nodes[v].op {
        Op::Unary(_) | Op::Binary(_) | Op::Compare(_) | Op::Select | Op::Cast | Op::Rope { .. } => {
            true
        }
        Op::Gather => !matches!(g.nodes[g.nodes[v].args[0]].op, Op::Weight(_)),
        _ => false,
    }
}

fn const_f32(g: &Graph, v: Value) -> Option<f32> {
    match g.nodes[v].op {
        Op::Const(Scalar::F32(x)) => Some(x),
        _ => None,
    }
}

/// Matches the attention chain ending in `mix`, if it is one.
pub fn match_attention(
    g: &Graph,
    users: &SecondaryMap<Value, Vec<Value>>,
    mix: Value,
) -> Option<(Attention, [Value; 4])> {
    let single = |v: Value| users[v].len() == 1 && !g.is_result(v);
    let n = &g.nodes[mix];
    let (p, v) = (n.args[0], n.args[1]);
    let Op::Softmax { axis: 3 } = g.nodes[p].op else {
        return None;
    };
    let sel = g.nodes[p].args[0];
    let Op::Select = g.nodes[sel].op else {
        return None;
    };
    let [mask, scaled, fill] = g.nodes[sel].args[..] else {
        return None;
    };
    if const_f32(g, fill) != Some(f32::NEG_INFINITY) {
        return None;
    }
    let Op::Binary(BinaryOp::Mul) = g.nodes[scaled].op else {
        return None;
    };
    let [scores, scale] = g.nodes[scaled].args[..] else {
        return None;
    };
    let scale = const_f32(g, scale)?;
    let Op::AttnScores = g.nodes[scores].op else {
        return None;
    };
    let [q, k] = g.nodes[scores].args[..] else {
        return None;
    };
    let inner = [p, sel, scaled, scores];
    if !inner.iter().all(|&x| single(x)) || g.ty(scaled).shape != g.ty(sel).shape {
        return None;
    }
    Some((
        Attention {
            q,
            k,
            v,
            scale,
            mask,
        },
        inner,
    ))
}

/// Decides the placement of every value of `g`.
pub fn place(g: &Graph) -> Result<Placement> {
    let mut users: SecondaryMap<Value, Vec<Value>> = SecondaryMap::new();
    for (v, n) in g.nodes.iter() {
        for &a in &n.args {
            if !users[a].contains(&v) {
                users[a].push(v);
            }
        }
    }
    let mut place: SecondaryMap<Value, Place> = SecondaryMap::new();
    let mut needs_buffer: SecondaryMap<Value, bool> = SecondaryMap::new();
    for n in g.nodes.values() {
        match n.op {
            Op::MatMul | Op::ArgMax { .. } | Op::AnyNonFinite | Op::RmsNorm { .. } => {
                needs_buffer[n.args[0]] = true
            }
            Op::AttnMix | Op::AttnScores => needs_buffer[n.args[1]] = true,
            Op::DynamicUpdateSlice { .. } | Op::ScatterUpdate => needs_buffer[n.args[0]] = true,
            _ => {}
        }
    }
    // Reads a computed buffer somewhere in its inline tree.
    let mut heavy: SecondaryMap<Value, bool> = SecondaryMap::new();
    for (v, n) in g.nodes.iter() {
        let p = match &n.op {
            Op::Weight(_) | Op::State(_) | Op::Slot(_) => Place::Input,
            Op::Const(_) | Op::Iota { .. } => Place::Inline,
            Op::Reshape => match place[n.args[0]] {
                Place::Input | Place::Buffer | Place::Alias(_) => Place::Alias(n.args[0]),
                _ => Place::Inline,
            },
            _ if index_local(g, v) => {
                let reads = n.args.iter().any(|&a| {
                    heavy[a]
                        || matches!(place[a], Place::Buffer | Place::Alias(_))
                        || matches!(g.nodes[a].op, Op::State(_) | Op::Weight(_))
                });
                let many = users[v].len() > 1 && reads;
                if g.is_result(v) || needs_buffer[v] || many {
                    Place::Buffer
                } else {
                    heavy[v] = reads;
                    Place::Inline
                }
            }
            Op::AttnScores | Op::Softmax { .. } => Place::None,
            // In-place updates write their operand's buffer; nothing else may read it.
            Op::DynamicUpdateSlice { .. } | Op::ScatterUpdate => {
                let x = n.args[0];
                if users[x].len() != 1
                    || !matches!(place[x], Place::Input | Place::Buffer | Place::Alias(_))
                {
                    return Err(unsupported(
                        g,
                        v,
                        "an update of a value that other ops also read",
                    ));
                }
                Place::Alias(x)
            }
            _ => Place::Buffer,
        };
        place[v] = p;
        if matches!(p, Place::Alias(_)) && needs_buffer[v] {
            needs_buffer[n.args[0]] = true;
        }
        if p == Place::Inline && n.op == Op::Reshape {
            heavy[v] = heavy[n.args[0]];
        }
        if p == Place::Inline && needs_buffer[v] {
            place[v] = Place::Buffer;
        }
    }
    // Fuse attention chains.
    let roots: Vec<Value> = g
        .nodes
        .iter()
        .filter(|(_, n)| n.op == Op::AttnMix)
        .map(|(v, _)| v)
        .collect();
    for mix in roots {
        let (_, inner) = match_attention(g, &users, mix)
            .ok_or_else(|| unsupported(g, mix, "attention that is not the fused chain"))?;
        for x in inner {
            place[x] = Place::Fused(mix);
        }
    }
    // RMS norms read only as matmul inputs (through reshapes) move into those matmuls.
    let values: Vec<Value> = g.nodes.keys().collect();
    for &v in &values {
        if !matches!(g.nodes[v].op, Op::RmsNorm { .. })
            || g.is_result(v)
            || place[v] != Place::Buffer
        {
            continue;
        }
        let x0 = g.nodes[v].args[0];
        let w = g.nodes[v].args[1];
        let mut readers = users[v].clone();
        let mut ok = matches!(place[x0], Place::Buffer | Place::Input | Place::Alias(_))
            && matches!(g.nodes[w].op, Op::Weight(_))
            && g.ty(w).dtype == poot_ir::DType::F32;
        while let Some(u) = readers.pop() {
            match g.nodes[u].op {
                Op::Reshape
                    if place[u] == Place::Alias(v)
                        || matches!(place[u], Place::Alias(a) if a != v && g.nodes[a].op == Op::Reshape) =>
                {
                    ok &= !g.is_result(u);
                    readers.extend(users[u].iter().copied());
                }
                Op::MatMul => ok &= g.nodes[u].args[0] != g.nodes[u].args[1],
                _ => ok = false,
            }
            if !ok {
                break;
            }
        }
        if ok {
            place[v] = Place::Prologue;
        }
    }
    // Matmul epilogues.
    let values: Vec<Value> = g.nodes.keys().collect();
    for v in values {
        if place[v] != Place::Buffer || !index_local(g, v) {
            continue;
        }
        // Only through same-shape element-wise ops, so the matmul's index is the value's.
        let same = |a: Value| g.ty(a).shape == g.ty(v).shape;
        let elementwise = |a: Value| {
            matches!(
                g.nodes[a].op,
                Op::Unary(_) | Op::Binary(_) | Op::Compare(_) | Op::Select | Op::Cast
            )
        };
        let mut found: Vec<Value> = Vec::new();
        let mut stack: Vec<Value> = g.nodes[v]
            .args
            .iter()
            .copied()
            .filter(|&a| same(a))
            .collect();
        while let Some(a) = stack.pop() {
            match place[a] {
                Place::Inline if elementwise(a) => {
                    stack.extend(g.nodes[a].args.iter().copied().filter(|&x| same(x)))
                }
                Place::Buffer
                    if g.nodes[a].op == Op::MatMul
                        && users[a].len() == 1
                        && !g.is_result(a)
                        && g.ty(a).shape == g.ty(v).shape
                        && !found.contains(&a) =>
                {
                    found.push(a);
                }
                _ => {}
            }
        }
        // Up to two matmuls of one input (a SwiGLU's gate and up) share the kernel.
        if let Some(&first) = found.first() {
            let x = g.nodes[first].args[0];
            found.retain(|&m| g.nodes[m].args[0] == x);
            for &m in found.iter().take(2) {
                place[m] = Place::Fused(v);
            }
        }
    }
    for (v, n) in g.nodes.iter() {
        if place[v] == Place::None && (users[v].is_empty() && !g.is_result(v)) {
            continue;
        }
        if place[v] == Place::None {
            return Err(unsupported(g, v, n.op.name()));
        }
    }
    Ok(Placement { place, users })
}

/// The error for a graph the lowering has no kernel for.
pub fn unsupported(g: &Graph, v: Value, what: &str) -> CompileError {
    CompileError::Lower(format!(
        "{}: no kernel for {what}: {}",
        g.name,
        poot_ir::node_text(g, v)
    ))
}
