//! The kernel verifier: scoping, typing and memory rules (see `kernel`'s invariants).

use crate::kernel::{Access, Expr, Inst, Kernel, Mem, Val};
use crate::types::{BinOp, Scalar, Ty, UnOp};
use std::collections::HashSet;

/// A broken rule, naming the kernel and the value or statement.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("kernel `{kernel}`: {msg}")]
pub struct VerifyError {
    /// The kernel.
    pub kernel: String,
    /// What is wrong.
    pub msg: String,
}

struct Ctx<'a> {
    k: &'a Kernel,
    scopes: Vec<HashSet<Val>>,
    defined: HashSet<Val>,
    /// The cluster shape of the kernel's first `Clustered`.
    cluster: Option<[u32; 3]>,
    /// Inside the `then` form of a `Clustered`.
    in_cluster: bool,
    /// Inside the `then` form of a `Matrix`.
    in_matrix: bool,
    /// Inside either form of a `Matrix`.
    in_matrix_forms: bool,
}

impl Ctx<'_> {
    fn err(&self, msg: String) -> VerifyError {
        VerifyError {
            kernel: self.k.name.clone(),
            msg,
        }
    }
    fn visible(&self, v: Val) -> Result<Ty, VerifyError> {
        if !self.scopes.iter().any(|s| s.contains(&v)) {
            return Err(self.err(format!("{v} is used where it is not defined")));
        }
        Ok(self.k.types[v])
    }
    fn define(&mut self, v: Val) -> Result<(), VerifyError> {
        if !self.k.types.is_valid(v) || !self.defined.insert(v) {
            return Err(self.err(format!("{v} is defined twice or has no type")));
        }
        if let Some(s) = self.scopes.last_mut() {
            s.insert(v);
        }
        Ok(())
    }
    fn mem(&self, m: Mem, store: bool) -> Result<Scalar, VerifyError> {
        match m {
            Mem::Param(i) => {
                let p = self
                    .k
                    .params
                    .get(i as usize)
                    .ok_or_else(|| self.err(format!("no param {i}")))?;
                let ok = match p.access {
                    Access::Read => !store,
                    Access::Write => store,
                    Access::ReadWrite => true,
                };
                if !ok {
                    return Err(self.err(format!(
                        "param {i} ({}) is not {}",
                        p.name,
                        if store { "writable" } else { "readable" }
                    )));
                }
                Ok(p.elem)
            }
            Mem::Shared(i) => self
                .k
                .shared
                .get(i as usize)
                .map(|s| s.elem)
                .ok_or_else(|| self.err(format!("no shared array {i}"))),
        }
    }
    fn clustered(&self, what: &str) -> Result<(), VerifyError> {
        if !self.in_cluster {
            return Err(self.err(format!("{what} outside the clustered form of a clustered")));
        }
        Ok(())
    }
    fn u32_index(&self, v: Val) -> Result<(), VerifyError> {
        if self.visible(v)? != Ty::U32 {
            return Err(self.err(format!("index {v} is not u32")));
        }
        Ok(())
    }
    fn block(&mut self, insts: &[Inst], pre: &[Val]) -> Result<(), VerifyError> {
        self.scopes.push(HashSet::new());
        for &p in pre {
            self.define(p)?;
        }
        for i in insts {
            self.inst(i)?;
        }
        Ok(())
    }
    fn end_block(&mut self, yields: &[Val]) -> Result<Vec<Ty>, VerifyError> {
        let tys = yields
            .iter()
            .map(|v| self.visible(*v))
            .collect::<Result<Vec<_>, _>>();
        self.scopes.pop();
        tys
    }
    fn inst(&mut self, i: &Inst) -> Result<(), VerifyError> {
        match i {
            Inst::Let(v, e) => {
                let ty = self.expr(e)?;
                if ty != self.k.types[*v] {
                    return Err(self.err(format!(
                        "{v} is declared {} but computes {ty}",
                        self.k.types[*v]
                    )));
                }
                self.define(*v)
            }
            Inst::Store { mem, index, value }
            | Inst::Atomic {
                mem, index, value, ..
            } => {
                let elem = self.mem(*mem, true)?;
                self.u32_index(*index)?;
                let t = self.visible(*value)?;
                let lanes_ok = matches!(i, Inst::Store { .. }) || t.lanes == 1;
                if t.scalar != elem || !lanes_ok {
                    return Err(self.err(format!("cannot store {t} ({value}) into {elem} memory")));
                }
                if let Inst::Atomic { old: Some(old), .. } = i {
                    if self.k.types[*old] != t {
                        return Err(self.err(format!(
                            "{old} is declared {} but the atomic returns {t}",
                            self.k.types[*old]
                        )));
                    }
                    self.define(*old)?;
                }
                Ok(())
            }
            Inst::Prefetch { mem, index, count } => {
                if let Mem::Shared(_) = mem {
                    return Err(self.err("prefetch of shared memory".to_string()));
                }
                self.mem(*mem, false)?;
                self.u32_index(*index)?;
                self.u32_index(*count)
            }
            Inst::Barrier | Inst::Fence => Ok(()),
            Inst::Trap(_) | Inst::LaunchDependents => Ok(()),
            Inst::Clustered { dims, then, els } => {
                let n: u32 = dims.iter().product();
                if dims.contains(&0) || !(2..=8).contains(&n) {
                    return Err(self.err(format!("a cluster of {dims:?} is not 2 to 8 groups")));
                }
                if self.cluster.is_some_and(|d| d != *dims) || self.in_cluster {
                    return Err(self.err(format!("a second cluster shape {dims:?} or nesting")));
                }
                self.cluster = Some(*dims);
                self.in_cluster = true;
                self.block(then, &[])?;
                self.end_block(&[])?;
                self.in_cluster = false;
                self.block(els, &[])?;
                self.end_block(&[]).map(|_| ())
            }
            Inst::Matrix { then, els } => {
                if self.in_matrix_forms {
                    return Err(self.err("a matrix inside a matrix".into()));
                }
                self.in_matrix_forms = true;
                self.in_matrix = true;
                self.block(then, &[])?;
                self.end_block(&[])?;
                self.in_matrix = false;
                self.block(els, &[])?;
                self.end_block(&[])?;
                self.in_matrix_forms = false;
                Ok(())
            }
            Inst::ClusterArrive { .. } => self.clustered("cluster_arrive"),
            Inst::ClusterWait => self.clustered("cluster_wait"),
            Inst::StoreRemote {
                mem,
                rank,
                index,
                value,
            } => {
                self.clustered("store_remote")?;
                if !matches!(mem, Mem::Shared(_)) {
                    return Err(self.err("store_remote to a buffer".into()));
                }
                let elem = self.mem(*mem, true)?;
                self.u32_index(*index)?;
                self.u32_index(*rank)?;
                let t = self.visible(*value)?;
                if t != Ty::scalar(elem) {
                    return Err(self.err(format!("cannot store {t} ({value}) into {elem} memory")));
                }
                Ok(())
            }
            Inst::GridWait { early } => early
                .iter()
                .try_for_each(|&p| self.mem(Mem::Param(p), false).map(|_| ())),
            Inst::If {
                cond,
                then,
                then_yield,
                els,
                else_yield,
                results,
            } => {
                if self.visible(*cond)? != Ty::BOOL {
                    return Err(self.err(format!("if condition {cond} is not bool")));
                }
                self.block(then, &[])?;
                let a = self.end_block(then_yield)?;
                self.block(els, &[])?;
                let b = self.end_block(else_yield)?;
                let r: Vec<Ty> = results.iter().map(|v| self.k.types[*v]).collect();
                if a != b || a != r {
                    return Err(self.err(format!("if yields {a:?} / {b:?} for results {r:?}")));
                }
                results.iter().try_for_each(|v| self.define(*v))
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
            } => {
                self.u32_index(*start)?;
                self.u32_index(*end)?;
                if *step == 0 {
                    return Err(self.err("loop step is 0".into()));
                }
                let init: Vec<Ty> = carried
                    .iter()
                    .map(|c| self.visible(c.init))
                    .collect::<Result<_, _>>()?;
                let params: Vec<Val> = std::iter::once(*var)
                    .chain(carried.iter().map(|c| c.param))
                    .collect();
                self.block(body, &params)?;
                let y = self.end_block(yields)?;
                let p: Vec<Ty> = carried.iter().map(|c| self.k.types[c.param]).collect();
                let r: Vec<Ty> = results.iter().map(|v| self.k.types[*v]).collect();
                if init != p || y != p || r != p || self.k.types[*var] != Ty::U32 {
                    return Err(self.err(format!(
                        "loop carries {p:?} but starts {init:?}, yields {y:?}, results {r:?}"
                    )));
                }
                results.iter().try_for_each(|v| self.define(*v))
            }
        }
    }
    fn expr(&self, e: &Expr) -> Result<Ty, VerifyError> {
        let same = |a: Val, b: Val| -> Result<Ty, VerifyError> {
            let (ta, tb) = (self.visible(a)?, self.visible(b)?);
            if ta != tb {
                return Err(self.err(format!("operands {a}: {ta} and {b}: {tb} differ")));
            }
            Ok(ta)
        };
        let float = |t: Ty, what: &str| -> Result<Ty, VerifyError> {
            if t.scalar != Scalar::F32 {
                return Err(self.err(format!("{what} needs f32, got {t}")));
            }
            Ok(t)
        };
        Ok(match e {
            Expr::Const(c) => c.ty(),
            Expr::Special(_) => Ty::U32,
            Expr::Unary(op, a) => {
                let t = self.visible(*a)?;
                match op {
                    UnOp::Exp | UnOp::Sqrt | UnOp::Rsqrt | UnOp::Recip | UnOp::Sin | UnOp::Cos => {
                        float(t, op.name())?
                    }
                    UnOp::IsFinite | UnOp::IsNan => Ty {
                        scalar: Scalar::Bool,
                        lanes: float(t, op.name())?.lanes,
                    },
                    _ => t,
                }
            }
            Expr::Binary(op, a, b) => {
                let t = same(*a, *b)?;
                let int_only = matches!(op, BinOp::Rem | BinOp::Xor | BinOp::Shl | BinOp::Shr);
                if (int_only && !matches!(t.scalar, Scalar::I32 | Scalar::U32))
                    || (t.scalar == Scalar::Bool
                        && !matches!(op, BinOp::And | BinOp::Or | BinOp::Xor))
                {
                    return Err(self.err(format!("{} does not apply to {t}", op.name())));
                }
                t
            }
            Expr::Fma(a, b, c) => {
                let t = same(*a, *b)?;
                same(*a, *c)?;
                float(t, "fma")?
            }
            Expr::Cmp(_, a, b) => Ty {
                scalar: Scalar::Bool,
                lanes: same(*a, *b)?.lanes,
            },
            Expr::Select(c, a, b) => {
                let t = same(*a, *b)?;
                let tc = self.visible(*c)?;
                if tc.scalar != Scalar::Bool || (tc.lanes != 1 && tc.lanes != t.lanes) {
                    return Err(self.err(format!("select condition {c} is {tc}")));
                }
                t
            }
            Expr::Convert(a, s) | Expr::Bitcast(a, s) => {
                let t = self.visible(*a)?;
                if *s == Scalar::Bool || t.scalar == Scalar::Bool && matches!(e, Expr::Bitcast(..))
                {
                    return Err(self.err(format!("cannot convert {t} to {s}")));
                }
                Ty {
                    scalar: *s,
                    lanes: t.lanes,
                }
            }
            Expr::HalfToF32(a, _) | Expr::Bf16ToF32(a, _) => {
                if self.visible(*a)? != Ty::U32 {
                    return Err(self.err(format!("half conversion of {a} needs u32")));
                }
                Ty::F32
            }
            Expr::Load(m, index, lanes) => {
                let elem = self.mem(*m, false)?;
                self.u32_index(*index)?;
                if !matches!(lanes, 1 | 2 | 4) {
                    return Err(self.err(format!("load of {lanes} lanes")));
                }
                Ty {
                    scalar: elem,
                    lanes: *lanes,
                }
            }
            Expr::Extract(v, lane) => {
                let t = self.visible(*v)?;
                if *lane >= t.lanes {
                    return Err(self.err(format!("lane {lane} of {t}")));
                }
                Ty::scalar(t.scalar)
            }
            Expr::SubgroupReduce(_, a) | Expr::ShuffleXor(a, _) => {
                if self.k.subgroup <= 1 {
                    return Err(
                        self.err("subgroup operation in a kernel declaring subgroup 1".into())
                    );
                }
                self.visible(*a)?
            }
            Expr::Mma { a, b, c } => {
                if !self.in_matrix {
                    return Err(self.err("mma outside the matrix form of a matrix".into()));
                }
                if self.k.subgroup != 32 {
                    return Err(
                        self.err(format!("mma in a kernel of subgroup {}", self.k.subgroup))
                    );
                }
                for &v in a.iter().chain(b).chain(c) {
                    let t = self.visible(v)?;
                    if t != Ty::F32 {
                        return Err(self.err(format!("mma operand {v} is {t}, not f32")));
                    }
                }
                Ty {
                    scalar: Scalar::F32,
                    lanes: 4,
                }
            }
        })
    }
}

/// Verifies `k`.
pub fn verify(k: &Kernel) -> Result<(), VerifyError> {
    let mut cx = Ctx {
        k,
        scopes: Vec::new(),
        defined: HashSet::new(),
        cluster: None,
        in_cluster: false,
        in_matrix: false,
        in_matrix_forms: false,
    };
    if k.workgroup.contains(&0) || k.threads() > 1024 {
        return Err(cx.err(format!(
            "work-group {:?} is not 1..=1024 threads",
            k.workgroup
        )));
    }
    if k.subgroup > 1 && !k.threads().is_multiple_of(k.subgroup) {
        return Err(cx.err(format!(
            "{} threads are not whole subgroups of {}",
            k.threads(),
            k.subgroup
        )));
    }
    if k.params.iter().any(|p| p.elem == Scalar::Bool)
        || k.shared.iter().any(|s| s.elem == Scalar::Bool)
    {
        return Err(cx.err("bool memory".into()));
    }
    cx.block(&k.body, &[])?;
    cx.end_block(&[])?;
    if has_wait(&k.body) {
        let early = early_params(&k.body);
        Waits { cx: &cx, early }.block(&k.body, true)?;
    }
    Ok(())
}

/// Whether `insts` hold a `GridWait` at any depth.
pub fn has_wait(insts: &[Inst]) -> bool {
    insts.iter().any(|i| match i {
        Inst::GridWait { .. } => true,
        Inst::If { then, els, .. }
        | Inst::Clustered { then, els, .. }
        | Inst::Matrix { then, els } => has_wait(then) || has_wait(els),
        Inst::For { body, .. } => has_wait(body),
        _ => false,
    })
}

/// The parameters some `GridWait` of `insts` (at any depth) lets the kernel read before it.
pub fn early_params(insts: &[Inst]) -> HashSet<u32> {
    let mut out = HashSet::new();
    for i in insts {
        match i {
            Inst::GridWait { early } => out.extend(early.iter().copied()),
            Inst::If { then, els, .. }
            | Inst::Clustered { then, els, .. }
            | Inst::Matrix { then, els } => {
                out.extend(early_params(then));
                out.extend(early_params(els));
            }
            Inst::For { body, .. } => out.extend(early_params(body)),
            _ => {}
        }
    }
    out
}

/// The grid wait rules for a kernel with a wait: exactly one on every path, never in a loop,
/// and before it no buffer write and no read of a parameter no wait lists.
struct Waits<'a, 'k> {
    cx: &'a Ctx<'k>,
    early: HashSet<u32>,
}

impl Waits<'_, '_> {
    /// Checks `insts`, entered before the wait when `pre`; true when it waits on every path
    /// (false when it has no wait).
    fn block(&self, insts: &[Inst], mut pre: bool) -> Result<bool, VerifyError> {
        let entered = pre;
        for i in insts {
            match i {
                Inst::GridWait { .. } if !pre => {
                    return Err(self.cx.err("a second grid wait on one path".into()));
                }
                Inst::GridWait { .. } => pre = false,
                Inst::If { then, els, .. }
                | Inst::Clustered { then, els, .. }
                | Inst::Matrix { then, els } => {
                    let (a, b) = (self.block(then, pre)?, self.block(els, pre)?);
                    if a != b {
                        return Err(self
                            .cx
                            .err("a grid wait on one branch of an if only".into()));
                    }
                    pre &= !a;
                }
                Inst::For { body, .. } => {
                    if has_wait(body) {
                        return Err(self.cx.err("a grid wait in a loop".into()));
                    }
                    self.block(body, pre)?;
                }
                _ if pre => self.before_wait(i)?,
                _ => {}
            }
        }
        Ok(entered && !pre)
    }
    /// Checks a statement executed before the wait (not an `if` or a loop).
    fn before_wait(&self, i: &Inst) -> Result<(), VerifyError> {
        let bad = match i {
            Inst::Let(_, Expr::Load(Mem::Param(p), _, _)) if !self.early.contains(p) => {
                format!("param {p} is read before the grid wait but no wait lists it")
            }
            Inst::Store {
                mem: Mem::Param(p), ..
            }
            | Inst::Atomic {
                mem: Mem::Param(p), ..
            } => format!("param {p} is written before the grid wait"),
            Inst::Fence | Inst::Trap(_) | Inst::LaunchDependents => {
                "a fence, trap or launch hint before the grid wait".into()
            }
            _ => return Ok(()),
        };
        Err(self.cx.err(bad))
    }
}
