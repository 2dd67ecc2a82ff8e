//! The attention kernel: scores, masked softmax and the weighted sum of values, split over
//! the cache, with the combine of the splits done by the last split to finish, and for a
//! decode step the write of the new K/V rows into the cache.
//!
//! Invariants: a split covers one position per thread (`ATT_WARPS` subgroups; where the scores
//! go by lane groups, `scores::KEY_LANES`, a thread owns the position whose score its group
//! leaves in it, every lane of the group holding the same bits of that sum); hidden positions
//! reach the result only through selects (their scores become -inf, their weights are skipped),
//! never through a multiply, so whatever a hidden cache row holds cannot leak into it. A step
//! reads the K/V its position needs, not the whole cache: a hidden position reads position 0's
//! row instead of its own (one row every split shares), and with a causal prefix mask the
//! splits past the prefix load nothing (or, where their loads come before their branch,
//! position 0's rows) and visibility comes from the position slot, not a mask buffer. Each
//! split that is not alone writes its record (max score, sum of exponentials, unnormalised
//! output), fences, and counts itself in its (row, token, head)'s counter; the split that
//! counts last fences again, weighs each record by `exp(m_split - m)` in split order (every
//! record loaded at once) and restores the counter to zero, so the result does not depend on
//! which split finishes last and the counters are zero between dispatches. Where the device
//! runs work-groups in clusters and a decode attention (one token a row) has 2 to `MAX_CLUSTER`
//! splits (`Inst::Clustered`), the splits of a (row, head) form one cluster instead: where
//! several splits are live, each live split arrives at the cluster barrier before anything but
//! its loads and waits on it (every live split started) before it stores its record into split
//! 0's shared memory; all meet at the barrier again, and split 0 combines the records the same
//! way, with no fence, counter or scratch (which stay bound for devices without clusters).
//! Splits past the prefix exit without arriving (the barrier counts only threads that have not
//! exited), and a split alone touches no cluster barrier. With a fused write (`KvWrite`),
//! exactly one work-group stores each new row (the group's first query head, in the split
//! holding the position), and no work-group uses the cache's copy of that row: every reader
//! computes it into shared memory. Such an attention is the only dispatch of its entry that
//! writes its caches, so every split issues its key and value loads (rows that earlier steps
//! wrote) and its reads of the position slot (its rope positions among them, one value a
//! work-group) before its grid wait; a kernel without a fused write waits before its first
//! statement.
//!
//! `split` emits one split's work-group, `scores` its keys and their products with the query,
//! `combine` the combine of the last split to finish. A prefill chunk with a causal prefix
//! mask takes the tiled form instead (`tiled`, with invariants of its own): no splits, each
//! work-group a block of query tokens of one head.

mod combine;
mod scores;
mod split;
mod tiled;

use super::expr::Emit;
use super::kernels::{Launch, launch};
use crate::Result;
use cranelift_entity::SecondaryMap;
use poot_ir::{CmpOp as IrCmp, DType, Op, Value};
use poot_kir::{BinOp, CmpOp, Scalar, Special, Val};
use split::{Mode, Split};

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

/// Subgroups per attention work-group. A split covers one cache position per thread, so a
/// split is `ATT_WARPS * sub` positions: a decode step whose visible prefix fits one split
/// runs as one work-group per head with no combine.
pub(super) const ATT_WARPS: usize = 4;

/// The most splits that meet in a cluster (the portable cluster size of sm_90); more splits
/// meet through global memory on every target.
const MAX_CLUSTER: usize = 8;

/// A causal mask `iota(c) <= bound` (or `<`): a (row, token) sees exactly positions
/// `0 .. end`, with `end` computed from `bound` alone.
pub struct Prefix {
    /// The bound, of size 1 along the cache axis.
    bound: Value,
    /// `<=` (the bound itself is visible) rather than `<`.
    inclusive: bool,
}

/// The prefix form of `mask`, if it is a comparison of an `i32` iota along the cache axis
/// with an `i32` bound constant along it.
pub fn match_prefix(g: &poot_ir::Graph, mask: Value) -> Option<Prefix> {
    let Op::Compare(op) = g.nodes[mask].op else {
        return None;
    };
    let inclusive = match op {
        IrCmp::Le => true,
        IrCmp::Lt => false,
        IrCmp::Eq => return None,
    };
    let [key, bound] = g.nodes[mask].args[..] else {
        return None;
    };
    let (kt, bt) = (g.ty(key), g.ty(bound));
    let along = matches!(g.nodes[key].op, Op::Iota { axis } if axis + 1 == kt.shape.0.len());
    let flat = bt.shape.0.last().is_none_or(|&n| n == 1);
    (along && flat && kt.dtype == DType::I32 && bt.dtype == DType::I32)
        .then_some(Prefix { bound, inclusive })
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

/// Attention, split over the cache: each work-group computes, for one (row, token, head) and
/// one split of `ATT_WARPS * sub` cache positions (one per thread), the split's max score,
/// sum of exponentials and unnormalised output. Each subgroup mixes the values of its own
/// positions lane-per-dimension over their visible prefix, and the work-group sums the
/// subgroups' mixes in shared memory. Every key and value load is issued before the queries
/// are computed, so the kernel waits for memory about once before the mix. With a causal
/// prefix mask, the splits past the prefix do nothing and a prefix inside one split is
/// written straight to `root`; otherwise the last split to finish combines the records.
/// Prefill chunks with a causal prefix mask take `tiled::tiled` instead.
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
    let prefix = match_prefix(g, a.mask);
    if let (None, Some(p)) = (write, &prefix)
        && let Some(qt) = tiled::tokens_per_group(t, d, sub as usize)
    {
        return tiled::tiled(e, (root, a, p), [r, t, h, d, c, groups], qt, sub);
    }
    let chunk = ATT_WARPS * sub as usize;
    let splits = c.div_ceil(chunk);
    let rec = d + 2;
    // Where the device has clusters, a decode attention's (row, head) splits form one: the
    // records go straight into split 0's shared memory (`split::rest`). A prefill's grid has a
    // row of splits for every token, and there clusters cost more than they save: SmolLM2's
    // 64-token chunk took 7% longer on the H200 (BENCHMARKS.md, twenty-fourth session).
    let cluster = (t == 1 && (2..=MAX_CLUSTER).contains(&splits)).then_some([1, splits as u32, 1]);
    // The split's position arithmetic and its key and value loads, all `let`s. A decode
    // step's attention that writes the new K/V rows itself is the only dispatch of its entry
    // that writes its caches (`match_kv_write`), and the rows it reads besides the new one
    // were written by earlier steps, so it issues those loads (and the position slot's)
    // before its grid wait, while the q/k/v projection before it runs. A split past the
    // prefix issues its loads too (of position 0's rows) before it reaches its branch and
    // ends.
    e.kb.begin();
    let rth = e.kb.special(Special::GroupX);
    let split = e.kb.special(Special::GroupY);
    let hv = e.u(h);
    let th = e.u(t * h);
    let ri = e.kb.bin(BinOp::Div, rth, th);
    let rem = e.kb.bin(BinOp::Rem, rth, th);
    let ti = e.kb.bin(BinOp::Div, rem, hv);
    let hi = e.kb.bin(BinOp::Rem, rem, hv);
    let end = match &prefix {
        Some(p) => Some(prefix_end(e, p, [ri, hi, ti], c)?),
        None => None,
    };
    let n_live = match end {
        Some(end) if splits > 1 => Some(live_splits(e, end, chunk)),
        _ => None,
    };
    let mode = match n_live {
        _ if splits == 1 => Mode::Direct,
        None => Mode::Records,
        Some(n) => {
            let one = e.u(1);
            Mode::Either(e.kb.cmp(CmpOp::Eq, n, one), e.kb.cmp(CmpOp::Gt, n, one))
        }
    };
    let s = Split {
        a,
        write,
        root,
        dims: [d, c, groups, h / groups],
        sub,
        splits,
        at: [ri, ti, hi, rth, split],
        end,
        n_live,
        mode,
        cluster,
    };
    let loaded = split::loads(e, &s)?;
    let head = e.kb.end();
    if write.is_some() {
        e.loads_before_wait(head, Vec::new());
    } else {
        e.kb.append(head);
    }
    match n_live {
        Some(n) => {
            let active = e.kb.cmp(CmpOp::Lt, split, n);
            e.when(active, |e| split::rest(e, &s, loaded))?;
        }
        None => split::rest(e, &s, loaded)?,
    }
    let rows = r * t * h;
    let mut l = launch(
        [rows, splits, 1],
        8 * r * c * groups * d + 4 * rows * splits * rec,
    );
    if splits > 1 {
        l.scratch = vec![(4 * rows * splits * rec) as u64];
        l.counters = rows;
    }
    Ok(l)
}

/// The end (`u32`, at most `c`) of `p`'s visible prefix for (row, head, token) `rht`.
fn prefix_end(e: &mut Emit, p: &Prefix, rht: [Val; 3], c: usize) -> Result<Val> {
    let zero = e.u(0);
    let idx = e.broadcast_idx(p.bound, 4, &[rht[0], rht[1], rht[2], zero]);
    let b = e.value(p.bound, &idx)?;
    let top = e.kb.i32(c as i32 - i32::from(p.inclusive));
    let b = e.kb.bin(BinOp::Min, b, top);
    let end = if p.inclusive {
        let one = e.kb.i32(1);
        e.kb.add(b, one)
    } else {
        b
    };
    let none = e.kb.i32(0);
    let end = e.kb.bin(BinOp::Max, end, none);
    Ok(e.kb.bitcast(end, Scalar::U32))
}

/// The number of splits of `chunk` positions holding a position of the prefix ending at
/// `end`: at least one, so a row that sees nothing still gets its (NaN) result.
fn live_splits(e: &mut Emit, end: Val, chunk: usize) -> Val {
    let one = e.u(1);
    let end = e.kb.bin(BinOp::Max, end, one);
    let round = e.u(chunk - 1);
    let x = e.kb.add(end, round);
    let cv = e.u(chunk);
    e.kb.bin(BinOp::Div, x, cv)
}
