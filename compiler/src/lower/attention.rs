//! The attention kernel: scores, masked softmax and the weighted sum of values, split over
//! the cache, with the combine of the splits done by the last split to finish, and for a
//! decode step the write of the new K/V rows into the cache.
//!
//! Invariants: one subgroup per work-group; a split covers one position per lane; a position
//! the mask hides reads position 0's row instead of its own (one row every split shares, its
//! values never used), and the weighted sum runs over the split's visible prefix only, so a
//! step reads the K/V its position needs, not the whole cache. Each split writes its record
//! (max score, sum of exponentials, unnormalised output), fences, and counts itself in its
//! (row, token, head)'s counter; the split that counts last fences again, weighs each record
//! by `exp(m_split - m)` in split order (every record loaded at once) and restores the counter
//! to zero, so the result does not depend on which split finishes last and the counters are
//! zero between dispatches. With a fused write (`KvWrite`), exactly one work-group stores each
//! new row (the group's first query head, in the split holding the position), and no
//! work-group uses the cache's copy of that row: every reader computes it into shared memory.

use super::expr::{Buf, Emit, TRAP_CACHE_OVERFLOW};
use super::kernels::{Launch, launch};
use crate::Result;
use cranelift_entity::SecondaryMap;
use poot_ir::{Op, Value};
use poot_kir::{Access, BinOp, CmpOp, Mem, ReduceOp, Scalar, Special, UnOp, Val};

/// A decode step's cache update fused into its attention: `k` and `v` (`[r, 1, g, d]`) are
/// written at position `start[row]` of the caches the attention reads.
pub struct KvWrite {
    /// The new keys.
    pub k: Value,
    /// The new values.
    pub v: Value,
    /// The position slot.
    pub start: Value,
}

/// The cache update of attention `a` that can be fused into it: both caches it reads are
/// `dynamic_update_slice`s along the position axis by one position per row, at the same
/// start, and nothing but this attention reads them.
pub fn match_kv_write(
    g: &poot_ir::Graph,
    users: &SecondaryMap<Value, Vec<Value>>,
    a: &super::place::Attention,
) -> Option<KvWrite> {
    let update = |x: Value| match g.nodes[x].op {
        Op::DynamicUpdateSlice { axis: 1 } if users[x].len() == 1 => {
            let args = &g.nodes[x].args;
            (g.ty(args[1]).shape.0.get(1) == Some(&1)).then(|| (args[1], args[2]))
        }
        _ => None,
    };
    let (k, start) = update(a.k)?;
    let (v, start_v) = update(a.v)?;
    (start == start_v).then_some(KvWrite { k, v, start })
}

/// The dot product of shared `q` with `keys` (one value per dimension), with four
/// accumulators combined as `(a0 + a1) + (a2 + a3)` and `q` read in 4-lane loads when the
/// head is a multiple of 4.
fn dot_q(e: &mut Emit, qs: Mem, keys: &[Val]) -> Val {
    let zero = e.kb.f32(0.0);
    let mut acc = [zero; 4];
    if keys.len().is_multiple_of(4) {
        for (i, k4) in keys.chunks(4).enumerate() {
            let o = e.u(4 * i);
            let qv = e.kb.load(qs, o, 4);
            for (c, (&k, a)) in k4.iter().zip(acc.iter_mut()).enumerate() {
                let x = e.kb.extract(qv, c as u8);
                *a = e.kb.fma(x, k, *a);
            }
        }
    } else {
        for (i, &k) in keys.iter().enumerate() {
            let o = e.u(i);
            let x = e.kb.load(qs, o, 1);
            acc[i % 4] = e.kb.fma(x, k, acc[i % 4]);
        }
    }
    let l = e.kb.add(acc[0], acc[1]);
    let r = e.kb.add(acc[2], acc[3]);
    e.kb.add(l, r)
}

/// Attention, split over the cache: each work-group computes, for one (row, token, head) and
/// one chunk of cache positions, the chunk's max score, sum of exponentials and unnormalised
/// output, and the last chunk of a (row, token, head) to finish combines them into `root`.
/// Scores are lane-per-position; the weighted sum of values is lane-per-dimension over the
/// chunk's visible prefix only. Every key and value load is issued before the queries are
/// computed, so the kernel waits for memory about once before the combine. One subgroup per
/// work-group.
pub fn attention(
    e: &mut Emit,
    root: Value,
    a: &super::place::Attention,
    write: Option<&KvWrite>,
    sub: u32,
) -> Result<Launch> {
    let g = e.g;
    let qd = g.ty(a.q).shape.0.clone();
    let kd = g.ty(a.k).shape.0.clone();
    let (r, t, h, d) = (qd[0], qd[1], qd[2], qd[3]);
    let (c, groups) = (kd[1], kd[2]);
    let per = h / groups;
    let subn = sub as usize;
    let chunk = subn;
    let splits = c.div_ceil(chunk);
    let cache = if write.is_some() {
        Access::ReadWrite
    } else {
        Access::Read
    };
    let km = e.buffer(a.k, cache)?;
    let vm = e.buffer(a.v, cache)?;
    let part = e.mem(Buf::Scratch(root, 0), Scalar::F32, Access::ReadWrite);
    let qs = e.kb.shared(Scalar::F32, d.next_multiple_of(4) as u32);
    let ps = e.kb.shared(Scalar::F32, chunk as u32);
    let rth = e.kb.special(Special::GroupX);
    let split = e.kb.special(Special::GroupY);
    let lane = e.kb.special(Special::LocalX);
    let hv = e.u(h);
    let th = e.u(t * h);
    let ri = e.kb.bin(BinOp::Div, rth, th);
    let rem = e.kb.bin(BinOp::Rem, rth, th);
    let ti = e.kb.bin(BinOp::Div, rem, hv);
    let hi = e.kb.bin(BinOp::Rem, rem, hv);
    let perv = e.u(per);
    let gi = e.kb.bin(BinOp::Div, hi, perv);
    let dv = e.u(d);
    // Every lane has a dimension in every round: the per-dimension work needs no branch, so
    // its loads can issue together with the cache loads before it.
    let all_dims = d.is_multiple_of(subn);
    let chunk_v = e.u(chunk);
    let c0 = e.kb.mul(split, chunk_v);
    let scale = e.kb.f32(a.scale);
    let ninf = e.kb.f32(f32::NEG_INFINITY);
    let zero = e.kb.f32(0.0);
    let cv = e.u(c);
    let gv = e.u(groups);
    let zero_u = e.u(0);
    let row_of = |e: &mut Emit, ci: Val| {
        let x = e.kb.mul(ri, cv);
        let x = e.kb.add(x, ci);
        let x = e.kb.mul(x, gv);
        let x = e.kb.add(x, gi);
        e.kb.mul(x, dv)
    };
    // This lane's position, whether the mask shows it, and the chunk's visible prefix
    // c0 .. end (the whole visible part for a causal mask).
    let cc = e.kb.add(c0, lane);
    let inside = e.kb.cmp(CmpOp::Lt, cc, cv);
    let last = e.u(c - 1);
    let ci = e.kb.bin(BinOp::Min, cc, last);
    let mi = e.broadcast_idx(a.mask, 4, &[ri, hi, ti, ci]);
    let visible = e.value(a.mask, &mi)?;
    let live = e.kb.bin(BinOp::And, inside, visible);
    let one = e.u(1);
    let next = e.kb.add(cc, one);
    let mine = e.kb.select(live, next, zero_u);
    let end = e.kb.subgroup_reduce(ReduceOp::Max, mine);
    let has = e.kb.cmp(CmpOp::Gt, end, c0);
    let span = e.kb.sub(end, c0);
    let count = e.kb.select(has, span, zero_u);
    // Every key and value load is issued before the queries are ready, without branches: a
    // hidden position reads position 0's row instead (one hot row, never used), so a chunk
    // with nothing visible costs no memory traffic beyond that row.
    let kpos = e.kb.select(live, ci, zero_u);
    let kbase = row_of(e, kpos);
    let kl = if d.is_multiple_of(4) { 4 } else { 1 };
    let mut keys = Vec::with_capacity(d);
    for i in 0..d / kl {
        let o = e.u(kl * i);
        let at = e.kb.add(kbase, o);
        let kv = e.kb.load(km, at, kl as u8);
        for c in 0..kl {
            keys.push(if kl == 1 {
                kv
            } else {
                e.kb.extract(kv, c as u8)
            });
        }
    }
    // Values, lane-per-dimension: `w` consecutive dimensions per lane (2-lane loads when the
    // head splits evenly), `rounds` rounds of dimensions, the chunk's positions clamped to its
    // visible prefix.
    let w = if d % (2 * subn) == 0 { 2 } else { 1 };
    let rounds = d.div_ceil(subn * w);
    let wv = e.u(w);
    let dstart = e.kb.mul(lane, wv);
    let last_dim = e.u(d - w);
    let last_seen = e.kb.sub(count, one);
    let last_seen = e.kb.select(has, last_seen, zero_u);
    let rows_at: Vec<(Val, Val)> = (0..chunk)
        .map(|u| {
            let uv = e.u(u);
            let pu = e.kb.bin(BinOp::Min, uv, last_seen);
            let pos = e.kb.add(c0, pu);
            let pos = e.kb.select(has, pos, zero_u);
            (pos, row_of(e, pos))
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
    // The fused cache write (one new position per row), after the cache loads are issued:
    // every work-group computes the new key and value rows into shared memory, and the first
    // query head of the group, in the split holding the new position, stores them to the
    // cache. Readers of that position take them from shared memory, never from the cache row
    // being written.
    let fresh = match write {
        None => None,
        Some(wr) => {
            let s = e.value(wr.start, &[ri])?;
            let su = e.kb.bitcast(s, Scalar::U32);
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
            let home = e.kb.bin(BinOp::Div, at, chunk_v);
            let home = e.kb.cmp(CmpOp::Eq, home, split);
            let writer = e.kb.bin(BinOp::And, lead, home);
            let base = row_of(e, at);
            for i in 0..d.div_ceil(subn) {
                let off = e.u(i * subn);
                let dd = e.kb.add(lane, off);
                let ok = e.kb.cmp(CmpOp::Lt, dd, dv);
                e.when_unless(all_dims, ok, |e| {
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
            }
            Some((at, ks, vs))
        }
    };
    // Queries into shared memory, computed once per work-group.
    for i in 0..d.div_ceil(subn) {
        let off = e.u(i * subn);
        let dd = e.kb.add(lane, off);
        let ok = e.kb.cmp(CmpOp::Lt, dd, dv);
        e.when_unless(all_dims, ok, |e| {
            let q = e.value(a.q, &[ri, ti, hi, dd])?;
            e.kb.store(qs, dd, q);
            Ok(())
        })?;
    }
    e.kb.barrier();
    // The new position's key from shared memory.
    let keys = match fresh {
        Some((at, ks, _)) => {
            let is_new = e.kb.cmp(CmpOp::Eq, ci, at);
            let mut out = Vec::with_capacity(d);
            for (j, &k) in keys.iter().enumerate() {
                let jv = e.u(j);
                let x = e.kb.load(ks, jv, 1);
                out.push(e.kb.select(is_new, x, k));
            }
            out
        }
        None => keys,
    };
    let dot = dot_q(e, qs, &keys);
    let sc = e.kb.mul(dot, scale);
    let sc = e.kb.select(live, sc, ninf);
    let m = e.kb.subgroup_reduce(ReduceOp::Max, sc);
    let empty = e.kb.cmp(CmpOp::Eq, m, ninf);
    let safe_m = e.kb.select(empty, zero, m);
    let x = e.kb.sub(sc, safe_m);
    let p = e.kb.un(UnOp::Exp, x);
    e.kb.store(ps, lane, p);
    let l = e.kb.subgroup_reduce(ReduceOp::Add, p);
    e.kb.barrier();
    let rec = d + 2;
    let recv = e.u(rec);
    let splits_v = e.u(splits);
    let slot = e.kb.mul(rth, splits_v);
    let slot = e.kb.add(slot, split);
    let pbase = e.kb.mul(slot, recv);
    let first = e.kb.cmp(CmpOp::Eq, lane, zero_u);
    e.when(first, |e| {
        e.kb.store(part, pbase, m);
        let at = e.kb.add(pbase, one);
        e.kb.store(part, at, l);
        Ok(())
    })?;
    // The weighted sum over the visible prefix, two accumulators per dimension.
    let weights: Vec<(Val, Val)> = (0..chunk)
        .map(|u| {
            let uv = e.u(u);
            let ok = e.kb.cmp(CmpOp::Lt, uv, count);
            (e.kb.load(ps, uv, 1), ok)
        })
        .collect();
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
                let off = e.u(2 + comp);
                let at = e.kb.add(pbase, off);
                let at = e.kb.add(at, dd);
                e.kb.store(part, at, o);
            }
            Ok(())
        })?;
    }
    // The last split of this (row, token, head) to finish combines the records.
    let last = if splits == 1 {
        e.kb.bool(true)
    } else {
        let counters = e.mem(Buf::Counters, Scalar::U32, Access::ReadWrite);
        let seen = e.kb.shared(Scalar::U32, 1);
        e.kb.fence();
        e.kb.barrier();
        e.when(first, |e| {
            let one = e.u(1);
            let old = e.kb.atomic_fetch(ReduceOp::Add, counters, rth, one);
            e.kb.store(seen, zero_u, old);
            Ok(())
        })?;
        e.kb.barrier();
        let arrived = e.kb.load(seen, zero_u, 1);
        let before_last = e.u(splits - 1);
        e.kb.cmp(CmpOp::Eq, arrived, before_last)
    };
    e.when(last, |e| {
        if splits > 1 {
            e.kb.fence();
        }
        combine(e, root, part, rth, splits, sub)?;
        if splits > 1 {
            let counters = e.mem(Buf::Counters, Scalar::U32, Access::ReadWrite);
            e.when(first, |e| {
                e.kb.atomic(ReduceOp::Min, counters, rth, zero_u);
                Ok(())
            })?;
        }
        Ok(())
    })?;
    let rows = r * t * h;
    let mut l = launch(
        [rows, splits, 1],
        8 * r * c * groups * d + 4 * rows * splits * rec,
    );
    l.scratch = vec![(4 * rows * splits * rec) as u64];
    l.counters = if splits > 1 { rows } else { 0 };
    Ok(l)
}

/// Combines the `splits` records of (row, token, head) `rth` in `part` into `root`'s
/// `[r, t, h, d]` output.
fn combine(e: &mut Emit, root: Value, part: Mem, rth: Val, splits: usize, sub: u32) -> Result<()> {
    let d = e.g.ty(root).shape.last();
    let out = e.buffer(root, Access::Write)?;
    let lane = e.kb.special(Special::LocalX);
    let rec = e.u(d + 2);
    let splits_v = e.u(splits);
    let ninf = e.kb.f32(f32::NEG_INFINITY);
    let zero = e.kb.f32(0.0);
    let slot0 = e.kb.mul(rth, splits_v);
    // Every split's (m, l) loaded at once (the split count is known), then the maximum.
    let mut ms = Vec::with_capacity(splits);
    let mut ls = Vec::with_capacity(splits);
    let mut bases = Vec::with_capacity(splits);
    for s_ in 0..splits {
        let sv = e.u(s_);
        let slot = e.kb.add(slot0, sv);
        let at = e.kb.mul(slot, rec);
        let m = e.kb.load(part, at, 1);
        let one = e.u(1);
        let at1 = e.kb.add(at, one);
        ls.push(e.kb.load(part, at1, 1));
        ms.push(m);
        bases.push(at);
    }
    let mut big = ninf;
    for &m in &ms {
        big = e.kb.bin(BinOp::Max, big, m);
    }
    let mut weights = Vec::with_capacity(splits);
    let mut total = zero;
    for (&m, &l) in ms.iter().zip(&ls) {
        let live = e.kb.cmp(CmpOp::Ne, m, ninf);
        let x = e.kb.sub(m, big);
        let w = e.kb.un(UnOp::Exp, x);
        let w = e.kb.select(live, w, zero);
        total = e.kb.fma(l, w, total);
        weights.push(w);
    }
    // Lane-per-dimension, the rounds of dimensions straight-line (indices clamped, stores
    // guarded), so the records' loads can issue with the (m, l) loads above.
    let dv = e.u(d);
    let last_dim = e.u(d - 1);
    let two = e.u(2);
    let dstb = e.kb.mul(rth, dv);
    for i in 0..d.div_ceil(sub as usize) {
        let off = e.u(i * sub as usize);
        let dd = e.kb.add(lane, off);
        let ok = e.kb.cmp(CmpOp::Lt, dd, dv);
        let dd = e.kb.bin(BinOp::Min, dd, last_dim);
        let loads: Vec<Val> = bases
            .iter()
            .map(|&at| {
                let at2 = e.kb.add(at, two);
                let at2 = e.kb.add(at2, dd);
                e.kb.load(part, at2, 1)
            })
            .collect();
        let mut o = zero;
        for (os, &w) in loads.into_iter().zip(&weights) {
            o = e.kb.fma(os, w, o);
        }
        let y = e.kb.bin(BinOp::Div, o, total);
        let at = e.kb.add(dstb, dd);
        e.when(ok, |e| {
            e.kb.store(out, at, y);
            Ok(())
        })?;
    }
    Ok(())
}
