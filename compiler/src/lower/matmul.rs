//! The decode matmul: `x @ w^T` for a few input rows, with the packed GGUF formats decoded
//! in the kernel (the tiled prefill matmul is in `gemm`, which shares `operands`).
//!
//! Invariants: one or two matmuls of one input per kernel (a SwiGLU's gate and up); an RMS
//! norm of the input may run in the prologue (its scale applied to the reduced sums), and
//! an element-wise value of the output's shape in the epilogue (evaluated in every lane,
//! stored by lane 0); the input rows are read from a shared copy where they fit (`stage`;
//! with a norm the copy holds them times its weight and the work-group sums their
//! squares), so staging is the kernel's first work and every thread reaches its barrier;
//! rows not staged are loaded by each lane, which then also sums the squares of what it
//! loads; every subgroup reduction runs with the whole subgroup active; the parts of a
//! split `k` are added in part order, so results do not depend on scheduling.

use super::expr::Emit;
use super::kernels::{Launch, args, bytes, inv_rms, launch, store};
use super::matmul_shape::{MM_WARPS, Shape, shape};
use super::quant::{Codes, Form, unit_codes, weight};
use super::stage::{fits, stage};
use crate::Result;
use poot_ir::{DType, Op, Value};
use poot_kir::{Access, BinOp, CmpOp, Mem, ReduceOp, Scalar, Special, Val};

/// One matmul's weight bound in a kernel: its words, their count, dtype and bytes per row.
pub(super) type Weight = (Mem, usize, DType, usize);

/// The operands of one or two matmuls `mms` of one input `x`, bound in a kernel: the input
/// rows (the norm's input where `x` is an RMS norm computed in the prologue, with the norm's
/// weight and epsilon), and each matmul's weight.
pub(super) struct Operands {
    /// The input rows read.
    pub x: Mem,
    /// The prologue norm's weight and epsilon.
    pub norm: Option<(Mem, f32)>,
    /// Each matmul's weight.
    pub ws: Vec<Weight>,
}

/// Binds the operands of `mms` (rows of `k` weights).
pub(super) fn operands(e: &mut Emit, mms: &[Value], k: usize) -> Result<Operands> {
    let [x, _] = args(e, mms[0])?;
    let (x, norm) = match e.pl.prologue_of(e.g, x) {
        Some(v) => {
            let eps = match e.g.nodes[v].op {
                poot_ir::Op::RmsNorm { eps } => eps.0,
                _ => 0.0,
            };
            let [x0, nw] = args(e, v)?;
            (
                e.buffer(x0, Access::Read)?,
                Some((e.buffer(nw, Access::Read)?, eps)),
            )
        }
        None => (e.buffer(x, Access::Read)?, None),
    };
    let mut ws = Vec::with_capacity(mms.len());
    for &mm in mms {
        let [_, w] = args(e, mm)?;
        let dt = e.g.ty(w).dtype;
        ws.push((
            e.words(w)?,
            bytes(e, w).div_ceil(4),
            dt,
            dt.bytes_for(k).unwrap_or(0),
        ));
    }
    Ok(Operands { x, norm, ws })
}

/// Input rows per matmul work-group.
const MM_ROWS: usize = 8;
/// The most rounds of 32-weight units per lane a matmul unrolls (Qwen2.5-0.5B's down
/// projection, 152 units, would have 5 on one subgroup per column; split over 4, it has 2).
const MM_UNROLL: usize = 8;

/// `x @ w^T`: each subgroup sums one output column or more for all of `k` or a part of it
/// (`matmul_shape`), up to eight input rows per work-group, lanes
/// striding over `k` by units of 32 weights (one block's fields loaded together, x in 4-lane
/// loads, the rounds unrolled up to `MM_UNROLL`; one weight per step when `k` is not a
/// multiple of 32), then a subgroup sum. A unit of a block format is summed as its codes
/// times the inputs and scaled once (`unit_codes`): on the H200, Qwen2.5-0.5B's dual
/// matmul went from 233.2 to 205.7 us per step (1760 to 1376 SASS instructions a thread) and
/// its decode step from 791-792 to 763 us on CUDA. `mms` are one or two matmuls of the same `x` (a
/// SwiGLU's gate and up); the root is the matmul itself or an element-wise value of their
/// shape computed from them (the epilogue).
pub fn matmul(e: &mut Emit, root: Value, mms: &[Value], sub: u32) -> Result<Launch> {
    let [x, w0] = args(e, mms[0])?;
    let (n, k) = (e.g.ty(w0).shape.0[0], e.g.ty(w0).shape.0[1]);
    let rows = e.g.ty(x).shape.numel() / k;
    let rb = rows.min(MM_ROWS);
    // An RMS norm in the prologue: x = (x0 * r) * nw, with r per row computed here, is summed
    // as r * sum((x0 * nw) * w): on the H200 SmolLM2's decode step went from 478.8 to 465.7
    // us (its q/k/v and gate/up kernels from 82.8 and 120.0 to 79.2 and 111.4 us per step).
    let Operands { x: xm, norm, ws } = operands(e, mms, k)?;
    let nwm = norm.map(|(m, _)| m);
    let out = e.buffer(root, Access::Write)?;
    let root_ty = e.g.ty(root).clone();
    let sub_v = e.u(sub as usize);
    let local = e.kb.special(Special::LocalX);
    let warp = e.kb.bin(BinOp::Div, local, sub_v);
    let lane = e.kb.special(Special::Lane);
    let gx = e.kb.special(Special::GroupX);
    let gy = e.kb.special(Special::GroupY);
    let tiling = shape(n, k, mms.len());
    let Shape { cols: cpw, parts } = tiling;
    let wpg = e.u(MM_WARPS / parts);
    let col = e.kb.mul(gx, wpg);
    // With a split `k`: the subgroup's column within the work-group, and its part.
    let (wcol, part) = if parts > 1 {
        let parts_v = e.u(parts);
        let wcol = e.kb.bin(BinOp::Div, warp, parts_v);
        (wcol, Some(e.kb.bin(BinOp::Rem, warp, parts_v)))
    } else {
        (warp, None)
    };
    let col = e.kb.add(col, wcol);
    let cols: Vec<Val> = if cpw == 1 {
        vec![col]
    } else {
        let cpw_v = e.u(cpw);
        let first_col = e.kb.mul(col, cpw_v);
        (0..cpw)
            .map(|j| {
                let jv = e.u(j);
                e.kb.add(first_col, jv)
            })
            .collect()
    };
    let rbv = e.u(rb);
    let m0 = e.kb.mul(gy, rbv);
    let nv = e.u(n);
    let inside = e.kb.cmp(CmpOp::Lt, col, nv);
    // The weights each lane reads: matmul i's column j at j * nm + i.
    let nm = mms.len();
    let per_col: Vec<(Val, (Mem, usize, DType, usize))> = cols
        .iter()
        .flat_map(|&c| ws.iter().map(move |&w| (c, w)))
        .collect();
    // A lane's first unit of 32 weights, and the stride between its units.
    let first_unit = match part {
        Some(p) => {
            let sv = e.u(sub as usize);
            let x = e.kb.mul(p, sv);
            e.kb.add(x, lane)
        }
        None => lane,
    };
    let ustep = sub * parts as u32;
    let kv = e.u(k);
    let last_row = e.u(rows - 1);
    let row_base = |e: &mut Emit, r: usize| {
        let rv = e.u(r);
        let m = e.kb.add(m0, rv);
        let m = e.kb.bin(BinOp::Min, m, last_row);
        e.kb.mul(m, kv)
    };
    // The input rows go through shared memory when they fit (`stage::fits`): one round trip
    // for the work-group's copy instead of each lane's batches of global loads (Nsight
    // Compute showed every batch as a stall on its first use). On the H200, decode step in
    // us, two rounds each: SmolLM2 CUDA 465.6, 471.2 to 464.4, 460.7 (another call: 459.6,
    // 467.7 to 453.1, 453.3), Vulkan 729.3, 733.4 to 718.7, 719.8; Qwen2.5-0.5B CUDA 694.5,
    // 683.5 to 670.0, 670.8, Vulkan 895.0, 892.4 to 887.5, 891.7. Loading the weights of the
    // unrolled rounds before the copy's barrier too gave SmolLM2 457.8, 458.0 against
    // 453.1, 453.3 (CUDA): not done.
    let all_inside = n.is_multiple_of(tiling.per_group());
    // Few rounds of 32-weight units per lane are unrolled, and their weights are loaded
    // before the grid wait, while the dispatch before this one still runs (their codes are
    // taken apart after it, so nothing before the wait waits for the loads): the weights
    // change in no dispatch, so after the wait only the input's round trip is left before
    // the products. A column past `n` loads column `n - 1`'s weights (its sums are never
    // stored). On the H200, captured decode step in us (`poot bench --steps 200`, three
    // calls): SmolLM2 339.7, 337.7, 338.9 / 333.6, 334.2, 334.2 / 338.2, 334.4, 334.7 to
    // 335.9, 335.7, 336.4 / 329.5, 333.7, 329.3 / 329.9, 330.1, 334.4; Qwen2.5-0.5B 500.1,
    // 501.7 to 464.7, 462.5. Taking the codes apart before the wait too (so the wait waited
    // for the loads) gained nothing: 344.0, 341.9, 341.8 against 345.7, 336.4, 337.1.
    let units = k / 32;
    let rounds = units.div_ceil(ustep as usize);
    let unrolled = k.is_multiple_of(32) && rounds <= MM_UNROLL;
    // The codes of unit `u` of each column of `cols`.
    let unit_loads = |e: &mut Emit, cols: &[(Val, Weight)], u: Val| -> Vec<Codes> {
        cols.iter()
            .map(|&(c, (m, words, dt, rbytes))| unit_codes(e, m, words, dt, c, u, rbytes, false))
            .collect()
    };
    // (Only where every right operand is a weight: another value could be the output of the
    // dispatch before.)
    let weights_only = mms.iter().all(|&mm| {
        let w = e.g.nodes[mm].args[1];
        e.pl.buffer_of(w)
            .is_some_and(|b| matches!(e.g.nodes[b].op, Op::Weight(_)))
    });
    let early = if weights_only && unrolled {
        let last_col = e.u(n - 1);
        let pre_cols: Vec<(Val, Weight)> = per_col
            .iter()
            .map(|&(c, w)| {
                let c = if all_inside {
                    c
                } else {
                    e.kb.bin(BinOp::Min, c, last_col)
                };
                (c, w)
            })
            .collect();
        let params = ws
            .iter()
            .map(|w| w.0)
            .chain(nwm)
            .filter_map(|m| match m {
                Mem::Param(p) => Some(p),
                Mem::Shared(_) => None,
            })
            .collect();
        let rs = e.rounds(first_unit, units, ustep, rounds);
        let codes: Vec<Vec<Codes>> = e.early_loads(params, |e| {
            rs.iter()
                .map(|&(_, u)| unit_loads(e, &pre_cols, u))
                .collect()
        });
        Some(rs.into_iter().zip(codes))
    } else {
        None
    };
    let threads = MM_WARPS * sub as usize;
    let staged = k.is_multiple_of(32) && fits(rb, k, norm.is_some(), MM_WARPS);
    let rows_src: Vec<(Mem, Val)> = if staged {
        (0..rb).map(|r| (xm, row_base(e, r))).collect()
    } else {
        Vec::new()
    };
    // With a prologue norm the copy holds `x0 * nw` and the work-group sums each row's
    // squares once, so no lane multiplies by the weight or sums squares and
    // the norm's scale is ready before the products are: on the H200, decode step in us,
    // SmolLM2 CUDA 453.5, 456.0, 457.9 to 406.4, 411.9, 407.3 (its gate/up from 110.2 to
    // 82.1 us a step, q/k/v from 74.5 to 58.9), Vulkan 708.9-710.1 to 681.3-685.0;
    // Qwen2.5-0.5B CUDA 660.2, 659.8 to 575.1, 574.8, Vulkan 880.0, 878.5 to 831.8, 827.6.
    // Rows that are not staged keep the lanes' squares.
    let (xsh, staged_squares) = if staged {
        let (sh, squares) = stage(e, &rows_src, nwm, k, [threads, sub as usize])?;
        (Some(sh), squares)
    } else {
        (None, None)
    };
    // The norm's weight where lanes still apply it and sum squares themselves.
    let lane_nw = if staged_squares.is_some() { None } else { nwm };
    // Where the body reads x row `r` (its base element).
    let x_at = |e: &mut Emit, r: usize| match xsh {
        Some(sh) => (sh, e.u(r * k)),
        None => (xm, row_base(e, r)),
    };
    e.when_unless(all_inside, inside, |e| {
        let zero = e.kb.f32(0.0);
        // Accumulator of matmul i, column j, row r at (j * nm + i) * rb + r; with a prologue
        // norm over rows not staged, row r's sum of squares of x0 follows at `nacc + r`,
        // summed from the same loads (every lane of a subgroup reads a distinct part of the
        // row, and together the subgroups of a split `k` read it once), so the norm's scale
        // multiplies the sums after the reduction and nothing waits for it before the
        // products.
        let nacc = rb * per_col.len();
        let init = vec![zero; nacc + if lane_nw.is_some() { rb } else { 0 }];
        let acc = if k.is_multiple_of(32) {
            // A lane takes 32 consecutive weights (one block's fields) per iteration and reads
            // the matching x as eight 4-lane loads, shared by the matmuls.
            let body = |e: &mut Emit, u: Val, acc: &[Val], wv: Vec<Codes>| {
                let c32 = e.u(32);
                let k0 = e.kb.mul(u, c32);
                let nv4: Vec<Option<Val>> = (0..8)
                    .map(|q| {
                        lane_nw.map(|nm_| {
                            let off = e.u(4 * q);
                            let at = e.kb.add(k0, off);
                            e.kb.load(nm_, at, 4)
                        })
                    })
                    .collect();
                // The inputs' sums, for mins and mantissa codes: over the whole unit, or
                // over its halves where a unit has a scale for each.
                let any_sum = wv
                    .iter()
                    .any(|w| w.min.is_some() || matches!(w.form, Form::Mantissa { .. }));
                let halves = wv.iter().any(|w| w.scales.len() == 2);
                let mut next = acc.to_vec();
                for r in 0..rb {
                    let (xmem, mk) = x_at(e, r);
                    let xb = e.kb.add(mk, k0);
                    let xs: Vec<Val> = (0..8)
                        .map(|q| {
                            let off = e.u(4 * q);
                            let at = e.kb.add(xb, off);
                            e.kb.load(xmem, at, 4)
                        })
                        .collect();
                    // A factored unit's codes are summed from zero, then scaled into the
                    // accumulator (with the min times the inputs' sum); plain weights are
                    // summed into it directly. So are the squares of x0 for a norm.
                    let mut part: Vec<Vec<Val>> = wv
                        .iter()
                        .enumerate()
                        .map(|(i, w)| match w.scales.len() {
                            0 => vec![acc[i * rb + r]],
                            n => vec![zero; n],
                        })
                        .collect();
                    let mut sx = [zero; 2];
                    let mut ss = zero;
                    for (q, (&xv, n4)) in xs.iter().zip(&nv4).enumerate() {
                        for c in 0..4 {
                            let mut x1 = e.kb.extract(xv, c as u8);
                            if let Some(n4) = n4 {
                                ss = e.kb.fma(x1, x1, ss);
                                let nw1 = e.kb.extract(*n4, c as u8);
                                x1 = e.kb.mul(x1, nw1);
                            }
                            let j = 4 * q + c;
                            for (p, w) in part.iter_mut().zip(&wv) {
                                let h = j * p.len() / 32;
                                p[h] = e.kb.fma(x1, w.codes[j], p[h]);
                            }
                            if any_sum {
                                let h = usize::from(halves && j >= 16);
                                sx[h] = e.kb.add(sx[h], x1);
                            }
                        }
                    }
                    if lane_nw.is_some() {
                        next[nacc + r] = e.kb.add(acc[nacc + r], ss);
                    }
                    let total = if halves && any_sum {
                        e.kb.add(sx[0], sx[1])
                    } else {
                        sx[0]
                    };
                    for (i, w) in wv.iter().enumerate() {
                        let mut t = if w.scales.is_empty() {
                            part[i][0]
                        } else {
                            acc[i * rb + r]
                        };
                        for (h, (&d, &p)) in w.scales.iter().zip(&part[i]).enumerate() {
                            let s = if w.scales.len() == 2 { sx[h] } else { total };
                            let p = w.form.code_sum(e, p, s);
                            t = e.kb.fma(d, p, t);
                        }
                        if let Some(m) = w.min {
                            t = e.kb.fma(m, total, t);
                        }
                        next[i * rb + r] = t;
                    }
                }
                Ok(next)
            };
            // Few rounds per lane: unrolled, so every round's weights are in flight at once
            // (loaded before the grid wait where `early`).
            match early {
                Some(rounds) => {
                    let mut acc = init;
                    for ((valid, u), wv) in rounds {
                        let next = body(e, u, &acc, wv)?;
                        acc = e.keep(valid, &next, &acc);
                    }
                    acc
                }
                None if unrolled => {
                    e.unrolled(first_unit, units, ustep, rounds, &init, |e, u, acc| {
                        let wv = unit_loads(e, &per_col, u);
                        body(e, u, acc, wv)
                    })?
                }
                None => {
                    let units = e.u(units);
                    e.repeat(first_unit, units, ustep, &init, |e, u, acc| {
                        let wv = unit_loads(e, &per_col, u);
                        body(e, u, acc, wv)
                    })?
                }
            }
        } else {
            e.repeat(lane, kv, sub, &init, |e, kk, acc| {
                let xv: Vec<Val> = (0..rb)
                    .map(|r| {
                        let mk = row_base(e, r);
                        let at = e.kb.add(mk, kk);
                        e.kb.load(xm, at, 1)
                    })
                    .collect();
                let nw1 = lane_nw.map(|nm_| e.kb.load(nm_, kk, 1));
                let wv: Vec<Val> = per_col
                    .iter()
                    .map(|&(c, (m, words, dt, rbytes))| weight(e, m, words, dt, c, kk, rbytes))
                    .collect();
                let mut next = acc.to_vec();
                for (r, &x0) in xv.iter().enumerate() {
                    let x1 = match nw1 {
                        Some(nw1) => {
                            next[nacc + r] = e.kb.fma(x0, x0, next[nacc + r]);
                            e.kb.mul(x0, nw1)
                        }
                        None => x0,
                    };
                    for (i, &w) in wv.iter().enumerate() {
                        next[i * rb + r] = e.kb.fma(x1, w, next[i * rb + r]);
                    }
                }
                Ok(next)
            })?
        };
        // The products are done: what remains (the reductions, the epilogue) is short, so
        // the next dispatch may start its work-groups (they wait for this one before they
        // touch memory). On the H200, with the same hint in the attention and the tiled
        // matmul, SmolLM2's CUDA decode step went from 404.5-409.5 to 393.2-396.0 us.
        e.kb.launch_dependents();
        let mut sums: Vec<Val> = acc
            .iter()
            .map(|&a| e.kb.subgroup_reduce(ReduceOp::Add, a))
            .collect();
        // A split `k`: each part's sums through shared memory, added in part order.
        if part.is_some() {
            let per = sums.len();
            let sh = e.kb.shared(Scalar::F32, (MM_WARPS * per) as u32);
            let zero_u = e.u(0);
            let lead = e.kb.cmp(CmpOp::Eq, lane, zero_u);
            let per_v = e.u(per);
            let mine = e.kb.mul(warp, per_v);
            e.when(lead, |e| {
                for (i, &x) in sums.iter().enumerate() {
                    let iv = e.u(i);
                    let at = e.kb.add(mine, iv);
                    e.kb.store(sh, at, x);
                }
                Ok(())
            })?;
            e.kb.barrier();
            let stride = e.u(parts * per);
            let base = e.kb.mul(wcol, stride);
            sums = (0..per)
                .map(|i| {
                    let loads: Vec<Val> = (0..parts)
                        .map(|p| {
                            let o = e.u(p * per + i);
                            let at = e.kb.add(base, o);
                            e.kb.load(sh, at, 1)
                        })
                        .collect();
                    loads[1..].iter().fold(loads[0], |a, &x| e.kb.add(a, x))
                })
                .collect();
        }
        // The norm's 1 / sqrt(mean(x0^2) + eps) of each row scales that row's sums.
        if let Some((_, eps)) = norm {
            let squares = staged_squares
                .clone()
                .unwrap_or_else(|| sums[nacc..].to_vec());
            let scales: Vec<Val> = squares.iter().map(|&ss| inv_rms(e, ss, k, eps)).collect();
            sums.truncate(nacc);
            for (i, s) in sums.iter_mut().enumerate() {
                *s = e.kb.mul(*s, scales[i % rb]);
            }
        }
        // The epilogue runs in every lane, outside any branch (rows clamped), so the loads of
        // its other operands (a residual, a bias) can issue before the reductions finish;
        // lane 0 stores.
        let mut ys = Vec::with_capacity(rb * cpw);
        for (j, &c) in cols.iter().enumerate() {
            for r in 0..rb {
                let rv = e.u(r);
                let m = e.kb.add(m0, rv);
                let rows_v = e.u(rows);
                let ok = e.kb.cmp(CmpOp::Lt, m, rows_v);
                let m = e.kb.bin(BinOp::Min, m, last_row);
                let mn = e.kb.mul(m, nv);
                let at = e.kb.add(mn, c);
                let y = if mms == [root] {
                    sums[j * rb + r]
                } else {
                    for (i, &mm) in mms.iter().enumerate() {
                        e.set_override(mm, sums[(j * nm + i) * rb + r]);
                    }
                    let idx = e.unravel(&root_ty.shape.0, at);
                    e.compute(root, &idx)?
                };
                ys.push((ok, at, y));
            }
        }
        let zero_u = e.u(0);
        let first = e.kb.cmp(CmpOp::Eq, lane, zero_u);
        let first = match part {
            Some(p) => {
                let p0 = e.kb.cmp(CmpOp::Eq, p, zero_u);
                e.kb.bin(BinOp::And, first, p0)
            }
            None => first,
        };
        e.when(first, |e| {
            for (ok, at, y) in ys {
                e.when(ok, |e| {
                    store(e, out, at, y, root_ty.dtype);
                    Ok(())
                })?;
            }
            Ok(())
        })
    })?;
    let wbytes: usize = ws.iter().map(|w| n * w.3).sum();
    Ok(launch(
        [n.div_ceil(tiling.per_group()), rows.div_ceil(rb), 1],
        wbytes + 4 * rows * k,
    ))
}
