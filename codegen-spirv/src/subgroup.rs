//! Subgroup reductions and shuffles, native or through the shared-memory fallback, and the
//! hoisting that keeps the fallback's barriers in work-group-uniform control flow.
//!
//! Native (the device's subgroups are the kernel's, `SpirvTarget::subgroup`):
//! - integer reductions are `OpGroupNonUniform{IAdd,SMax,UMax,SMin,UMin,BitwiseOr}` with
//!   `Reduce`, bool ones `UMax`/`UMin` of 1/0 (naga accepts no bool reduction but scalar
//!   `any`/`all`); f32 `add` is `OpGroupNonUniformFAdd` (the device
//!   picks the order) unless `native_float_add` is off; f32 `max`/`min`, and `add` when it is
//!   off, are the reference device's butterfly (`x = x op shuffle_xor(x, m)` for
//!   `m = w/2 .. 1`, own value first) through `OpGroupNonUniformShuffleXor`, because
//!   `OpGroupNonUniformFMax/FMin` drop NaNs where kir propagates them.
//! - `shuffle_xor` is `OpGroupNonUniformShuffleXor` (bool through `u32`); a mask of `w` or
//!   more leaves each lane its own value, as the reference device defines it.
//!
//! Fallback (any other width `w`, a power of two): kir subgroup `s` is threads
//! `[s * w, (s + 1) * w)` by local linear index and `lane = index % w`, as on the reference
//! device. A reduction stores each thread's value (as u32 bits) in a scratch row of one
//! word per thread, barriers, and every thread combines the `w` words of its subgroup in the
//! order of the reference butterfly: all of kir's combining operators are commutative, so
//! lane `i`'s butterfly result equals the tree `u_j = u_j op u_(j+m)` for `m = w/2 .. 1`, the
//! same bits in every lane; then a second barrier frees the scratch. A shuffle stores,
//! barriers, reads `index ^ mask`, barriers. A run of independent subgroup operations
//! (`analysis::sync_run`, such as a matmul's sums of each row and column) shares the pair of
//! barriers: each component of their operands takes a row of its own, up to the kernel's
//! `SpirvTarget::scratch_words` rows at a time (the tiny llama's 4-token q/k/v kernel went
//! from 99 barriers to 15; its results are the same bits).
//!
//! The fallback's barriers need every thread of the work-group. So an `if` that contains a
//! subgroup operation is split at it: the statements before it run as `if g { .. }` (their
//! values leaving through phis that are zero on the skipped path), the operation itself runs
//! in every thread with `select(g, x, identity)` as its input (what the reference device's
//! inactive lanes contribute), then the statements after it run as `if g { .. }` again; `g`
//! is the conjunction of the enclosing conditions (and the negation for `else`), and the
//! `if`'s results are `select(cond, then, else)`. A reduction's active lanes therefore get
//! exactly the reference device's result. A shuffle whose source lane is inactive reads that
//! lane's (zero) value where the reference keeps the lane's own; poot's lowering keeps whole
//! subgroups active around shuffles, so they agree. A `for` loop that contains a subgroup
//! operation cannot be split this way and is refused inside such an `if`; at any other
//! depth its trip count must be the same in the whole work-group (kir barriers need that too).

use crate::analysis::{defs, has_sync, inst_has_sync, sync_run, uses};
use crate::error::Result;
use crate::module::id;
use crate::ops::{konst_of, with};
use crate::target::SubgroupMode;
use crate::writer::Writer;
use poot_kir::{Expr, Inst, ReduceOp, Scalar, Ty, Val};
use rspirv::dr::Operand;
use rspirv::spirv::{Capability, GroupOperation, Op, Scope, StorageClass, Word};
use std::collections::HashSet;

/// How two values of a reduction combine.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Comb {
    FAdd,
    FMax,
    FMin,
    IAdd,
    SMax,
    SMin,
    UMax,
    UMin,
    Or,
    And,
}

/// The combining operator and its identity (the bits inactive lanes contribute).
fn comb(op: ReduceOp, s: Scalar) -> Option<(Comb, u32)> {
    Some(match (op, s) {
        (ReduceOp::Add, Scalar::F32) => (Comb::FAdd, 0x8000_0000),
        (ReduceOp::Max, Scalar::F32) => (Comb::FMax, f32::NEG_INFINITY.to_bits()),
        (ReduceOp::Min, Scalar::F32) => (Comb::FMin, f32::INFINITY.to_bits()),
        (ReduceOp::Add, Scalar::I32 | Scalar::U32) => (Comb::IAdd, 0),
        (ReduceOp::Max, Scalar::I32) => (Comb::SMax, i32::MIN as u32),
        (ReduceOp::Min, Scalar::I32) => (Comb::SMin, i32::MAX as u32),
        (ReduceOp::Max, Scalar::U32) => (Comb::UMax, 0),
        (ReduceOp::Min, Scalar::U32) => (Comb::UMin, u32::MAX),
        (ReduceOp::Or, Scalar::I32 | Scalar::U32) => (Comb::Or, 0),
        (ReduceOp::Or | ReduceOp::Max, Scalar::Bool) => (Comb::Or, 0),
        (ReduceOp::Min, Scalar::Bool) => (Comb::And, 1),
        _ => return None,
    })
}

impl Writer<'_> {
    /// `a op b` for values of type `t`.
    fn combine(&mut self, c: Comb, a: Word, b: Word, t: Ty) -> Word {
        use rspirv::spirv::GlslStd450Op as Gl;
        let ty = self.m.ty(t);
        match c {
            Comb::FAdd => self.exact(Op::FAdd, t, &[a, b]),
            Comb::FMax => self.fminmax(true, a, b, t),
            Comb::FMin => self.fminmax(false, a, b, t),
            Comb::IAdd => self.emit(Op::IAdd, t, &[a, b]),
            Comb::SMax => self.m.glsl(Gl::SMax, ty, &[a, b]),
            Comb::SMin => self.m.glsl(Gl::SMin, ty, &[a, b]),
            Comb::UMax => self.m.glsl(Gl::UMax, ty, &[a, b]),
            Comb::UMin => self.m.glsl(Gl::UMin, ty, &[a, b]),
            Comb::Or if t.scalar == Scalar::Bool => self.logic(true, a, b, t),
            Comb::And if t.scalar == Scalar::Bool => self.logic(false, a, b, t),
            Comb::Or => self.emit(Op::BitwiseOr, t, &[a, b]),
            Comb::And => self.emit(Op::BitwiseAnd, t, &[a, b]),
        }
    }

    /// `subgroup_reduce(op, a)`, the definition of `v`.
    pub(crate) fn reduce(
        &mut self,
        op: ReduceOp,
        a: Val,
        v: Val,
        guard: Option<Word>,
    ) -> Result<Word> {
        let t = self.ty(a);
        let Some((c, identity)) = comb(op, t.scalar) else {
            return Err(self.unsupported(format!("{v} = subgroup_{} of {}", op.name(), t.scalar)));
        };
        match self.mode {
            SubgroupMode::Native(w) => {
                let x = self.masked(self.val(a), t, guard, identity);
                Ok(self.native_reduce(c, x, t, w))
            }
            SubgroupMode::Fallback(_) => {
                self.fallback_run(&[Inst::Let(v, Expr::SubgroupReduce(op, a))], guard)?;
                Ok(self.val(v))
            }
            SubgroupMode::Single => Ok(self.masked(self.val(a), t, guard, identity)),
        }
    }

    /// `shuffle_xor(a, mask)`, the definition of `v`.
    pub(crate) fn shuffle_xor(
        &mut self,
        a: Val,
        mask: u32,
        v: Val,
        guard: Option<Word>,
    ) -> Result<Word> {
        if let SubgroupMode::Fallback(_) = self.mode {
            self.fallback_run(&[Inst::Let(v, Expr::ShuffleXor(a, mask))], guard)?;
            return Ok(self.val(v));
        }
        let t = self.ty(a);
        let x = self.masked(self.val(a), t, guard, 0);
        Ok(match self.mode {
            SubgroupMode::Native(w) if mask < w => {
                if t.scalar == Scalar::Bool {
                    let ut = with(t, Scalar::U32);
                    let (one, zero) = (self.cu(1, t.lanes), self.cu(0, t.lanes));
                    let n = self.select(ut, x, one, zero);
                    let s = self.native_shuffle(n, ut, mask);
                    self.emit(Op::INotEqual, t, &[s, zero])
                } else {
                    self.native_shuffle(x, t, mask)
                }
            }
            _ => x,
        })
    }

    /// `select(guard, x, identity)` where a guard is given.
    fn masked(&mut self, x: Word, t: Ty, guard: Option<Word>, identity: u32) -> Word {
        let Some(g) = guard else { return x };
        let g = self.broadcast(g, Ty::BOOL, t.lanes);
        let id = self.konst(konst_of(t.scalar, identity), t.lanes);
        self.select(t, g, x, id)
    }

    fn subgroup_scope(&mut self) -> Word {
        self.m.u32(Scope::Subgroup as u32)
    }

    /// `x` copied into the current block. naga 30's SPIR-V front end panics when the operand
    /// of a subgroup instruction is defined in another structured block (it closes its
    /// expression emitter before spilling the operand); a local copy sidesteps that.
    fn local(&mut self, x: Word, t: Ty) -> Word {
        self.emit(Op::CopyObject, t, &[x])
    }

    fn native_shuffle(&mut self, x: Word, t: Ty, mask: u32) -> Word {
        self.m.capability(Capability::GroupNonUniformShuffle);
        let x = self.local(x, t);
        let scope = self.subgroup_scope();
        let m = self.m.u32(mask);
        let ty = self.m.ty(t);
        self.m.op(
            Op::GroupNonUniformShuffleXor,
            ty,
            vec![Operand::IdScope(scope), id(x), id(m)],
        )
    }

    fn native_reduce(&mut self, c: Comb, x: Word, t: Ty, w: u32) -> Word {
        if t.scalar == Scalar::Bool {
            // naga accepts no bool reductions but `any`/`all` of scalars: reduce 1/0 as u32.
            let ut = with(t, Scalar::U32);
            let (one, zero) = (self.cu(1, t.lanes), self.cu(0, t.lanes));
            let n = self.select(ut, x, one, zero);
            let c = if c == Comb::And {
                Comb::UMin
            } else {
                Comb::UMax
            };
            let r = self.native_reduce(c, n, ut, w);
            return self.emit(Op::INotEqual, t, &[r, zero]);
        }
        let code = match (c, t.scalar) {
            (Comb::FAdd, _) if self.t.native_float_add => Op::GroupNonUniformFAdd,
            (Comb::FAdd | Comb::FMax | Comb::FMin, _) => {
                // The reference butterfly: own value first, xor w/2 .. 1.
                let mut cur = x;
                let mut m = w / 2;
                while m > 0 {
                    let other = self.native_shuffle(cur, t, m);
                    cur = self.combine(c, cur, other, t);
                    m /= 2;
                }
                return cur;
            }
            (Comb::IAdd, _) => Op::GroupNonUniformIAdd,
            (Comb::SMax, _) => Op::GroupNonUniformSMax,
            (Comb::SMin, _) => Op::GroupNonUniformSMin,
            (Comb::UMax, _) => Op::GroupNonUniformUMax,
            (Comb::UMin, _) => Op::GroupNonUniformUMin,
            (Comb::Or, _) => Op::GroupNonUniformBitwiseOr,
            (Comb::And, _) => Op::GroupNonUniformBitwiseAnd,
        };
        self.m.capability(Capability::GroupNonUniformArithmetic);
        let x = self.local(x, t);
        let scope = self.subgroup_scope();
        let ty = self.m.ty(t);
        self.m.op(
            code,
            ty,
            vec![
                Operand::IdScope(scope),
                Operand::GroupOperation(GroupOperation::Reduce),
                id(x),
            ],
        )
    }

    /// A scalar as its u32 bits (bool as 1/0).
    fn as_word(&mut self, x: Word, s: Scalar) -> Word {
        match s {
            Scalar::U32 => x,
            Scalar::Bool => {
                let (one, zero) = (self.cu(1, 1), self.cu(0, 1));
                self.select(Ty::U32, x, one, zero)
            }
            _ => self.emit(Op::Bitcast, Ty::U32, &[x]),
        }
    }

    /// u32 bits as a scalar of type `s`.
    fn of_word(&mut self, u: Word, s: Scalar) -> Word {
        match s {
            Scalar::U32 => u,
            Scalar::Bool => {
                let zero = self.cu(0, 1);
                self.emit(Op::INotEqual, Ty::BOOL, &[u, zero])
            }
            _ => self.emit(Op::Bitcast, Ty::scalar(s), &[u]),
        }
    }

    /// A pointer to word `i` of the fallback scratch.
    fn scratch_at(&mut self, i: Word) -> Word {
        let u = self.m.scalar(Scalar::U32);
        let ptr_t = self.m.pointer(StorageClass::Workgroup, u);
        let var = self.scratch.unwrap_or(0);
        self.m.ids(Op::AccessChain, ptr_t, &[var, i])
    }

    /// Word `i` of the scratch as a scalar of type `s`.
    fn read(&mut self, i: Word, s: Scalar) -> Word {
        let u = self.m.scalar(Scalar::U32);
        let ptr = self.scratch_at(i);
        let bits = self.m.ids(Op::Load, u, &[ptr]);
        self.of_word(bits, s)
    }

    /// `base + k` (`base` itself for 0).
    fn offset(&mut self, base: Word, k: u32) -> Word {
        if k == 0 {
            return base;
        }
        let u = self.m.scalar(Scalar::U32);
        let k = self.m.u32(k);
        self.m.ids(Op::IAdd, u, &[base, k])
    }

    /// The subgroup operations `run` (`let`s none of which reads another's value) through
    /// the shared-memory fallback, under `guard`. Their operands' components go through the
    /// scratch a batch of `scratch_words` at a time, word `j` of a batch in row `j` (`j *
    /// threads + index`): each thread stores its batch, one barrier, each reads what its
    /// operations need and combines it in the reference butterfly's order, a second barrier
    /// frees the scratch. A shuffle whose mask reaches past the subgroup keeps its value.
    pub(crate) fn fallback_run(&mut self, run: &[Inst], guard: Option<Word>) -> Result<()> {
        let SubgroupMode::Fallback(w) = self.mode else {
            return Err(self.unsupported("the subgroup fallback without its mode".into()));
        };
        // Each operation's definition, operand type, and combining operator (a reduction) or
        // mask (a shuffle).
        let mut ops: Vec<(Val, Ty, Option<Comb>, u32)> = Vec::with_capacity(run.len());
        // Each operand component (an operation's components in order): its operation and value.
        let mut parts: Vec<(usize, Word)> = Vec::new();
        for i in run {
            let Inst::Let(v, e) = i else { continue };
            let (a, c, identity, mask) = match *e {
                Expr::SubgroupReduce(op, a) => {
                    let s = self.ty(a).scalar;
                    let Some((c, identity)) = comb(op, s) else {
                        return Err(
                            self.unsupported(format!("{v} = subgroup_{} of {s}", op.name()))
                        );
                    };
                    (a, Some(c), identity, 0)
                }
                Expr::ShuffleXor(a, mask) => (a, None, 0, mask),
                _ => continue,
            };
            let t = self.ty(a);
            let x = self.masked(self.val(a), t, guard, identity);
            let o = ops.len();
            ops.push((*v, t, c, mask));
            if t.lanes == 1 {
                parts.push((o, x));
            } else {
                let s = self.m.scalar(t.scalar);
                for j in 0..t.lanes {
                    let lane = Operand::LiteralBit32(u32::from(j));
                    let c = self.m.op(Op::CompositeExtract, s, vec![id(x), lane]);
                    parts.push((o, c));
                }
            }
        }
        let threads = self.k.threads();
        let mut results: Vec<Word> = parts.iter().map(|&(_, x)| x).collect();
        // Components that touch the scratch (not the shuffles past the subgroup's width).
        let shared: Vec<usize> = (0..parts.len())
            .filter(|&p| ops[parts[p].0].2.is_some() || ops[parts[p].0].3 < w)
            .collect();
        let u = self.m.scalar(Scalar::U32);
        for batch in shared.chunks(self.scratch_words.max(1) as usize) {
            let me = self.local_index();
            for (row, &p) in batch.iter().enumerate() {
                let s = ops[parts[p].0].1.scalar;
                let bits = self.as_word(parts[p].1, s);
                let at = self.offset(me, row as u32 * threads);
                let ptr = self.scratch_at(at);
                self.m.exec(Op::Store, vec![id(ptr), id(bits)]);
            }
            self.scratch_barrier();
            for (row, &p) in batch.iter().enumerate() {
                let (_, t, c, mask) = ops[parts[p].0];
                let s = t.scalar;
                let base = self.offset(me, row as u32 * threads);
                results[p] = match c {
                    Some(c) => {
                        let low = self.m.u32(!(w - 1));
                        let first = self.m.ids(Op::BitwiseAnd, u, &[base, low]);
                        let mut vals: Vec<Word> = (0..w)
                            .map(|j| {
                                let i = self.offset(first, j);
                                self.read(i, s)
                            })
                            .collect();
                        let mut m = (w / 2) as usize;
                        while m > 0 {
                            for j in 0..m {
                                vals[j] = self.combine(c, vals[j], vals[j + m], Ty::scalar(s));
                            }
                            m /= 2;
                        }
                        vals[0]
                    }
                    None => {
                        let m = self.m.u32(mask);
                        let src = self.m.ids(Op::BitwiseXor, u, &[base, m]);
                        self.read(src, s)
                    }
                };
            }
            self.scratch_barrier();
        }
        let mut results = results.into_iter();
        for &(v, t, _, _) in &ops {
            let mine: Vec<Word> = results.by_ref().take(usize::from(t.lanes)).collect();
            let r = if t.lanes == 1 {
                mine[0]
            } else {
                self.emit(Op::CompositeConstruct, t, &mine)
            };
            self.set(v, r);
        }
        Ok(())
    }

    /// An `if` containing subgroup operations, under the enclosing guard `outer` (fallback).
    pub(crate) fn guarded_if(&mut self, outer: Option<Word>, i: &Inst) -> Result<()> {
        let Inst::If {
            cond,
            then,
            then_yield,
            els,
            else_yield,
            results,
        } = i
        else {
            return Ok(());
        };
        let c = self.val(*cond);
        let g_then = self.and(outer, c);
        let ty = self.guarded_block(g_then, then, then_yield)?;
        let ey = if els.is_empty() {
            else_yield.iter().map(|y| self.val(*y)).collect()
        } else {
            let nc = self.emit(Op::LogicalNot, Ty::BOOL, &[c]);
            let g_else = self.and(outer, nc);
            self.guarded_block(g_else, els, else_yield)?
        };
        for ((r, a), b) in results.iter().zip(ty).zip(ey) {
            let t = self.ty(*r);
            let cv = self.broadcast(c, Ty::BOOL, t.lanes);
            let w = self.select(t, cv, a, b);
            self.set(*r, w);
        }
        Ok(())
    }

    fn and(&mut self, outer: Option<Word>, c: Word) -> Word {
        match outer {
            Some(g) => self.emit(Op::LogicalAnd, Ty::BOOL, &[g, c]),
            None => c,
        }
    }

    /// Runs `insts` where `g` holds, splitting at subgroup operations; returns the yields.
    fn guarded_block(&mut self, g: Word, insts: &[Inst], yields: &[Val]) -> Result<Vec<Word>> {
        let mut i = 0;
        while i < insts.len() {
            let j = insts[i..]
                .iter()
                .position(inst_has_sync)
                .map_or(insts.len(), |p| i + p);
            if j > i {
                let mut live: HashSet<Val> = yields.iter().copied().collect();
                uses(&insts[j..], &mut live);
                self.segment(g, &insts[i..j], &live)?;
            }
            if let Some(s) = insts.get(j) {
                match s {
                    Inst::Let(..) => {
                        let n = sync_run(&insts[j..]).max(1);
                        self.fallback_run(&insts[j..j + n], Some(g))?;
                        i = j + n;
                        continue;
                    }
                    Inst::If { .. } => self.guarded_if(Some(g), s)?,
                    Inst::For { var, body, .. } if has_sync(body) => {
                        return Err(self.unsupported(format!(
                            "the loop over {var}, which has subgroup operations, inside a branch \
                             (the shared-memory fallback needs them in work-group-uniform control flow)"
                        )));
                    }
                    _ => {}
                }
            }
            i = j + 1;
        }
        Ok(yields.iter().map(|y| self.val(*y)).collect())
    }

    /// `if g { insts }`, passing the values `live` reads out through phis.
    fn segment(&mut self, g: Word, insts: &[Inst], live: &HashSet<Val>) -> Result<()> {
        let pre = self.m.current();
        let (body, merge) = (self.m.fresh(), self.m.fresh());
        self.selection(merge);
        self.m
            .exec(Op::BranchConditional, vec![id(g), id(body), id(merge)]);
        self.m.begin(body);
        self.block(insts)?;
        let end = self.m.current();
        self.branch(merge);
        self.m.begin(merge);
        for v in insts.iter().flat_map(defs).filter(|v| live.contains(v)) {
            let t = self.m.ty(self.ty(v));
            let zero = self.m.null(t);
            let (p, _) = self.m.phi(t, &[(self.val(v), end), (zero, pre)]);
            self.set(v, p);
        }
        Ok(())
    }
}
