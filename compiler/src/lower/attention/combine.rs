//! The combine of an attention's splits: every split's record (its max score `m`, sum of
//! exponentials `l` and unnormalised output `o`) weighed by `exp(m_split - m)`, in split
//! order. It runs in the last split to finish (`combine`), or in the kernel reading the
//! attention's output, while that kernel copies its input (`combine_at`). Both use
//! `weigh` and `mix`, so both round alike. The other invariants are the attention module's.

use crate::Result;
use crate::lower::expr::Emit;
use poot_kir::{BinOp, CmpOp, Mem, Special, UnOp, Val};

/// Where an attention's records lie in their buffer: (row, token, head) `rth`'s split `s` is
/// slot `rth * splits + s`; a slot's `d` output floats start at `slot * d` (16 bytes aligned
/// where `d` is a multiple of 4), and every slot's `(m, l)` pair follows them all, at
/// `stats + 2 * slot` (`stats` a multiple of 4).
#[derive(Clone, Copy, Debug)]
pub(super) struct Layout {
    /// Head size.
    pub(super) d: usize,
    /// Splits per (row, token, head).
    pub(super) splits: usize,
    /// (row, token, head)s.
    pub(super) rows: usize,
}

impl Layout {
    fn stats(&self) -> usize {
        (self.rows * self.splits * self.d).next_multiple_of(4)
    }

    /// Bytes of the records buffer.
    pub(super) fn bytes(&self) -> usize {
        4 * (self.stats() + 2 * self.rows * self.splits)
    }

    /// The slot of split `s` of (row, token, head) `rth`.
    pub(super) fn slot(&self, e: &mut Emit, rth: Val, s: Val) -> Val {
        let splits = e.u(self.splits);
        let x = e.kb.mul(rth, splits);
        e.kb.add(x, s)
    }

    /// The element of dimension `dd` of `slot`'s output.
    pub(super) fn out_at(&self, e: &mut Emit, slot: Val, dd: Val) -> Val {
        let dv = e.u(self.d);
        let x = e.kb.mul(slot, dv);
        e.kb.add(x, dd)
    }

    /// The element of `slot`'s `m` (its `l` follows it).
    pub(super) fn stats_at(&self, e: &mut Emit, slot: Val) -> Val {
        let two = e.u(2);
        let base = e.u(self.stats());
        let x = e.kb.mul(slot, two);
        e.kb.add(base, x)
    }
}

/// A (row, token, head)'s records, weighed: each split's slot, its weight `exp(m_s - m)`
/// and whether it holds any position, and the weighted sum of the `l`s.
struct Weighed {
    slots: Vec<Val>,
    weights: Vec<(Val, Val)>,
    total: Val,
}

/// Loads every split's `(m, l)` of (row, token, head) `rth` at once (the split count is
/// known) and weighs them. With `n_live`, only the first `n_live` splits were written this
/// step: a split past them reads the last live record and counts as empty.
fn weigh(e: &mut Emit, part: Mem, lay: Layout, rth: Val, n_live: Option<Val>) -> Weighed {
    let ninf = e.kb.f32(f32::NEG_INFINITY);
    let zero = e.kb.f32(0.0);
    let one = e.u(1);
    let last_live = n_live.map(|n| e.kb.sub(n, one));
    let mut slots = Vec::with_capacity(lay.splits);
    let mut ms = Vec::with_capacity(lay.splits);
    let mut ls = Vec::with_capacity(lay.splits);
    for s_ in 0..lay.splits {
        let sv = e.u(s_);
        let (sv, fresh) = match last_live {
            Some(ll) => {
                let fresh = e.kb.cmp(CmpOp::Le, sv, ll);
                (e.kb.bin(BinOp::Min, sv, ll), Some(fresh))
            }
            None => (sv, None),
        };
        let slot = lay.slot(e, rth, sv);
        let at = lay.stats_at(e, slot);
        let ml = e.kb.load(part, at, 2);
        let m = e.kb.extract(ml, 0);
        let m = match fresh {
            Some(f) => e.kb.select(f, m, ninf),
            None => m,
        };
        ls.push(e.kb.extract(ml, 1));
        ms.push(m);
        slots.push(slot);
    }
    let mut big = ninf;
    for &m in &ms {
        big = e.kb.bin(BinOp::Max, big, m);
    }
    let mut weights = Vec::with_capacity(lay.splits);
    let mut total = zero;
    for (&m, &l) in ms.iter().zip(&ls) {
        let live = e.kb.cmp(CmpOp::Ne, m, ninf);
        let x = e.kb.sub(m, big);
        let w = e.kb.un(UnOp::Exp, x);
        let w = e.kb.select(live, w, zero);
        let t = e.kb.fma(l, w, total);
        total = e.kb.select(live, t, total);
        weights.push((w, live));
    }
    Weighed {
        slots,
        weights,
        total,
    }
}

/// Dimensions `dd .. dd + width` of the combined output: each split's `width` outputs loaded
/// at once (`width` 1, 2 or 4, dividing `d` where above 1), summed by weight in split order,
/// divided by the total.
fn mix(e: &mut Emit, part: Mem, lay: Layout, w: &Weighed, dd: Val, width: u8) -> Vec<Val> {
    let zero = e.kb.f32(0.0);
    let loads: Vec<Val> = w
        .slots
        .iter()
        .map(|&slot| {
            let at = lay.out_at(e, slot, dd);
            e.kb.load(part, at, width)
        })
        .collect();
    (0..width)
        .map(|c| {
            let mut o = zero;
            for (&os, &(wt, live)) in loads.iter().zip(&w.weights) {
                let x = if width == 1 { os } else { e.kb.extract(os, c) };
                let f = e.kb.fma(x, wt, o);
                o = e.kb.select(live, f, o);
            }
            e.kb.bin(BinOp::Div, o, w.total)
        })
        .collect()
}

/// Combines the records of (row, token, head) `rth` in `part` into `out` (`[r, t, h, d]`),
/// of which the first `n_live` splits were written this step where given; one dimension per
/// thread of `span`.
pub(super) fn combine(
    e: &mut Emit,
    out: Mem,
    part: Mem,
    lay: Layout,
    rth: Val,
    span: usize,
    n_live: Option<Val>,
) -> Result<()> {
    let local = e.kb.special(Special::LocalX);
    let weighed = weigh(e, part, lay, rth, n_live);
    // A dimension per thread, the rounds of dimensions straight-line (indices clamped, stores
    // guarded), so the records' loads can issue with the (m, l) loads above.
    let d = lay.d;
    let dv = e.u(d);
    let last_dim = e.u(d - 1);
    let dstb = e.kb.mul(rth, dv);
    for i in 0..d.div_ceil(span) {
        let off = e.u(i * span);
        let dd = e.kb.add(local, off);
        let ok = e.kb.cmp(CmpOp::Lt, dd, dv);
        let dd = e.kb.bin(BinOp::Min, dd, last_dim);
        let y = mix(e, part, lay, &weighed, dd, 1)[0];
        let at = e.kb.add(dstb, dd);
        e.when(ok, |e| {
            e.kb.store(out, at, y);
            Ok(())
        })?;
    }
    Ok(())
}

/// Dimensions `dd .. dd + width` of (row, token, head) `rth`'s output, combined from the
/// records in `part`, of which the first `n_live` splits were written this step.
pub(super) fn combine_at(
    e: &mut Emit,
    part: Mem,
    lay: Layout,
    [rth, dd]: [Val; 2],
    n_live: Val,
    width: u8,
) -> Vec<Val> {
    let weighed = weigh(e, part, lay, rth, Some(n_live));
    mix(e, part, lay, &weighed, dd, width)
}
