//! Lowering: a verified, optimized graph becomes kernels and the dispatch list that runs them.
//!
//! Invariants: `place` decides what is fused (see `place`); every value with a kernel gets
//! exactly one (a decode step's cache update read only by its attention is written by that
//! attention), emitted in node order so each dispatch runs after every producer it reads;
//! each dispatch prefetches the next one's weights (`prefetch`); identical kernels (same
//! text) are shared; every emitted kernel passes `poot_kir::verify`; a parameter a kernel
//! reads before its grid wait is bound to memory no other dispatch of the entry writes (a
//! weight, a table, a slot, a state only that dispatch writes), so reading it while the
//! previous dispatch runs is safe (`check_early`).

mod attention;
mod blocks;
mod expr;
mod gemm;
mod kernels;
pub mod layout;
mod matmul;
mod matmul_shape;
mod merge;
mod place;
mod prefetch;
mod quant;
mod reduce;
mod stage;
mod tables;

pub use expr::{Buf, TRAP_CACHE_OVERFLOW, TRAP_GATHER};
pub use tables::Tables;

use crate::{CompileError, Result};
use expr::Emit;
pub use gemm::{Products, TileForm};
use place::{Place, Placement, match_attention, unsupported};
use poot_ir::{Graph, Op, Value};
use poot_kir::{Access, Kernel, KernelBuilder};
use std::collections::{BTreeMap, HashMap, HashSet};

/// What the target offers the lowering (capabilities as data).
#[derive(Clone, Copy, Debug)]
pub struct LowerTarget {
    /// Subgroup width the kernels may assume.
    pub subgroup: u32,
}

/// One kernel launch of a program.
#[derive(Clone, Debug)]
pub struct Dispatch {
    /// Index into `Program::kernels`.
    pub kernel: usize,
    /// Work-groups.
    pub grid: [u32; 3],
    /// The buffer bound to each kernel parameter, and how the kernel uses it.
    pub args: Vec<(Buf, Access)>,
    /// Bytes the dispatch reads.
    pub work: u64,
    /// Words of the counters region the dispatch uses, from word 0 (`Buf::Counters`).
    pub counters: usize,
    /// How each tiled matmul the dispatch runs computes, in the order of its merged members
    /// (none for the other kernels): what a report or a test reads to know which form a
    /// shape reaches.
    pub tiles: Vec<TileForm>,
}

/// A lowered step.
pub struct Program {
    /// The graph it computes.
    pub graph: Graph,
    /// Distinct kernels.
    pub kernels: Vec<Kernel>,
    /// Launches, in order.
    pub dispatches: Vec<Dispatch>,
    /// Bytes of each kernel-private scratch buffer.
    pub scratch: BTreeMap<Buf, u64>,
    /// Words of the counters region (`Buf::Counters`) the dispatches use (the most any one
    /// uses).
    pub counters: usize,
    /// Each output's buffer.
    pub outputs: Vec<(String, Buf)>,
    /// Each carried state's buffer after the step (updated in place).
    pub states: Vec<(String, Buf)>,
}

struct Builder<'t> {
    target: LowerTarget,
    tables: &'t mut Tables,
    kernels: Vec<Kernel>,
    by_text: HashMap<String, usize>,
    dispatches: Vec<Dispatch>,
    scratch: BTreeMap<Buf, u64>,
}

impl Builder<'_> {
    fn emit(
        &mut self,
        g: &Graph,
        pl: &Placement,
        kind: &str,
        wg: u32,
        body: impl FnOnce(&mut Emit) -> Result<kernels::Launch>,
    ) -> Result<()> {
        let kb = KernelBuilder::new(kind, [wg, 1, 1], self.target.subgroup);
        let mut e = Emit::new(g, pl, self.tables, kb);
        let launch = body(&mut e)?;
        let params = e.params.clone();
        let mut k = e.kb.finish();
        let access: Vec<Access> = k.params.iter().map(|p| p.access).collect();
        let text = poot_kir::print(&k);
        let index = match self.by_text.get(&text) {
            Some(&i) => i,
            None => {
                k.name = format!("{kind}_{}", self.kernels.len());
                poot_kir::verify(&k)
                    .map_err(|e| CompileError::Lower(format!("{e}\n{}", poot_kir::print(&k))))?;
                self.kernels.push(k);
                self.by_text.insert(text, self.kernels.len() - 1);
                self.kernels.len() - 1
            }
        };
        for (i, bytes) in launch.scratch.iter().enumerate() {
            if let Some(Buf::Scratch(v, _)) = params
                .iter()
                .find(|b| matches!(b, Buf::Scratch(_, j) if *j == i as u32))
            {
                self.scratch.insert(Buf::Scratch(*v, i as u32), *bytes);
            }
        }
        self.dispatches.push(Dispatch {
            kernel: index,
            grid: launch.grid,
            args: params.into_iter().zip(access).collect(),
            work: launch.work,
            counters: launch.counters,
            tiles: launch.tiles,
        });
        Ok(())
    }

    /// The kernel of one or two matmuls `mms` of one input computing `root`: tiled for many
    /// input rows (`gemm::applies`), the GEMV template otherwise.
    fn emit_matmul(&mut self, g: &Graph, pl: &Placement, root: Value, mms: &[Value]) -> Result<()> {
        let dual = if mms.len() > 1 { "dual_" } else { "" };
        if gemm::applies(g, mms[0]) {
            let side = gemm::side_by_side(g, pl, mms);
            self.emit(g, pl, &format!("{dual}gemm"), gemm::THREADS as u32, |e| {
                gemm::gemm(e, root, mms, side)
            })
        } else {
            let sub = self.target.subgroup;
            self.emit(
                g,
                pl,
                &format!("{dual}matmul"),
                matmul_shape::MM_WARPS as u32 * sub,
                |e| matmul::matmul(e, root, mms, sub),
            )
        }
    }
}

/// Lowers `g` (verified and optimized) for `target`, adding any tables it needs to `tables`.
pub fn lower(g: &Graph, target: LowerTarget, tables: &mut Tables) -> Result<Program> {
    poot_ir::verify(g)?;
    let pl = place::place(g)?;
    let sub = target.subgroup;
    let mut b = Builder {
        target,
        tables,
        kernels: Vec::new(),
        by_text: HashMap::new(),
        dispatches: Vec::new(),
        scratch: BTreeMap::new(),
    };
    // Each attention, with the decode cache update that only it reads (written by it).
    let mut attns = HashMap::new();
    let mut written: HashSet<Value> = HashSet::new();
    for (v, n) in g.nodes.iter() {
        if n.op == Op::AttnMix {
            let (a, _) =
                match_attention(g, &pl.users, v).ok_or_else(|| unsupported(g, v, "attention"))?;
            let w = attention::match_kv_write(g, &pl.users, &a);
            if w.is_some() {
                written.extend([a.k, a.v]);
            }
            attns.insert(v, (a, w));
        }
    }
    // Each argmax with the `any_nonfinite` of the same input, which its kernel computes too.
    let mut flag_of: HashMap<Value, Value> = HashMap::new();
    for (f, n) in g.nodes.iter() {
        if n.op == Op::AnyNonFinite
            && pl.place[f] == Place::Buffer
            && let Some((a, _)) = g.nodes.iter().find(|(a, m)| {
                matches!(m.op, Op::ArgMax { axis } if axis + 1 == g.ty(n.args[0]).shape.rank())
                    && m.args[0] == n.args[0]
                    && pl.place[*a] == Place::Buffer
                    && !flag_of.contains_key(a)
            })
        {
            flag_of.insert(a, f);
        }
    }
    let flagged: HashSet<Value> = flag_of.values().copied().collect();
    for (v, n) in g.nodes.iter() {
        let fused_mm: Vec<Value> = g
            .nodes
            .keys()
            .filter(|&m| pl.place[m] == Place::Fused(v) && g.nodes[m].op == Op::MatMul)
            .collect();
        match (&n.op, pl.place[v]) {
            (Op::DynamicUpdateSlice { .. }, _) if written.contains(&v) => {}
            (Op::DynamicUpdateSlice { axis }, _) => {
                let axis = *axis;
                b.emit(g, &pl, "update_slice", 256, |e| {
                    kernels::update_slice(e, v, axis)
                })?
            }
            (Op::ScatterUpdate, _) => b.emit(g, &pl, "scatter", 256, |e| kernels::scatter(e, v))?,
            (_, Place::Buffer) => match &n.op {
                Op::MatMul => b.emit_matmul(g, &pl, v, &[v])?,
                _ if !fused_mm.is_empty() => b.emit_matmul(g, &pl, v, &fused_mm)?,
                Op::Gather if matches!(g.nodes[n.args[0]].op, Op::Weight(_)) => {
                    b.emit(g, &pl, "gather", 256, |e| kernels::gather_rows(e, v))?
                }
                Op::RmsNorm { eps } => {
                    let eps = eps.0;
                    b.emit(g, &pl, "rms_norm", 256, |e| {
                        kernels::rms_norm(e, v, eps, sub)
                    })?
                }
                Op::ArgMax { axis } if *axis + 1 == g.ty(n.args[0]).shape.rank() => {
                    let flag = flag_of.get(&v).copied();
                    b.emit(g, &pl, "argmax", reduce::RED_THREADS as u32, |e| {
                        reduce::argmax(e, v, flag, sub)
                    })?
                }
                Op::AnyNonFinite if flagged.contains(&v) => {}
                Op::AnyNonFinite => {
                    b.emit(g, &pl, "any_nonfinite", reduce::RED_THREADS as u32, |e| {
                        reduce::any_nonfinite(e, v, sub)
                    })?
                }
                Op::AttnMix => {
                    let (a, w) = &attns[&v];
                    b.emit(
                        g,
                        &pl,
                        "attention",
                        attention::ATT_WARPS as u32 * sub,
                        |e| attention::attention(e, v, a, w.as_ref(), sub),
                    )?
                }
                Op::Unary(_)
                | Op::Binary(_)
                | Op::Compare(_)
                | Op::Select
                | Op::Cast
                | Op::Rope { .. }
                | Op::Gather
                | Op::Reshape => {
                    b.emit(g, &pl, "elementwise", 256, |e| kernels::elementwise(e, v))?
                }
                _ => return Err(unsupported(g, v, n.op.name())),
            },
            _ => {}
        }
    }
    // Horizontal fusion, each dispatch's prefetch of the next one's weights, then share equal
    // kernels again.
    let merged = prefetch::add(g, merge::merge(&b.kernels, &b.dispatches));
    let mut kernels: Vec<Kernel> = Vec::new();
    let mut by_text: HashMap<String, usize> = HashMap::new();
    let mut dispatches = Vec::with_capacity(merged.len());
    for (mut k, mut d) in merged {
        let name = std::mem::take(&mut k.name);
        let text = poot_kir::print(&k);
        let index = match by_text.get(&text) {
            Some(&i) => i,
            None => {
                let kind = name
                    .rsplit_once('_')
                    .filter(|(_, n)| n.parse::<usize>().is_ok())
                    .map_or(name.as_str(), |(a, _)| a);
                k.name = format!("{kind}_{}", kernels.len());
                poot_kir::verify(&k)
                    .map_err(|e| CompileError::Lower(format!("{e}\n{}", poot_kir::print(&k))))?;
                kernels.push(k);
                by_text.insert(text, kernels.len() - 1);
                kernels.len() - 1
            }
        };
        d.kernel = index;
        dispatches.push(d);
    }
    check_early(g, &kernels, &dispatches)?;
    let counters = dispatches.iter().map(|d| d.counters).max().unwrap_or(0);
    let buf = |v: Value| -> Result<Buf> {
        pl.buffer_of(v)
            .map(Buf::Value)
            .ok_or_else(|| unsupported(g, v, "a result without a buffer"))
    };
    let outputs = g
        .outputs
        .iter()
        .map(|(n, v)| Ok((n.clone(), buf(*v)?)))
        .collect::<Result<_>>()?;
    let mut states = Vec::new();
    for (sv, name) in g.states() {
        let after = g
            .state_updates
            .iter()
            .find(|(n, _)| n == name)
            .map_or(sv, |(_, v)| *v);
        let bb = buf(after)?;
        if bb != Buf::Value(sv) {
            return Err(unsupported(g, after, "a state update that is not in place"));
        }
        states.push((name.to_string(), bb));
    }
    Ok(Program {
        graph: g.clone(),
        kernels,
        dispatches,
        scratch: b.scratch,
        counters,
        outputs,
        states,
    })
}

/// Checks that every parameter a kernel reads before its grid wait is bound, in each of
/// `dispatches`, to memory no other dispatch of the entry writes: a weight, a compile-time
/// table, a slot (written by the host before the step), or a state that this dispatch alone
/// writes (a decode attention's caches, whose other rows earlier steps wrote). Anything else
/// could be the previous dispatch's output, or scratch it shares.
fn check_early(g: &Graph, kernels: &[Kernel], dispatches: &[Dispatch]) -> Result<()> {
    for (i, d) in dispatches.iter().enumerate() {
        let k = &kernels[d.kernel];
        for p in poot_kir::early_params(&k.body) {
            let arg = d.args.get(p as usize).map(|a| a.0);
            let written_elsewhere = |b: Buf| {
                dispatches.iter().enumerate().any(|(j, o)| {
                    j != i && o.args.iter().any(|&(ob, a)| ob == b && a != Access::Read)
                })
            };
            let fixed = match arg {
                Some(Buf::Value(v)) => match g.nodes[v].op {
                    Op::Weight(_) | Op::Slot(_) => true,
                    Op::State(_) => !written_elsewhere(Buf::Value(v)),
                    _ => false,
                },
                Some(Buf::Table(_)) => true,
                _ => false,
            };
            if !fixed {
                return Err(CompileError::Lower(format!(
                    "kernel `{}` reads parameter {p} before its grid wait, but it is not bound \
                     to a weight, a table, a slot or a state no other dispatch writes",
                    k.name
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use poot_ir::{DType, RoleKind, SlotKind, Type, WeightRole};
    use poot_kir::Scalar;

    /// A kernel reading params 0..4 that lists `early` in its wait, and a dispatch binding
    /// them to a weight, a slot, a computed value (which could be the previous dispatch's
    /// output) and a state it writes; a second dispatch (a plain kernel) writes that state
    /// too where `shared_state`.
    fn case(early: Vec<u32>, shared_state: bool) -> Result<()> {
        let mut b = poot_ir::Builder::new("g");
        let role = WeightRole {
            kind: RoleKind::OutputNorm,
            layer: None,
        };
        let w = b.weight(role, Type::new(DType::F32, [4])).unwrap();
        let s = b.slot(SlotKind::Pos, Type::new(DType::I32, [1])).unwrap();
        let y = b.add(w, w).unwrap();
        let st = b.state("cache", Type::new(DType::F32, [4])).unwrap();
        let g = b.finish();
        let mut kb = KernelBuilder::new("k", [1, 1, 1], 1);
        for name in ["w", "s", "y"] {
            kb.param(name, Scalar::F32, Access::Read);
        }
        kb.param("state", Scalar::F32, Access::ReadWrite);
        kb.grid_wait(early);
        let other = KernelBuilder::new("other", [1, 1, 1], 1).finish();
        let k = kb.finish();
        let mut args: Vec<(Buf, Access)> = [w, s, y]
            .iter()
            .map(|&v| (Buf::Value(v), Access::Read))
            .collect();
        args.push((Buf::Value(st), Access::ReadWrite));
        let d = Dispatch {
            kernel: 0,
            grid: [1, 1, 1],
            args,
            work: 0,
            counters: 0,
            tiles: Vec::new(),
        };
        let writer = Dispatch {
            kernel: 1,
            args: vec![(Buf::Value(st), Access::Write)],
            ..d.clone()
        };
        let ds = if shared_state {
            vec![writer, d]
        } else {
            vec![d]
        };
        check_early(&g, &[k, other], &ds)
    }

    /// The matmul kernel of `x @ w^T` (`x` computed, `w` a weight or computed): whether it
    /// places its own grid wait.
    fn matmul_waits(computed_w: bool) -> bool {
        let mut b = poot_ir::Builder::new("g");
        let role = |kind| WeightRole { kind, layer: None };
        let a = b
            .weight(role(RoleKind::AttnQ), Type::new(DType::F32, [1, 64]))
            .unwrap();
        let w = b
            .weight(role(RoleKind::AttnK), Type::new(DType::F32, [8, 64]))
            .unwrap();
        let x = b.add(a, a).unwrap();
        let w = if computed_w { b.add(w, w).unwrap() } else { w };
        let y = b.matmul(x, w).unwrap();
        b.output("y", y);
        if computed_w {
            // An output has a buffer, which the matmul reads.
            b.output("w", w);
        }
        let g = b.finish();
        let p = lower(&g, LowerTarget { subgroup: 32 }, &mut Tables::new(1)).unwrap();
        let k = p
            .kernels
            .iter()
            .find(|k| k.name.starts_with("matmul"))
            .expect("a matmul kernel");
        poot_kir::has_wait(&k.body)
    }

    #[test]
    fn a_matmul_loads_early_only_from_weights() {
        assert!(matmul_waits(false));
        assert!(!matmul_waits(true));
    }

    #[test]
    fn only_weights_tables_slots_and_own_states_are_read_before_the_wait() {
        case(vec![0, 1], false).unwrap();
        case(vec![0, 1, 3], false).unwrap();
        let e = case(vec![0, 2], false).unwrap_err().to_string();
        assert!(
            e.contains("kernel `k` reads parameter 2 before its grid wait, but it is not bound"),
            "{e}"
        );
        let e = case(vec![3], true).unwrap_err().to_string();
        assert!(
            e.contains("kernel `k` reads parameter 3 before its grid wait, but it is not bound"),
            "{e}"
        );
    }
}
