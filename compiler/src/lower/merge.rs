//! Horizontal fusion: adjacent independent dispatches become one.
//!
//! Invariants: dispatches merge only when they have the same work-group size and the same
//! grid in y and z, and none writes a buffer another reads or writes; the merged kernel runs
//! member `j` in the work-groups `[start_j, start_j + grid_j.x)` of x, where it sees its own
//! work-group index exactly as before, so each member computes what it computed alone.
//! Branches are uniform per work-group, so barriers and subgroup operations stay valid.
//! Since a work-group runs one member, the members' shared arrays overlay: a member's array
//! takes the first merged array of its element type that no earlier array of the same member
//! took, grown to the longest, so the merged kernel needs the most shared memory of any
//! member, not their sum. Where a member places its own grid wait, the others wait first
//! thing, so every path through the merged kernel waits exactly once. Members that count in
//! `Buf::Counters` count in words of their own: each binds the counters from its own offset,
//! after the words of the members before it (rounded up to the planner's alignment), so
//! counters never make two dispatches dependent.

use super::Dispatch;
use super::expr::Buf;
use cranelift_entity::{EntityRef, PrimaryMap};
use poot_kir::{Access, BinOp, CmpOp, Const, Expr, Inst, Kernel, Mem, Special, Ty, Val};
use std::collections::HashSet;

/// Most dispatches one merged kernel holds.
const MAX_MEMBERS: usize = 4;

/// Words between the counters of two merged members: the planner's alignment, so that each
/// member's binding stays aligned.
const COUNTER_STRIDE: usize = (crate::plan::ALIGN / 4) as usize;

/// The buffers `d` writes, but the counters (a merged member gets words of its own).
fn writes(d: &Dispatch) -> HashSet<Buf> {
    d.args
        .iter()
        .filter(|(b, a)| *a != Access::Read && !matches!(b, Buf::Counters(_)))
        .map(|(b, _)| *b)
        .collect()
}

/// The buffers `d` reads or writes, but the counters.
fn touches(d: &Dispatch) -> HashSet<Buf> {
    d.args
        .iter()
        .filter(|(b, _)| !matches!(b, Buf::Counters(_)))
        .map(|(b, _)| *b)
        .collect()
}

fn independent(group: &[&Dispatch], d: &Dispatch, kernels: &[Kernel]) -> bool {
    let k = &kernels[d.kernel];
    // A cluster shape covers every work-group of a kernel, so clustered kernels stay alone.
    let clustered = |k: &Kernel| poot_kir::cluster_dims(&k.body).is_some();
    !clustered(k)
        && group.iter().all(|g| {
            let gk = &kernels[g.kernel];
            !clustered(gk)
                && gk.workgroup == k.workgroup
                && gk.subgroup == k.subgroup
                && g.grid[1..] == d.grid[1..]
                && writes(g).is_disjoint(&touches(d))
                && writes(d).is_disjoint(&touches(g))
        })
}

struct Remap {
    val_off: u32,
    params: Vec<u32>,
    shared: Vec<u32>,
    gx: Val,
    base: Val,
}

impl Remap {
    fn v(&self, v: Val) -> Val {
        Val::new(v.index() + self.val_off as usize)
    }
    fn m(&self, m: Mem) -> Mem {
        match m {
            Mem::Param(i) => Mem::Param(self.params[i as usize]),
            Mem::Shared(i) => Mem::Shared(self.shared[i as usize]),
        }
    }
    fn vs(&self, vs: &[Val]) -> Vec<Val> {
        vs.iter().map(|&v| self.v(v)).collect()
    }
    fn expr(&self, e: &Expr) -> Expr {
        let v = |x: &Val| self.v(*x);
        match e {
            Expr::Special(Special::GroupX) => Expr::Binary(BinOp::Sub, self.gx, self.base),
            Expr::Const(_) | Expr::Special(_) => e.clone(),
            Expr::Unary(o, a) => Expr::Unary(*o, v(a)),
            Expr::Binary(o, a, b) => Expr::Binary(*o, v(a), v(b)),
            Expr::Fma(a, b, c) => Expr::Fma(v(a), v(b), v(c)),
            Expr::Cmp(o, a, b) => Expr::Cmp(*o, v(a), v(b)),
            Expr::Select(c, a, b) => Expr::Select(v(c), v(a), v(b)),
            Expr::Convert(a, s) => Expr::Convert(v(a), *s),
            Expr::Bitcast(a, s) => Expr::Bitcast(v(a), *s),
            Expr::HalfToF32(a, h) => Expr::HalfToF32(v(a), *h),
            Expr::Bf16ToF32(a, h) => Expr::Bf16ToF32(v(a), *h),
            Expr::Load(m, i, n) => Expr::Load(self.m(*m), v(i), *n),
            Expr::Extract(a, l) => Expr::Extract(v(a), *l),
            Expr::SubgroupReduce(o, a) => Expr::SubgroupReduce(*o, v(a)),
            Expr::ShuffleXor(a, m) => Expr::ShuffleXor(v(a), *m),
            Expr::Mma { a, b, c } => Expr::Mma {
                a: a.map(|x| self.v(x)),
                b: b.map(|x| self.v(x)),
                c: c.map(|x| self.v(x)),
            },
        }
    }
    fn block(&self, insts: &[Inst]) -> Vec<Inst> {
        insts.iter().map(|i| self.inst(i)).collect()
    }
    fn inst(&self, i: &Inst) -> Inst {
        match i {
            Inst::Let(v, e) => Inst::Let(self.v(*v), self.expr(e)),
            Inst::Store { mem, index, value } => Inst::Store {
                mem: self.m(*mem),
                index: self.v(*index),
                value: self.v(*value),
            },
            Inst::Atomic {
                op,
                mem,
                index,
                value,
                old,
            } => Inst::Atomic {
                op: *op,
                mem: self.m(*mem),
                index: self.v(*index),
                value: self.v(*value),
                old: old.map(|o| self.v(o)),
            },
            Inst::Barrier => Inst::Barrier,
            Inst::Fence => Inst::Fence,
            Inst::Prefetch { mem, index, count } => Inst::Prefetch {
                mem: self.m(*mem),
                index: self.v(*index),
                count: self.v(*count),
            },
            Inst::Trap(c) => Inst::Trap(*c),
            Inst::LaunchDependents => Inst::LaunchDependents,
            Inst::Clustered { dims, then, els } => Inst::Clustered {
                dims: *dims,
                then: self.block(then),
                els: self.block(els),
            },
            Inst::Matrix { then, els } => Inst::Matrix {
                then: self.block(then),
                els: self.block(els),
            },
            Inst::ClusterArrive { release } => Inst::ClusterArrive { release: *release },
            Inst::ClusterWait => Inst::ClusterWait,
            Inst::StoreRemote {
                mem,
                rank,
                index,
                value,
            } => Inst::StoreRemote {
                mem: self.m(*mem),
                rank: self.v(*rank),
                index: self.v(*index),
                value: self.v(*value),
            },
            Inst::GridWait { early } => Inst::GridWait {
                early: early.iter().map(|&p| self.params[p as usize]).collect(),
            },
            Inst::If {
                cond,
                then,
                then_yield,
                els,
                else_yield,
                results,
            } => Inst::If {
                cond: self.v(*cond),
                then: self.block(then),
                then_yield: self.vs(then_yield),
                els: self.block(els),
                else_yield: self.vs(else_yield),
                results: self.vs(results),
            },
            Inst::For {
                var,
                start,
                end,
                step,
                carried,
                body,
                yields,
                results,
            } => Inst::For {
                var: self.v(*var),
                start: self.v(*start),
                end: self.v(*end),
                step: *step,
                carried: carried
                    .iter()
                    .map(|c| poot_kir::Carried {
                        param: self.v(c.param),
                        init: self.v(c.init),
                    })
                    .collect(),
                body: self.block(body),
                yields: self.vs(yields),
                results: self.vs(results),
            },
        }
    }
}

/// One kernel running `members` side by side over x.
fn merge_kernels(
    members: &[(&Kernel, &Dispatch)],
) -> (Kernel, Vec<(Buf, Access)>, [u32; 3], usize) {
    let first = members[0].0;
    let mut types: PrimaryMap<Val, Ty> = PrimaryMap::new();
    let gx = types.push(Ty::U32);
    let mut params = Vec::new();
    let mut args: Vec<(Buf, Access)> = Vec::new();
    let mut shared: Vec<poot_kir::SharedArray> = Vec::new();
    let mut prelude = vec![Inst::Let(gx, Expr::Special(Special::GroupX))];
    let mut bodies = Vec::new();
    let mut start = 0u32;
    // The counters' words the members before this one use, and all members.
    let (mut next, mut counters) = (0, 0);
    // Where a member places its own grid wait, every path of the merged kernel waits once:
    // the other members at their start, and the empty last branch.
    let waits = members.iter().any(|(k, _)| poot_kir::has_wait(&k.body));
    let wait = || Inst::GridWait { early: Vec::new() };
    for (k, d) in members {
        let base = types.push(Ty::U32);
        let end = types.push(Ty::U32);
        let inside = types.push(Ty::BOOL);
        prelude.push(Inst::Let(base, Expr::Const(Const::U32(start))));
        prelude.push(Inst::Let(end, Expr::Const(Const::U32(start + d.grid[0]))));
        prelude.push(Inst::Let(inside, Expr::Cmp(CmpOp::Lt, gx, end)));
        let val_off = types.len() as u32;
        for (_, t) in k.types.iter() {
            types.push(*t);
        }
        // This member's counters from word `next` on.
        let at = next as u32;
        let own = |&(b, a): &(Buf, Access)| match b {
            Buf::Counters(n) => (Buf::Counters(n + at), a),
            _ => (b, a),
        };
        if d.counters > 0 {
            counters = next + d.counters;
            next = counters.next_multiple_of(COUNTER_STRIDE);
        }
        let map: Vec<u32> = d
            .args
            .iter()
            .map(own)
            .zip(&k.params)
            .map(|(arg, p)| match args.iter().position(|a| *a == arg) {
                Some(i) => i as u32,
                None => {
                    args.push(arg);
                    params.push(p.clone());
                    (args.len() - 1) as u32
                }
            })
            .collect();
        let mut taken: Vec<u32> = Vec::new();
        let overlay: Vec<u32> = k
            .shared
            .iter()
            .map(|a| {
                let free = (0..shared.len() as u32)
                    .find(|&j| shared[j as usize].elem == a.elem && !taken.contains(&j));
                let j = match free {
                    Some(j) => {
                        let m = &mut shared[j as usize];
                        m.len = m.len.max(a.len);
                        j
                    }
                    None => {
                        shared.push(a.clone());
                        shared.len() as u32 - 1
                    }
                };
                taken.push(j);
                j
            })
            .collect();
        let r = Remap {
            val_off,
            params: map,
            shared: overlay,
            gx,
            base,
        };
        let mut body = r.block(&k.body);
        if waits && !poot_kir::has_wait(&k.body) {
            body.insert(0, wait());
        }
        bodies.push((inside, body));
        start += d.grid[0];
    }
    // if inside_0 { body_0 } else { if inside_1 { body_1 } else { ... } }
    let mut tail: Vec<Inst> = if waits { vec![wait()] } else { Vec::new() };
    for (inside, body) in bodies.into_iter().rev() {
        tail = vec![Inst::If {
            cond: inside,
            then: body,
            then_yield: vec![],
            els: tail,
            else_yield: vec![],
            results: vec![],
        }];
    }
    prelude.extend(tail);
    let grid = [start, members[0].1.grid[1], members[0].1.grid[2]];
    let kernel = Kernel {
        name: first.name.clone(),
        params,
        shared,
        workgroup: first.workgroup,
        subgroup: first.subgroup,
        types,
        body: prelude,
    };
    (kernel, args, grid, counters)
}

/// Merges runs of adjacent independent dispatches; returns the new kernels and dispatches.
pub fn merge(kernels: &[Kernel], dispatches: &[Dispatch]) -> Vec<(Kernel, Dispatch)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < dispatches.len() {
        let mut group: Vec<&Dispatch> = vec![&dispatches[i]];
        while group.len() < MAX_MEMBERS
            && i + group.len() < dispatches.len()
            && independent(&group, &dispatches[i + group.len()], kernels)
        {
            group.push(&dispatches[i + group.len()]);
        }
        if group.len() == 1 {
            out.push((kernels[group[0].kernel].clone(), group[0].clone()));
        } else {
            let members: Vec<(&Kernel, &Dispatch)> =
                group.iter().map(|d| (&kernels[d.kernel], *d)).collect();
            let (k, args, grid, counters) = merge_kernels(&members);
            let work = group.iter().map(|d| d.work).sum();
            let tiles = group.iter().flat_map(|d| d.tiles.clone()).collect();
            let name = group
                .iter()
                .map(|d| {
                    kernels[d.kernel]
                        .name
                        .rsplit_once('_')
                        .map_or(kernels[d.kernel].name.clone(), |(a, _)| a.to_string())
                })
                .collect::<Vec<_>>();
            let mut k = k;
            k.name = if name.iter().all(|n| *n == name[0]) {
                format!("{}x{}", name[0], group.len())
            } else {
                name.join("_and_")
            };
            out.push((
                k,
                Dispatch {
                    kernel: 0,
                    grid,
                    args,
                    work,
                    counters,
                    tiles,
                },
            ));
        }
        i += group.len();
    }
    out
}
