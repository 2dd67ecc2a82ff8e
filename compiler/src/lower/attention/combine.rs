//! The combine of an attention's splits: the last split of a (row, token, head) to finish
//! weighs every split's record by `exp(m_split - m)`, in split order. The invariants are
//! the attention module's.

use crate::Result;
use crate::lower::expr::Emit;
use poot_kir::{BinOp, CmpOp, Mem, Special, UnOp, Val};

/// Combines the records of (row, token, head) `rth` into `out` (`[r, t, h, d]`): `splits`
/// records in `part` (global scratch or a shared array) from record `slot0` on, of which the
/// first `n_live` were written this step where given; one dimension per thread of `span`.
pub(super) fn combine(
    e: &mut Emit,
    out: Mem,
    (part, slot0, rth): (Mem, Val, Val),
    [d, splits, span]: [usize; 3],
    n_live: Option<Val>,
) -> Result<()> {
    let local = e.kb.special(Special::LocalX);
    let rec = e.u(d + 2);
    let ninf = e.kb.f32(f32::NEG_INFINITY);
    let zero = e.kb.f32(0.0);
    let one = e.u(1);
    let last_live = n_live.map(|n| e.kb.sub(n, one));
    // Every split's (m, l) loaded at once (the split count is known), then the maximum; a
    // split past the live ones reads the last live record and counts as empty.
    let mut ms = Vec::with_capacity(splits);
    let mut ls = Vec::with_capacity(splits);
    let mut bases = Vec::with_capacity(splits);
    for s_ in 0..splits {
        let sv = e.u(s_);
        let (sv, fresh) = match last_live {
            Some(ll) => {
                let fresh = e.kb.cmp(CmpOp::Le, sv, ll);
                (e.kb.bin(BinOp::Min, sv, ll), Some(fresh))
            }
            None => (sv, None),
        };
        let slot = e.kb.add(slot0, sv);
        let at = e.kb.mul(slot, rec);
        let m = e.kb.load(part, at, 1);
        let m = match fresh {
            Some(f) => e.kb.select(f, m, ninf),
            None => m,
        };
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
        let t = e.kb.fma(l, w, total);
        total = e.kb.select(live, t, total);
        weights.push((w, live));
    }
    // A dimension per thread, the rounds of dimensions straight-line (indices clamped, stores
    // guarded), so the records' loads can issue with the (m, l) loads above.
    let dv = e.u(d);
    let last_dim = e.u(d - 1);
    let two = e.u(2);
    let dstb = e.kb.mul(rth, dv);
    for i in 0..d.div_ceil(span) {
        let off = e.u(i * span);
        let dd = e.kb.add(local, off);
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
        for (os, &(w, live)) in loads.into_iter().zip(&weights) {
            let f = e.kb.fma(os, w, o);
            o = e.kb.select(live, f, o);
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
