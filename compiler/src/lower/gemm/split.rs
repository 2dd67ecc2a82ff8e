//! The end of a tile whose `k` is split over `group_id.z` (`k_splits`): the parts' records,
//! their counter, and the sum in part order by the last part to finish.

use super::{Outputs, finish};
use crate::Result;
use crate::lower::expr::{Buf, Emit};
use poot_kir::{Access, BinOp, CmpOp, Scalar, Val};

/// A split `k`'s end: each work-group stores its partial sums (and its rows' partial sums of
/// squares) as part `z` of the tile's record, fences and counts itself in the tile's
/// counter; the last to count fences again, adds the parts in `z` order, finishes the
/// outputs and restores the counter to zero, so the result does not depend on which part
/// finishes last.
pub(super) fn split_finish(
    e: &mut Emit,
    outs: &[(Outputs, Vec<Val>, Val)],
    [gx, gy, z]: [Val; 3],
    [gxn, ks, rows]: [usize; 3],
) -> Result<()> {
    let o0 = &outs[0].0;
    let nm = o0.mms.len();
    let n = o0.n;
    let part = e.mem(Buf::Scratch(o0.root, 0), Scalar::F32, Access::ReadWrite);
    let nv = e.u(n);
    let plane = e.u(rows * n);
    let rows_v = e.u(rows);
    let ssq_base = e.u(ks * nm * rows * n);
    // Element (row `xrow`, column `first + j`) of matmul i in part `zz`, and the row's sum of
    // squares there.
    let at = |e: &mut Emit, [xrow, first, last_col]: [Val; 3], zz: Val, i: usize, j: usize| {
        let nmv = e.u(nm);
        let iv = e.u(i);
        let p = e.kb.mul(zz, nmv);
        let p = e.kb.add(p, iv);
        let p = e.kb.mul(p, plane);
        let jv = e.u(j);
        let col = e.kb.add(first, jv);
        let col = e.kb.bin(BinOp::Min, col, last_col);
        let r = e.kb.mul(xrow, nv);
        let p = e.kb.add(p, r);
        e.kb.add(p, col)
    };
    let ssq_at = |e: &mut Emit, xrow: Val, zz: Val| {
        let p = e.kb.mul(zz, rows_v);
        let p = e.kb.add(p, ssq_base);
        e.kb.add(p, xrow)
    };
    for (o, sums, ssq) in outs {
        let [_, xrow, row_ok] = o.row;
        let [first, last_col] = o.cols;
        for i in 0..nm {
            for j in 0..2 {
                let a = at(e, [xrow, first, last_col], z, i, j);
                let jv = e.u(j);
                let col = e.kb.add(first, jv);
                let ok = e.kb.cmp(CmpOp::Lt, col, nv);
                let ok = e.kb.bin(BinOp::And, ok, row_ok);
                let x = sums[2 * i + j];
                e.when(ok, |e| {
                    e.kb.store(part, a, x);
                    Ok(())
                })?;
            }
        }
        if let (Some(_), Some(lead)) = (o.norm, o.lead) {
            let a = ssq_at(e, xrow, z);
            let ok = e.kb.bin(BinOp::And, lead, row_ok);
            let x = *ssq;
            e.when(ok, |e| {
                e.kb.store(part, a, x);
                Ok(())
            })?;
        }
    }
    let gxv = e.u(gxn);
    let tile = e.kb.mul(gy, gxv);
    let tile = e.kb.add(tile, gx);
    let parts = e.u(ks);
    e.last_to_arrive(tile, parts, |e| {
        for (o, _, ssq) in outs {
            let rc = [o.row[1], o.cols[0], o.cols[1]];
            // Every part's loads first, then the sums in part order.
            let mut parts: Vec<Vec<Val>> = Vec::with_capacity(ks);
            for zz in 0..ks {
                let zv = e.u(zz);
                let mut xs = Vec::with_capacity(2 * nm + 1);
                for i in 0..nm {
                    for j in 0..2 {
                        let a = at(e, rc, zv, i, j);
                        xs.push(e.kb.load(part, a, 1));
                    }
                }
                if o.norm.is_some() {
                    let a = ssq_at(e, rc[0], zv);
                    xs.push(e.kb.load(part, a, 1));
                }
                parts.push(xs);
            }
            let mut total = parts[0].clone();
            for p in &parts[1..] {
                for (t, &x) in total.iter_mut().zip(p) {
                    *t = e.kb.add(*t, x);
                }
            }
            let ssq_total = if o.norm.is_some() {
                total[2 * nm]
            } else {
                *ssq
            };
            finish(e, o, &total[..2 * nm], ssq_total)?;
        }
        Ok(())
    })
}
