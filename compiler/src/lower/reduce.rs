//! Reduction kernels over a whole row or tensor: `argmax` (with the `any_nonfinite` of the
//! same input) and `any_nonfinite`.
//!
//! Invariants: a work-group of `RED_THREADS` threads scans its elements in increasing index
//! order per thread and combines the threads' results in a tree whose combine is
//! commutative, associative and idempotent, so the result does not depend on the order; a
//! row split over work-groups is folded by its last part to count, in part order, and the
//! counters it used are zero again when the dispatch ends.

use super::expr::{Buf, Emit};
use super::kernels::{Launch, args, launch};
use crate::Result;
use poot_ir::Value;
use poot_kir::{Access, BinOp, CmpOp, Mem, Scalar, Special, UnOp, Val};

/// Combines two threads' partial results in a tree reduction.
type Combine = dyn Fn(&mut Emit, &[Val], &[Val]) -> Vec<Val>;

/// Threads of the reduction kernels (argmax, non-finite flag).
pub const RED_THREADS: usize = 1024;

/// The reduction of `vals` (per-thread values) over the work-group, in every thread: a
/// butterfly of lane shuffles within each subgroup of `sub` lanes, the subgroups' results
/// through shared arrays (one barrier), and a butterfly over those. `combine(e, mine, other)`
/// must be commutative, associative and idempotent (a selection such as argmax, or a
/// bitwise or), so the result is the same whatever order combines it.
fn tree(e: &mut Emit, vals: Vec<Val>, sub: u32, combine: &Combine) -> Result<Vec<Val>> {
    let butterfly = |e: &mut Emit, mut vals: Vec<Val>| {
        let mut mask = 1;
        while mask < sub {
            let theirs: Vec<Val> = vals
                .iter()
                .map(|&v| e.kb.expr(poot_kir::Expr::ShuffleXor(v, mask)))
                .collect();
            vals = combine(e, &vals, &theirs);
            mask *= 2;
        }
        vals
    };
    let groups = RED_THREADS / sub as usize;
    if groups > sub as usize {
        return Err(crate::CompileError::Lower(format!(
            "a reduction over {groups} subgroups of {sub} lanes needs two shared rounds"
        )));
    }
    let vals = butterfly(e, vals);
    let local = e.kb.special(Special::LocalX);
    let lane = e.kb.special(Special::Lane);
    let subv = e.u(sub as usize);
    let warp = e.kb.bin(BinOp::Div, local, subv);
    let shs: Vec<_> = vals
        .iter()
        .map(|v| e.kb.shared(e.kb.ty(*v).scalar, groups as u32))
        .collect();
    let zero = e.u(0);
    let first = e.kb.cmp(CmpOp::Eq, lane, zero);
    e.when(first, |e| {
        for (s, &v) in shs.iter().zip(&vals) {
            e.kb.store(*s, warp, v);
        }
        Ok(())
    })?;
    e.kb.barrier();
    // Lanes past the subgroup count read the last result again (`combine` is idempotent).
    let last = e.u(groups - 1);
    let at = e.kb.bin(BinOp::Min, lane, last);
    let mine: Vec<Val> = shs.iter().map(|s| e.kb.load(*s, at, 1)).collect();
    Ok(butterfly(e, mine))
}

/// A reduction kernel's scan of the `n` elements of `xm` from `base`, in 4-element groups
/// (4-lane loads when `n` allows): the thread takes `iters` groups from group `first`,
/// `RED_THREADS` apart, in increasing index order (those past the end change nothing),
/// unrolled so all of its loads issue at once; `step(e, k, v, carried)` folds element `k`
/// (relative to `base`) of value `v` into the carried values.
#[allow(clippy::too_many_arguments)]
fn scan(
    e: &mut Emit,
    xm: Mem,
    base: Option<Val>,
    n: usize,
    first: Val,
    iters: usize,
    init: &[Val],
    step: impl Fn(&mut Emit, Val, Val, Vec<Val>) -> Vec<Val>,
) -> Result<Vec<Val>> {
    let lanes = scan_lanes(n);
    let four = e.u(lanes);
    let groups = n / lanes;
    e.unrolled(first, groups, RED_THREADS as u32, iters, init, |e, g, c| {
        let k0 = e.kb.mul(g, four);
        let at = match base {
            Some(b) => e.kb.add(b, k0),
            None => k0,
        };
        let vs = e.kb.load(xm, at, lanes as u8);
        let mut c = c.to_vec();
        for i in 0..lanes {
            let v = if lanes == 1 {
                vs
            } else {
                e.kb.extract(vs, i as u8)
            };
            let iv = e.u(i);
            let k = e.kb.add(k0, iv);
            c = step(e, k, v, c);
        }
        Ok(c)
    })
}

/// Elements per group of a scan of `n`.
fn scan_lanes(n: usize) -> usize {
    if n.is_multiple_of(4) { 4 } else { 1 }
}

/// Groups each thread of an argmax split scans: a row of more groups than `RED_THREADS`
/// times this is split over work-groups (`group_id.y`), so a vocabulary-wide row is read by
/// many SMs instead of one.
const ARGMAX_ITERS: usize = 2;

/// `argmax` over the last axis: the first index of the largest non-NaN value, else the first
/// NaN (as `poot_eval` defines it); with `flag`, an `any_nonfinite` of the same input, also
/// that (the OR over every row). A row is split over `group_id.y` (`ARGMAX_ITERS`); each
/// work-group reduces its part with every load of a thread issued at once (the scan
/// unrolled). Where a row has several parts, each stores its (value, index, first NaN,
/// non-finite) record and the last part of the row to count folds the records in part
/// order; with a flag and several rows, each row's last part stores the row's flag and the
/// last row to count ORs them. The selection is commutative, associative and idempotent, so
/// the result does not depend on which part finishes last.
pub fn argmax(e: &mut Emit, root: Value, flag: Option<Value>, sub: u32) -> Result<Launch> {
    let [x] = args(e, root)?;
    let xt = e.g.ty(x).clone();
    let n = xt.shape.last();
    let rows = xt.shape.numel() / n;
    let xm = e.buffer(x, Access::Read)?;
    let out = e.buffer(root, Access::Write)?;
    let flag_out = match flag {
        Some(f) => Some(e.buffer(f, Access::Write)?),
        None => None,
    };
    let row = e.kb.special(Special::GroupX);
    let part = e.kb.special(Special::GroupY);
    let local = e.kb.special(Special::LocalX);
    let groups = n / scan_lanes(n);
    let per_part = RED_THREADS * ARGMAX_ITERS;
    let parts = groups.div_ceil(per_part);
    let iters = if parts == 1 {
        groups.div_ceil(RED_THREADS)
    } else {
        ARGMAX_ITERS
    };
    let nv = e.u(n);
    let base = e.kb.mul(row, nv);
    let per_v = e.u(per_part);
    let first = e.kb.mul(part, per_v);
    let first = e.kb.add(first, local);
    let ninf = e.kb.f32(f32::NEG_INFINITY);
    let none = e.kb.u32(u32::MAX);
    let zero = e.u(0);
    let found = scan(
        e,
        xm,
        Some(base),
        n,
        first,
        iters,
        &[ninf, none, none, zero],
        |e, k, v, c| {
            let nan = e.kb.un(UnOp::IsNan, v);
            let ok = e.kb.un(UnOp::Not, nan);
            let empty = e.kb.cmp(CmpOp::Eq, c[1], none);
            let gt = e.kb.cmp(CmpOp::Gt, v, c[0]);
            let better = e.kb.bin(BinOp::Or, empty, gt);
            let take = e.kb.bin(BinOp::And, ok, better);
            let bv = e.kb.select(take, v, c[0]);
            let bi = e.kb.select(take, k, c[1]);
            let first_nan = e.kb.bin(BinOp::Min, c[2], k);
            let fi = e.kb.select(nan, first_nan, c[2]);
            let fin = e.kb.un(UnOp::IsFinite, v);
            let one = e.u(1);
            let z = e.u(0);
            let bad = e.kb.select(fin, z, one);
            vec![bv, bi, fi, e.kb.bin(BinOp::Or, c[3], bad)]
        },
    )?;
    let pick = move |e: &mut Emit, a: &[Val], b: &[Val]| {
        let a_empty = e.kb.cmp(CmpOp::Eq, a[1], none);
        let b_some = e.kb.cmp(CmpOp::Ne, b[1], none);
        let gt = e.kb.cmp(CmpOp::Gt, b[0], a[0]);
        let eq = e.kb.cmp(CmpOp::Eq, b[0], a[0]);
        let lower = e.kb.cmp(CmpOp::Lt, b[1], a[1]);
        let tie = e.kb.bin(BinOp::And, eq, lower);
        let wins = e.kb.bin(BinOp::Or, gt, tie);
        let wins = e.kb.bin(BinOp::Or, a_empty, wins);
        let take = e.kb.bin(BinOp::And, b_some, wins);
        let v = e.kb.select(take, b[0], a[0]);
        let i = e.kb.select(take, b[1], a[1]);
        let f = e.kb.bin(BinOp::Min, a[2], b[2]);
        vec![v, i, f, e.kb.bin(BinOp::Or, a[3], b[3])]
    };
    let mine = tree(e, found, sub, &pick)?;
    let mut l = launch([rows, parts, 1], 4 * rows * n);
    // Scratch: the parts' records where a row has several, then the rows' flags.
    let flags_at = u32::from(parts > 1);
    let finish_row = |e: &mut Emit, r: &[Val]| -> Result<()> {
        let is_first = e.kb.cmp(CmpOp::Eq, local, zero);
        e.when(is_first, |e| {
            let empty = e.kb.cmp(CmpOp::Eq, r[1], none);
            let nan_empty = e.kb.cmp(CmpOp::Eq, r[2], none);
            let fallback = e.kb.select(nan_empty, zero, r[2]);
            let i = e.kb.select(empty, fallback, r[1]);
            let i = e.kb.bitcast(i, Scalar::I32);
            e.kb.store(out, row, i);
            Ok(())
        })?;
        let Some(fm) = flag_out else {
            return Ok(());
        };
        if rows == 1 {
            return e.when(is_first, |e| {
                e.kb.store(fm, zero, r[3]);
                Ok(())
            });
        }
        // Each row's flag, then the OR of all of them by the last row to count.
        let flags = e.mem(Buf::Scratch(root, flags_at), Scalar::U32, Access::ReadWrite);
        e.when(is_first, |e| {
            e.kb.store(flags, row, r[3]);
            Ok(())
        })?;
        let all = e.u(rows);
        e.last_to_arrive(all, all, |e| {
            let mut any = zero;
            for i in 0..rows {
                let iv = e.u(i);
                let f = e.kb.load(flags, iv, 1);
                any = e.kb.bin(BinOp::Or, any, f);
            }
            e.when(is_first, |e| {
                e.kb.store(fm, zero, any);
                Ok(())
            })
        })
    };
    if parts == 1 {
        finish_row(e, &mine)?;
    } else {
        // Record `part` of the row: value, index, first NaN and flag, as f32 bits.
        let recs = e.mem(Buf::Scratch(root, 0), Scalar::F32, Access::ReadWrite);
        let slot = |e: &mut Emit, p: Val, j: usize| {
            let pv = e.u(parts);
            let at = e.kb.mul(row, pv);
            let at = e.kb.add(at, p);
            let four = e.u(4);
            let at = e.kb.mul(at, four);
            let jv = e.u(j);
            e.kb.add(at, jv)
        };
        let is_first = e.kb.cmp(CmpOp::Eq, local, zero);
        e.when(is_first, |e| {
            for (j, &x) in mine.iter().enumerate() {
                let at = slot(e, part, j);
                let x = if j == 0 {
                    x
                } else {
                    e.kb.bitcast(x, Scalar::F32)
                };
                e.kb.store(recs, at, x);
            }
            Ok(())
        })?;
        let parts_v = e.u(parts);
        e.last_to_arrive(row, parts_v, |e| {
            // Every record's loads first, then the fold in part order.
            let loaded: Vec<Vec<Val>> = (0..parts)
                .map(|p| {
                    let pv = e.u(p);
                    (0..4)
                        .map(|j| {
                            let at = slot(e, pv, j);
                            let x = e.kb.load(recs, at, 1);
                            if j == 0 {
                                x
                            } else {
                                e.kb.bitcast(x, Scalar::U32)
                            }
                        })
                        .collect()
                })
                .collect();
            let r = loaded[1..]
                .iter()
                .fold(loaded[0].clone(), |a, b| pick(e, &a, b));
            finish_row(e, &r)
        })?;
        l.scratch = vec![(16 * rows * parts) as u64];
    }
    // Counters: one per row where a row has several parts, then one for the rows' flags.
    if flag.is_some() && rows > 1 {
        l.scratch.push(4 * rows as u64);
        l.counters = rows + 1;
    } else if parts > 1 {
        l.counters = rows;
    }
    Ok(l)
}

/// `any_nonfinite`: one work-group ORs every element's non-finiteness (the scan unrolled).
pub fn any_nonfinite(e: &mut Emit, root: Value, sub: u32) -> Result<Launch> {
    let [x] = args(e, root)?;
    let n = e.g.ty(x).shape.numel();
    let xm = e.buffer(x, Access::Read)?;
    let out = e.buffer(root, Access::Write)?;
    let local = e.kb.special(Special::LocalX);
    let zero = e.u(0);
    let iters = (n / scan_lanes(n)).div_ceil(RED_THREADS);
    let flag = scan(e, xm, None, n, local, iters, &[zero], |e, _, v, f| {
        let fin = e.kb.un(UnOp::IsFinite, v);
        let one = e.u(1);
        let z = e.u(0);
        let bad = e.kb.select(fin, z, one);
        vec![e.kb.bin(BinOp::Or, f[0], bad)]
    })?;
    let r = tree(e, flag, sub, &|e, a, b| {
        vec![e.kb.bin(BinOp::Or, a[0], b[0])]
    })?;
    let is_first = e.kb.cmp(CmpOp::Eq, local, zero);
    e.when(is_first, |e| {
        e.kb.store(out, zero, r[0]);
        Ok(())
    })?;
    Ok(launch([1, 1, 1], 4 * n))
}
