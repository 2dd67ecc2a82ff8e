//! The scores of one attention split: the keys each thread reads and their dot products with
//! the query, which sits in shared memory.
//!
//! Invariants: with heads a multiple of `4 * KEY_LANES` wide the scores go by lane groups: a
//! group's lanes read one key row together and sum its product with butterflies, so every
//! lane of the group holds the same bits, and a thread owns the position whose score its
//! group leaves in it (`owned`); otherwise a thread reads its own position's row. Either way
//! a hidden position reads position 0's row (the caller masks its score), and the new
//! position's key comes from shared memory, never from the cache row being written.

use crate::lower::expr::Emit;
use poot_kir::{BinOp, CmpOp, Mem, Val};

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

/// Lanes that share one position's key row when the scores go by lane groups: each loads an
/// eighth of the row, so one 4-lane load of the group reads 128 contiguous bytes of a 64-wide
/// head (one cache line), and a subgroup's load touches 4 rows. A lane reading a whole row
/// by itself made each 4-lane load of the subgroup touch 32 rows; the L1 serves a load one
/// line at a time, and with 242 registers a thread the attention ran one subgroup per
/// scheduler, waiting on those loads. On the H200, SmolLM2's CUDA decode step (positions 0
/// to 199) went from 392.6-395.3 to 380.8-383.8 us (groups of 4 lanes: 383.2-384.9), and
/// over positions 0 to 999 from 448.9 to 433.1 us (groups of 4: 438.5).
pub(super) const KEY_LANES: usize = 8;

/// Whether the scores go by lane groups of `KEY_LANES` (a head of whole 4-lane loads per
/// lane).
pub(super) fn grouped(d: usize, subn: usize) -> bool {
    subn >= KEY_LANES && subn.is_multiple_of(KEY_LANES) && d.is_multiple_of(4 * KEY_LANES)
}

/// The keys a lane holds: its own position's row, or a part of one row per round.
pub(super) enum Keys {
    Own(Vec<Val>),
    Grouped(Vec<Round>),
}

/// One round of grouped scores: the position group `lane / KEY_LANES` scores (0 past the
/// subgroup's visible prefix) and the lane's 4-lane parts of its key row.
pub(super) struct Round {
    pos: Val,
    parts: Vec<Val>,
}

/// The grouped key loads: in round `r`, the lanes of group `g` read the row of subgroup
/// position `r * (subn / KEY_LANES) + g`, lane `j` of the group its parts `i * KEY_LANES + j`.
#[allow(clippy::too_many_arguments)]
pub(super) fn group_keys(
    e: &mut Emit,
    km: Mem,
    lane: Val,
    w0: Val,
    count: Val,
    row_of: &dyn Fn(&mut Emit, Val) -> Val,
    d: usize,
    subn: usize,
) -> Keys {
    let q = e.u(KEY_LANES);
    let g = e.kb.bin(BinOp::Div, lane, q);
    let j = e.kb.bin(BinOp::Rem, lane, q);
    let zero = e.u(0);
    let rounds = (0..KEY_LANES)
        .map(|r| {
            let first = e.u(r * (subn / KEY_LANES));
            let u = e.kb.add(first, g);
            let seen = e.kb.cmp(CmpOp::Lt, u, count);
            let pos = e.kb.add(w0, u);
            let pos = e.kb.select(seen, pos, zero);
            let base = row_of(e, pos);
            let parts = (0..d / (4 * KEY_LANES))
                .map(|i| {
                    let o = e.u(4 * i * KEY_LANES);
                    let at = e.kb.add(base, o);
                    let four = e.u(4);
                    let jo = e.kb.mul(j, four);
                    let at = e.kb.add(at, jo);
                    e.kb.load(km, at, 4)
                })
                .collect();
            Round { pos, parts }
        })
        .collect();
    Keys::Grouped(rounds)
}

/// The grouped scores' dot products: each round's parts times `q`'s (the new position's
/// key parts from shared memory where fused), summed over the group by butterflies (each
/// adds two commuted operands, so every lane of a group holds the same bits of its row's
/// product); lane `l` keeps round `l % KEY_LANES`'s, the product of the position it owns.
fn group_dot(e: &mut Emit, qs: Mem, lane: Val, rounds: &[Round], fresh: Option<(Val, Mem)>) -> Val {
    let q = e.u(KEY_LANES);
    let j = e.kb.bin(BinOp::Rem, lane, q);
    let four = e.u(4);
    let jo = e.kb.mul(j, four);
    let n_parts = rounds.first().map_or(0, |r| r.parts.len());
    let offsets: Vec<Val> = (0..n_parts)
        .map(|i| {
            let o = e.u(4 * i * KEY_LANES);
            e.kb.add(o, jo)
        })
        .collect();
    let qv: Vec<Val> = offsets.iter().map(|&o| e.kb.load(qs, o, 4)).collect();
    let zero = e.kb.f32(0.0);
    let mut dots = Vec::with_capacity(rounds.len());
    for round in rounds {
        let is_new = fresh.map(|(at, ks)| (e.kb.cmp(CmpOp::Eq, round.pos, at), ks));
        let mut acc = [zero; 4];
        for (i, &kv) in round.parts.iter().enumerate() {
            let new = is_new.map(|(n, ks)| (n, e.kb.load(ks, offsets[i], 4)));
            for (c, a) in acc.iter_mut().enumerate() {
                let mut k = e.kb.extract(kv, c as u8);
                if let Some((n, nv)) = new {
                    let x = e.kb.extract(nv, c as u8);
                    k = e.kb.select(n, x, k);
                }
                let x = e.kb.extract(qv[i], c as u8);
                *a = e.kb.fma(x, k, *a);
            }
        }
        let l = e.kb.add(acc[0], acc[1]);
        let r = e.kb.add(acc[2], acc[3]);
        let mut t = e.kb.add(l, r);
        let mut m = 1;
        while m < KEY_LANES {
            let o = e.kb.expr(poot_kir::Expr::ShuffleXor(t, m as u32));
            t = e.kb.add(t, o);
            m *= 2;
        }
        dots.push(t);
    }
    let mut dot = dots[0];
    for (r, &x) in dots.iter().enumerate().skip(1) {
        let rv = e.u(r);
        let mine = e.kb.cmp(CmpOp::Eq, j, rv);
        dot = e.kb.select(mine, x, dot);
    }
    dot
}

/// The position within its subgroup that `lane` owns when the scores go by lane groups: the
/// one whose score its group leaves in it (round `lane % KEY_LANES` of group
/// `lane / KEY_LANES`).
pub(super) fn owned(e: &mut Emit, lane: Val, subn: usize) -> Val {
    let q = e.u(KEY_LANES);
    let per_round = e.u(subn / KEY_LANES);
    let r = e.kb.bin(BinOp::Rem, lane, q);
    let g = e.kb.bin(BinOp::Div, lane, q);
    let x = e.kb.mul(r, per_round);
    e.kb.add(x, g)
}

/// A thread's own key row, from element `base` of `km` (4-lane loads when the head is a
/// multiple of 4).
pub(super) fn own_keys(e: &mut Emit, km: Mem, base: Val, d: usize) -> Keys {
    let kl = if d.is_multiple_of(4) { 4 } else { 1 };
    let mut keys = Vec::with_capacity(d);
    for i in 0..d / kl {
        let o = e.u(kl * i);
        let at = e.kb.add(base, o);
        let kv = e.kb.load(km, at, kl as u8);
        for c in 0..kl {
            keys.push(if kl == 1 {
                kv
            } else {
                e.kb.extract(kv, c as u8)
            });
        }
    }
    Keys::Own(keys)
}

/// The dot product of the query in `qs` with the key of the position `pos` this thread owns;
/// where the attention writes the cache, `fresh` holds the new position and its key row in
/// shared memory, which replaces the cache's copy.
pub(super) fn dot(
    e: &mut Emit,
    keys: Keys,
    qs: Mem,
    lane: Val,
    pos: Val,
    fresh: Option<(Val, Mem)>,
) -> Val {
    match keys {
        Keys::Own(keys) => {
            let keys = match fresh {
                Some((at, ks)) => {
                    let is_new = e.kb.cmp(CmpOp::Eq, pos, at);
                    let mut out = Vec::with_capacity(keys.len());
                    for (j, &k) in keys.iter().enumerate() {
                        let jv = e.u(j);
                        let x = e.kb.load(ks, jv, 1);
                        out.push(e.kb.select(is_new, x, k));
                    }
                    out
                }
                None => keys,
            };
            dot_q(e, qs, &keys)
        }
        Keys::Grouped(rounds) => group_dot(e, qs, lane, &rounds, fresh),
    }
}
