//! The builder tracing uses: one method per op, each typed through `Op::infer`.
//!
//! Invariant: a builder only ever appends well-typed nodes, so a traced graph verifies unless
//! its inputs were declared twice.

use crate::{
    BinaryOp, CmpOp, DType, F32Bits, Graph, IrError, Node, Op, ReduceOp, Result, RopeLayout,
    Scalar, Shape, SlotKind, Type, UnaryOp, Value, WeightRole,
};

/// Appends typed nodes to a graph.
pub struct Builder {
    g: Graph,
}

impl Builder {
    /// A builder for a new graph named `name`.
    pub fn new(name: impl Into<String>) -> Builder {
        Builder {
            g: Graph::new(name),
        }
    }

    /// The graph so far.
    pub fn graph(&self) -> &Graph {
        &self.g
    }

    /// Finishes the graph.
    pub fn finish(self) -> Graph {
        self.g
    }

    /// The type of `v`.
    pub fn ty(&self, v: Value) -> &Type {
        self.g.ty(v)
    }

    /// Appends `op(args)` with `declared` as the type for ops that take it from the declaration.
    pub fn push(&mut self, op: Op, args: &[Value], declared: Type) -> Result<Value> {
        let tys: Vec<_> = args.iter().map(|a| self.g.ty(*a)).collect();
        let ty = op
            .infer(&tys, &declared)
            .map_err(|msg| IrError::Build { op: op.name(), msg })?;
        Ok(self.g.nodes.push(Node {
            op,
            args: args.to_vec(),
            ty,
        }))
    }

    fn derived(&mut self, op: Op, args: &[Value]) -> Result<Value> {
        self.push(op, args, Type::scalar(DType::F32))
    }

    /// A weight input.
    pub fn weight(&mut self, role: WeightRole, ty: Type) -> Result<Value> {
        self.push(Op::Weight(role), &[], ty)
    }
    /// A state input.
    pub fn state(&mut self, name: impl Into<String>, ty: Type) -> Result<Value> {
        self.push(Op::State(name.into()), &[], ty)
    }
    /// A slot input.
    pub fn slot(&mut self, kind: SlotKind, ty: Type) -> Result<Value> {
        self.push(Op::Slot(kind), &[], ty)
    }
    /// A constant splat.
    pub fn constant(&mut self, s: Scalar, shape: impl Into<Vec<usize>>) -> Result<Value> {
        self.push(Op::Const(s), &[], Type::new(s.dtype(), shape))
    }
    /// An f32 scalar constant.
    pub fn f32(&mut self, x: f32) -> Result<Value> {
        self.constant(Scalar::F32(x), [])
    }
    /// `i32` indices along `axis` of `shape`.
    pub fn iota(&mut self, shape: impl Into<Vec<usize>>, axis: usize) -> Result<Value> {
        self.push(Op::Iota { axis }, &[], Type::new(DType::I32, shape))
    }
    /// Element-wise unary.
    pub fn unary(&mut self, u: UnaryOp, x: Value) -> Result<Value> {
        self.derived(Op::Unary(u), &[x])
    }
    /// Element-wise binary.
    pub fn binary(&mut self, b: BinaryOp, x: Value, y: Value) -> Result<Value> {
        self.derived(Op::Binary(b), &[x, y])
    }
    /// `x + y`.
    pub fn add(&mut self, x: Value, y: Value) -> Result<Value> {
        self.binary(BinaryOp::Add, x, y)
    }
    /// `x * y`.
    pub fn mul(&mut self, x: Value, y: Value) -> Result<Value> {
        self.binary(BinaryOp::Mul, x, y)
    }
    /// Comparison.
    pub fn compare(&mut self, c: CmpOp, x: Value, y: Value) -> Result<Value> {
        self.derived(Op::Compare(c), &[x, y])
    }
    /// `a` where `cond`, else `b`.
    pub fn select(&mut self, cond: Value, a: Value, b: Value) -> Result<Value> {
        self.derived(Op::Select, &[cond, a, b])
    }
    /// Conversion to `dtype`.
    pub fn cast(&mut self, x: Value, dtype: DType) -> Result<Value> {
        let shape = self.ty(x).shape.clone();
        self.push(Op::Cast, &[x], Type { dtype, shape })
    }
    /// Same elements, new shape.
    pub fn reshape(&mut self, x: Value, dims: impl Into<Vec<usize>>) -> Result<Value> {
        let dtype = self.ty(x).dtype;
        self.push(
            Op::Reshape,
            &[x],
            Type {
                dtype,
                shape: Shape::new(dims),
            },
        )
    }
    /// Reduction over `axis` (kept as size 1).
    pub fn reduce(&mut self, op: ReduceOp, x: Value, axis: usize) -> Result<Value> {
        self.derived(Op::Reduce { op, axis }, &[x])
    }
    /// Softmax over `axis`.
    pub fn softmax(&mut self, x: Value, axis: usize) -> Result<Value> {
        self.derived(Op::Softmax { axis }, &[x])
    }
    /// RMS norm over the last axis.
    pub fn rms_norm(&mut self, x: Value, w: Value, eps: f32) -> Result<Value> {
        self.derived(Op::RmsNorm { eps: F32Bits(eps) }, &[x, w])
    }
    /// `x @ w^T`.
    pub fn matmul(&mut self, x: Value, w: Value) -> Result<Value> {
        self.derived(Op::MatMul, &[x, w])
    }
    /// Rows of `table` at `ids`.
    pub fn gather(&mut self, table: Value, ids: Value) -> Result<Value> {
        self.derived(Op::Gather, &[table, ids])
    }
    /// Rotary embedding.
    pub fn rope(
        &mut self,
        x: Value,
        pos: Value,
        layout: RopeLayout,
        base: f32,
        dims: usize,
    ) -> Result<Value> {
        let op = Op::Rope {
            layout,
            base: F32Bits(base),
            dims,
        };
        self.derived(op, &[x, pos])
    }
    /// Attention scores `q . k` per head.
    pub fn attn_scores(&mut self, q: Value, k: Value) -> Result<Value> {
        self.derived(Op::AttnScores, &[q, k])
    }
    /// Attention-weighted values.
    pub fn attn_mix(&mut self, p: Value, v: Value) -> Result<Value> {
        self.derived(Op::AttnMix, &[p, v])
    }
    /// Per-row write of `update` into `x` along `axis` at `start`.
    pub fn dynamic_update_slice(
        &mut self,
        x: Value,
        update: Value,
        start: Value,
        axis: usize,
    ) -> Result<Value> {
        self.derived(Op::DynamicUpdateSlice { axis }, &[x, update, start])
    }
    /// Row scatter.
    pub fn scatter_update(&mut self, x: Value, update: Value, index: Value) -> Result<Value> {
        self.derived(Op::ScatterUpdate, &[x, update, index])
    }
    /// Index of the maximum over `axis`.
    pub fn argmax(&mut self, x: Value, axis: usize) -> Result<Value> {
        self.derived(Op::ArgMax { axis }, &[x])
    }
    /// True when any element is NaN or infinite.
    pub fn any_nonfinite(&mut self, x: Value) -> Result<Value> {
        self.derived(Op::AnyNonFinite, &[x])
    }
    /// Names `v` as a step output.
    pub fn output(&mut self, name: impl Into<String>, v: Value) {
        self.g.outputs.push((name.into(), v));
    }
    /// Records `v` as the new value of state `name`.
    pub fn update_state(&mut self, name: impl Into<String>, v: Value) {
        self.g.state_updates.push((name.into(), v));
    }
}
