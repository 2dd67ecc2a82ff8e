//! The PTX writer: the module header, the entry's parameters and declarations, registers,
//! memory access and structured control flow. Expressions are in `ops`.
//!
//! Invariants:
//! - Every kir value owns one PTX register per lane, allocated up front in value order
//!   (`%f` for f32, `%r` for i32/u32, `%p` for bool); temporaries and addresses are allocated
//!   after them in program order, never reused, and declared at the top of the entry. Only an
//!   `if`'s results and a `for`'s induction variable, carried parameters and results are
//!   assigned more than once, each by `mov` at the edges of their construct.
//! - An `if` is a predicated branch over its `then` block to an `else` label; each branch ends
//!   by moving its yields into the results. A `for` tests `var < end` (u32) before the first
//!   iteration, moves its yields into the carried registers as one parallel copy (through
//!   temporaries when a yield is another carried value), and advances `var` without ever
//!   wrapping past `end`, exactly like `(start..end).step_by(step)`.
//! - Labels are `$L<n>_<role>`, numbered in program order per construct.

use crate::error::{PtxError, Result};
use crate::select::Patterns;
use crate::target::PtxTarget;
use poot_kir::{Access, Carried, Inst, Kernel, Mem, ReduceOp, Scalar, Ty, Val};
use std::collections::{HashMap, HashSet};
use std::fmt::{self, Write};

/// Register classes, in declaration order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Pred,
    B16,
    B32,
    F32,
    B64,
}

const CLASSES: [(Class, &str, &str); 5] = [
    (Class::Pred, ".pred", "%p"),
    (Class::B16, ".b16", "%h"),
    (Class::B32, ".b32", "%r"),
    (Class::F32, ".f32", "%f"),
    (Class::B64, ".b64", "%rd"),
];

/// One PTX register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reg {
    class: Class,
    n: u32,
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix = CLASSES[self.class as usize].2;
        write!(f, "{prefix}{}", self.n)
    }
}

/// The register class holding a scalar.
pub(crate) fn class(s: Scalar) -> Class {
    match s {
        Scalar::F32 => Class::F32,
        Scalar::I32 | Scalar::U32 => Class::B32,
        Scalar::Bool => Class::Pred,
    }
}

/// The `mov` type of a scalar.
pub(crate) fn mov_ty(s: Scalar) -> &'static str {
    match s {
        Scalar::F32 => "f32",
        Scalar::I32 | Scalar::U32 => "b32",
        Scalar::Bool => "pred",
    }
}

/// The memory type of a storable scalar (`.f32`, `.s32`, `.u32`).
fn mem_ty(s: Scalar) -> &'static str {
    match s {
        Scalar::F32 => "f32",
        Scalar::I32 => "s32",
        Scalar::U32 | Scalar::Bool => "u32",
    }
}

/// Appends one tab-indented instruction line to the writer's body.
macro_rules! emit {
    ($w:expr, $($arg:tt)*) => {{
        $w.body.push('\t');
        let _ = write!($w.body, $($arg)*);
        $w.body.push('\n');
    }};
}
pub(crate) use emit;

/// Writes one kernel.
pub(crate) struct Writer<'a> {
    pub(crate) k: &'a Kernel,
    pub(crate) t: &'a PtxTarget,
    regs: HashMap<Val, Vec<Reg>>,
    counts: [u32; 5],
    labels: u32,
    param_base: Vec<Reg>,
    shared_base: Vec<Reg>,
    /// The kernel places its own grid wait (`Inst::GridWait`).
    waits: bool,
    /// The parameters its waits let it read before them.
    early: HashSet<u32>,
    /// The statement being rendered runs before the kernel's own wait.
    before_wait: bool,
    pub(crate) body: String,
    /// The kir patterns instruction selection recognizes.
    pub(crate) patterns: Patterns<'a>,
}

impl<'a> Writer<'a> {
    /// A writer with every value's registers allocated.
    pub(crate) fn new(k: &'a Kernel, t: &'a PtxTarget) -> Writer<'a> {
        let mut w = Writer {
            k,
            t,
            regs: HashMap::new(),
            counts: [0; 5],
            labels: 0,
            param_base: Vec::new(),
            shared_base: Vec::new(),
            waits: poot_kir::has_wait(&k.body),
            early: poot_kir::early_params(&k.body),
            before_wait: poot_kir::has_wait(&k.body),
            body: String::new(),
            patterns: Patterns::new(k),
        };
        for (v, ty) in k.types.iter() {
            let regs = (0..ty.lanes).map(|_| w.reg(class(ty.scalar))).collect();
            w.regs.insert(v, regs);
        }
        w
    }

    /// A fresh register.
    pub(crate) fn reg(&mut self, c: Class) -> Reg {
        let n = &mut self.counts[c as usize];
        *n += 1;
        Reg {
            class: c,
            n: *n - 1,
        }
    }

    /// The registers of `v`, one per lane.
    pub(crate) fn of(&self, v: Val) -> Vec<Reg> {
        self.regs.get(&v).cloned().unwrap_or_default()
    }

    /// The type of `v`.
    pub(crate) fn ty(&self, v: Val) -> Ty {
        self.k.types[v]
    }

    /// An `Unsupported` error for this kernel and target.
    pub(crate) fn unsupported(&self, what: String) -> PtxError {
        PtxError::Unsupported {
            kernel: self.k.name.clone(),
            what,
            target: self.t.name(),
        }
    }

    fn label(&mut self) -> u32 {
        self.labels += 1;
        self.labels - 1
    }

    fn place(&mut self, label: &str) {
        let _ = writeln!(self.body, "{label}:");
    }

    /// Renders the whole module.
    pub(crate) fn write(mut self) -> Result<String> {
        self.prologue();
        let k = self.k;
        self.block(&k.body)?;
        emit!(self, "ret;");
        Ok(self.module())
    }

    /// Grid dependency control where the target has it (unless the kernel places its own
    /// wait, the wait precedes every memory access), then parameter addresses and
    /// shared-array bases, computed once at entry.
    fn prologue(&mut self) {
        if self.t.grid_dependency && !self.waits {
            emit!(self, "griddepcontrol.wait;");
        }
        for (i, p) in self.k.params.iter().enumerate() {
            let r = self.reg(Class::B64);
            let access = match p.access {
                Access::Read => "read",
                Access::Write => "write",
                Access::ReadWrite => "read_write",
            };
            emit!(self, "// p{i}: {} {} {access}", p.name, p.elem);
            emit!(self, "ld.param.u64 {r}, [p{i}];");
            emit!(self, "cvta.to.global.u64 {r}, {r};");
            self.param_base.push(r);
        }
        for (i, a) in self.k.shared.iter().enumerate() {
            let r = self.reg(Class::B32);
            emit!(self, "// s{i}: {}[{}]", a.elem, a.len);
            emit!(self, "mov.u32 {r}, s{i};");
            self.shared_base.push(r);
        }
    }

    /// Header, entry signature, declarations, then the body.
    fn module(&self) -> String {
        let (k, t) = (self.k, self.t);
        let mut s = String::new();
        let _ = writeln!(s, "//\n// poot kernel `{}` for {}", k.name, t.name());
        let _ = writeln!(s, "// generated by poot-codegen-ptx; do not edit\n//\n");
        let (major, minor) = t.ptx_version;
        let _ = writeln!(s, ".version {major}.{minor}");
        let _ = writeln!(s, ".target {}\n.address_size 64\n", t.name());
        let _ = writeln!(s, ".visible .entry {}(", k.name);
        let params: Vec<String> = (0..k.params.len())
            .map(|i| format!("\t.param .u64 p{i}"))
            .collect();
        if !params.is_empty() {
            let _ = writeln!(s, "{}", params.join(",\n"));
        }
        let [x, y, z] = k.workgroup;
        let _ = writeln!(s, ")\n.maxntid {x}, {y}, {z}");
        if let Some([x, y, z]) = poot_kir::cluster_dims(&k.body) {
            let _ = writeln!(s, ".reqnctapercluster {x}, {y}, {z}");
        }
        let _ = writeln!(s, "{{");
        for (c, ty, prefix) in CLASSES {
            let n = self.counts[c as usize];
            if n > 0 {
                let _ = writeln!(s, "\t.reg {ty} {prefix}<{n}>;");
            }
        }
        for (i, a) in k.shared.iter().enumerate() {
            let _ = writeln!(s, "\t.shared .align 16 .b32 s{i}[{}];", a.len.max(1));
        }
        s.push('\n');
        s.push_str(&self.body);
        s.push_str("}\n");
        s
    }

    fn block(&mut self, insts: &[Inst]) -> Result<()> {
        insts.iter().try_for_each(|i| self.inst(i))
    }

    fn inst(&mut self, i: &Inst) -> Result<()> {
        match i {
            Inst::Let(v, e) => {
                emit!(
                    self,
                    "// {v} = {} : {}",
                    poot_kir::expr_text(e),
                    self.ty(*v)
                );
                self.expr(*v, e)
            }
            Inst::Store { mem, index, value } => {
                emit!(
                    self,
                    "// store {}[{index}] = {value}",
                    poot_kir::mem_text(*mem)
                );
                let lanes = self.ty(*value).lanes;
                let (space, addr) = self.address(*mem, *index);
                let elem = mem_ty(self.ty(*value).scalar);
                let regs = vector(&self.of(*value));
                emit!(
                    self,
                    "st{space}{}.{elem} [{addr}], {regs};",
                    vec_suffix(lanes)
                );
                Ok(())
            }
            Inst::Atomic {
                op,
                mem,
                index,
                value,
                old,
            } => {
                emit!(
                    self,
                    "// {}atomic_{} {}[{index}], {value}",
                    old.map_or(String::new(), |o| format!("{o} = ")),
                    op.name(),
                    poot_kir::mem_text(*mem)
                );
                self.atomic(*op, *mem, *index, *value, *old)
            }
            Inst::Barrier => {
                emit!(self, "bar.sync 0;");
                Ok(())
            }
            Inst::Fence => {
                emit!(self, "fence.acq_rel.gpu;");
                Ok(())
            }
            // `render` removes clusters first where the target has none.
            Inst::Clustered { dims, then, .. } => {
                if !self.t.clusters {
                    return Err(self.unsupported("a clustered statement".into()));
                }
                let [x, y, z] = dims;
                emit!(self, "// clustered {x}x{y}x{z}: the form with clusters");
                self.block(then)
            }
            // `render` removes matrices first where the target has no `mma`.
            Inst::Matrix { then, .. } => {
                if !self.t.mma {
                    return Err(self.unsupported("a matrix statement".into()));
                }
                emit!(self, "// matrix: the form with mma");
                self.block(then)
            }
            Inst::ClusterArrive { .. } | Inst::ClusterWait => {
                if !self.t.clusters {
                    return Err(self.unsupported("a cluster barrier".into()));
                }
                match i {
                    Inst::ClusterArrive { release: true } => {
                        emit!(self, "barrier.cluster.arrive.release.aligned;");
                    }
                    Inst::ClusterArrive { release: false } => {
                        emit!(self, "barrier.cluster.arrive.relaxed.aligned;");
                    }
                    _ => emit!(self, "barrier.cluster.wait.acquire.aligned;"),
                }
                Ok(())
            }
            Inst::StoreRemote {
                mem,
                rank,
                index,
                value,
            } => {
                emit!(
                    self,
                    "// store_remote {}[{index}] of {rank} = {value}",
                    poot_kir::mem_text(*mem)
                );
                if !self.t.clusters {
                    return Err(self.unsupported("store_remote".into()));
                }
                let (_, addr) = self.address(*mem, *index);
                let (r, at) = (self.of(*rank)[0], self.reg(Class::B32));
                emit!(self, "mapa.shared::cluster.u32 {at}, {addr}, {r};");
                let elem = mem_ty(self.ty(*value).scalar);
                let v = self.of(*value)[0];
                emit!(self, "st.shared::cluster.{elem} [{at}], {v};");
                Ok(())
            }
            Inst::Prefetch { mem, index, count } => {
                emit!(
                    self,
                    "// prefetch {}[{index}], {count}",
                    poot_kir::mem_text(*mem)
                );
                if self.t.bulk_prefetch {
                    let n = self.of(*count)[0];
                    let (_, addr) = self.address(*mem, *index);
                    let (bytes, some) = (self.reg(Class::B32), self.reg(Class::Pred));
                    emit!(self, "shl.b32 {bytes}, {n}, 2;");
                    emit!(self, "setp.ne.u32 {some}, {bytes}, 0;");
                    emit!(
                        self,
                        "@{some} cp.async.bulk.prefetch.L2.global [{addr}], {bytes};"
                    );
                }
                Ok(())
            }
            Inst::LaunchDependents => {
                if self.t.grid_dependency {
                    emit!(self, "griddepcontrol.launch_dependents;");
                }
                Ok(())
            }
            Inst::GridWait { .. } => {
                if self.t.grid_dependency {
                    emit!(self, "griddepcontrol.wait;");
                }
                self.before_wait = false;
                Ok(())
            }
            Inst::Trap(code) => {
                emit!(self, "// trap {code}");
                emit!(self, "trap;");
                Ok(())
            }
            Inst::If {
                cond,
                then,
                then_yield,
                els,
                else_yield,
                results,
            } => {
                let n = self.label();
                emit!(self, "// if {cond}{}", arrow(results));
                let c = self.of(*cond)[0];
                let has_else = !els.is_empty() || !results.is_empty();
                let skip = if has_else { "else" } else { "end" };
                emit!(self, "@!{c} bra $L{n}_{skip};");
                let before = self.before_wait;
                self.block(then)?;
                self.moves(results, then_yield);
                if has_else {
                    emit!(self, "bra $L{n}_end;");
                    self.place(&format!("$L{n}_else"));
                    // Both branches wait, or neither does (`kir::verify`).
                    self.before_wait = before;
                    self.block(els)?;
                    self.moves(results, else_yield);
                }
                self.place(&format!("$L{n}_end"));
                Ok(())
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
            } => self.for_loop(*var, *start, *end, *step, carried, body, yields, results),
        }
    }

    /// `dst[i] = src[i]` for every lane, in order (the caller rules out overlaps).
    fn moves(&mut self, dst: &[Val], src: &[Val]) {
        if !dst.is_empty() {
            emit!(self, "// [{}] <- [{}]", list(dst), list(src));
        }
        for (d, s) in dst.iter().zip(src) {
            if d == s {
                continue;
            }
            let ty = mov_ty(self.ty(*d).scalar);
            for (rd, rs) in self.of(*d).into_iter().zip(self.of(*s)) {
                emit!(self, "mov.{ty} {rd}, {rs};");
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn for_loop(
        &mut self,
        var: Val,
        start: Val,
        end: Val,
        step: u32,
        carried: &[Carried],
        body: &[Inst],
        yields: &[Val],
        results: &[Val],
    ) -> Result<()> {
        let n = self.label();
        let params: Vec<Val> = carried.iter().map(|c| c.param).collect();
        let inits: Vec<Val> = carried.iter().map(|c| c.init).collect();
        let carry: Vec<String> = carried
            .iter()
            .map(|c| format!("{} = {}", c.param, c.init))
            .collect();
        let carry = if carry.is_empty() {
            String::new()
        } else {
            format!(" carry({})", carry.join(", "))
        };
        emit!(
            self,
            "// for {var} = {start} to {end} step {step}{carry}{}",
            arrow(results)
        );
        let (v, e) = (self.of(var)[0], self.of(end)[0]);
        emit!(self, "mov.u32 {v}, {};", self.of(start)[0]);
        self.moves(&params, &inits);
        self.place(&format!("$L{n}_head"));
        let done = self.reg(Class::Pred);
        emit!(self, "setp.ge.u32 {done}, {v}, {e};");
        emit!(self, "@{done} bra $L{n}_end;");
        if step > 1 {
            self.place(&format!("$L{n}_body"));
        }
        self.block(body)?;
        // The yields form one parallel copy into the carried registers.
        let crossed = yields
            .iter()
            .enumerate()
            .any(|(j, y)| params.iter().enumerate().any(|(i, p)| i != j && p == y));
        if crossed {
            emit!(
                self,
                "// [{}] <- [{}] (parallel copy)",
                list(&params),
                list(yields)
            );
            let mut temps = Vec::new();
            for y in yields {
                let ty = self.ty(*y);
                let regs: Vec<Reg> = (0..ty.lanes).map(|_| self.reg(class(ty.scalar))).collect();
                for (rd, rs) in regs.iter().zip(self.of(*y)) {
                    emit!(self, "mov.{} {rd}, {rs};", mov_ty(ty.scalar));
                }
                temps.push(regs);
            }
            for (p, regs) in params.iter().zip(temps) {
                let ty = mov_ty(self.ty(*p).scalar);
                for (rd, rs) in self.of(*p).into_iter().zip(regs) {
                    emit!(self, "mov.{ty} {rd}, {rs};");
                }
            }
        } else {
            self.moves(&params, yields);
        }
        if step == 1 {
            emit!(self, "add.u32 {v}, {v}, 1;");
            emit!(self, "bra $L{n}_head;");
        } else {
            // Leave when `end - var <= step`, so `var + step` never wraps.
            let (left, last) = (self.reg(Class::B32), self.reg(Class::Pred));
            emit!(self, "sub.u32 {left}, {e}, {v};");
            emit!(self, "setp.le.u32 {last}, {left}, {step};");
            emit!(self, "@{last} bra $L{n}_end;");
            emit!(self, "add.u32 {v}, {v}, {step};");
            emit!(self, "bra $L{n}_body;");
        }
        self.place(&format!("$L{n}_end"));
        self.moves(results, &params);
        Ok(())
    }

    /// The address of element `index` of `mem`, as (state-space suffix, register): global
    /// addresses are 64-bit, shared ones 32-bit offsets in the shared window.
    fn address(&mut self, mem: Mem, index: Val) -> (&'static str, Reg) {
        let i = self.of(index)[0];
        match mem {
            Mem::Param(p) => {
                let base = self.param_base[p as usize];
                let (off, a) = (self.reg(Class::B64), self.reg(Class::B64));
                emit!(self, "mul.wide.u32 {off}, {i}, 4;");
                emit!(self, "add.s64 {a}, {base}, {off};");
                (".global", a)
            }
            Mem::Shared(s) => {
                let base = self.shared_base[s as usize];
                let a = self.reg(Class::B32);
                emit!(self, "mad.lo.u32 {a}, {i}, 4, {base};");
                (".shared", a)
            }
        }
    }

    /// `Load(mem, index, lanes)` into `dst`.
    pub(crate) fn load(&mut self, dst: Val, mem: Mem, index: Val, lanes: u8) {
        let (mut space, addr) = self.address(mem, index);
        if let Mem::Param(p) = mem
            && self.t.nc_loads
            && self.k.params[p as usize].access == Access::Read
            && (!self.waits || self.early.contains(&p) && !self.before_wait)
        {
            space = ".global.nc";
        }
        let elem = mem_ty(self.ty(dst).scalar);
        let regs = vector(&self.of(dst));
        emit!(
            self,
            "ld{space}{}.{elem} {regs}, [{addr}];",
            vec_suffix(lanes)
        );
    }

    /// `Atomic` as a `red`, or an `atom` when the old value is used.
    fn atomic(
        &mut self,
        op: ReduceOp,
        mem: Mem,
        index: Val,
        value: Val,
        old: Option<Val>,
    ) -> Result<()> {
        let s = self.ty(value).scalar;
        let ty = match (op, s) {
            (ReduceOp::Add, Scalar::F32) => "f32",
            (ReduceOp::Add, Scalar::I32 | Scalar::U32) => "u32",
            (ReduceOp::Max | ReduceOp::Min, Scalar::I32) => "s32",
            (ReduceOp::Max | ReduceOp::Min, Scalar::U32) => "u32",
            (ReduceOp::Or, Scalar::I32 | Scalar::U32) => "b32",
            _ => {
                return Err(self.unsupported(format!(
                    "atomic {} of {value} on {s} memory {}",
                    op.name(),
                    poot_kir::mem_text(mem)
                )));
            }
        };
        let (space, addr) = self.address(mem, index);
        let r = self.of(value)[0];
        match old {
            Some(o) => {
                let o = self.of(o)[0];
                emit!(self, "atom{space}.{}.{ty} {o}, [{addr}], {r};", op.name());
            }
            None => emit!(self, "red{space}.{}.{ty} [{addr}], {r};", op.name()),
        }
        Ok(())
    }
}

/// `.v2` / `.v4` for vector accesses.
fn vec_suffix(lanes: u8) -> &'static str {
    match lanes {
        2 => ".v2",
        4 => ".v4",
        _ => "",
    }
}

/// One register, or a braced vector of them.
fn vector(regs: &[Reg]) -> String {
    match regs {
        [r] => r.to_string(),
        _ => format!("{{{}}}", list(regs)),
    }
}

fn list<T: fmt::Display>(xs: &[T]) -> String {
    xs.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// ` -> [%1, %2]`, or nothing for no results.
fn arrow(results: &[Val]) -> String {
    if results.is_empty() {
        String::new()
    } else {
        format!(" -> [{}]", list(results))
    }
}
