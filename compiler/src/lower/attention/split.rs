//! One split's work-group of the attention kernel: its scores, softmax statistics and mix
//! of values, the fused cache write, and its result (the output, or a record for the
//! combine). The invariants are the attention module's.

use super::combine::combine;
use super::scores;
use super::{ATT_WARPS, KvWrite};
use crate::Result;
use crate::lower::expr::{Buf, Emit, TRAP_CACHE_OVERFLOW};
use crate::lower::kernels::{fold_parts, group_reduce, subgroup_parts};
use crate::lower::place::Attention;
use crate::lower::place::Place;
use poot_ir::{Op, Value};
use poot_kir::{Access, BinOp, CmpOp, Mem, ReduceOp, Scalar, Special, UnOp, Val};

/// How a split's result leaves it: straight to the output (the only split that sees a
/// position), as a record for the combine, or either by the runtime conditions (single,
/// several).
#[derive(Clone, Copy)]
pub(super) enum Mode {
    Direct,
    Records,
    Either(Val, Val),
}

impl Mode {
    /// Runs `f` where the result leaves `direct`ly (or as records when not).
    fn run(
        self,
        e: &mut Emit,
        direct: bool,
        f: impl FnOnce(&mut Emit) -> Result<()>,
    ) -> Result<()> {
        match (self, direct) {
            (Mode::Direct, true) | (Mode::Records, false) => f(e),
            (Mode::Direct, false) | (Mode::Records, true) => Ok(()),
            (Mode::Either(single, _), true) => e.when(single, f),
            (Mode::Either(_, several), false) => e.when(several, f),
        }
    }
}

/// What one split's work-group needs.
pub(super) struct Split<'a> {
    pub(super) a: &'a Attention,
    pub(super) write: Option<&'a KvWrite>,
    pub(super) root: Value,
    /// Head size, cache positions, K/V groups, query heads per group.
    pub(super) dims: [usize; 4],
    pub(super) sub: u32,
    pub(super) splits: usize,
    /// Row, token, head, flat (row, token, head) and split indices.
    pub(super) at: [Val; 5],
    /// The end of the visible prefix, where the mask is a causal prefix.
    pub(super) end: Option<Val>,
    /// The splits that see a position, where the mask is a causal prefix and there are
    /// several splits.
    pub(super) n_live: Option<Val>,
    pub(super) mode: Mode,
    /// The cluster shape of the splits, where they may form one.
    pub(super) cluster: Option<[u32; 3]>,
}

/// Runs `f` on each dimension `dd < d` spread over `span` threads from `local`.
fn per_dim(
    e: &mut Emit,
    local: Val,
    d: usize,
    span: usize,
    mut f: impl FnMut(&mut Emit, Val) -> Result<()>,
) -> Result<()> {
    let dv = e.u(d);
    for i in 0..d.div_ceil(span) {
        let off = e.u(i * span);
        let dd = e.kb.add(local, off);
        let ok = e.kb.cmp(CmpOp::Lt, dd, dv);
        e.when_unless(d.is_multiple_of(span), ok, |e| f(e, dd))?;
    }
    Ok(())
}

/// What a split's loads leave to the rest of its work-group.
pub(super) struct Loaded {
    km: Mem,
    vm: Mem,
    local: Val,
    lane: Val,
    warp: Val,
    /// The first position of this thread's subgroup within the split.
    wbase: Val,
    /// The K/V group of the head.
    gi: Val,
    /// This thread's position within the split, its cache position clamped to the cache,
    /// and whether the mask shows it.
    at_in_split: Val,
    ci: Val,
    live: Val,
    /// The positions of the subgroup's visible prefix.
    count: Val,
    keys: scores::Keys,
    /// Per round of value dimensions: the first dimension and whether it is inside the head,
    /// and each subgroup position's value components.
    dims: Vec<(Val, Val)>,
    values: Vec<Vec<Val>>,
    /// The subgroup positions whose value rows were loaded, and where those rows start.
    rows_at: Vec<(Val, Val)>,
    /// Value components a lane loads at once.
    w: usize,
    /// The new position, where the attention writes the cache (as read from its slot).
    start: Option<Val>,
}

/// Element offset of cache position `ci`'s row in K/V group `gi` of row `ri`.
fn row_of(e: &mut Emit, s: &Split, gi: Val, ci: Val) -> Val {
    let [d, c, groups, _] = s.dims;
    let ri = s.at[0];
    let cv = e.u(c);
    let gv = e.u(groups);
    let dv = e.u(d);
    let x = e.kb.mul(ri, cv);
    let x = e.kb.add(x, ci);
    let x = e.kb.mul(x, gv);
    let x = e.kb.add(x, gi);
    e.kb.mul(x, dv)
}

/// A split's key and value loads, all `let`s with no branch, so that a decode attention can
/// issue them before its grid wait (the caller places them), with a fused write and one
/// query token a row the rope positions too. A split past the visible prefix loads position
/// 0's rows only.
pub(super) fn loads(e: &mut Emit, s: &Split) -> Result<Loaded> {
    let [d, c, _, per] = s.dims;
    let [ri, ti, hi, _, split] = s.at;
    let subn = s.sub as usize;
    let span = ATT_WARPS * subn;
    let a = s.a;
    let cache = if s.write.is_some() {
        Access::ReadWrite
    } else {
        Access::Read
    };
    let km = e.buffer(a.k, cache)?;
    let vm = e.buffer(a.v, cache)?;
    let local = e.kb.special(Special::LocalX);
    let lane = e.kb.special(Special::Lane);
    let subv = e.u(subn);
    let warp = e.kb.bin(BinOp::Div, local, subv);
    let perv = e.u(per);
    let gi = e.kb.bin(BinOp::Div, hi, perv);
    let span_v = e.u(span);
    let c0 = e.kb.mul(split, span_v);
    let wbase = e.kb.mul(warp, subv);
    let w0 = e.kb.add(c0, wbase);
    let cv = e.u(c);
    let zero_u = e.u(0);
    let one = e.u(1);
    let row_at = |e: &mut Emit, ci: Val| row_of(e, s, gi, ci);
    // This thread's position within the split: its index, or with the scores by lane groups
    // (`KEY_LANES`) the position of its subgroup whose score its group leaves in it.
    let grouped = scores::grouped(d, subn);
    let at_in_split = if grouped {
        let own = scores::owned(e, lane, subn);
        e.kb.add(wbase, own)
    } else {
        local
    };
    // This thread's position, whether the mask shows it, and its subgroup's visible prefix
    // w0 .. end (the whole visible part of the subgroup's positions for a causal mask).
    let cc = e.kb.add(c0, at_in_split);
    let inside = e.kb.cmp(CmpOp::Lt, cc, cv);
    let last = e.u(c - 1);
    let ci = e.kb.bin(BinOp::Min, cc, last);
    let visible = match s.end {
        Some(end) => e.kb.cmp(CmpOp::Lt, cc, end),
        None => {
            let mi = e.broadcast_idx(a.mask, 4, &[ri, hi, ti, ci]);
            e.value(a.mask, &mi)?
        }
    };
    let live = e.kb.bin(BinOp::And, inside, visible);
    let next = e.kb.add(cc, one);
    let mine = e.kb.select(live, next, zero_u);
    let end = e.kb.subgroup_reduce(ReduceOp::Max, mine);
    let has = e.kb.cmp(CmpOp::Gt, end, w0);
    let seen = e.kb.sub(end, w0);
    let count = e.kb.select(has, seen, zero_u);
    // Every key and value load is issued before the queries are ready, without branches: a
    // hidden position reads position 0's row instead (one hot row, never used), so positions
    // past the prefix cost no memory traffic beyond that row.
    let keys = if grouped {
        scores::group_keys(e, km, lane, w0, count, &row_at, d, subn)
    } else {
        let kpos = e.kb.select(live, ci, zero_u);
        let kbase = row_at(e, kpos);
        scores::own_keys(e, km, kbase, d)
    };
    // Values, lane-per-dimension: `w` consecutive dimensions per lane (2-lane loads when the
    // head splits evenly), `rounds` rounds of dimensions, the subgroup's positions clamped to
    // its visible prefix.
    let w = if d % (2 * subn) == 0 { 2 } else { 1 };
    let rounds = d.div_ceil(subn * w);
    let wv = e.u(w);
    let dstart = e.kb.mul(lane, wv);
    let last_dim = e.u(d - w);
    let dv = e.u(d);
    let last_seen = e.kb.sub(count, one);
    let last_seen = e.kb.select(has, last_seen, zero_u);
    let rows_at: Vec<(Val, Val)> = (0..subn)
        .map(|u| {
            let uv = e.u(u);
            let pu = e.kb.bin(BinOp::Min, uv, last_seen);
            let pos = e.kb.add(w0, pu);
            let pos = e.kb.select(has, pos, zero_u);
            (pos, row_at(e, pos))
        })
        .collect();
    let mut dims = Vec::with_capacity(rounds);
    let mut values = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let off = e.u(i * subn * w);
        let dd = e.kb.add(dstart, off);
        let ok = e.kb.cmp(CmpOp::Lt, dd, dv);
        let dd = e.kb.bin(BinOp::Min, dd, last_dim);
        let row: Vec<Val> = rows_at
            .iter()
            .map(|&(_, vb)| {
                let at = e.kb.add(vb, dd);
                e.kb.load(vm, at, w as u8)
            })
            .collect();
        dims.push((dd, ok));
        values.push(row);
    }
    let start = match s.write {
        Some(wr) => {
            let st = e.value(wr.start, &[ri])?;
            // The rope positions of the query and the new key, read once here (before the
            // grid wait, with the other loads): where the query, like the new key, is one
            // token a row, every element this work-group ropes is of row `ri` and token 0,
            // so each position is one value, and the rope's table loads then wait for
            // nothing but their own issue.
            if e.g.ty(a.q).shape.0[1] == 1 {
                for pv in rope_positions(e, [a.q, wr.k]) {
                    let x = e.value(pv, &[ri, zero_u])?;
                    e.set_override(pv, x);
                }
            }
            Some(e.kb.bitcast(st, Scalar::U32))
        }
        None => None,
    };
    Ok(Loaded {
        km,
        vm,
        local,
        lane,
        warp,
        wbase,
        gi,
        at_in_split,
        ci,
        live,
        count,
        keys,
        dims,
        values,
        rows_at,
        w,
        start,
    })
}

/// The rest of a split's work-group, after its loads: the fused cache write, the queries,
/// scores, softmax statistics, the mix, and its result.
pub(super) fn rest(e: &mut Emit, s: &Split, l: Loaded) -> Result<()> {
    let [d, c, _, per] = s.dims;
    let [ri, ti, hi, rth, split] = s.at;
    let subn = s.sub as usize;
    let span = ATT_WARPS * subn;
    let a = s.a;
    let Loaded {
        km,
        vm,
        local,
        lane,
        warp,
        wbase,
        gi,
        at_in_split,
        ci,
        live,
        count,
        keys,
        dims,
        values,
        rows_at,
        w,
        start,
    } = l;
    // In a cluster, every live split arrives before anything else it does after its loads
    // where several are live, so that each one's wait before its first remote store finds
    // every live split started. The arrival orders nothing: with release ordering SmolLM2's
    // decode step took 13 us longer below position 128 on the H200, relaxed 3-6 us, and
    // arriving even where a split is alone cost those 3-6 us (BENCHMARKS.md, twenty-third and
    // twenty-fourth sessions).
    if let Some(dims) = s.cluster {
        e.clustered(
            dims,
            |e| {
                s.mode.run(e, false, |e| {
                    e.kb.cluster_arrive(false);
                    Ok(())
                })
            },
            |_| Ok(()),
        )?;
    }
    let qs = e.kb.shared(Scalar::F32, d.next_multiple_of(4) as u32);
    let ps = e.kb.shared(Scalar::F32, span as u32);
    let maxes = e.kb.shared(Scalar::F32, ATT_WARPS as u32);
    let sums = e.kb.shared(Scalar::F32, ATT_WARPS as u32);
    let mixes = e.kb.shared(Scalar::F32, (ATT_WARPS * d) as u32);
    let perv = e.u(per);
    let dv = e.u(d);
    let span_v = e.u(span);
    let scale = e.kb.f32(a.scale);
    let ninf = e.kb.f32(f32::NEG_INFINITY);
    let zero = e.kb.f32(0.0);
    let zero_u = e.u(0);
    let one = e.u(1);
    // The fused cache write (one new position per row), after the cache loads are issued:
    // every work-group computes the new key and value rows into shared memory, and the first
    // query head of the group, in the split holding the new position, stores them to the
    // cache. Readers of that position take them from shared memory, never from the cache row
    // being written.
    let fresh = match (s.write, start) {
        (Some(wr), Some(su)) => {
            let room = e.u(c - 1);
            let bad = e.kb.cmp(CmpOp::Gt, su, room);
            e.when(bad, |e| {
                e.kb.trap(TRAP_CACHE_OVERFLOW);
                Ok(())
            })?;
            let at = e.kb.bin(BinOp::Min, su, room);
            let ks = e.kb.shared(Scalar::F32, d.next_multiple_of(4) as u32);
            let vs = e.kb.shared(Scalar::F32, d.next_multiple_of(2) as u32);
            let lead = e.kb.bin(BinOp::Rem, hi, perv);
            let lead = e.kb.cmp(CmpOp::Eq, lead, zero_u);
            let home = e.kb.bin(BinOp::Div, at, span_v);
            let home = e.kb.cmp(CmpOp::Eq, home, split);
            let writer = e.kb.bin(BinOp::And, lead, home);
            let base = row_of(e, s, gi, at);
            per_dim(e, local, d, span, |e, dd| {
                let idx = [ri, zero_u, gi, dd];
                let kx = e.value(wr.k, &idx)?;
                let vx = e.value(wr.v, &idx)?;
                e.kb.store(ks, dd, kx);
                e.kb.store(vs, dd, vx);
                e.when(writer, |e| {
                    let to = e.kb.add(base, dd);
                    e.kb.store(km, to, kx);
                    e.kb.store(vm, to, vx);
                    Ok(())
                })
            })?;
            Some((at, ks, vs))
        }
        _ => None,
    };
    // Queries into shared memory, computed once per work-group.
    per_dim(e, local, d, span, |e, dd| {
        let q = e.value(a.q, &[ri, ti, hi, dd])?;
        e.kb.store(qs, dd, q);
        Ok(())
    })?;
    e.kb.barrier();
    let dot = scores::dot(e, keys, qs, lane, ci, fresh.map(|(at, ks, _)| (at, ks)));
    let sc = e.kb.mul(dot, scale);
    let sc = e.kb.select(live, sc, ninf);
    // The split's maximum and sum of exponentials: each subgroup's, then the work-group's.
    let first = e.kb.cmp(CmpOp::Eq, lane, zero_u);
    let m = group_reduce(
        e,
        (ReduceOp::Max, sc, ninf),
        maxes,
        [warp, first],
        ATT_WARPS,
    )?;
    let empty = e.kb.cmp(CmpOp::Eq, m, ninf);
    let safe_m = e.kb.select(empty, zero, m);
    let x = e.kb.sub(sc, safe_m);
    let p = e.kb.un(UnOp::Exp, x);
    e.kb.store(ps, at_in_split, p);
    subgroup_parts(e, ReduceOp::Add, p, sums, [warp, first])?;
    e.kb.barrier();
    // The subgroup's weighted sum over its visible prefix, two accumulators per dimension,
    // into its row of `mixes`.
    let weights: Vec<(Val, Val)> = (0..subn)
        .map(|u| {
            let uv = e.u(u);
            let ok = e.kb.cmp(CmpOp::Lt, uv, count);
            let at = e.kb.add(wbase, uv);
            (e.kb.load(ps, at, 1), ok)
        })
        .collect();
    let mix_row = e.kb.mul(warp, dv);
    for ((dd, ok), row) in dims.into_iter().zip(values) {
        let mut acc = vec![zero; 2 * w];
        // The new position's value components (from shared memory), where fused.
        let fresh_v: Option<(Val, Vec<Val>)> = match fresh {
            Some((at, _, vs)) => {
                let xs = (0..w)
                    .map(|comp| {
                        let cv_ = e.u(comp);
                        let j = e.kb.add(dd, cv_);
                        e.kb.load(vs, j, 1)
                    })
                    .collect();
                Some((at, xs))
            }
            None => None,
        };
        for (u, (&(p, seen), vv)) in weights.iter().zip(row).enumerate() {
            let is_new = fresh_v
                .as_ref()
                .map(|(at, _)| e.kb.cmp(CmpOp::Eq, rows_at[u].0, *at));
            for (comp, a) in acc.iter_mut().skip(u % 2).step_by(2).enumerate() {
                let x = if w == 1 {
                    vv
                } else {
                    e.kb.extract(vv, comp as u8)
                };
                let x = match (&fresh_v, is_new) {
                    (Some((_, xs)), Some(n)) => e.kb.select(n, xs[comp], x),
                    _ => x,
                };
                let f = e.kb.fma(p, x, *a);
                *a = e.kb.select(seen, f, *a);
            }
        }
        e.when(ok, |e| {
            for comp in 0..w {
                let o = e.kb.add(acc[2 * comp], acc[2 * comp + 1]);
                let off = e.u(comp);
                let at = e.kb.add(mix_row, dd);
                let at = e.kb.add(at, off);
                e.kb.store(mixes, at, o);
            }
            Ok(())
        })?;
    }
    e.kb.barrier();
    // What remains (the sum of the mixes, the output or the record, the combine) is short.
    e.kb.launch_dependents();
    // The work-group's sum of the subgroups' mixes: the output, or this split's record.
    let l = fold_parts(e, ReduceOp::Add, sums, ATT_WARPS, zero);
    let out = e.buffer(s.root, Access::Write)?;
    let records = !matches!(s.mode, Mode::Direct);
    let part = records.then(|| e.mem(Buf::Scratch(s.root, 0), Scalar::F32, Access::ReadWrite));
    let recv = e.u(d + 2);
    let splits_v = e.u(s.splits);
    let slot0 = e.kb.mul(rth, splits_v);
    let slot = e.kb.add(slot0, split);
    let pbase = e.kb.mul(slot, recv);
    // In a cluster: its shape, split 0's inbox (one record per split) and this split's
    // record in it.
    let cluster = s.cluster.map(|dims| {
        let inbox = e.kb.shared(Scalar::F32, (s.splits * (d + 2)) as u32);
        (dims, inbox, e.kb.mul(split, recv))
    });
    let dst = e.kb.mul(rth, dv);
    let two = e.u(2);
    // The record's word `k` (0: max, 1: sum, 2 + dim: output): to split 0 in a cluster, to
    // the scratch without.
    let record = |e: &mut Emit, part: poot_kir::Mem, k: Val, x: Val| -> Result<()> {
        let to_part = |e: &mut Emit| {
            let at = e.kb.add(pbase, k);
            e.kb.store(part, at, x);
            Ok(())
        };
        match cluster {
            Some((dims, inbox, ibase)) => e.clustered(
                dims,
                |e| {
                    let at = e.kb.add(ibase, k);
                    e.kb.store_remote(inbox, zero_u, at, x);
                    Ok(())
                },
                to_part,
            ),
            None => to_part(e),
        }
    };
    // Clusters form only from 2 splits up, so they always come with records.
    if let Some((dims, _, _)) = cluster {
        // Every live split has arrived (first thing) before any remote store lands.
        s.mode.run(e, false, |e| {
            e.clustered(
                dims,
                |e| {
                    e.kb.cluster_wait();
                    Ok(())
                },
                |_| Ok(()),
            )
        })?;
    }
    per_dim(e, local, d, span, |e, dd| {
        let mut o = zero;
        for i in 0..ATT_WARPS {
            let row = e.u(i * d);
            let at = e.kb.add(row, dd);
            let x = e.kb.load(mixes, at, 1);
            o = e.kb.add(o, x);
        }
        s.mode.run(e, true, |e| {
            let y = e.kb.bin(BinOp::Div, o, l);
            let at = e.kb.add(dst, dd);
            e.kb.store(out, at, y);
            Ok(())
        })?;
        match part {
            Some(part) => s.mode.run(e, false, |e| {
                let k = e.kb.add(dd, two);
                record(e, part, k, o)
            }),
            None => Ok(()),
        }
    })?;
    let Some(part) = part else {
        return Ok(());
    };
    let lead = e.kb.cmp(CmpOp::Eq, local, zero_u);
    let dims = [d, s.splits, span];
    s.mode.run(e, false, |e| {
        e.when(lead, |e| {
            record(e, part, zero_u, m)?;
            record(e, part, one, l)
        })?;
        // The last split of this (row, token, head) to finish combines the records.
        let through_memory = |e: &mut Emit| {
            let n = match s.n_live {
                Some(n) => n,
                None => e.u(s.splits),
            };
            e.last_to_arrive(rth, n, |e| {
                combine(e, out, (part, slot0, rth), dims, s.n_live)
            })
        };
        match cluster {
            // Split 0 combines once every live split's record is in its inbox.
            Some((cdims, inbox, _)) => e.clustered(
                cdims,
                |e| {
                    e.kb.cluster_arrive(true);
                    e.kb.cluster_wait();
                    let first = e.kb.cmp(CmpOp::Eq, split, zero_u);
                    e.when(first, |e| {
                        combine(e, out, (inbox, zero_u, rth), dims, s.n_live)
                    })
                },
                through_memory,
            ),
            None => through_memory(e),
        }
    })
}

/// The position arguments of the ropes that `values` compute inline (through other inline
/// ops, up to the first value with a buffer).
fn rope_positions(e: &Emit, values: [Value; 2]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut stack = values.to_vec();
    let mut seen = std::collections::HashSet::new();
    while let Some(v) = stack.pop() {
        if !seen.insert(v) || e.pl.place[v] != Place::Inline {
            continue;
        }
        let node = &e.g.nodes[v];
        if matches!(node.op, Op::Rope { .. }) {
            if !out.contains(&node.args[1]) {
                out.push(node.args[1]);
            }
            stack.push(node.args[0]);
        } else {
            stack.extend(node.args.iter().copied());
        }
    }
    out
}
