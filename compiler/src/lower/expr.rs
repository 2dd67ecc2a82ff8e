//! Emitting one element of an inline value inside a kernel, and the kernel's buffer table.
//!
//! Invariants: `value(v, idx)` computes element `idx` (one `u32` per dimension of `v`'s shape)
//! with exactly the f32 operations `poot_eval` documents for each op, so inlining never
//! changes a result; every buffer a kernel touches is a parameter bound in first-use order;
//! an index read from data (a gather id) is checked and out of range traps with
//! `TRAP_GATHER`; positions index the rope tables clamped to their length (the cache write
//! traps on a position past the cache before anything reads a table row past it).

use super::place::{Place, Placement};
use super::tables::Tables;
use crate::Result;
use poot_ir::{BinaryOp, CmpOp, DType, Graph, Op, RopeLayout, Scalar, UnaryOp, Value};
use poot_kir::{
    Access, BinOp, CmpOp as KCmp, Expr, Inst, KernelBuilder, Mem, Scalar as KS, UnOp, Val,
};
use std::collections::{HashMap, HashSet};

/// Trap code: a key/value write past the cache capacity.
pub const TRAP_CACHE_OVERFLOW: u32 = 1;
/// Trap code: a gather id outside its table.
pub const TRAP_GATHER: u32 = 2;

/// A buffer a kernel parameter is bound to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Buf {
    /// The buffer of a graph value (input or materialized).
    Value(Value),
    /// A compile-time table (rope cos/sin).
    Table(usize),
    /// Kernel-private scratch `i` of the kernel computing a value.
    Scratch(Value, u32),
    /// Counters (`u32`) that are zero between dispatches, from word `n` of the entry's counters
    /// region: a kernel that changes one restores it to zero before it ends, so every
    /// dispatch of a step may share them. They persist across steps (zeroed at allocation and
    /// by `reset_state`). A kernel binds them from word 0; a merged kernel binds each member's
    /// at its own offset (`merge`).
    Counters(u32),
    /// The weights of a value, bound to a dispatch that only prefetches them for the next
    /// dispatch (`prefetch`): it reads none of them.
    Ahead(Value),
}

/// The kir element type of a graph dtype held in a buffer.
pub fn elem(d: DType) -> KS {
    match d {
        DType::F32 => KS::F32,
        DType::I32 => KS::I32,
        _ => KS::U32,
    }
}

/// One kernel under construction.
pub struct Emit<'a> {
    /// The graph.
    pub g: &'a Graph,
    /// Its placement.
    pub pl: &'a Placement,
    /// Compile-time tables.
    pub tables: &'a mut Tables,
    /// The kernel.
    pub kb: KernelBuilder,
    /// Parameter bindings, in order.
    pub params: Vec<Buf>,
    mems: HashMap<Buf, Mem>,
    overrides: HashMap<Value, Val>,
    root: Option<Value>,
}

impl<'a> Emit<'a> {
    /// Starts a kernel.
    pub fn new(
        g: &'a Graph,
        pl: &'a Placement,
        tables: &'a mut Tables,
        kb: KernelBuilder,
    ) -> Emit<'a> {
        Emit {
            g,
            pl,
            tables,
            kb,
            params: Vec::new(),
            mems: HashMap::new(),
            overrides: HashMap::new(),
            root: None,
        }
    }

    /// The parameter for `buf`, added on first use.
    pub fn mem(&mut self, buf: Buf, elem: KS, access: Access) -> Mem {
        if let Some(m) = self.mems.get(&buf) {
            return *m;
        }
        // Names describe the binding's kind only, so equal kernels print equal and are shared.
        let name = match buf {
            Buf::Value(v) => match self.g.nodes[v].op {
                Op::Weight(r) => r.kind.name().to_string(),
                Op::State(_) => "state".to_string(),
                Op::Slot(k) => k.name().to_string(),
                _ => "temp".to_string(),
            },
            Buf::Table(_) => "table".to_string(),
            Buf::Scratch(..) => "scratch".to_string(),
            Buf::Counters(_) => "counters".to_string(),
            Buf::Ahead(_) => "ahead".to_string(),
        };
        let m = self.kb.param(&name, elem, access);
        self.params.push(buf);
        self.mems.insert(buf, m);
        m
    }

    /// The parameter backing value `v` (which must have a buffer).
    pub fn buffer(&mut self, v: Value, access: Access) -> Result<Mem> {
        let b = self
            .pl
            .buffer_of(v)
            .ok_or_else(|| super::place::unsupported(self.g, v, "a buffer for an inline value"))?;
        Ok(self.mem(Buf::Value(b), elem(self.g.ty(v).dtype), access))
    }

    /// The parameter backing weight `v` as raw 32-bit words (any dtype, packed included).
    pub fn words(&mut self, v: Value) -> Result<Mem> {
        let b = self
            .pl
            .buffer_of(v)
            .ok_or_else(|| super::place::unsupported(self.g, v, "a weight without a buffer"))?;
        Ok(self.mem(Buf::Value(b), KS::U32, Access::Read))
    }

    /// Makes `value(v, idx)` return `x` (a fused producer's result at the current index).
    pub fn set_override(&mut self, v: Value, x: Val) {
        self.overrides.insert(v, x);
    }

    /// Runs `body` in the one work-group that is the last of `count` to count itself in
    /// word `index` of `Buf::Counters(0)`. Every work-group fences and passes a barrier before
    /// it counts, so everything any of them stored is visible to the last one, which fences
    /// again, runs `body` and restores the counter to zero before the dispatch ends.
    pub fn last_to_arrive(
        &mut self,
        index: Val,
        count: Val,
        body: impl FnOnce(&mut Self) -> Result<()>,
    ) -> Result<()> {
        let counters = self.mem(Buf::Counters(0), KS::U32, Access::ReadWrite);
        let arrived_at = self.kb.shared(KS::U32, 1);
        self.kb.fence();
        self.kb.barrier();
        let local = self.kb.special(poot_kir::Special::LocalX);
        let zero = self.u(0);
        let lead = self.kb.cmp(KCmp::Eq, local, zero);
        let one = self.u(1);
        self.kb.if_then(lead, |b| {
            let old = b.atomic_fetch(poot_kir::ReduceOp::Add, counters, index, one);
            b.store(arrived_at, zero, old);
        });
        self.kb.barrier();
        let arrived = self.kb.load(arrived_at, zero, 1);
        let before_last = self.kb.sub(count, one);
        let last = self.kb.cmp(KCmp::Eq, arrived, before_last);
        self.when(last, |e| {
            e.kb.fence();
            body(e)?;
            e.kb.if_then(lead, |b| {
                b.atomic(poot_kir::ReduceOp::Min, counters, index, zero)
            });
            Ok(())
        })
    }

    /// A u32 constant.
    pub fn u(&mut self, x: usize) -> Val {
        self.kb.u32(x as u32)
    }

    /// Row-major linear index of `idx` in `dims` (size-1 dimensions contribute nothing).
    pub fn linear(&mut self, dims: &[usize], idx: &[Val]) -> Val {
        let mut acc: Option<Val> = None;
        let mut stride = 1usize;
        for (d, &i) in dims.iter().zip(idx).rev() {
            if *d != 1 {
                let term = if stride == 1 {
                    i
                } else {
                    let s = self.u(stride);
                    self.kb.mul(i, s)
                };
                acc = Some(match acc {
                    Some(a) => self.kb.add(a, term),
                    None => term,
                });
            }
            stride *= d;
        }
        acc.unwrap_or_else(|| self.u(0))
    }

    /// The indices of linear index `lin` in `dims`.
    pub fn unravel(&mut self, dims: &[usize], lin: Val) -> Vec<Val> {
        let mut out = vec![lin; dims.len()];
        let mut rest = lin;
        for i in (0..dims.len()).rev() {
            if i == 0 {
                out[0] = rest;
                break;
            }
            let d = self.u(dims[i]);
            out[i] = self.kb.bin(BinOp::Rem, rest, d);
            rest = self.kb.bin(BinOp::Div, rest, d);
        }
        if dims.len() == 1 {
            out[0] = lin;
        }
        out
    }

    fn load_element(&mut self, v: Value, idx: &[Val]) -> Result<Val> {
        let mem = self.buffer(v, Access::Read)?;
        let dims = self.g.ty(v).shape.0.clone();
        let lin = self.linear(&dims, idx);
        let x = self.kb.load(mem, lin, 1);
        Ok(if self.g.ty(v).dtype == DType::Bool {
            let z = self.kb.u32(0);
            self.kb.cmp(KCmp::Ne, x, z)
        } else {
            x
        })
    }

    /// The index of `operand` (broadcast numpy-style) at element `idx` of a rank-`out_rank` value.
    pub fn broadcast_idx(&mut self, operand: Value, out_rank: usize, idx: &[Val]) -> Vec<Val> {
        let dims = self.g.ty(operand).shape.0.clone();
        let off = out_rank - dims.len();
        dims.iter()
            .enumerate()
            .map(|(i, &d)| if d == 1 { self.u(0) } else { idx[off + i] })
            .collect()
    }

    /// `if cond { then }`.
    pub fn when(&mut self, cond: Val, then: impl FnOnce(&mut Self) -> Result<()>) -> Result<()> {
        self.kb.begin();
        then(self)?;
        let body = self.kb.end();
        self.kb.finish_if(cond, body, vec![], vec![], vec![]);
        Ok(())
    }

    /// The two forms of a computation (`Inst::Clustered`): `then` where work-groups run in
    /// clusters of `dims`, `els` where they do not.
    pub fn clustered(
        &mut self,
        dims: [u32; 3],
        then: impl FnOnce(&mut Self) -> Result<()>,
        els: impl FnOnce(&mut Self) -> Result<()>,
    ) -> Result<()> {
        let [with, without] = self.two_blocks(then, els)?;
        self.kb.finish_clustered(dims, with, without);
        Ok(())
    }

    /// The statements `then` and `els` emit, each in a closed block of its own.
    fn two_blocks(
        &mut self,
        then: impl FnOnce(&mut Self) -> Result<()>,
        els: impl FnOnce(&mut Self) -> Result<()>,
    ) -> Result<[Vec<Inst>; 2]> {
        self.kb.begin();
        then(self)?;
        let with = self.kb.end();
        self.kb.begin();
        els(self)?;
        Ok([with, self.kb.end()])
    }

    /// The two forms of a computation (`Inst::Matrix`): `then` where the device has subgroup
    /// matrix multiply-accumulate, `els` where it does not.
    pub fn matrix(
        &mut self,
        then: impl FnOnce(&mut Self) -> Result<()>,
        els: impl FnOnce(&mut Self) -> Result<()>,
    ) -> Result<()> {
        let [with, without] = self.two_blocks(then, els)?;
        self.kb.finish_matrix(with, without);
        Ok(())
    }

    /// `if cond { then }`, or `then` alone when `always` (the caller knows `cond` holds, and a
    /// body outside any branch lets its loads issue with the code around it).
    pub fn when_unless(
        &mut self,
        always: bool,
        cond: Val,
        then: impl FnOnce(&mut Self) -> Result<()>,
    ) -> Result<()> {
        if always {
            then(self)
        } else {
            self.when(cond, then)
        }
    }

    /// A `u32` loop carrying `init`; the body returns the carried values' next values.
    pub fn repeat(
        &mut self,
        start: Val,
        end: Val,
        step: u32,
        init: &[Val],
        body: impl FnOnce(&mut Self, Val, &[Val]) -> Result<Vec<Val>>,
    ) -> Result<Vec<Val>> {
        let (var, carried) = self.kb.loop_vars(init);
        let params: Vec<Val> = carried.iter().map(|c| c.param).collect();
        self.kb.begin();
        let yields = body(self, var, &params)?;
        let b = self.kb.end();
        Ok(self
            .kb
            .finish_for(var, start, end, step, carried, b, yields))
    }

    /// Runs `f`, whose statements must be `let`s, and places the grid wait among them
    /// (`loads_before_wait`, listing `early` too). The loads issue while the previous
    /// dispatch runs, and nothing before the wait waits for them.
    pub fn early_loads<R>(&mut self, early: Vec<u32>, f: impl FnOnce(&mut Self) -> R) -> R {
        self.kb.begin();
        let r = f(self);
        let block = self.kb.end();
        self.loads_before_wait(block, early);
        r
    }

    /// Places `block` (statements that must be `let`s) with the grid wait among them: its
    /// loads, with the values their indices need, before the wait, which lists `early` and
    /// every parameter they read; the rest after it.
    pub fn loads_before_wait(&mut self, block: Vec<Inst>, mut early: Vec<u32>) {
        let (loads, rest) = partition_loads(block);
        for i in &loads {
            if let Inst::Let(_, Expr::Load(Mem::Param(p), ..)) = i
                && !early.contains(p)
            {
                early.push(*p);
            }
        }
        self.kb.append(loads);
        self.kb.grid_wait(early);
        self.kb.append(rest);
    }

    /// Runs `f`, whose statements must be `let`s, into a block of their own, and returns
    /// its result with the block split in two, each in the original order: its loads with
    /// the values their indices need, then the rest (which may use values of the first part,
    /// so the parts must be placed in that order).
    pub fn split_loads<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> (R, Vec<Inst>, Vec<Inst>) {
        self.kb.begin();
        let r = f(self);
        let block = self.kb.end();
        let (loads, rest) = partition_loads(block);
        (r, loads, rest)
    }

    /// `repeat` over `start + i * step` for `i < iters`, unrolled: round `i` runs the body
    /// on its index clamped below `end` and keeps the carried values it yields only where the
    /// index is below `end`, so the rounds are straight-line code and their loads issue
    /// together instead of one memory round trip per iteration. The caller picks `iters` to
    /// cover `start..end`.
    pub fn unrolled(
        &mut self,
        start: Val,
        end: usize,
        step: u32,
        iters: usize,
        init: &[Val],
        mut body: impl FnMut(&mut Self, Val, &[Val]) -> Result<Vec<Val>>,
    ) -> Result<Vec<Val>> {
        let mut acc = init.to_vec();
        for (valid, at) in self.rounds(start, end, step, iters) {
            let next = body(self, at, &acc)?;
            acc = self.keep(valid, &next, &acc);
        }
        Ok(acc)
    }

    /// The rounds of `unrolled`: each round's index clamped below `end`, and whether it is
    /// below `end`.
    pub fn rounds(&mut self, start: Val, end: usize, step: u32, iters: usize) -> Vec<(Val, Val)> {
        let endv = self.u(end);
        let last = self.u(end.saturating_sub(1));
        (0..iters)
            .map(|i| {
                let off = self.u(i * step as usize);
                let var = self.kb.add(start, off);
                let valid = self.kb.cmp(poot_kir::CmpOp::Lt, var, endv);
                (valid, self.kb.bin(BinOp::Min, var, last))
            })
            .collect()
    }

    /// `next` where `valid`, else `acc` (a round of `unrolled`).
    pub fn keep(&mut self, valid: Val, next: &[Val], acc: &[Val]) -> Vec<Val> {
        next.iter()
            .zip(acc)
            .map(|(&n, &a)| self.kb.select(valid, n, a))
            .collect()
    }

    /// Element `idx` of `root` computed from its own op, even though `root` has a buffer
    /// (this is the kernel that writes it).
    pub fn compute(&mut self, root: Value, idx: &[Val]) -> Result<Val> {
        self.root = Some(root);
        let r = self.value(root, idx);
        self.root = None;
        r
    }

    /// Element `idx` of `v`.
    pub fn value(&mut self, v: Value, idx: &[Val]) -> Result<Val> {
        if let Some(x) = self.overrides.get(&v) {
            return Ok(*x);
        }
        match self.pl.place[v] {
            _ if self.root == Some(v) => {}
            Place::Inline => {}
            _ if self.pl.buffer_of(v).is_some() => return self.load_element(v, idx),
            _ => {
                return Err(super::place::unsupported(
                    self.g,
                    v,
                    "a value computed inside another kernel",
                ));
            }
        }
        let g = self.g;
        let node = &g.nodes[v];
        let rank = g.ty(v).shape.rank();
        let arg = |i: usize| node.args[i];
        Ok(match &node.op {
            Op::Const(s) => match s {
                Scalar::F32(x) => self.kb.f32(*x),
                Scalar::I32(x) => self.kb.i32(*x),
                Scalar::U32(x) => self.kb.u32(*x),
                Scalar::U8(x) => self.kb.u32(*x as u32),
                Scalar::Bool(x) => self.kb.bool(*x),
            },
            Op::Iota { axis } => self.kb.convert(idx[*axis], KS::I32),
            Op::Reshape => {
                let dims = g.ty(v).shape.0.clone();
                let lin = self.linear(&dims, idx);
                let from = g.ty(arg(0)).shape.0.clone();
                let at = self.unravel(&from, lin);
                self.value(arg(0), &at)?
            }
            Op::Unary(u) => {
                let x = self.value(arg(0), idx)?;
                self.unary(*u, x)
            }
            Op::Binary(b) => {
                let (ia, ib) = (
                    self.broadcast_idx(arg(0), rank, idx),
                    self.broadcast_idx(arg(1), rank, idx),
                );
                let x = self.value(arg(0), &ia)?;
                let y = self.value(arg(1), &ib)?;
                let op = match b {
                    BinaryOp::Add => BinOp::Add,
                    BinaryOp::Sub => BinOp::Sub,
                    BinaryOp::Mul => BinOp::Mul,
                    BinaryOp::Div => BinOp::Div,
                    BinaryOp::Max => BinOp::Max,
                    BinaryOp::Min => BinOp::Min,
                };
                self.kb.bin(op, x, y)
            }
            Op::Compare(c) => {
                let (ia, ib) = (
                    self.broadcast_idx(arg(0), rank, idx),
                    self.broadcast_idx(arg(1), rank, idx),
                );
                let x = self.value(arg(0), &ia)?;
                let y = self.value(arg(1), &ib)?;
                let op = match c {
                    CmpOp::Lt => KCmp::Lt,
                    CmpOp::Le => KCmp::Le,
                    CmpOp::Eq => KCmp::Eq,
                };
                self.kb.cmp(op, x, y)
            }
            Op::Select => {
                let ic = self.broadcast_idx(arg(0), rank, idx);
                let (ia, ib) = (
                    self.broadcast_idx(arg(1), rank, idx),
                    self.broadcast_idx(arg(2), rank, idx),
                );
                let c = self.value(arg(0), &ic)?;
                let x = self.value(arg(1), &ia)?;
                let y = self.value(arg(2), &ib)?;
                self.kb.select(c, x, y)
            }
            Op::Cast => {
                let x = self.value(arg(0), idx)?;
                let (from, to) = (g.ty(arg(0)).dtype, g.ty(v).dtype);
                match (from, to) {
                    (a, b) if a == b => x,
                    (DType::Bool, _) => {
                        let (one, zero) = match to {
                            DType::F32 => (self.kb.f32(1.0), self.kb.f32(0.0)),
                            DType::I32 => (self.kb.i32(1), self.kb.i32(0)),
                            _ => (self.kb.u32(1), self.kb.u32(0)),
                        };
                        self.kb.select(x, one, zero)
                    }
                    (_, DType::Bool) => {
                        let z = match from {
                            DType::F32 => self.kb.f32(0.0),
                            DType::I32 => self.kb.i32(0),
                            _ => self.kb.u32(0),
                        };
                        self.kb.cmp(KCmp::Ne, x, z)
                    }
                    _ => self.kb.convert(x, elem(to)),
                }
            }
            Op::Rope { layout, base, dims } => {
                self.rope(v, arg(0), arg(1), *layout, base.0, *dims, idx)?
            }
            Op::Gather => {
                let ids_dims = g.ty(arg(1)).shape.rank();
                let id = self.value(arg(1), &idx[..ids_dims])?;
                let rows = g.ty(arg(0)).shape.0[0];
                let row = self.checked_id(id, rows);
                let at = [row, idx[ids_dims]];
                self.value(arg(0), &at)?
            }
            _ => return Err(super::place::unsupported(g, v, "an inline op")),
        })
    }

    /// `id` as u32, trapping with `TRAP_GATHER` unless `0 <= id < rows`.
    pub fn checked_id(&mut self, id: Val, rows: usize) -> Val {
        let u = self.kb.bitcast(id, KS::U32);
        let n = self.u(rows);
        let bad = self.kb.cmp(KCmp::Ge, u, n);
        self.kb.if_then(bad, |b| b.trap(TRAP_GATHER));
        let last = self.u(rows - 1);
        self.kb.bin(BinOp::Min, u, last)
    }

    /// One unary function, exactly as `poot_eval` defines it.
    pub fn unary(&mut self, u: UnaryOp, x: Val) -> Val {
        let kb = &mut self.kb;
        match u {
            UnaryOp::Neg => kb.un(UnOp::Neg, x),
            UnaryOp::Exp => kb.un(UnOp::Exp, x),
            UnaryOp::Sqrt => kb.un(UnOp::Sqrt, x),
            UnaryOp::Rsqrt => {
                let s = kb.un(UnOp::Sqrt, x);
                let one = kb.f32(1.0);
                kb.bin(BinOp::Div, one, s)
            }
            UnaryOp::Recip => {
                let one = kb.f32(1.0);
                kb.bin(BinOp::Div, one, x)
            }
            UnaryOp::Silu => {
                let n = kb.un(UnOp::Neg, x);
                let e = kb.un(UnOp::Exp, n);
                let one = kb.f32(1.0);
                let d = kb.add(one, e);
                kb.bin(BinOp::Div, x, d)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn rope(
        &mut self,
        v: Value,
        x: Value,
        pos: Value,
        layout: RopeLayout,
        base: f32,
        dims: usize,
        idx: &[Val],
    ) -> Result<Val> {
        let (cos_t, sin_t, len) = self.tables.rope(base, dims);
        let half = dims / 2;
        let d = idx[3];
        let p = self.value(pos, &idx[..2])?;
        let p = self.kb.bitcast(p, KS::U32);
        let last = self.u(len - 1);
        let p = self.kb.bin(BinOp::Min, p, last);
        let dims_v = self.u(dims);
        let rotated = self.kb.cmp(KCmp::Lt, d, dims_v);
        // Pair index i, and the two partners (x0, x1) with this element being x0 or x1.
        let (i, first, lo) = match layout {
            RopeLayout::Pairs => {
                let one = self.u(1);
                let i = self.kb.bin(BinOp::Shr, d, one);
                let bit = self.kb.bin(BinOp::And, d, one);
                let zero = self.u(0);
                let first = self.kb.cmp(KCmp::Eq, bit, zero);
                let lo = self.kb.sub(d, bit);
                (i, first, lo)
            }
            RopeLayout::Halves => {
                let h = self.u(half);
                let first = self.kb.cmp(KCmp::Lt, d, h);
                let back = self.kb.sub(d, h);
                let lo = self.kb.select(first, d, back);
                (lo, first, lo)
            }
        };
        let step = match layout {
            RopeLayout::Pairs => 1,
            RopeLayout::Halves => half,
        };
        let step = self.u(step);
        let hi = self.kb.add(lo, step);
        // Out-of-rotation lanes read their own element (clamped partners stay in range).
        let dmax = self.u(self.g.ty(v).shape.0[3] - 1);
        let lo = self.kb.bin(BinOp::Min, lo, dmax);
        let hi = self.kb.bin(BinOp::Min, hi, dmax);
        let x0 = self.value(x, &[idx[0], idx[1], idx[2], lo])?;
        let x1 = self.value(x, &[idx[0], idx[1], idx[2], hi])?;
        let own = self.value(x, idx)?;
        let hv = self.u(half);
        let i = {
            let last = self.u(half - 1);
            self.kb.bin(BinOp::Min, i, last)
        };
        let row = self.kb.mul(p, hv);
        let at = self.kb.add(row, i);
        let cm = self.mem(Buf::Table(cos_t), KS::F32, Access::Read);
        let sm = self.mem(Buf::Table(sin_t), KS::F32, Access::Read);
        let c = self.kb.load(cm, at, 1);
        let s = self.kb.load(sm, at, 1);
        let a = self.kb.mul(x0, c);
        let b = self.kb.mul(x1, s);
        let y0 = self.kb.sub(a, b);
        let a = self.kb.mul(x0, s);
        let b = self.kb.mul(x1, c);
        let y1 = self.kb.add(a, b);
        let y = self.kb.select(first, y0, y1);
        Ok(self.kb.select(rotated, y, own))
    }
}

/// `block` (statements that must be `let`s) in two parts, each in the original order: its
/// loads with the values their indices need, then the rest (which may use values of the
/// first part, so the parts must be placed in that order).
fn partition_loads(block: Vec<Inst>) -> (Vec<Inst>, Vec<Inst>) {
    let mut need: HashSet<Val> = HashSet::new();
    for i in block.iter().rev() {
        if let Inst::Let(v, x) = i
            && (matches!(x, Expr::Load(..)) || need.contains(v))
        {
            need.insert(*v);
            need.extend(x.operands());
        }
    }
    let (loads, rest): (Vec<_>, Vec<_>) = block
        .into_iter()
        .partition(|i| matches!(i, Inst::Let(v, _) if need.contains(v)));
    debug_assert!(rest.iter().all(|i| matches!(i, Inst::Let(..))));
    (loads, rest)
}
