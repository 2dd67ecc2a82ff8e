//! Building kernels: one method per expression, closures for structured control flow.
//!
//! Invariant: the builder infers every value's type from its operands, so a built kernel
//! only fails `verify` through misuse the builder cannot see (a value used outside the
//! block that defines it).

use crate::kernel::{Access, Carried, Expr, Inst, Kernel, Mem, Param, SharedArray, Val};
use crate::types::{BinOp, CmpOp, Const, ReduceOp, Scalar, Special, Ty, UnOp};
use cranelift_entity::PrimaryMap;

/// Builds one kernel.
pub struct KernelBuilder {
    k: Kernel,
    blocks: Vec<Vec<Inst>>,
}

impl KernelBuilder {
    /// A kernel named `name` with the given work-group size and assumed subgroup width.
    pub fn new(name: impl Into<String>, workgroup: [u32; 3], subgroup: u32) -> KernelBuilder {
        KernelBuilder {
            k: Kernel {
                name: name.into(),
                params: Vec::new(),
                shared: Vec::new(),
                workgroup,
                subgroup,
                types: PrimaryMap::new(),
                body: Vec::new(),
            },
            blocks: vec![Vec::new()],
        }
    }

    /// Finishes the kernel.
    pub fn finish(mut self) -> Kernel {
        self.k.body = self.blocks.pop().unwrap_or_default();
        self.k
    }

    /// Adds a buffer parameter.
    pub fn param(&mut self, name: &str, elem: Scalar, access: Access) -> Mem {
        self.k.params.push(Param {
            name: name.into(),
            elem,
            access,
        });
        Mem::Param(self.k.params.len() as u32 - 1)
    }

    /// Adds a shared array.
    pub fn shared(&mut self, elem: Scalar, len: u32) -> Mem {
        self.k.shared.push(SharedArray { elem, len });
        Mem::Shared(self.k.shared.len() as u32 - 1)
    }

    /// The type of `v`.
    pub fn ty(&self, v: Val) -> Ty {
        self.k.types[v]
    }

    fn emit(&mut self, i: Inst) {
        if let Some(b) = self.blocks.last_mut() {
            b.push(i);
        }
    }

    fn fresh(&mut self, ty: Ty) -> Val {
        self.k.types.push(ty)
    }

    fn elem(&self, m: Mem) -> Scalar {
        match m {
            Mem::Param(i) => self.k.params[i as usize].elem,
            Mem::Shared(i) => self.k.shared[i as usize].elem,
        }
    }

    /// Defines a value.
    pub fn expr(&mut self, e: Expr) -> Val {
        let ty = match &e {
            Expr::Const(c) => c.ty(),
            Expr::Special(_) => Ty::U32,
            Expr::Unary(UnOp::IsFinite | UnOp::IsNan, a) => Ty {
                scalar: Scalar::Bool,
                lanes: self.ty(*a).lanes,
            },
            Expr::Unary(_, a) | Expr::Binary(_, a, _) | Expr::Fma(a, _, _) => self.ty(*a),
            Expr::Select(_, a, _) | Expr::SubgroupReduce(_, a) | Expr::ShuffleXor(a, _) => {
                self.ty(*a)
            }
            Expr::Cmp(_, a, _) => Ty {
                scalar: Scalar::Bool,
                lanes: self.ty(*a).lanes,
            },
            Expr::Convert(a, s) | Expr::Bitcast(a, s) => Ty {
                scalar: *s,
                lanes: self.ty(*a).lanes,
            },
            Expr::HalfToF32(..) | Expr::Bf16ToF32(..) => Ty::F32,
            Expr::Load(m, _, lanes) => Ty {
                scalar: self.elem(*m),
                lanes: *lanes,
            },
            Expr::Extract(a, _) => Ty::scalar(self.ty(*a).scalar),
            Expr::Mma { .. } => Ty {
                scalar: Scalar::F32,
                lanes: 4,
            },
        };
        let v = self.fresh(ty);
        self.emit(Inst::Let(v, e));
        v
    }

    /// A u32 constant.
    pub fn u32(&mut self, x: u32) -> Val {
        self.expr(Expr::Const(Const::U32(x)))
    }
    /// An i32 constant.
    pub fn i32(&mut self, x: i32) -> Val {
        self.expr(Expr::Const(Const::I32(x)))
    }
    /// An f32 constant.
    pub fn f32(&mut self, x: f32) -> Val {
        self.expr(Expr::Const(Const::F32(x.to_bits())))
    }
    /// A bool constant.
    pub fn bool(&mut self, x: bool) -> Val {
        self.expr(Expr::Const(Const::Bool(x)))
    }
    /// A thread coordinate.
    pub fn special(&mut self, s: Special) -> Val {
        self.expr(Expr::Special(s))
    }
    /// Unary operator.
    pub fn un(&mut self, op: UnOp, a: Val) -> Val {
        self.expr(Expr::Unary(op, a))
    }
    /// Binary operator.
    pub fn bin(&mut self, op: BinOp, a: Val, b: Val) -> Val {
        self.expr(Expr::Binary(op, a, b))
    }
    /// `a + b`.
    pub fn add(&mut self, a: Val, b: Val) -> Val {
        self.bin(BinOp::Add, a, b)
    }
    /// `a - b`.
    pub fn sub(&mut self, a: Val, b: Val) -> Val {
        self.bin(BinOp::Sub, a, b)
    }
    /// `a * b`.
    pub fn mul(&mut self, a: Val, b: Val) -> Val {
        self.bin(BinOp::Mul, a, b)
    }
    /// `a * b + c`, rounded once.
    pub fn fma(&mut self, a: Val, b: Val, c: Val) -> Val {
        self.expr(Expr::Fma(a, b, c))
    }
    /// Comparison.
    pub fn cmp(&mut self, op: CmpOp, a: Val, b: Val) -> Val {
        self.expr(Expr::Cmp(op, a, b))
    }
    /// Selection.
    pub fn select(&mut self, c: Val, a: Val, b: Val) -> Val {
        self.expr(Expr::Select(c, a, b))
    }
    /// Numeric conversion.
    pub fn convert(&mut self, a: Val, to: Scalar) -> Val {
        self.expr(Expr::Convert(a, to))
    }
    /// Bit reinterpretation.
    pub fn bitcast(&mut self, a: Val, to: Scalar) -> Val {
        self.expr(Expr::Bitcast(a, to))
    }
    /// Load of `lanes` elements.
    pub fn load(&mut self, m: Mem, index: Val, lanes: u8) -> Val {
        self.expr(Expr::Load(m, index, lanes))
    }
    /// One lane of a vector.
    pub fn extract(&mut self, v: Val, lane: u8) -> Val {
        self.expr(Expr::Extract(v, lane))
    }
    /// Subgroup reduction.
    pub fn subgroup_reduce(&mut self, op: ReduceOp, v: Val) -> Val {
        self.expr(Expr::SubgroupReduce(op, v))
    }
    /// Store.
    pub fn store(&mut self, mem: Mem, index: Val, value: Val) {
        self.emit(Inst::Store { mem, index, value });
    }
    /// Atomic combine.
    pub fn atomic(&mut self, op: ReduceOp, mem: Mem, index: Val, value: Val) {
        self.emit(Inst::Atomic {
            op,
            mem,
            index,
            value,
            old: None,
        });
    }
    /// Atomic combine that returns the element's previous value.
    pub fn atomic_fetch(&mut self, op: ReduceOp, mem: Mem, index: Val, value: Val) -> Val {
        let ty = self.ty(value);
        let old = self.fresh(ty);
        self.emit(Inst::Atomic {
            op,
            mem,
            index,
            value,
            old: Some(old),
        });
        old
    }
    /// A prefetch hint (see `Inst::Prefetch`).
    pub fn prefetch(&mut self, mem: Mem, index: Val, count: Val) {
        self.emit(Inst::Prefetch { mem, index, count });
    }
    /// Device-scope fence (see `Inst::Fence`).
    pub fn fence(&mut self) {
        self.emit(Inst::Fence);
    }
    /// Barrier.
    pub fn barrier(&mut self) {
        self.emit(Inst::Barrier);
    }
    /// Trap with a code.
    pub fn trap(&mut self, code: u32) {
        self.emit(Inst::Trap(code));
    }
    /// The hint that the work-group's remaining work is short (`Inst::LaunchDependents`).
    pub fn launch_dependents(&mut self) {
        self.emit(Inst::LaunchDependents);
    }
    /// Appends `insts` (built elsewhere, e.g. a block taken with `begin`/`end`) to the current
    /// block.
    pub fn append(&mut self, insts: Vec<Inst>) {
        insts.into_iter().for_each(|i| self.emit(i));
    }
    /// The wait for the previous dispatch, with the parameters read before it
    /// (`Inst::GridWait`).
    pub fn grid_wait(&mut self, early: Vec<u32>) {
        self.emit(Inst::GridWait { early });
    }

    /// The thread's arrival at the cluster's barrier, with release ordering or without
    /// (`Inst::ClusterArrive`).
    pub fn cluster_arrive(&mut self, release: bool) {
        self.emit(Inst::ClusterArrive { release });
    }

    /// The wait for the cluster's arrivals (`Inst::ClusterWait`).
    pub fn cluster_wait(&mut self) {
        self.emit(Inst::ClusterWait);
    }

    /// Stores `value` into shared array `mem` of the cluster's work-group `rank`
    /// (`Inst::StoreRemote`).
    pub fn store_remote(&mut self, mem: Mem, rank: Val, index: Val, value: Val) {
        self.emit(Inst::StoreRemote {
            mem,
            rank,
            index,
            value,
        });
    }

    /// Emits the two forms of a computation, with clusters of `dims` and without, from two
    /// closed blocks (`Inst::Clustered`).
    pub fn finish_clustered(&mut self, dims: [u32; 3], then: Vec<Inst>, els: Vec<Inst>) {
        self.emit(Inst::Clustered { dims, then, els });
    }

    /// Emits the two forms of a computation, with subgroup matrix multiply-accumulate and
    /// without, from two closed blocks (`Inst::Matrix`).
    pub fn finish_matrix(&mut self, then: Vec<Inst>, els: Vec<Inst>) {
        self.emit(Inst::Matrix { then, els });
    }

    /// Opens a block for the body of an `if` branch or a loop (see `finish_if`, `finish_for`).
    pub fn begin(&mut self) {
        self.blocks.push(Vec::new());
    }

    /// Closes the innermost block and returns its statements.
    pub fn end(&mut self) -> Vec<Inst> {
        self.blocks.pop().unwrap_or_default()
    }

    /// Emits an `if` from two closed blocks and their yields; returns its results.
    pub fn finish_if(
        &mut self,
        cond: Val,
        then: Vec<Inst>,
        then_yield: Vec<Val>,
        els: Vec<Inst>,
        else_yield: Vec<Val>,
    ) -> Vec<Val> {
        let results: Vec<Val> = then_yield.iter().map(|v| self.fresh(self.ty(*v))).collect();
        self.emit(Inst::If {
            cond,
            then,
            then_yield,
            els,
            else_yield,
            results: results.clone(),
        });
        results
    }

    /// The induction variable and carried parameters of a loop about to be built.
    pub fn loop_vars(&mut self, init: &[Val]) -> (Val, Vec<Carried>) {
        let var = self.fresh(Ty::U32);
        let carried = init
            .iter()
            .map(|&i| Carried {
                param: self.fresh(self.ty(i)),
                init: i,
            })
            .collect();
        (var, carried)
    }

    /// Emits a loop from `loop_vars`, a closed body block and its yields; returns its results.
    #[allow(clippy::too_many_arguments)]
    pub fn finish_for(
        &mut self,
        var: Val,
        start: Val,
        end: Val,
        step: u32,
        carried: Vec<Carried>,
        body: Vec<Inst>,
        yields: Vec<Val>,
    ) -> Vec<Val> {
        let results: Vec<Val> = carried
            .iter()
            .map(|c| self.fresh(self.ty(c.init)))
            .collect();
        self.emit(Inst::For {
            var,
            start,
            end,
            step,
            carried,
            body,
            yields,
            results: results.clone(),
        });
        results
    }

    /// `if cond { then } else { els }`, each branch yielding values of the same types.
    pub fn if_else(
        &mut self,
        cond: Val,
        then: impl FnOnce(&mut Self) -> Vec<Val>,
        els: impl FnOnce(&mut Self) -> Vec<Val>,
    ) -> Vec<Val> {
        self.begin();
        let then_yield = then(self);
        let then_b = self.end();
        self.begin();
        let else_yield = els(self);
        let els_b = self.end();
        self.finish_if(cond, then_b, then_yield, els_b, else_yield)
    }

    /// `if cond { then }` without results.
    pub fn if_then(&mut self, cond: Val, then: impl FnOnce(&mut Self)) {
        self.if_else(
            cond,
            |b| {
                then(b);
                vec![]
            },
            |_| vec![],
        );
    }

    /// A `u32` loop from `start` to `end` by `step`, carrying `init`; the body gets the
    /// induction variable and the carried values and returns their next values.
    pub fn for_loop(
        &mut self,
        start: Val,
        end: Val,
        step: u32,
        init: &[Val],
        body: impl FnOnce(&mut Self, Val, &[Val]) -> Vec<Val>,
    ) -> Vec<Val> {
        let (var, carried) = self.loop_vars(init);
        let params: Vec<Val> = carried.iter().map(|c| c.param).collect();
        self.begin();
        let yields = body(self, var, &params);
        let body_b = self.end();
        self.finish_for(var, start, end, step, carried, body_b, yields)
    }
}
