//! Resolving a `kir::Kernel` into a [`Program`]: checks, register allocation and operator
//! specialisation, done once per kernel.
//!
//! Invariants: a kernel is accepted only if `poot_kir::verify` accepts it (after a pre-scan that
//! keeps the verifier away from value ids and work-group sizes it would index or multiply
//! unchecked) and every operator applies to its type with a defined meaning; anything else is
//! an [`INVALID_KERNEL`] fault. Every value gets fresh register slots except aliases
//! (`extract`, `bitcast`, bit-preserving conversions), so no operation's destination overlaps
//! its operands.

use super::program::{Bin, Carry, Comb, Fixed, ForOp, IfOp, Op, Program, Space, Un};
use super::{Fault, INVALID_KERNEL};
use poot_kir::{
    Access, BinOp, CmpOp, Const, Expr, Inst, Kernel, Mem, ReduceOp, Scalar, Special, Ty, UnOp, Val,
};
use std::collections::HashMap;

/// The largest register file a kernel may need, in 32-bit words (256 MiB).
const MAX_REGS: usize = 1 << 26;
/// The largest shared memory a work-group may declare, in 32-bit words (64 MiB).
const MAX_SHARED: usize = 1 << 24;

struct Cx<'k> {
    k: &'k Kernel,
    threads: usize,
    slots: usize,
    /// Register offset and type of every value defined so far.
    vals: HashMap<Val, (usize, Ty)>,
    fixed: Vec<(usize, Fixed)>,
    group_ids: Vec<(usize, usize)>,
}

fn invalid(k: &Kernel, detail: impl Into<String>) -> Fault {
    Fault {
        kernel: k.name.clone(),
        code: INVALID_KERNEL,
        detail: detail.into(),
    }
}

/// The deepest nesting of `if`/`for` blocks accepted (deeper kernels are refused before
/// anything recurses further, so no recursion here or in kir's verifier runs out of stack).
const MAX_DEPTH: usize = 256;

/// Calls `f` on every value an instruction list mentions, nested blocks included; `false`
/// when blocks nest deeper than [`MAX_DEPTH`] (those are not visited).
fn each_val(insts: &[Inst], depth: usize, f: &mut impl FnMut(Val)) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    let mut ok = true;
    for i in insts {
        match i {
            Inst::Let(v, e) => {
                f(*v);
                e.operands().into_iter().for_each(&mut *f);
            }
            Inst::Store { index, value, .. } => {
                f(*index);
                f(*value);
            }
            Inst::Atomic {
                index, value, old, ..
            } => {
                f(*index);
                f(*value);
                old.iter().for_each(|v| f(*v));
            }
            Inst::Prefetch { index, count, .. } => {
                f(*index);
                f(*count);
            }
            Inst::Barrier
            | Inst::Fence
            | Inst::Trap(_)
            | Inst::LaunchDependents
            | Inst::GridWait { .. }
            | Inst::ClusterArrive { .. }
            | Inst::ClusterWait => {}
            Inst::StoreRemote {
                rank, index, value, ..
            } => {
                f(*rank);
                f(*index);
                f(*value);
            }
            Inst::Clustered { then, els, .. } | Inst::Matrix { then, els } => {
                ok &= each_val(then, depth + 1, f) && each_val(els, depth + 1, f);
            }
            Inst::If {
                cond,
                then,
                then_yield,
                els,
                else_yield,
                results,
            } => {
                f(*cond);
                ok &= each_val(then, depth + 1, f) && each_val(els, depth + 1, f);
                then_yield
                    .iter()
                    .chain(else_yield)
                    .chain(results)
                    .for_each(|v| f(*v));
            }
            Inst::For {
                var,
                start,
                end,
                carried,
                body,
                yields,
                results,
                ..
            } => {
                f(*var);
                f(*start);
                f(*end);
                for c in carried {
                    f(c.param);
                    f(c.init);
                }
                ok &= each_val(body, depth + 1, f);
                yields.iter().chain(results).for_each(|v| f(*v));
            }
        }
    }
    ok
}

/// Whether some instruction updates a buffer parameter atomically.
fn param_atomics(insts: &[Inst]) -> bool {
    insts.iter().any(|i| match i {
        Inst::Atomic { mem, .. } => matches!(mem, Mem::Param(_)),
        Inst::If { then, els, .. } | Inst::Matrix { then, els } => {
            param_atomics(then) || param_atomics(els)
        }
        Inst::For { body, .. } => param_atomics(body),
        _ => false,
    })
}

/// Resolves `k` into a program.
pub(crate) fn prepare(k: &Kernel) -> Result<Program, Fault> {
    // kir's verifier multiplies the work-group size and indexes value types unchecked:
    // establish both before calling it.
    let mut threads = 1usize;
    for d in k.workgroup {
        threads = threads.saturating_mul(d as usize);
    }
    if threads == 0 || threads > 1024 {
        return Err(invalid(
            k,
            format!("work-group {:?} is not 1..=1024 threads", k.workgroup),
        ));
    }
    let mut bad = None;
    let shallow = each_val(&k.body, 0, &mut |v| {
        if bad.is_none() && k.types.get(v).is_none() {
            bad = Some(v);
        }
    });
    if !shallow {
        return Err(invalid(k, format!("blocks nest deeper than {MAX_DEPTH}")));
    }
    if let Some(v) = bad {
        return Err(invalid(k, format!("{v} has no type")));
    }
    poot_kir::verify(k).map_err(|e| invalid(k, e.msg))?;
    // Work-groups run one at a time here, never in clusters: the form without them runs.
    let k = &poot_kir::without_clusters(k);
    let subgroup = k.subgroup as usize;
    if !subgroup.is_power_of_two() {
        return Err(invalid(
            k,
            format!("subgroup width {subgroup} is not a power of two"),
        ));
    }
    let mut shared = Vec::with_capacity(k.shared.len());
    let mut shared_len = 0usize;
    for s in &k.shared {
        shared.push((shared_len, s.len as usize));
        shared_len = shared_len.saturating_add(s.len as usize);
    }
    if shared_len > MAX_SHARED {
        return Err(invalid(
            k,
            format!("{shared_len} words of shared memory (the reference allows {MAX_SHARED})"),
        ));
    }
    let mut cx = Cx {
        k,
        threads,
        slots: 0,
        vals: HashMap::new(),
        fixed: Vec::new(),
        group_ids: Vec::new(),
    };
    let ones = cx.alloc(1);
    cx.fixed.push((ones, Fixed::Ones));
    let body = cx.block(&k.body)?;
    let regs_len = cx
        .slots
        .checked_mul(threads)
        .filter(|&n| n <= MAX_REGS)
        .ok_or_else(|| invalid(k, format!("{} value slots are too many", cx.slots)))?;
    let order_dependent =
        k.params.iter().any(|p| p.access == Access::ReadWrite) || param_atomics(&k.body);
    Ok(Program {
        name: k.name.clone(),
        params: k
            .params
            .iter()
            .map(|p| (p.name.clone(), p.access != Access::Read))
            .collect(),
        workgroup: k.workgroup,
        threads,
        subgroup,
        regs_len,
        ones,
        fixed: cx.fixed,
        group_ids: cx.group_ids,
        shared,
        shared_len,
        order_dependent,
        body,
    })
}

impl Cx<'_> {
    fn err(&self, detail: impl Into<String>) -> Fault {
        invalid(self.k, detail)
    }

    /// Fresh slots for `comps` components; returns the element offset.
    fn alloc(&mut self, comps: usize) -> usize {
        let off = self.slots.saturating_mul(self.threads);
        self.slots = self.slots.saturating_add(comps);
        off
    }

    fn ty(&self, v: Val) -> Result<Ty, Fault> {
        self.k
            .types
            .get(v)
            .copied()
            .ok_or_else(|| self.err(format!("{v} has no type")))
    }

    fn get(&self, v: Val) -> Result<(usize, Ty), Fault> {
        self.vals
            .get(&v)
            .copied()
            .ok_or_else(|| self.err(format!("{v} is used before it is defined")))
    }

    fn off(&self, v: Val) -> Result<usize, Fault> {
        Ok(self.get(v)?.0)
    }

    /// Defines `v` in fresh slots.
    fn define(&mut self, v: Val) -> Result<(usize, usize), Fault> {
        let ty = self.ty(v)?;
        let comps = ty.lanes as usize;
        let off = self.alloc(comps);
        self.vals.insert(v, (off, ty));
        Ok((off, comps.saturating_mul(self.threads)))
    }

    fn space(&self, m: Mem) -> Space {
        match m {
            Mem::Param(i) => Space::Param(i as usize),
            Mem::Shared(i) => Space::Shared(i as usize),
        }
    }

    fn comb(&self, op: ReduceOp, s: Scalar, what: &str) -> Result<Comb, Fault> {
        use Scalar::*;
        Ok(match (op, s) {
            (ReduceOp::Add, F32) => Comb::AddF,
            (ReduceOp::Add, I32 | U32) => Comb::AddI,
            (ReduceOp::Max, F32) => Comb::MaxF,
            (ReduceOp::Max, I32) => Comb::MaxI,
            (ReduceOp::Max, U32) => Comb::MaxU,
            (ReduceOp::Max | ReduceOp::Or, Bool) => Comb::Or,
            (ReduceOp::Min, F32) => Comb::MinF,
            (ReduceOp::Min, I32) => Comb::MinI,
            (ReduceOp::Min, U32) => Comb::MinU,
            (ReduceOp::Min, Bool) => Comb::AndB,
            (ReduceOp::Or, I32 | U32) => Comb::Or,
            (ReduceOp::Add, Bool) | (ReduceOp::Or, F32) => {
                return Err(self.err(format!("{what} {} of {s} has no meaning", op.name())));
            }
        })
    }

    fn block(&mut self, insts: &[Inst]) -> Result<Vec<Op>, Fault> {
        let mut ops = Vec::with_capacity(insts.len());
        for i in insts {
            match i {
                Inst::Let(v, e) => {
                    if let Some(op) = self.expr(*v, e)? {
                        ops.push(op);
                    }
                }
                Inst::Store { mem, index, value } => {
                    let (value_off, t) = self.get(*value)?;
                    ops.push(Op::Store {
                        space: self.space(*mem),
                        index: self.off(*index)?,
                        value: value_off,
                        comps: t.lanes as usize,
                    });
                }
                Inst::Atomic {
                    op,
                    mem,
                    index,
                    value,
                    old,
                } => {
                    let (value_off, t) = self.get(*value)?;
                    let f = self.comb(*op, t.scalar, "atomic")?;
                    let index = self.off(*index)?;
                    let old = match old {
                        Some(o) => Some(self.define(*o)?.0),
                        None => None,
                    };
                    ops.push(Op::Atomic {
                        f,
                        space: self.space(*mem),
                        index,
                        value: value_off,
                        old,
                    });
                }
                // Lockstep execution satisfies every barrier, and work-groups run one after
                // another (in linear order) whenever a kernel has parameter atomics, so every
                // fence is satisfied too (module docs).
                // The reference runs dispatches one after another: the hint and the wait
                // have no use.
                Inst::Barrier | Inst::Fence | Inst::LaunchDependents | Inst::GridWait { .. } => {}
                // The reference multiplies matrices (`Op::Mma`): the matrix form runs, in place.
                Inst::Matrix { then, .. } => ops.extend(self.block(then)?),
                // `prepare` removed them (`poot_kir::without_clusters`).
                Inst::Clustered { .. }
                | Inst::ClusterArrive { .. }
                | Inst::ClusterWait
                | Inst::StoreRemote { .. } => {
                    return Err(invalid(self.k, "a cluster operation"));
                }
                Inst::Prefetch { mem, index, count } => ops.push(Op::Prefetch {
                    space: self.space(*mem),
                    index: self.off(*index)?,
                    count: self.off(*count)?,
                }),
                Inst::Trap(code) => ops.push(Op::Trap(*code)),
                Inst::If {
                    cond,
                    then,
                    then_yield,
                    els,
                    else_yield,
                    results,
                } => {
                    let cond = self.off(*cond)?;
                    let then_mask = self.alloc(1);
                    let else_mask = self.alloc(1);
                    let then = self.block(then)?;
                    let els = self.block(els)?;
                    let mut merges = Vec::with_capacity(results.len());
                    for ((r, t), e) in results.iter().zip(then_yield).zip(else_yield) {
                        let (t, e) = (self.off(*t)?, self.off(*e)?);
                        let (dst, n) = self.define(*r)?;
                        merges.push((dst, t, e, n));
                    }
                    ops.push(Op::If(Box::new(IfOp {
                        cond,
                        then_mask,
                        else_mask,
                        then,
                        els,
                        merges,
                    })));
                }
                Inst::For {
                    var,
                    start,
                    end,
                    step,
                    carried,
                    body,
                    yields,
                    results,
                } => ops.push(
                    self.for_loop(*var, *start, *end, *step, carried, body, yields, results)?,
                ),
            }
        }
        Ok(ops)
    }

    #[allow(clippy::too_many_arguments)]
    fn for_loop(
        &mut self,
        var: Val,
        start: Val,
        end: Val,
        step: u32,
        carried: &[poot_kir::Carried],
        body: &[Inst],
        yields: &[Val],
        results: &[Val],
    ) -> Result<Op, Fault> {
        let (start, end) = (self.off(start)?, self.off(end)?);
        // The induction variable and the loop's mask share one allocation: mask = var + threads.
        let var_ty = self.ty(var)?;
        let var_off = self.alloc(2);
        self.vals.insert(var, (var_off, var_ty));
        let (var, mask) = (var_off, var_off.saturating_add(self.threads));
        let mut params = Vec::with_capacity(carried.len());
        for c in carried {
            let init = self.off(c.init)?;
            let (param, n) = self.define(c.param)?;
            params.push((param, init, n));
        }
        let body = self.block(body)?;
        let mut out = Vec::with_capacity(params.len());
        for (((param, init, n), y), r) in params.iter().zip(yields).zip(results) {
            let yielded = self.off(*y)?;
            let comps = n / self.threads.max(1);
            let stage = self.alloc(comps);
            let (result, _) = self.define(*r)?;
            out.push(Carry {
                param: *param,
                init: *init,
                yielded,
                result,
                stage,
                n: *n,
            });
        }
        let staged = out.iter().any(|y| {
            out.iter().any(|p| {
                y.yielded < p.param.saturating_add(p.n) && p.param < y.yielded.saturating_add(y.n)
            })
        });
        Ok(Op::For(Box::new(ForOp {
            var,
            start,
            end,
            step,
            mask,
            carried: out,
            staged,
            body,
        })))
    }

    /// Defines `v` as `e`; `None` when nothing runs per execution (aliases, constants and
    /// thread coordinates).
    fn expr(&mut self, v: Val, e: &Expr) -> Result<Option<Op>, Fault> {
        use Scalar::*;
        let t_threads = self.threads;
        let alias = |cx: &mut Self, off: usize| -> Result<Option<Op>, Fault> {
            let ty = cx.ty(v)?;
            cx.vals.insert(v, (off, ty));
            Ok(None)
        };
        match e {
            Expr::Const(c) => {
                let bits = match *c {
                    Const::F32(b) | Const::U32(b) => b,
                    Const::I32(x) => x as u32,
                    Const::Bool(b) => b as u32,
                };
                let (dst, _) = self.define(v)?;
                self.fixed.push((dst, Fixed::Const(bits)));
                Ok(None)
            }
            Expr::Special(s) => {
                let (dst, _) = self.define(v)?;
                match s {
                    Special::LocalX => self.fixed.push((dst, Fixed::LocalX)),
                    Special::LocalY => self.fixed.push((dst, Fixed::LocalY)),
                    Special::Lane => self.fixed.push((dst, Fixed::Lane)),
                    Special::GroupX => self.group_ids.push((dst, 0)),
                    Special::GroupY => self.group_ids.push((dst, 1)),
                    Special::GroupZ => self.group_ids.push((dst, 2)),
                }
                Ok(None)
            }
            Expr::Unary(op, a) => {
                let (a, t) = self.get(*a)?;
                let f = match (op, t.scalar) {
                    (UnOp::Abs, U32) => return alias(self, a),
                    (UnOp::Neg, F32) => Un::NegF,
                    (UnOp::Neg, I32 | U32) => Un::NegI,
                    (UnOp::Not, I32 | U32) => Un::NotI,
                    (UnOp::Not, Bool) => Un::NotB,
                    (UnOp::Abs, F32) => Un::AbsF,
                    (UnOp::Abs, I32) => Un::AbsI,
                    (UnOp::Exp, F32) => Un::Exp,
                    (UnOp::Sqrt, F32) => Un::Sqrt,
                    (UnOp::Rsqrt, F32) => Un::Rsqrt,
                    (UnOp::Recip, F32) => Un::Recip,
                    (UnOp::Sin, F32) => Un::Sin,
                    (UnOp::Cos, F32) => Un::Cos,
                    (UnOp::IsFinite, F32) => Un::IsFinite,
                    (UnOp::IsNan, F32) => Un::IsNan,
                    (op, s) => {
                        return Err(self.err(format!("{v}: {} of {s} has no meaning", op.name())));
                    }
                };
                let (dst, n) = self.define(v)?;
                Ok(Some(Op::Un { f, dst, a, n }))
            }
            Expr::Binary(op, a, b) => {
                let (a, t) = self.get(*a)?;
                let b = self.off(*b)?;
                let f = match (op, t.scalar) {
                    (BinOp::Add, F32) => Bin::AddF,
                    (BinOp::Sub, F32) => Bin::SubF,
                    (BinOp::Mul, F32) => Bin::MulF,
                    (BinOp::Div, F32) => Bin::DivF,
                    (BinOp::Min, F32) => Bin::MinF,
                    (BinOp::Max, F32) => Bin::MaxF,
                    (BinOp::Add, I32 | U32) => Bin::AddI,
                    (BinOp::Sub, I32 | U32) => Bin::SubI,
                    (BinOp::Mul, I32 | U32) => Bin::MulI,
                    (BinOp::Div, I32) => Bin::DivI,
                    (BinOp::Div, U32) => Bin::DivU,
                    (BinOp::Rem, I32) => Bin::RemI,
                    (BinOp::Rem, U32) => Bin::RemU,
                    (BinOp::Min, I32) => Bin::MinI,
                    (BinOp::Min, U32) => Bin::MinU,
                    (BinOp::Max, I32) => Bin::MaxI,
                    (BinOp::Max, U32) => Bin::MaxU,
                    (BinOp::And, I32 | U32 | Bool) => Bin::And,
                    (BinOp::Or, I32 | U32 | Bool) => Bin::Or,
                    (BinOp::Xor, I32 | U32 | Bool) => Bin::Xor,
                    (BinOp::Shl, I32 | U32) => Bin::Shl,
                    (BinOp::Shr, I32) => Bin::ShrI,
                    (BinOp::Shr, U32) => Bin::ShrU,
                    (op, s) => {
                        return Err(self.err(format!("{v}: {} of {s} has no meaning", op.name())));
                    }
                };
                let (dst, n) = self.define(v)?;
                Ok(Some(Op::Bin { f, dst, a, b, n }))
            }
            Expr::Cmp(op, a, b) => {
                let (a, t) = self.get(*a)?;
                let b = self.off(*b)?;
                let float = t.scalar == F32;
                let (lt, le) = match t.scalar {
                    F32 => (Bin::LtF, Bin::LeF),
                    I32 => (Bin::LtI, Bin::LeI),
                    U32 | Bool => (Bin::LtU, Bin::LeU),
                };
                let (eq, ne) = if float {
                    (Bin::EqF, Bin::NeF)
                } else {
                    (Bin::EqBits, Bin::NeBits)
                };
                let (f, a, b) = match op {
                    CmpOp::Lt => (lt, a, b),
                    CmpOp::Le => (le, a, b),
                    CmpOp::Gt => (lt, b, a),
                    CmpOp::Ge => (le, b, a),
                    CmpOp::Eq => (eq, a, b),
                    CmpOp::Ne => (ne, a, b),
                };
                let (dst, n) = self.define(v)?;
                Ok(Some(Op::Bin { f, dst, a, b, n }))
            }
            Expr::Fma(a, b, c) => {
                let (a, b, c) = (self.off(*a)?, self.off(*b)?, self.off(*c)?);
                let (dst, n) = self.define(v)?;
                Ok(Some(Op::Fma { dst, a, b, c, n }))
            }
            Expr::Select(c, a, b) => {
                let (cond, tc) = self.get(*c)?;
                let (a, t) = self.get(*a)?;
                let b = self.off(*b)?;
                let (dst, _) = self.define(v)?;
                Ok(Some(Op::Select {
                    dst,
                    cond,
                    a,
                    b,
                    comps: t.lanes as usize,
                    cond_vec: tc.lanes > 1,
                }))
            }
            Expr::Convert(a, to) => {
                let (a, t) = self.get(*a)?;
                let f = match (t.scalar, to) {
                    (from, to) if from == *to => return alias(self, a),
                    (I32 | U32 | Bool, I32 | U32) => return alias(self, a),
                    (F32, I32) => Un::F2I,
                    (F32, U32) => Un::F2U,
                    (I32, F32) => Un::I2F,
                    (U32 | Bool, F32) => Un::U2F,
                    (from, to) => {
                        return Err(self.err(format!("{v}: cannot convert {from} to {to}")));
                    }
                };
                let (dst, n) = self.define(v)?;
                Ok(Some(Op::Un { f, dst, a, n }))
            }
            Expr::Bitcast(a, _) => {
                let a = self.off(*a)?;
                alias(self, a)
            }
            Expr::HalfToF32(a, high) => {
                let a = self.off(*a)?;
                let (dst, _) = self.define(v)?;
                Ok(Some(Op::HalfToF32 {
                    dst,
                    a,
                    high: *high,
                }))
            }
            Expr::Bf16ToF32(a, high) => {
                let a = self.off(*a)?;
                let f = if *high { Un::Bf16Hi } else { Un::Bf16Lo };
                let (dst, n) = self.define(v)?;
                Ok(Some(Op::Un { f, dst, a, n }))
            }
            Expr::Load(m, index, lanes) => {
                let index = self.off(*index)?;
                let (dst, _) = self.define(v)?;
                Ok(Some(Op::Load {
                    space: self.space(*m),
                    dst,
                    index,
                    comps: *lanes as usize,
                }))
            }
            Expr::Extract(a, lane) => {
                let a = self.off(*a)?;
                alias(
                    self,
                    a.saturating_add((*lane as usize).saturating_mul(t_threads)),
                )
            }
            Expr::SubgroupReduce(op, a) => {
                let (a, t) = self.get(*a)?;
                let f = self.comb(*op, t.scalar, "subgroup reduction")?;
                let (dst, _) = self.define(v)?;
                Ok(Some(Op::Reduce {
                    f,
                    dst,
                    a,
                    comps: t.lanes as usize,
                }))
            }
            Expr::ShuffleXor(a, mask) => {
                let (a, t) = self.get(*a)?;
                let (dst, _) = self.define(v)?;
                Ok(Some(Op::Shuffle {
                    dst,
                    a,
                    mask: *mask,
                    comps: t.lanes as usize,
                }))
            }
            Expr::Mma { a, b, c } => {
                if !self.threads.is_multiple_of(32) {
                    return Err(
                        self.err(format!("mma in a work-group of {} threads", self.threads))
                    );
                }
                let offs = |vs: &[Val]| {
                    vs.iter()
                        .map(|&x| self.off(x))
                        .collect::<Result<Vec<_>, _>>()
                };
                let (a, b, c) = (offs(a)?, offs(b)?, offs(c)?);
                let (dst, _) = self.define(v)?;
                Ok(Some(Op::Mma { dst, a, b, c }))
            }
        }
    }
}
