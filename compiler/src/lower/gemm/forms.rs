//! The two forms of a tile's products and epilogue (`Inst::Matrix`): each thread's own
//! multiply-adds (`fma_form`) and tensor cores over exact tf32 parts (`mma_form`). Both keep
//! the tiled matmul's invariants (`gemm`'s module docs): the staging is shared, only the
//! products and the thread-to-output map differ.

use super::coded::Coded;
use super::{TM, TN, Tile, UNIT, outputs, step_loop, tile_end, w_at, w_row};
use crate::Result;
use crate::lower::expr::Emit;
use poot_kir::{BinOp, CmpOp, Scalar, Val};

/// The form without tensor cores: every thread computes the same output rows it stages
/// (`tr + 16 * i`), columns `2 * (t % 8)` and the next of each matmul, reading each of its
/// rows four inputs at a time; each output sums its products in `k` order.
pub(super) fn fma_form(e: &mut Emit, t: &Tile) -> Result<()> {
    let (rm, nm, u) = (t.rm, t.nm, t.u);
    let tk = UNIT * u;
    let two = e.u(2);
    let tc2 = e.kb.mul(t.tc, two);
    // The sums of (row i, matmul mi, column j) at (i * nm + mi) * 2 + j.
    let (acc, ssq) = step_loop(e, t, 2 * nm * rm, None, false, |e, next| {
        let row_ats: Vec<Val> = (0..rm)
            .map(|i| {
                let o = e.u(TM * i);
                let r = e.kb.add(t.tr, o);
                let s_ = e.u(tk + 4);
                e.kb.mul(r, s_)
            })
            .collect();
        for g in 0..tk / 4 {
            let xs: Vec<Val> = row_ats
                .iter()
                .map(|&r| {
                    let o = e.u(4 * g);
                    let at = e.kb.add(r, o);
                    e.kb.load(t.xt, at, 4)
                })
                .collect();
            for c in 0..4 {
                let kk = 4 * g + c;
                for mi in 0..nm {
                    let o = e.u(w_at(kk, nm, false, u) + mi * TN);
                    let at = e.kb.add(o, tc2);
                    let w2 = e.kb.load(t.wt, at, 2);
                    for j in 0..2 {
                        let wj = e.kb.extract(w2, j as u8);
                        for (i, &x4) in xs.iter().enumerate() {
                            let x1 = e.kb.extract(x4, c as u8);
                            let a = (i * nm + mi) * 2 + j;
                            next[a] = e.kb.fma(x1, wj, next[a]);
                        }
                    }
                }
            }
        }
        Ok(())
    })?;
    let rows_v = e.u(t.rows);
    let first_col = e.kb.add(t.n0, tc2);
    let zero_u = e.u(0);
    let lead = e.kb.cmp(CmpOp::Eq, t.tc, zero_u);
    let mut outs = Vec::with_capacity(rm);
    for (i, &(row, xrow)) in t.trows.iter().enumerate() {
        let row_ok = e.kb.cmp(CmpOp::Lt, row, rows_v);
        let o = outputs(t, [row, xrow, row_ok], first_col, Some(lead));
        outs.push((o, acc[2 * nm * i..2 * nm * (i + 1)].to_vec(), ssq[i]));
    }
    tile_end(e, t, &outs)
}

/// `x` as the sum of two values exact in tf32: its pattern with the low 13 bits cleared,
/// and the rest (exact in f32) cleared the same way; the second part's lost bits are below
/// `2^-20 |x|`. An infinite `x` gives a NaN second part.
fn tf32_split(e: &mut Emit, x: Val) -> [Val; 2] {
    let mask = e.kb.u32(0xFFFF_E000);
    let clear = |e: &mut Emit, v: Val| {
        let bits = e.kb.bitcast(v, Scalar::U32);
        let bits = e.kb.bin(BinOp::And, bits, mask);
        e.kb.bitcast(bits, Scalar::F32)
    };
    let hi = clear(e, x);
    let rest = e.kb.sub(x, hi);
    [hi, clear(e, rest)]
}

/// Where a subgroup's fragments are in a tile of the tensor-core form: lane `l` holds rows
/// `l / 4` and `l / 4 + 8` of its 16-row block, columns `2 (l % 4)` and the next of each of
/// its 8-column blocks.
pub(super) struct Frags {
    /// The lane's two rows in the tile.
    pub rows: [Val; 2],
    /// Where the lane's elements of A start in `xt`, for each of its rows.
    ra: [Val; 2],
    /// The first column of each of the subgroup's blocks, and where the lane's elements of B
    /// of that block start in `wt`.
    pub blocks: Vec<Val>,
    bbase: Vec<Val>,
    /// `2 (l % 4)`: the lane's first column in a block.
    pub q2: Val,
}

impl Frags {
    /// The lane's elements of A over `k` `8 c8 ..` of the step, each as its two tf32 parts
    /// (`tf32_split`): `[hi, lo]`.
    pub fn a(&self, e: &mut Emit, t: &Tile, c8: usize) -> [[Val; 4]; 2] {
        let mut a = Vec::with_capacity(4);
        for (dk, r) in [(0, 0), (0, 1), (4, 0), (4, 1)] {
            let o = e.u(8 * c8 + dk);
            let at = e.kb.add(self.ra[r], o);
            let x = e.kb.load(t.xt, at, 1);
            a.push(tf32_split(e, x));
        }
        [0, 1].map(|p| [a[0][p], a[1][p], a[2][p], a[3][p]])
    }

    /// The lane's element of B of block `b` of matmul `mi` at `k` `kk` (`l % 4` more) of
    /// the step, as staged; B's elements are those of `kk` `8 c8` and `8 c8 + 4`.
    pub fn b(&self, e: &mut Emit, t: &Tile, [b, mi, kk]: [usize; 3]) -> Val {
        let o = e.u(w_at(kk, t.nm, true, t.u) + mi * TN);
        let at = e.kb.add(self.bbase[b], o);
        e.kb.load(t.wt, at, 1)
    }
}

/// The form with tensor cores (`Expr::Mma`, 16x8 output blocks over 8 of `k`): subgroup `w`
/// of a 64-row tile computes rows `16 w ..` of both 8-column blocks of each matmul, of a
/// 32-row tile rows `16 (w / 2) ..` of block `w % 2` (`Frags`). Where the weights are coded
/// (`Coded`), each product is two exact tf32 products of the code (`Coded::products`);
/// otherwise each product `x w` is three exact tf32 products (`tf32_split`: `lo(x) hi(w) +
/// hi(x) lo(w) + hi(x) hi(w)`, within `3 * 2^-20 |x w|` of it); each of the three is summed
/// on its own (by the device in blocks of 8 `k`, the blocks in `k` order), so three chains of
/// `mma` run side by side, and an output is the two low sums added, then the high one. The
/// staged rows' sums of squares reach the output rows' lanes through shared memory.
pub(super) fn mma_form(e: &mut Emit, t: &Tile, coded: Option<&Coded>) -> Result<()> {
    let (rm, nm) = (t.rm, t.nm);
    let thirty_two = e.u(32);
    let w = e.kb.bin(BinOp::Div, t.local, thirty_two);
    let lane = e.kb.bin(BinOp::Rem, t.local, thirty_two);
    let four = e.u(4);
    let g = e.kb.bin(BinOp::Div, lane, four);
    let q = e.kb.bin(BinOp::Rem, lane, four);
    let sixteen = e.u(16);
    let eight = e.u(8);
    let two = e.u(2);
    let zero_u = e.u(0);
    let q_lead = e.kb.cmp(CmpOp::Eq, q, zero_u);
    // The subgroup's first row in the tile, the first columns of its blocks, and whether its
    // lanes of `q == 0` store their rows' partial sums of squares in a split (the subgroup
    // holding the rows' first block does).
    let (rb, blocks, first_block) = if rm == 4 {
        (w, vec![zero_u, eight], q_lead)
    } else {
        let rb = e.kb.bin(BinOp::Div, w, two);
        let cb = e.kb.bin(BinOp::Rem, w, two);
        let cb0 = e.kb.cmp(CmpOp::Eq, cb, zero_u);
        let lead = e.kb.bin(BinOp::And, q_lead, cb0);
        (rb, vec![e.kb.mul(cb, eight)], lead)
    };
    let nb = blocks.len();
    let r0 = e.kb.mul(rb, sixteen);
    let r0 = e.kb.add(r0, g);
    let r1 = e.kb.add(r0, eight);
    let xs = e.u(UNIT * t.u + 4);
    let ra = [r0, r1].map(|r| {
        let a = e.kb.mul(r, xs);
        e.kb.add(a, q)
    });
    let wr = e.u(w_row(nm, true));
    let qb = e.kb.mul(q, wr);
    let qb = e.kb.add(qb, g);
    let bbase: Vec<Val> = blocks.iter().map(|&c| e.kb.add(qb, c)).collect();
    let q2 = e.kb.mul(q, two);
    let f = Frags {
        rows: [r0, r1],
        ra,
        blocks,
        bbase,
        q2,
    };
    let zero = e.kb.f32(0.0);
    // D of (matmul mi, block b) at (mi * nb + b) * 4 + i: coded, one sum; otherwise one for
    // each of the three products (`lo(x) hi(w)`, `hi(x) lo(w)`, `hi(x) hi(w)`, `d` apart,
    // each its own chain of dependent `mma`s).
    let d = 4 * nm * nb;
    let chains = if coded.is_some() { 1 } else { 3 };
    let (acc, staged) = step_loop(e, t, chains * d, coded, true, |e, next| {
        match coded {
            Some(c) => c.products(e, t, &f, next),
            None => three_products(e, t, &f, d, next),
        }
        Ok(())
    })?;
    // Each output: coded, its sum; otherwise its two low products' sums, then the high one's.
    let sums: Vec<Val> = if coded.is_some() {
        acc
    } else {
        (0..d)
            .map(|i| {
                let lo = e.kb.add(acc[i], acc[d + i]);
                e.kb.add(lo, acc[2 * d + i])
            })
            .collect()
    };
    // The output rows' sums of squares, from the threads that staged them.
    let ssq = match t.norm {
        Some(_) => {
            let sq = e.kb.shared(Scalar::F32, (TM * rm) as u32);
            let lead = e.kb.cmp(CmpOp::Eq, t.tc, zero_u);
            e.when(lead, |e| {
                for (i, &v) in staged.iter().enumerate() {
                    let o = e.u(TM * i);
                    let at = e.kb.add(t.tr, o);
                    e.kb.store(sq, at, v);
                }
                Ok(())
            })?;
            e.kb.barrier();
            [r0, r1].map(|r| e.kb.load(sq, r, 1))
        }
        None => [zero; 2],
    };
    let rows_v = e.u(t.rows);
    let last_row = e.u(t.rows - 1);
    let mut outs = Vec::with_capacity(2 * nb);
    for (ri, r) in [r0, r1].into_iter().enumerate() {
        let row = e.kb.add(t.m0, r);
        let xrow = e.kb.bin(BinOp::Min, row, last_row);
        let row_ok = e.kb.cmp(CmpOp::Lt, row, rows_v);
        for (b, &c) in f.blocks.iter().enumerate() {
            let first = e.kb.add(t.n0, c);
            let first = e.kb.add(first, q2);
            let lead = (b == 0).then_some(first_block);
            let o = outputs(t, [row, xrow, row_ok], first, lead);
            let sums = (0..nm)
                .flat_map(|mi| {
                    let at = (mi * nb + b) * 4 + 2 * ri;
                    [sums[at], sums[at + 1]]
                })
                .collect();
            outs.push((o, sums, ssq[ri]));
        }
    }
    tile_end(e, t, &outs)
}

/// One step's products of plain weights: the three products of each `x w` (see `mma_form`)
/// into their chains, `d` apart in `next`.
fn three_products(e: &mut Emit, t: &Tile, f: &Frags, d: usize, next: &mut [Val]) {
    let nb = f.blocks.len();
    for c8 in 0..UNIT * t.u / 8 {
        let [a_hi, a_lo] = f.a(e, t, c8);
        for mi in 0..t.nm {
            for b in 0..nb {
                let bv = [0, 4].map(|dk| {
                    let x = f.b(e, t, [b, mi, 8 * c8 + dk]);
                    tf32_split(e, x)
                });
                let b_hi = [bv[0][0], bv[1][0]];
                let b_lo = [bv[0][1], bv[1][1]];
                let pairs = [(a_lo, b_hi), (a_hi, b_lo), (a_hi, b_hi)];
                for (p, (pa, pb)) in pairs.into_iter().enumerate() {
                    let at = p * d + (mi * nb + b) * 4;
                    let c: [Val; 4] = next[at..at + 4].try_into().expect("four");
                    let r = e.kb.expr(poot_kir::Expr::Mma { a: pa, b: pb, c });
                    for i in 0..4 {
                        next[at + i] = e.kb.extract(r, i as u8);
                    }
                }
            }
        }
    }
}
