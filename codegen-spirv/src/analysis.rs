//! Facts about a kernel the writer needs before (or while) it emits code: which built-ins and
//! global arrays it touches, whether it synchronises the work-group, and which values a tail
//! of a block still reads.
//!
//! Invariant: every function here is a pure walk of the kir tree, in statement order.

use poot_kir::{Expr, Inst, Kernel, Mem, Special, Val};
use std::collections::HashSet;

/// True for a subgroup operation (what the shared-memory fallback turns into barriers).
pub(crate) fn is_sync(e: &Expr) -> bool {
    matches!(e, Expr::SubgroupReduce(..) | Expr::ShuffleXor(..))
}

/// True when `insts` contain a subgroup operation at any depth.
pub(crate) fn has_sync(insts: &[Inst]) -> bool {
    insts.iter().any(inst_has_sync)
}

/// True when `i` is or contains a subgroup operation.
pub(crate) fn inst_has_sync(i: &Inst) -> bool {
    match i {
        Inst::Let(_, e) => is_sync(e),
        Inst::If { then, els, .. } => has_sync(then) || has_sync(els),
        Inst::For { body, .. } => has_sync(body),
        _ => false,
    }
}

/// How many statements the run of subgroup operations at the start of `insts` takes:
/// consecutive `let`s of subgroup operations, none reading a value an earlier one of the run
/// defines, so the shared-memory fallback can publish them all behind one barrier.
pub(crate) fn sync_run(insts: &[Inst]) -> usize {
    let mut defined: HashSet<Val> = HashSet::new();
    for (n, i) in insts.iter().enumerate() {
        match i {
            Inst::Let(v, e) if is_sync(e) && e.operands().iter().all(|a| !defined.contains(a)) => {
                defined.insert(*v);
            }
            _ => return n,
        }
    }
    insts.len()
}

/// The most scratch words one run of subgroup operations (`sync_run`) of `k` publishes: a
/// component of a vector operand each.
pub(crate) fn widest_run(k: &Kernel) -> u32 {
    fn walk(k: &Kernel, insts: &[Inst], most: &mut u32) {
        let mut i = 0;
        while i < insts.len() {
            let n = sync_run(&insts[i..]);
            let words: u32 = insts[i..i + n]
                .iter()
                .filter_map(|s| match s {
                    Inst::Let(_, e) => e.operands().first().map(|a| u32::from(k.types[*a].lanes)),
                    _ => None,
                })
                .sum();
            *most = (*most).max(words);
            match &insts[i] {
                Inst::If { then, els, .. } => {
                    walk(k, then, most);
                    walk(k, els, most);
                }
                Inst::For { body, .. } => walk(k, body, most),
                _ => {}
            }
            i += n.max(1);
        }
    }
    let mut most = 0;
    walk(k, &k.body, &mut most);
    most
}

/// What a kernel uses, collected in one walk.
#[derive(Default)]
pub(crate) struct Features {
    /// A kir `barrier` anywhere.
    pub barrier: bool,
    /// A `trap` anywhere.
    pub trap: bool,
    /// A subgroup operation anywhere.
    pub sync: bool,
    /// Thread coordinates read.
    pub specials: HashSet<Special>,
}

impl Features {
    /// The features of `insts`.
    pub(crate) fn of(insts: &[Inst]) -> Features {
        let mut f = Features::default();
        f.walk(insts);
        f
    }

    fn walk(&mut self, insts: &[Inst]) {
        for i in insts {
            match i {
                Inst::Let(_, Expr::Special(s)) => {
                    self.specials.insert(*s);
                }
                Inst::Let(_, e) => self.sync |= is_sync(e),
                Inst::Barrier => self.barrier = true,
                Inst::Trap(_) => self.trap = true,
                Inst::If { then, els, .. } => {
                    self.walk(then);
                    self.walk(els);
                }
                Inst::For { body, .. } => self.walk(body),
                Inst::Store { .. }
                | Inst::Atomic { .. }
                | Inst::Fence
                | Inst::Prefetch { .. }
                | Inst::LaunchDependents
                | Inst::GridWait { .. } => {}
                // `render` removes clusters and matrices first (`poot_kir::without_clusters`,
                // `without_matrix`).
                Inst::Clustered { .. }
                | Inst::Matrix { .. }
                | Inst::ClusterArrive { .. }
                | Inst::ClusterWait
                | Inst::StoreRemote { .. } => {}
            }
        }
    }
}

/// Adds every value `insts` read (at any depth, yields included) to `out`.
pub(crate) fn uses(insts: &[Inst], out: &mut HashSet<Val>) {
    for i in insts {
        match i {
            Inst::Let(_, e) => out.extend(e.operands()),
            Inst::Store { index, value, .. } | Inst::Atomic { index, value, .. } => {
                out.extend([*index, *value]);
            }
            Inst::Prefetch { index, count, .. } => out.extend([*index, *count]),
            Inst::Barrier
            | Inst::Fence
            | Inst::Trap(_)
            | Inst::LaunchDependents
            | Inst::GridWait { .. } => {}
            // `render` removes clusters and matrices first (`poot_kir::without_clusters`,
            // `without_matrix`).
            Inst::Clustered { .. }
            | Inst::Matrix { .. }
            | Inst::ClusterArrive { .. }
            | Inst::ClusterWait
            | Inst::StoreRemote { .. } => {}
            Inst::If {
                cond,
                then,
                then_yield,
                els,
                else_yield,
                ..
            } => {
                out.insert(*cond);
                uses(then, out);
                uses(els, out);
                out.extend(then_yield.iter().chain(else_yield).copied());
            }
            Inst::For {
                start,
                end,
                carried,
                body,
                yields,
                ..
            } => {
                out.extend([*start, *end]);
                out.extend(carried.iter().map(|c| c.init));
                uses(body, out);
                out.extend(yields.iter().copied());
            }
        }
    }
}

/// The values a statement defines in its own block (a `let`, or an `if`'s or `for`'s results).
pub(crate) fn defs(i: &Inst) -> Vec<Val> {
    match i {
        Inst::Let(v, _) => vec![*v],
        Inst::If { results, .. } | Inst::For { results, .. } => results.clone(),
        _ => Vec::new(),
    }
}

/// Per parameter of `k`, the lanes of the elements its array is declared with: the widest
/// of its loads and stores (1, 2 or 4 lanes), or 1 where it has atomics (which need scalar
/// elements).
pub(crate) fn element_lanes(k: &Kernel) -> Vec<u8> {
    // The widest access of each parameter so far (1 before any), 0 once it has an atomic.
    fn walk(k: &Kernel, insts: &[Inst], out: &mut [u8]) {
        for i in insts {
            let (p, lanes) = match i {
                Inst::Let(_, Expr::Load(Mem::Param(p), _, lanes)) => (*p, *lanes),
                Inst::Store {
                    mem: Mem::Param(p),
                    value,
                    ..
                } => (*p, k.types[*value].lanes),
                Inst::Atomic {
                    mem: Mem::Param(p), ..
                } => (*p, 0),
                Inst::If { then, els, .. } => {
                    walk(k, then, out);
                    walk(k, els, out);
                    continue;
                }
                Inst::For { body, .. } => {
                    walk(k, body, out);
                    continue;
                }
                _ => continue,
            };
            if let Some(w) = out.get_mut(p as usize) {
                *w = if lanes == 0 || *w == 0 {
                    0
                } else {
                    (*w).max(lanes)
                };
            }
        }
    }
    let mut out = vec![1; k.params.len()];
    walk(k, &k.body, &mut out);
    out.into_iter().map(|w| w.max(1)).collect()
}
