//! The writer: bindings and built-ins, memory access, barriers, traps and structured control
//! flow. Expressions are in `ops`, subgroup operations in `subgroup`.
//!
//! Invariants:
//! - Every kir value maps to one SPIR-V id, defined where kir defines it; an `if`'s results
//!   are `OpPhi`s in its merge block, a `for`'s induction variable and carried values are
//!   `OpPhi`s in its loop header (the back edge patched once the body is written), and its
//!   results are those header phis seen from the merge block.
//! - An `if` is `OpSelectionMerge` + `OpBranchConditional` (an else block only when it has
//!   statements or results). A `for` is a header (phis, `var < end`, `OpLoopMerge`,
//!   conditional branch to the body or the merge), the body, and a continue block that
//!   advances `var` by `step` without wrapping: when `end - var <= step` it sets `var = end`,
//!   exactly `(start..end).step_by(step)` like the PTX renderer.
//! - Blocks are emitted in program order, so every block follows its dominators.
//! - `trap(code)` ORs `code` into error word 0 with a device-scope atomic. When the kernel has
//!   no work-group barrier (kir `barrier` or the subgroup fallback's), the thread then
//!   returns (`if true { return }`, which keeps the rest structured); otherwise it carries on,
//!   as the execution spec allows (the dispatch's results are discarded), because a thread
//!   that left early would make later barriers non-uniform.

use crate::analysis::{Features, element_lanes, inst_has_sync, sync_run};
use crate::error::{Result, SpirvError};
use crate::module::{Module, id};
use crate::target::{SpirvTarget, SubgroupMode};
use poot_kir::{Carried, Const, Inst, Kernel, Mem, ReduceOp, Scalar, Special, Ty, Val};
use rspirv::binary::Assemble;
use rspirv::dr::Operand;
use rspirv::spirv::{
    BuiltIn, Capability, Decoration, Op, Scope, SelectionControl, StorageClass, Word,
};
use std::collections::HashMap;

/// `AcquireRelease | UniformMemory | WorkgroupMemory`: kir's barrier orders shared and global
/// memory.
const SEM_ALL: u32 = 0x8 | 0x40 | 0x100;
/// `AcquireRelease | WorkgroupMemory`: the subgroup fallback orders its scratch only.
const SEM_SHARED: u32 = 0x8 | 0x100;
/// `AcquireRelease | UniformMemory`: kir's fence orders buffer memory.
const SEM_BUFFERS: u32 = 0x8 | 0x40;

/// The input variables of the built-ins a kernel reads.
#[derive(Default)]
struct Builtins {
    local_id: Option<Word>,
    group_id: Option<Word>,
    local_index: Option<Word>,
    subgroup_lane: Option<Word>,
}

/// Writes one kernel.
pub(crate) struct Writer<'a> {
    pub(crate) k: &'a Kernel,
    pub(crate) t: &'a SpirvTarget,
    pub(crate) m: Module,
    pub(crate) mode: SubgroupMode,
    vals: HashMap<Val, Word>,
    params: Vec<Word>,
    /// Per parameter, the lanes of its array's elements (`analysis::element_lanes`): accesses
    /// of that width load and store whole elements, narrower ones single components.
    lanes: Vec<u8>,
    shared: Vec<Word>,
    error: Word,
    pub(crate) scratch: Option<Word>,
    /// Words of `scratch` a thread has (`SpirvTarget::scratch_words`).
    pub(crate) scratch_words: u32,
    builtins: Builtins,
    trap_returns: bool,
}

impl<'a> Writer<'a> {
    /// A writer with every binding, shared array and built-in the kernel needs declared.
    pub(crate) fn new(k: &'a Kernel, t: &'a SpirvTarget) -> Writer<'a> {
        let f = Features::of(&k.body);
        let mode = t.mode(k);
        let fallback = matches!(mode, SubgroupMode::Fallback(_)) && f.sync;
        let mut w = Writer {
            k,
            t,
            m: Module::new(),
            mode,
            vals: HashMap::new(),
            params: Vec::new(),
            lanes: Vec::new(),
            shared: Vec::new(),
            error: 0,
            scratch: None,
            scratch_words: t.scratch_words(k),
            builtins: Builtins::default(),
            trap_returns: !(f.barrier || fallback),
        };
        let widths = element_lanes(k);
        for (i, p) in k.params.iter().enumerate() {
            let lanes = widths[i];
            let var = w.storage_buffer(
                Ty {
                    scalar: p.elem,
                    lanes,
                },
                i as u32,
                &p.name,
            );
            if p.access == poot_kir::Access::Read {
                w.m.decorate(var, Decoration::NonWritable, &[]);
            }
            w.params.push(var);
            w.lanes.push(lanes);
        }
        w.error = w.storage_buffer(Ty::U32, k.params.len() as u32, "poot_error");
        for (i, a) in k.shared.iter().enumerate() {
            let var = w.workgroup_array(a.elem, a.len.max(1));
            w.m.name(var, &format!("s{i}"));
            w.shared.push(var);
        }
        if fallback {
            let var = w.workgroup_array(Scalar::U32, k.threads() * w.scratch_words.max(1));
            w.m.name(var, "poot_subgroup_scratch");
            w.scratch = Some(var);
        }
        let uses = |s: &[Special]| s.iter().any(|s| f.specials.contains(s));
        if uses(&[Special::LocalX, Special::LocalY]) {
            w.builtins.local_id = Some(w.input(BuiltIn::LocalInvocationId, 3));
        }
        if uses(&[Special::GroupX, Special::GroupY, Special::GroupZ]) {
            w.builtins.group_id = Some(w.input(BuiltIn::WorkgroupId, 3));
        }
        let lane = uses(&[Special::Lane]);
        let flat = k.workgroup[1..].iter().all(|&d| d == 1);
        match mode {
            SubgroupMode::Native(_) if lane && flat => {
                w.m.capability(Capability::GroupNonUniform);
                w.builtins.subgroup_lane = Some(w.input(BuiltIn::SubgroupLocalInvocationId, 1));
            }
            SubgroupMode::Native(_) | SubgroupMode::Fallback(_) if lane || fallback => {
                w.builtins.local_index = Some(w.input(BuiltIn::LocalInvocationIndex, 1));
            }
            _ => {}
        }
        w
    }

    /// A `StorageBuffer` binding `binding` of set 0: a `Block` struct around a runtime array
    /// of `elem` (scalars or vectors).
    fn storage_buffer(&mut self, elem: Ty, binding: u32, name: &str) -> Word {
        let e = self.m.ty(elem);
        let arr = self.m.runtime_array(e, 4 * u32::from(elem.lanes));
        let st = self.m.block_struct(arr);
        let ptr = self.m.pointer(StorageClass::StorageBuffer, st);
        let var = self.m.variable(ptr, StorageClass::StorageBuffer);
        self.m.decorate(var, Decoration::DescriptorSet, &[0]);
        self.m.decorate(var, Decoration::Binding, &[binding]);
        self.m.name(var, name);
        var
    }

    /// A `Workgroup` array of `len` elements.
    fn workgroup_array(&mut self, elem: Scalar, len: u32) -> Word {
        let e = self.m.scalar(elem);
        let arr = self.m.array(e, len);
        let ptr = self.m.pointer(StorageClass::Workgroup, arr);
        self.m.variable(ptr, StorageClass::Workgroup)
    }

    /// An `Input` built-in of `lanes` u32s.
    fn input(&mut self, b: BuiltIn, lanes: u8) -> Word {
        let ty = self.m.ty(Ty {
            scalar: Scalar::U32,
            lanes,
        });
        let ptr = self.m.pointer(StorageClass::Input, ty);
        let var = self.m.variable(ptr, StorageClass::Input);
        self.m.decorate(var, Decoration::BuiltIn, &[b as u32]);
        var
    }

    /// Renders the module's words.
    pub(crate) fn write(mut self) -> Result<Vec<u32>> {
        let func = self.m.fresh();
        self.m.name(func, &self.k.name);
        let entry = self.m.fresh();
        self.m.begin(entry);
        let k = self.k;
        self.block(&k.body)?;
        self.m.exec(Op::Return, vec![]);
        // SPIR-V 1.3 lists the `Input` variables; 1.4 and later every global variable.
        let all = self.t.spirv_version >= (1, 4);
        let interface = self
            .m
            .vars
            .iter()
            .filter(|(_, c)| all || *c == StorageClass::Input)
            .map(|(v, _)| *v)
            .collect();
        let module = self
            .m
            .finish(self.t.spirv_version, func, &k.name, k.workgroup, interface);
        Ok(module.assemble())
    }

    /// The id of `v`.
    pub(crate) fn val(&self, v: Val) -> Word {
        self.vals.get(&v).copied().unwrap_or(0)
    }

    /// Binds `v` to `w`.
    pub(crate) fn set(&mut self, v: Val, w: Word) {
        self.vals.insert(v, w);
    }

    /// The type of `v`.
    pub(crate) fn ty(&self, v: Val) -> Ty {
        self.k.types[v]
    }

    /// An `Unsupported` error for this kernel and target.
    pub(crate) fn unsupported(&self, what: String) -> SpirvError {
        SpirvError::Unsupported {
            kernel: self.k.name.clone(),
            what,
            target: self.t.name.to_string(),
        }
    }

    /// Writes `insts`; with the subgroup fallback, each run of subgroup operations
    /// (`analysis::sync_run`) goes behind shared barriers.
    pub(crate) fn block(&mut self, insts: &[Inst]) -> Result<()> {
        let mut i = 0;
        while i < insts.len() {
            let run = match self.mode {
                SubgroupMode::Fallback(_) => sync_run(&insts[i..]),
                _ => 0,
            };
            if run > 0 {
                self.fallback_run(&insts[i..i + run], None)?;
                i += run;
            } else {
                self.inst(&insts[i])?;
                i += 1;
            }
        }
        Ok(())
    }

    fn inst(&mut self, i: &Inst) -> Result<()> {
        match i {
            Inst::Let(v, e) => {
                let w = self.expr(*v, e, None)?;
                self.set(*v, w);
            }
            Inst::Store { mem, index, value } => self.store(*mem, *index, *value),
            Inst::Atomic {
                op,
                mem,
                index,
                value,
                old,
            } => {
                let w = self.atomic(*op, *mem, *index, *value)?;
                if let Some(o) = old {
                    self.set(*o, w);
                }
            }
            Inst::Barrier => self.barrier(SEM_ALL),
            Inst::Fence => self.fence(),
            // SPIR-V has neither prefetches nor dependent launches: the hints are dropped, and
            // a dispatch starts after the one before it has finished (the barrier between
            // them), so the grid wait is met before the kernel starts.
            Inst::Prefetch { .. } | Inst::LaunchDependents | Inst::GridWait { .. } => {}
            // `render` removes clusters first (`poot_kir::without_clusters`).
            Inst::Clustered { .. }
            | Inst::ClusterArrive { .. }
            | Inst::ClusterWait
            | Inst::StoreRemote { .. } => {
                return Err(self.unsupported("thread-block clusters".into()));
            }
            // `render` removes matrices first (`poot_kir::without_matrix`).
            Inst::Matrix { .. } => {
                return Err(self.unsupported("matrix multiply-accumulate".into()));
            }
            Inst::Trap(code) => self.trap(*code),
            Inst::If {
                cond,
                then,
                then_yield,
                els,
                else_yield,
                results,
            } => {
                if matches!(self.mode, SubgroupMode::Fallback(_)) && inst_has_sync(i) {
                    self.guarded_if(None, i)?;
                } else {
                    self.if_else(*cond, then, then_yield, els, else_yield, results)?;
                }
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
            } => self.for_loop(*var, *start, *end, *step, carried, body, yields, results)?,
        }
        Ok(())
    }

    /// A plain structured `if`.
    fn if_else(
        &mut self,
        cond: Val,
        then: &[Inst],
        then_yield: &[Val],
        els: &[Inst],
        else_yield: &[Val],
        results: &[Val],
    ) -> Result<()> {
        let has_else = !els.is_empty() || !results.is_empty();
        let (then_l, merge) = (self.m.fresh(), self.m.fresh());
        let else_l = if has_else { self.m.fresh() } else { merge };
        let c = self.val(cond);
        self.selection(merge);
        self.m
            .exec(Op::BranchConditional, vec![id(c), id(then_l), id(else_l)]);
        self.m.begin(then_l);
        self.block(then)?;
        let ty: Vec<Word> = then_yield.iter().map(|v| self.val(*v)).collect();
        let then_end = self.m.current();
        self.branch(merge);
        let (mut ey, mut else_end) = (Vec::new(), 0);
        if has_else {
            self.m.begin(else_l);
            self.block(els)?;
            ey = else_yield.iter().map(|v| self.val(*v)).collect();
            else_end = self.m.current();
            self.branch(merge);
        }
        self.m.begin(merge);
        for ((r, a), b) in results.iter().zip(ty).zip(ey) {
            let t = self.m.ty(self.ty(*r));
            let (p, _) = self.m.phi(t, &[(a, then_end), (b, else_end)]);
            self.set(*r, p);
        }
        Ok(())
    }

    /// `OpSelectionMerge merge None`.
    pub(crate) fn selection(&mut self, merge: Word) {
        self.m.exec(
            Op::SelectionMerge,
            vec![id(merge), Operand::SelectionControl(SelectionControl::NONE)],
        );
    }

    /// `OpBranch to`.
    pub(crate) fn branch(&mut self, to: Word) {
        self.m.exec(Op::Branch, vec![id(to)]);
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
        let pre = self.m.current();
        let [header, body_l, cont, merge] = [(); 4].map(|_| self.m.fresh());
        self.branch(header);
        self.m.begin(header);
        let u = self.m.scalar(Scalar::U32);
        let (v, var_at) = self.m.phi(u, &[(self.val(start), pre), (0, 0)]);
        self.set(var, v);
        let mut carried_at = Vec::with_capacity(carried.len());
        for c in carried {
            let t = self.m.ty(self.ty(c.param));
            let (p, at) = self.m.phi(t, &[(self.val(c.init), pre), (0, 0)]);
            self.set(c.param, p);
            carried_at.push((p, at));
        }
        let b = self.m.scalar(Scalar::Bool);
        let e = self.val(end);
        let go = self.m.ids(Op::ULessThan, b, &[v, e]);
        self.m.exec(
            Op::LoopMerge,
            vec![
                id(merge),
                id(cont),
                Operand::LoopControl(rspirv::spirv::LoopControl::NONE),
            ],
        );
        self.m
            .exec(Op::BranchConditional, vec![id(go), id(body_l), id(merge)]);
        self.m.begin(body_l);
        self.block(body)?;
        let ys: Vec<Word> = yields.iter().map(|y| self.val(*y)).collect();
        self.branch(cont);
        self.m.begin(cont);
        let s = self.m.u32(step);
        let next = if step == 1 {
            // `var < end <= u32::MAX`, so `var + 1` cannot wrap.
            self.m.ids(Op::IAdd, u, &[v, s])
        } else {
            let left = self.m.ids(Op::ISub, u, &[e, v]);
            let last = self.m.ids(Op::ULessThanEqual, b, &[left, s]);
            let inc = self.m.ids(Op::IAdd, u, &[v, s]);
            self.m.ids(Op::Select, u, &[last, e, inc])
        };
        self.branch(header);
        self.m.patch_phi(var_at, 1, next, cont);
        for ((_, at), y) in carried_at.iter().zip(&ys) {
            self.m.patch_phi(*at, 1, *y, cont);
        }
        self.m.begin(merge);
        for (r, (p, _)) in results.iter().zip(carried_at) {
            self.set(*r, p);
        }
        Ok(())
    }

    /// `OpControlBarrier` at work-group scope with memory semantics `sem`.
    pub(crate) fn barrier(&mut self, sem: u32) {
        let scope = self.m.u32(Scope::Workgroup as u32);
        let sem = self.m.u32(sem);
        self.m.exec(
            Op::ControlBarrier,
            vec![
                Operand::IdScope(scope),
                Operand::IdScope(scope),
                Operand::IdMemorySemantics(sem),
            ],
        );
    }

    /// A barrier ordering only the fallback's scratch.
    pub(crate) fn scratch_barrier(&mut self) {
        self.barrier(SEM_SHARED);
    }

    fn trap(&mut self, code: u32) {
        let u = self.m.scalar(Scalar::U32);
        let zero = self.m.u32(0);
        let ptr_t = self.m.pointer(StorageClass::StorageBuffer, u);
        let ptr = self
            .m
            .ids(Op::AccessChain, ptr_t, &[self.error, zero, zero]);
        let device = self.m.u32(Scope::Device as u32);
        let code = self.m.u32(code);
        self.m.op(
            Op::AtomicOr,
            u,
            vec![
                id(ptr),
                Operand::IdScope(device),
                Operand::IdMemorySemantics(zero),
                id(code),
            ],
        );
        if self.trap_returns {
            let (ret, after) = (self.m.fresh(), self.m.fresh());
            let yes = self.m.bool(true);
            self.selection(after);
            self.m
                .exec(Op::BranchConditional, vec![id(yes), id(ret), id(after)]);
            self.m.begin(ret);
            self.m.exec(Op::Return, vec![]);
            self.m.begin(after);
        }
    }

    /// A pointer to element `index` (a u32 id) of `mem`, its element type and storage class.
    pub(crate) fn element(&mut self, mem: Mem, index: Word) -> (Word, Scalar, StorageClass) {
        let (var, elem, class) = match mem {
            Mem::Param(i) => (
                self.params[i as usize],
                self.k.params[i as usize].elem,
                StorageClass::StorageBuffer,
            ),
            Mem::Shared(i) => (
                self.shared[i as usize],
                self.k.shared[i as usize].elem,
                StorageClass::Workgroup,
            ),
        };
        let e = self.m.scalar(elem);
        let ptr_t = self.m.pointer(class, e);
        let lanes = match mem {
            Mem::Param(i) => self.lanes[i as usize],
            Mem::Shared(_) => 1,
        };
        let ptr = match class {
            StorageClass::StorageBuffer if lanes > 1 => {
                // Component `index % lanes` of vector `index / lanes`.
                let at = self.vector_index(index, lanes);
                let u = self.m.scalar(Scalar::U32);
                let mask = self.m.u32(u32::from(lanes) - 1);
                let c = self.m.ids(Op::BitwiseAnd, u, &[index, mask]);
                let zero = self.m.u32(0);
                self.m.ids(Op::AccessChain, ptr_t, &[var, zero, at, c])
            }
            StorageClass::StorageBuffer => {
                let zero = self.m.u32(0);
                self.m.ids(Op::AccessChain, ptr_t, &[var, zero, index])
            }
            _ => self.m.ids(Op::AccessChain, ptr_t, &[var, index]),
        };
        (ptr, elem, class)
    }

    /// `index + j` for lane `j` of a vector access.
    fn lane_index(&mut self, index: Word, j: u8) -> Word {
        if j == 0 {
            return index;
        }
        let u = self.m.scalar(Scalar::U32);
        let off = self.m.u32(u32::from(j));
        self.m.ids(Op::IAdd, u, &[index, off])
    }

    /// `index / lanes` (`lanes` a power of two): the vector holding element `index`.
    fn vector_index(&mut self, index: Word, lanes: u8) -> Word {
        let u = self.m.scalar(Scalar::U32);
        let shift = self.m.u32(u32::from(lanes).trailing_zeros());
        self.m.ids(Op::ShiftRightLogical, u, &[index, shift])
    }

    /// The pointer to the vector of `lanes` elements of parameter `mem` at (aligned) element
    /// `index` with the vector's type, where the parameter is an array of such vectors.
    fn vector_ptr(&mut self, mem: Mem, index: Word, lanes: u8) -> Option<(Word, Word)> {
        let Mem::Param(i) = mem else { return None };
        if lanes == 1 || self.lanes[i as usize] != lanes {
            return None;
        }
        let var = self.params[i as usize];
        let t = self.m.ty(Ty {
            scalar: self.k.params[i as usize].elem,
            lanes,
        });
        let at = self.vector_index(index, lanes);
        let ptr_t = self.m.pointer(StorageClass::StorageBuffer, t);
        let zero = self.m.u32(0);
        let ptr = self.m.ids(Op::AccessChain, ptr_t, &[var, zero, at]);
        Some((ptr, t))
    }

    /// `lanes` consecutive elements of `mem` from `index`, as one value.
    pub(crate) fn load(&mut self, mem: Mem, index: Val, lanes: u8) -> Word {
        let base = self.val(index);
        if let Some((ptr, t)) = self.vector_ptr(mem, base, lanes) {
            return self.m.ids(Op::Load, t, &[ptr]);
        }
        let mut parts = Vec::with_capacity(lanes as usize);
        let mut elem = Scalar::U32;
        for j in 0..lanes {
            let i = self.lane_index(base, j);
            let (ptr, e, _) = self.element(mem, i);
            elem = e;
            let t = self.m.scalar(e);
            parts.push(self.m.ids(Op::Load, t, &[ptr]));
        }
        if lanes == 1 {
            return parts[0];
        }
        let t = self.m.ty(Ty {
            scalar: elem,
            lanes,
        });
        self.m.ids(Op::CompositeConstruct, t, &parts)
    }

    fn store(&mut self, mem: Mem, index: Val, value: Val) {
        let base = self.val(index);
        let (v, t) = (self.val(value), self.ty(value));
        if let Some((ptr, _)) = self.vector_ptr(mem, base, t.lanes) {
            self.m.exec(Op::Store, vec![id(ptr), id(v)]);
            return;
        }
        for j in 0..t.lanes {
            let i = self.lane_index(base, j);
            let (ptr, e, _) = self.element(mem, i);
            let x = if t.lanes == 1 {
                v
            } else {
                let s = self.m.scalar(e);
                self.m.op(
                    Op::CompositeExtract,
                    s,
                    vec![id(v), Operand::LiteralBit32(u32::from(j))],
                )
            };
            self.m.exec(Op::Store, vec![id(ptr), id(x)]);
        }
    }

    /// A device-scope acquire-release memory barrier over buffer memory.
    fn fence(&mut self) {
        let scope = self.m.u32(Scope::Device as u32);
        let sem = self.m.u32(SEM_BUFFERS);
        self.m.exec(
            Op::MemoryBarrier,
            vec![Operand::IdScope(scope), Operand::IdMemorySemantics(sem)],
        );
    }

    /// The atomic's result id (the element's old value).
    fn atomic(&mut self, op: ReduceOp, mem: Mem, index: Val, value: Val) -> Result<Word> {
        let s = self.ty(value).scalar;
        let code = match (op, s) {
            (ReduceOp::Add, Scalar::F32)
                if match mem {
                    Mem::Param(_) => self.t.atomic_float_add,
                    Mem::Shared(_) => self.t.shared_atomic_float_add,
                } =>
            {
                self.m.capability(Capability::AtomicFloat32AddEXT);
                self.m.extension("SPV_EXT_shader_atomic_float_add");
                Op::AtomicFAddEXT
            }
            (ReduceOp::Add, Scalar::I32 | Scalar::U32) => Op::AtomicIAdd,
            (ReduceOp::Max, Scalar::I32) => Op::AtomicSMax,
            (ReduceOp::Max, Scalar::U32) => Op::AtomicUMax,
            (ReduceOp::Min, Scalar::I32) => Op::AtomicSMin,
            (ReduceOp::Min, Scalar::U32) => Op::AtomicUMin,
            (ReduceOp::Or, Scalar::I32 | Scalar::U32) => Op::AtomicOr,
            _ => {
                let name = match mem {
                    Mem::Param(i) => format!("p{i}"),
                    Mem::Shared(i) => format!("s{i}"),
                };
                return Err(self.unsupported(format!(
                    "atomic {} of {value} on {s} memory {name}",
                    op.name()
                )));
            }
        };
        let (ptr, e, class) = self.element(mem, self.val(index));
        let scope = match class {
            StorageClass::Workgroup => Scope::Workgroup,
            _ => Scope::Device,
        };
        let scope = self.m.u32(scope as u32);
        let relaxed = self.m.u32(0);
        let t = self.m.scalar(e);
        let v = self.val(value);
        Ok(self.m.op(
            code,
            t,
            vec![
                id(ptr),
                Operand::IdScope(scope),
                Operand::IdMemorySemantics(relaxed),
                id(v),
            ],
        ))
    }

    /// A thread coordinate.
    pub(crate) fn special(&mut self, s: Special) -> Word {
        let u = self.m.scalar(Scalar::U32);
        let uvec3 = self.m.ty(Ty {
            scalar: Scalar::U32,
            lanes: 3,
        });
        let component = |w: &mut Writer, var: Option<Word>, c: u32| {
            let v = w.m.ids(Op::Load, uvec3, &[var.unwrap_or(0)]);
            w.m.op(
                Op::CompositeExtract,
                u,
                vec![id(v), Operand::LiteralBit32(c)],
            )
        };
        match s {
            Special::LocalX => component(self, self.builtins.local_id, 0),
            Special::LocalY => component(self, self.builtins.local_id, 1),
            Special::GroupX => component(self, self.builtins.group_id, 0),
            Special::GroupY => component(self, self.builtins.group_id, 1),
            Special::GroupZ => component(self, self.builtins.group_id, 2),
            Special::Lane => match self.mode {
                SubgroupMode::Single => self.m.u32(0),
                SubgroupMode::Native(_) if self.builtins.subgroup_lane.is_some() => {
                    let var = self.builtins.subgroup_lane.unwrap_or(0);
                    self.m.ids(Op::Load, u, &[var])
                }
                SubgroupMode::Native(w) | SubgroupMode::Fallback(w) => {
                    let i = self.local_index();
                    let mask = self.m.u32(w - 1);
                    self.m.ids(Op::BitwiseAnd, u, &[i, mask])
                }
            },
        }
    }

    /// The local linear invocation index (fallback only).
    pub(crate) fn local_index(&mut self) -> Word {
        let u = self.m.scalar(Scalar::U32);
        let var = self.builtins.local_index.unwrap_or(0);
        self.m.ids(Op::Load, u, &[var])
    }

    /// A constant of `c`'s type, splatted to `lanes`.
    pub(crate) fn konst(&mut self, c: Const, lanes: u8) -> Word {
        let s = c.ty().scalar;
        if let Const::F32(bits) = c
            && !f32::from_bits(bits).is_finite()
        {
            // naga (the wgpu path) refuses NaN and infinite literals: make the value from its
            // bits where it is used.
            let u = self.m.u32(bits);
            let f = self.m.scalar(Scalar::F32);
            let w = self.m.ids(Op::Bitcast, f, &[u]);
            if lanes == 1 {
                return w;
            }
            let t = self.m.ty(Ty { scalar: s, lanes });
            return self
                .m
                .ids(Op::CompositeConstruct, t, &vec![w; lanes as usize]);
        }
        let w = match c {
            Const::Bool(b) => self.m.bool(b),
            Const::F32(bits) | Const::U32(bits) => {
                let t = self.m.scalar(s);
                self.m.const32(t, bits)
            }
            Const::I32(x) => {
                let t = self.m.scalar(s);
                self.m.const32(t, x as u32)
            }
        };
        if lanes == 1 {
            return w;
        }
        let t = self.m.ty(Ty { scalar: s, lanes });
        self.m.composite(t, vec![w; lanes as usize])
    }
}
