//! The tiled attention of a prefill chunk: one work-group for a block of query tokens of one
//! head, which stages the keys and values of `BLOCK` cache positions at a time in shared
//! memory and runs an online softmax over them, so each cache row is read once a block of
//! tokens instead of once a token (the split form's L2 traffic grows with the square of the
//! chunk: a quarter of SmolLM2's 256-token chunk, BENCHMARKS.md, twenty-ninth session).
//!
//! Invariants: the `tokens` query rows of a work-group are `lanes` consecutive threads each
//! (`lanes` divides the subgroup, so a row's reductions are butterflies within a subgroup,
//! each adding or comparing two commuted operands: every lane of a row holds the same bits);
//! thread `j` of a row scores positions `j + lanes * i` of a block and owns dimensions
//! `j * own .. (j + 1) * own` of the row's output. Only a causal prefix mask takes this form:
//! a row sees positions `0 .. end` of its token, the loop covers the work-group's largest
//! `end` (uniform: every barrier is reached by all threads), and positions past it read
//! position 0's row. Hidden positions reach the result only through selects (their scores
//! become -inf, their values are skipped), never through a multiply. The running maximum
//! starts at -inf and a row that has seen nothing yet subtracts 0 instead, so no `inf - inf`
//! arises. Token blocks run longest first (the last block of a causal chunk sees the most
//! positions), so the longest work-groups do not start last. A thread fetches its part of the
//! next block's rows into registers (carried by the loop) while it scores and mixes the
//! current block, so the loads' latency hides behind that work; the last block fetches
//! nothing.

use super::{ATT_WARPS, Prefix, prefix_end};
use crate::Result;
use crate::lower::expr::Emit;
use crate::lower::kernels::{Launch, group_reduce, launch};
use crate::lower::place::Attention;
use poot_ir::Value;
use poot_kir::{Access, BinOp, CmpOp, Expr, ReduceOp, Scalar, Special, UnOp, Val};

/// Cache positions a work-group stages at a time.
const BLOCK: usize = 32;

/// Floats between staged key rows: 4 more than the head, so the 4-wide loads of a row's
/// lanes (rows `j + lanes * i`) fall in distinct banks.
fn key_stride(d: usize) -> usize {
    d + 4
}

/// Query tokens a work-group of the tiled form takes for a chunk of `t` tokens with heads of
/// size `d`, or `None` where the form does not apply (one token, or no row width that fits
/// the head): the fewest whose rows fit (4, with a subgroup a row, where the head allows),
/// so a chunk has the most work-groups, each with the shortest chain of blocks. On the H200
/// (`poot bench --profile`, BENCHMARKS.md, thirty-first session), 4 tokens a work-group
/// against the most that still gave 128 work-groups took the 256-token attention of SmolLM2
/// from 616.5 to 365.1 us a chunk (16 tokens before) and of Qwen2.5-0.5B from 662.9 to
/// 449.2 (16 before); at 128 tokens SmolLM2's went from 194.1 to 177.0 and Qwen's from
/// 151.7 to 166.8 (8 before), chunks within 0.3% either way.
pub(super) fn tokens_per_group(t: usize, d: usize, sub: usize) -> Option<usize> {
    let threads = ATT_WARPS * sub;
    let fits = |qt: usize| {
        let lanes = threads / qt;
        threads.is_multiple_of(qt)
            && lanes <= sub
            && sub.is_multiple_of(lanes)
            && BLOCK.is_multiple_of(lanes)
            && d.is_multiple_of(lanes)
            && d.is_multiple_of(4)
    };
    if t < 2 {
        return None;
    }
    [4, 8, 16].into_iter().find(|&q| fits(q))
}

/// The tiled attention `a` into `root` for `qt` query tokens a work-group
/// (`tokens_per_group`), with the causal prefix mask `p`, for rows, tokens, heads, head size,
/// cache positions and K/V groups `[r, t, h, d, c, groups]`.
pub(super) fn tiled(
    e: &mut Emit,
    (root, a, p): (Value, &Attention, &Prefix),
    [r, t, h, d, c, groups]: [usize; 6],
    qt: usize,
    sub: u32,
) -> Result<Launch> {
    let threads = ATT_WARPS * sub as usize;
    let lanes = threads / qt;
    let blocks = t.div_ceil(qt);
    let per = h / groups;
    let own = d / lanes;
    // Work-group coordinates: row, token block (the last first) and head.
    let x = e.kb.special(Special::GroupX);
    let hv = e.u(h);
    let hi = e.kb.bin(BinOp::Rem, x, hv);
    let rest = e.kb.bin(BinOp::Div, x, hv);
    let bv = e.u(blocks);
    let back = e.kb.bin(BinOp::Rem, rest, bv);
    let ri = e.kb.bin(BinOp::Div, rest, bv);
    let last_block = e.u(blocks - 1);
    let blk = e.kb.sub(last_block, back);
    let qtv = e.u(qt);
    let t0 = e.kb.mul(blk, qtv);
    let local = e.kb.special(Special::LocalX);
    let lanes_v = e.u(lanes);
    let row = e.kb.bin(BinOp::Div, local, lanes_v);
    let j = e.kb.bin(BinOp::Rem, local, lanes_v);
    let tok = e.kb.add(t0, row);
    let tv = e.u(t);
    let valid = e.kb.cmp(CmpOp::Lt, tok, tv);
    let last_tok = e.u(t - 1);
    let tok_c = e.kb.bin(BinOp::Min, tok, last_tok);
    let perv = e.u(per);
    let gi = e.kb.bin(BinOp::Div, hi, perv);
    let km = e.buffer(a.k, Access::Read)?;
    let vm = e.buffer(a.v, Access::Read)?;
    let zero_u = e.u(0);
    let dv = e.u(d);
    let cv = e.u(c);
    let gv = e.u(groups);
    let row_of = |e: &mut Emit, ci: Val| {
        let x = e.kb.mul(ri, cv);
        let x = e.kb.add(x, ci);
        let x = e.kb.mul(x, gv);
        let x = e.kb.add(x, gi);
        e.kb.mul(x, dv)
    };
    // The block's queries into shared memory, the rows past the chunk repeating its last.
    let qs = e.kb.shared(Scalar::F32, (qt * d) as u32);
    let n_q = qt * d;
    for i in 0..n_q.div_ceil(threads) {
        let off = e.u(i * threads);
        let idx = e.kb.add(local, off);
        let n_qv = e.u(n_q);
        let ok = e.kb.cmp(CmpOp::Lt, idx, n_qv);
        e.when_unless(n_q.is_multiple_of(threads), ok, |e| {
            let rw = e.kb.bin(BinOp::Div, idx, dv);
            let dd = e.kb.bin(BinOp::Rem, idx, dv);
            let tk = e.kb.add(t0, rw);
            let tk = e.kb.bin(BinOp::Min, tk, last_tok);
            let q = e.value(a.q, &[ri, tk, hi, dd])?;
            e.kb.store(qs, idx, q);
            Ok(())
        })?;
    }
    // Each row's visible prefix, and the work-group's largest (0 for rows past the chunk).
    let end = prefix_end(e, p, [ri, hi, tok_c], c)?;
    let end = e.kb.select(valid, end, zero_u);
    let ends = e.kb.shared(Scalar::U32, ATT_WARPS as u32);
    let lane = e.kb.special(Special::Lane);
    let subv = e.u(sub as usize);
    let warp = e.kb.bin(BinOp::Div, local, subv);
    let first = e.kb.cmp(CmpOp::Eq, lane, zero_u);
    let top = group_reduce(
        e,
        (ReduceOp::Max, end, zero_u),
        ends,
        [warp, first],
        ATT_WARPS,
    )?;
    let qrow = e.kb.mul(row, dv);
    let q: Vec<Val> = (0..d / 4)
        .map(|i| {
            let o = e.u(4 * i);
            let at = e.kb.add(qrow, o);
            e.kb.load(qs, at, 4)
        })
        .collect();
    let ks = e.kb.shared(Scalar::F32, (BLOCK * key_stride(d)) as u32);
    let vs = e.kb.shared(Scalar::F32, (BLOCK * d) as u32);
    let ps = e.kb.shared(Scalar::F32, (qt * BLOCK) as u32);
    let ninf = e.kb.f32(f32::NEG_INFINITY);
    let zero = e.kb.f32(0.0);
    let scale = e.kb.f32(a.scale);
    let mut init = vec![ninf, zero];
    init.extend(std::iter::repeat_n(zero, own));
    let step = Step {
        dims: [d, lanes, own],
        threads,
        at: [local, row, j, end, top],
        mems: [km, vm, ks, vs, ps],
        q: &q,
        scale,
    };
    init.extend(step.fetch(e, zero_u, &row_of));
    let out = e.repeat(zero_u, top, BLOCK as u32, &init, |e, kb, carried| {
        step.run(e, kb, carried, &row_of)
    })?;
    e.kb.launch_dependents();
    // The row's output, `own` dimensions a thread.
    let res = e.buffer(root, Access::Write)?;
    let l = out[1];
    let rt = e.kb.mul(ri, tv);
    let rt = e.kb.add(rt, tok_c);
    let rth = e.kb.mul(rt, hv);
    let rth = e.kb.add(rth, hi);
    let base = e.kb.mul(rth, dv);
    let ownv = e.u(own);
    let d0 = e.kb.mul(j, ownv);
    let base = e.kb.add(base, d0);
    e.when(valid, |e| {
        for (k, &o) in out[2..2 + own].iter().enumerate() {
            let y = e.kb.bin(BinOp::Div, o, l);
            let kv = e.u(k);
            let at = e.kb.add(base, kv);
            e.kb.store(res, at, y);
        }
        Ok(())
    })?;
    Ok(launch(
        [r * blocks * h, 1, 1],
        8 * r * c * groups * d + 4 * r * t * h * d,
    ))
}

/// What one block of the loop needs.
struct Step<'a> {
    /// Head size, lanes a row, dimensions a thread owns.
    dims: [usize; 3],
    threads: usize,
    /// Thread, its row, its lane in the row, the row's visible end, the work-group's.
    at: [Val; 5],
    /// Key and value caches; staged keys, values and the rows' weights.
    mems: [poot_kir::Mem; 5],
    /// The row's query, in 4-lane vectors.
    q: &'a [Val],
    scale: Val,
}

impl Step<'_> {
    /// One block of `BLOCK` positions from `kb`: stage the fetched rows, fetch the next
    /// block's, score, update the running maximum and sum, and mix the values into the
    /// output. `carried` (and the result) is (max, sum, `own` outputs, the fetched parts).
    fn run(
        &self,
        e: &mut Emit,
        kb: Val,
        carried: &[Val],
        row_of: &dyn Fn(&mut Emit, Val) -> Val,
    ) -> Result<Vec<Val>> {
        let [d, lanes, own] = self.dims;
        let [_, row, j, end, top] = self.at;
        let [_, _, ks, vs, ps] = self.mems;
        let kstride = key_stride(d);
        // Every thread is done with the last block's staging before it is overwritten; the
        // rows fetched during the last block go in, and the next block's are fetched.
        let own_n = 2 + own;
        e.kb.barrier();
        self.stage(e, &carried[own_n..])?;
        e.kb.barrier();
        // The last block fetches nothing: its loads would hold up the loop's end.
        let bv = e.u(BLOCK);
        let next_kb = e.kb.add(kb, bv);
        let more = e.kb.cmp(CmpOp::Lt, next_kb, top);
        e.kb.begin();
        let got = self.fetch(e, next_kb, row_of);
        let then = e.kb.end();
        let fetched =
            e.kb.finish_if(more, then, got, vec![], carried[own_n..].to_vec());
        // Scores of positions `j + lanes * i`, masked, with four accumulators combined as
        // `(a0 + a1) + (a2 + a3)` (the split form's order).
        let ninf = e.kb.f32(f32::NEG_INFINITY);
        let zero = e.kb.f32(0.0);
        let mut scores = Vec::with_capacity(BLOCK / lanes);
        for i in 0..BLOCK / lanes {
            let iv = e.u(i * lanes);
            let pl = e.kb.add(j, iv);
            let ksv = e.u(kstride);
            let kbase = e.kb.mul(pl, ksv);
            let mut acc = [zero; 4];
            for (w, &qv) in self.q.iter().enumerate() {
                let o = e.u(4 * w);
                let at = e.kb.add(kbase, o);
                let kv = e.kb.load(ks, at, 4);
                for (cc, a) in acc.iter_mut().enumerate() {
                    let qx = e.kb.extract(qv, cc as u8);
                    let kx = e.kb.extract(kv, cc as u8);
                    *a = e.kb.fma(qx, kx, *a);
                }
            }
            let l = e.kb.add(acc[0], acc[1]);
            let r = e.kb.add(acc[2], acc[3]);
            let dot = e.kb.add(l, r);
            let sc = e.kb.mul(dot, self.scale);
            let pos = e.kb.add(kb, pl);
            let vis = e.kb.cmp(CmpOp::Lt, pos, end);
            scores.push((e.kb.select(vis, sc, ninf), pl));
        }
        // The row's maximum over the block and its new running maximum.
        let mut mx = ninf;
        for &(s, _) in &scores {
            mx = e.kb.bin(BinOp::Max, mx, s);
        }
        let mx = butterfly(e, mx, lanes, BinOp::Max);
        let m_old = carried[0];
        let m_new = e.kb.bin(BinOp::Max, m_old, mx);
        let empty = e.kb.cmp(CmpOp::Eq, m_new, ninf);
        let safe = e.kb.select(empty, zero, m_new);
        let shift = e.kb.sub(m_old, safe);
        let alpha = e.kb.un(UnOp::Exp, shift);
        let blockv = e.u(BLOCK);
        let prow = e.kb.mul(row, blockv);
        let mut sum = zero;
        for &(s, pl) in &scores {
            let x = e.kb.sub(s, safe);
            let w = e.kb.un(UnOp::Exp, x);
            let at = e.kb.add(prow, pl);
            e.kb.store(ps, at, w);
            sum = e.kb.add(sum, w);
        }
        let sum = butterfly(e, sum, lanes, BinOp::Add);
        let l_new = e.kb.fma(carried[1], alpha, sum);
        e.kb.barrier();
        // The weighted values: the thread's `own` dimensions of each position, in order.
        let ownv = e.u(own);
        let d0 = e.kb.mul(j, ownv);
        let mut acc: Vec<Val> = carried[2..2 + own]
            .iter()
            .map(|&o| e.kb.mul(o, alpha))
            .collect();
        let width = [4usize, 2, 1]
            .into_iter()
            .find(|w| own.is_multiple_of(*w))
            .unwrap_or(1);
        for pp in 0..BLOCK {
            let ppv = e.u(pp);
            let at = e.kb.add(prow, ppv);
            let w = e.kb.load(ps, at, 1);
            let pos = e.kb.add(kb, ppv);
            let vis = e.kb.cmp(CmpOp::Lt, pos, end);
            let vrow = e.u(pp * d);
            let vbase = e.kb.add(vrow, d0);
            for part in 0..own / width {
                let o = e.u(part * width);
                let at = e.kb.add(vbase, o);
                let v = e.kb.load(vs, at, width as u8);
                for cc in 0..width {
                    let x = if width == 1 {
                        v
                    } else {
                        e.kb.extract(v, cc as u8)
                    };
                    let k = part * width + cc;
                    let f = e.kb.fma(w, x, acc[k]);
                    acc[k] = e.kb.select(vis, f, acc[k]);
                }
            }
        }
        let mut next = vec![m_new, l_new];
        next.extend(acc);
        next.extend(fetched);
        Ok(next)
    }

    /// This thread's rounds of the staging of block `kb`: (place, key, value) with the place
    /// (unit index, and whether it is one) clamped; positions from `top` on read position 0.
    fn units(&self, e: &mut Emit) -> Vec<(Val, Val)> {
        let [d, ..] = self.dims;
        let local = self.at[0];
        let units = BLOCK * d / 4;
        let unitsv = e.u(units);
        let last = e.u(units - 1);
        (0..units.div_ceil(self.threads))
            .map(|i| {
                let off = e.u(i * self.threads);
                let idx = e.kb.add(local, off);
                let ok = e.kb.cmp(CmpOp::Lt, idx, unitsv);
                (e.kb.bin(BinOp::Min, idx, last), ok)
            })
            .collect()
    }

    /// The 4-wide key and value parts of block `kb` this thread stages, loaded (every round,
    /// clamped, outside any branch, so they all issue at once).
    fn fetch(&self, e: &mut Emit, kb: Val, row_of: &dyn Fn(&mut Emit, Val) -> Val) -> Vec<Val> {
        let [d, ..] = self.dims;
        let [km, vm, ..] = self.mems;
        let top = self.at[4];
        let zero_u = e.u(0);
        let q4 = e.u(d / 4);
        let four = e.u(4);
        let mut out = Vec::new();
        for (idx, _) in self.units(e) {
            let pp = e.kb.bin(BinOp::Div, idx, q4);
            let c4 = e.kb.bin(BinOp::Rem, idx, q4);
            let c4 = e.kb.mul(c4, four);
            let pos = e.kb.add(kb, pp);
            let seen = e.kb.cmp(CmpOp::Lt, pos, top);
            let pos = e.kb.select(seen, pos, zero_u);
            let at = row_of(e, pos);
            let at = e.kb.add(at, c4);
            out.push(e.kb.load(km, at, 4));
            out.push(e.kb.load(vm, at, 4));
        }
        out
    }

    /// Stores `fetch`'s parts into the staging arrays (keys `d + 4` floats a row apart).
    fn stage(&self, e: &mut Emit, parts: &[Val]) -> Result<()> {
        let [d, ..] = self.dims;
        let [_, _, ks, vs, _] = self.mems;
        let q4 = e.u(d / 4);
        let four = e.u(4);
        let units = self.units(e);
        let whole = (BLOCK * d / 4).is_multiple_of(self.threads);
        for ((idx, ok), kv) in units.into_iter().zip(parts.chunks(2)) {
            let pp = e.kb.bin(BinOp::Div, idx, q4);
            let c4 = e.kb.bin(BinOp::Rem, idx, q4);
            let c4 = e.kb.mul(c4, four);
            let ksv = e.u(key_stride(d));
            let kat = e.kb.mul(pp, ksv);
            let kat = e.kb.add(kat, c4);
            let dv = e.u(d);
            let vat = e.kb.mul(pp, dv);
            let vat = e.kb.add(vat, c4);
            let store = |e: &mut Emit| {
                e.kb.store(ks, kat, kv[0]);
                e.kb.store(vs, vat, kv[1]);
                Ok(())
            };
            // The unit index is clamped, so a thread past the units stores nothing.
            e.when_unless(whole, ok, store)?;
        }
        Ok(())
    }
}

/// `x` combined with `op` over the `lanes` consecutive lanes of a row (a power of two that
/// divides the subgroup), every lane left with the same bits.
fn butterfly(e: &mut Emit, mut x: Val, lanes: usize, op: BinOp) -> Val {
    let mut m = 1;
    while m < lanes {
        let o = e.kb.expr(Expr::ShuffleXor(x, m as u32));
        x = e.kb.bin(op, x, o);
        m *= 2;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::tokens_per_group;

    /// With 32-lane subgroups: 4 tokens where a subgroup a row fits the head, else 8 or 16;
    /// none for one token or a head the 4-wide loads do not fit. With 16-lane subgroups a
    /// work-group has 64 threads: 4 tokens of 16 lanes, or 8 of 8.
    #[test]
    fn fewest_tokens_whose_rows_fit_the_head() {
        assert_eq!(tokens_per_group(256, 64, 32), Some(4));
        assert_eq!(tokens_per_group(12, 128, 32), Some(4));
        assert_eq!(tokens_per_group(64, 48, 32), Some(8));
        assert_eq!(tokens_per_group(64, 16, 32), Some(8));
        assert_eq!(tokens_per_group(4, 8, 32), Some(16));
        assert_eq!(tokens_per_group(1, 64, 32), None);
        assert_eq!(tokens_per_group(64, 6, 32), None);
        assert_eq!(tokens_per_group(64, 64, 16), Some(4));
        assert_eq!(tokens_per_group(64, 8, 16), Some(8));
    }
}
