//! Kernel templates: one function per kind of materialized value.
//!
//! Invariants: every template computes its root value with the semantics `poot_eval`
//! documents, reading inline operands through `Emit::value`; grids and shapes are baked and
//! per-step data (positions, token ids) is loaded from slot buffers; every subgroup
//! operation runs with whole subgroups active (the guards around them are uniform per
//! subgroup); work-group reductions combine partial results in a fixed order.

use super::expr::{Buf, Emit, TRAP_CACHE_OVERFLOW};
use super::place::unsupported;
use super::quant::{unit, weight};
use crate::Result;
use poot_ir::{DType, Value};
use poot_kir::{Access, BinOp, CmpOp, ReduceOp, Scalar, Special, UnOp, Val};

/// A kernel's launch: grid, work weight and private scratch.
pub struct Launch {
    /// Work-groups.
    pub grid: [u32; 3],
    /// Bytes the dispatch reads (the planner's work weight).
    pub work: u64,
    /// Bytes of each kernel-private scratch buffer (`Buf::Scratch(root, i)`).
    pub scratch: Vec<u64>,
}

fn launch(grid: [usize; 3], work: usize) -> Launch {
    Launch {
        grid: grid.map(|g| g.max(1) as u32),
        work: work as u64,
        scratch: Vec::new(),
    }
}

fn gid(e: &mut Emit, wg: usize) -> Val {
    let g = e.kb.special(Special::GroupX);
    let l = e.kb.special(Special::LocalX);
    let w = e.u(wg);
    let base = e.kb.mul(g, w);
    e.kb.add(base, l)
}

/// Stores `x` (a value of `dtype`) at `out[at]`.
fn store(e: &mut Emit, out: poot_kir::Mem, at: Val, x: Val, dtype: DType) {
    let x = if dtype == DType::Bool {
        let one = e.kb.u32(1);
        let zero = e.kb.u32(0);
        e.kb.select(x, one, zero)
    } else {
        x
    };
    e.kb.store(out, at, x);
}

fn bytes(e: &Emit, v: Value) -> usize {
    let t = e.g.ty(v);
    t.dtype.bytes_for(t.shape.numel()).unwrap_or(0)
}

fn args<const N: usize>(e: &Emit, v: Value) -> Result<[Value; N]> {
    e.g.nodes[v]
        .args
        .clone()
        .try_into()
        .map_err(|_| unsupported(e.g, v, "an operand count"))
}

/// One thread per element of `root`, computed inline.
pub fn elementwise(e: &mut Emit, root: Value) -> Result<Launch> {
    let ty = e.g.ty(root).clone();
    let n = ty.shape.numel();
    let out = e.buffer(root, Access::Write)?;
    let i = gid(e, 256);
    let nv = e.u(n);
    let inside = e.kb.cmp(CmpOp::Lt, i, nv);
    e.when(inside, |e| {
        let idx = e.unravel(&ty.shape.0, i);
        let x = e.compute(root, &idx)?;
        store(e, out, i, x, ty.dtype);
        Ok(())
    })?;
    Ok(launch([n.div_ceil(256), 1, 1], 4 * n))
}

/// Rows of a weight table at computed ids.
pub fn gather_rows(e: &mut Emit, root: Value) -> Result<Launch> {
    let [table, ids] = args(e, root)?;
    let tt = e.g.ty(table).clone();
    let (rows, d) = (tt.shape.0[0], tt.shape.0[1]);
    let n = e.g.ty(root).shape.numel();
    let out = e.buffer(root, Access::Write)?;
    let w = e.words(table)?;
    let words = bytes(e, table).div_ceil(4);
    let row_bytes = tt.dtype.bytes_for(d).unwrap_or(0);
    let ids_dims = e.g.ty(ids).shape.0.clone();
    // One thread per 32 weights of a row (one block's fields), else per weight.
    let per = if d.is_multiple_of(32) { 32 } else { 1 };
    let threads = n / per;
    let i = gid(e, 256);
    let tv = e.u(threads);
    let inside = e.kb.cmp(CmpOp::Lt, i, tv);
    e.when(inside, |e| {
        let units = e.u(d / per);
        let r = e.kb.bin(BinOp::Div, i, units);
        let u = e.kb.bin(BinOp::Rem, i, units);
        let at = e.unravel(&ids_dims, r);
        let id = e.value(ids, &at)?;
        let row = e.checked_id(id, rows);
        let pv = e.u(per);
        let first = e.kb.mul(i, pv);
        let xs = if per == 32 {
            unit(e, w, words, tt.dtype, row, u, row_bytes)
        } else {
            vec![weight(e, w, words, tt.dtype, row, u, row_bytes)]
        };
        for (j, x) in xs.into_iter().enumerate() {
            let jv = e.u(j);
            let at = e.kb.add(first, jv);
            e.kb.store(out, at, x);
        }
        Ok(())
    })?;
    Ok(launch(
        [threads.div_ceil(256), 1, 1],
        4 * n + n / d * row_bytes,
    ))
}

const MM_WARPS: usize = 4;
const MM_ROWS: usize = 8;

/// `x @ w^T`: one subgroup per output column, up to eight input rows per work-group, lanes
/// striding over `k` by units of 32 weights (one block's fields loaded together, x in 4-lane
/// loads; one weight per step when `k` is not a multiple of 32), then a subgroup sum. `mms`
/// are one or two matmuls of the same `x` (a SwiGLU's gate and up); the root is the matmul
/// itself or an element-wise value of their shape computed from them (the epilogue).
pub fn matmul(e: &mut Emit, root: Value, mms: &[Value], sub: u32) -> Result<Launch> {
    let [x, w0] = args(e, mms[0])?;
    let (n, k) = (e.g.ty(w0).shape.0[0], e.g.ty(w0).shape.0[1]);
    let rows = e.g.ty(x).shape.numel() / k;
    let rb = rows.min(MM_ROWS);
    // An RMS norm in the prologue: x = (x0 * r) * nw, with r per row computed here.
    let pro = e.pl.prologue_of(e.g, x).map(|v| {
        let eps = match e.g.nodes[v].op {
            poot_ir::Op::RmsNorm { eps } => eps.0,
            _ => 0.0,
        };
        (e.g.nodes[v].args[0], e.g.nodes[v].args[1], eps)
    });
    let xm = match pro {
        Some((x0, _, _)) => e.buffer(x0, Access::Read)?,
        None => e.buffer(x, Access::Read)?,
    };
    let nwm = match pro {
        Some((_, nw, _)) => Some(e.buffer(nw, Access::Read)?),
        None => None,
    };
    // Per matmul: (weight words, their count, dtype, bytes per row).
    let mut ws = Vec::with_capacity(mms.len());
    for &mm in mms {
        let [_, w] = args(e, mm)?;
        let wt = e.g.ty(w).clone();
        let words = bytes(e, w).div_ceil(4);
        ws.push((
            e.words(w)?,
            words,
            wt.dtype,
            wt.dtype.bytes_for(k).unwrap_or(0),
        ));
    }
    let out = e.buffer(root, Access::Write)?;
    let root_ty = e.g.ty(root).clone();
    let sub_v = e.u(sub as usize);
    let local = e.kb.special(Special::LocalX);
    let warp = e.kb.bin(BinOp::Div, local, sub_v);
    let lane = e.kb.special(Special::Lane);
    let gx = e.kb.special(Special::GroupX);
    let gy = e.kb.special(Special::GroupY);
    let wpg = e.u(MM_WARPS);
    let col = e.kb.mul(gx, wpg);
    let col = e.kb.add(col, warp);
    let rbv = e.u(rb);
    let m0 = e.kb.mul(gy, rbv);
    let nv = e.u(n);
    let inside = e.kb.cmp(CmpOp::Lt, col, nv);
    let nm = mms.len();
    e.when(inside, |e| {
        let zero = e.kb.f32(0.0);
        let kv = e.u(k);
        let last_row = e.u(rows - 1);
        let row_base = |e: &mut Emit, r: usize| {
            let rv = e.u(r);
            let m = e.kb.add(m0, rv);
            let m = e.kb.bin(BinOp::Min, m, last_row);
            e.kb.mul(m, kv)
        };
        // The norm's 1 / sqrt(mean(x0^2) + eps) for each row of this work-group.
        let mut scales = Vec::new();
        if let Some((_, _, eps)) = pro {
            let lw = if k.is_multiple_of(4) { 4 } else { 1 };
            let lwv = e.u(lw);
            let start = e.kb.mul(lane, lwv);
            for r in 0..rb {
                let mk = row_base(e, r);
                // The row's squares, every load issued at once (K is known): one memory
                // round trip instead of one per stride.
                let stride = sub as usize * lw;
                let mut partial = [zero; 2];
                for i in 0..k.div_ceil(stride) {
                    let off = e.u(i * stride);
                    let kk = e.kb.add(start, off);
                    let ok = e.kb.cmp(CmpOp::Lt, kk, kv);
                    let last = e.u(k - lw);
                    let kc = e.kb.bin(BinOp::Min, kk, last);
                    let at = e.kb.add(mk, kc);
                    let xs = e.kb.load(xm, at, lw as u8);
                    for c in 0..lw {
                        let x1 = if lw == 1 {
                            xs
                        } else {
                            e.kb.extract(xs, c as u8)
                        };
                        let x1 = e.kb.select(ok, x1, zero);
                        partial[i % 2] = e.kb.fma(x1, x1, partial[i % 2]);
                    }
                }
                let ss = [e.kb.add(partial[0], partial[1])];
                let total = e.kb.subgroup_reduce(ReduceOp::Add, ss[0]);
                let kf = e.kb.f32(k as f32);
                let ms = e.kb.bin(BinOp::Div, total, kf);
                let epsv = e.kb.f32(eps);
                let t = e.kb.add(ms, epsv);
                let sq = e.kb.un(UnOp::Sqrt, t);
                let one = e.kb.f32(1.0);
                scales.push(e.kb.bin(BinOp::Div, one, sq));
            }
        }
        // Accumulator of matmul i, row r at i * rb + r.
        let acc = if k.is_multiple_of(32) {
            // A lane takes 32 consecutive weights (one block's fields) per iteration and reads
            // the matching x as eight 4-lane loads, shared by the matmuls.
            let units = e.u(k / 32);
            e.repeat(lane, units, sub, &vec![zero; rb * nm], |e, u, acc| {
                let wv: Vec<Vec<Val>> = ws
                    .iter()
                    .map(|&(m, words, dt, rbytes)| unit(e, m, words, dt, col, u, rbytes))
                    .collect();
                let c32 = e.u(32);
                let k0 = e.kb.mul(u, c32);
                let mut next = acc.to_vec();
                let nv4: Vec<Option<Val>> = (0..8)
                    .map(|q| {
                        nwm.map(|nm_| {
                            let off = e.u(4 * q);
                            let at = e.kb.add(k0, off);
                            e.kb.load(nm_, at, 4)
                        })
                    })
                    .collect();
                for r in 0..rb {
                    let mk = row_base(e, r);
                    let xb = e.kb.add(mk, k0);
                    for (q, n4) in nv4.iter().enumerate() {
                        let off = e.u(4 * q);
                        let at = e.kb.add(xb, off);
                        let xv = e.kb.load(xm, at, 4);
                        for c in 0..4 {
                            let mut x1 = e.kb.extract(xv, c as u8);
                            if let Some(n4) = n4 {
                                let nw1 = e.kb.extract(*n4, c as u8);
                                let y = e.kb.mul(x1, scales[r]);
                                x1 = e.kb.mul(y, nw1);
                            }
                            for (i, w) in wv.iter().enumerate() {
                                next[i * rb + r] = e.kb.fma(x1, w[4 * q + c], next[i * rb + r]);
                            }
                        }
                    }
                }
                Ok(next)
            })?
        } else {
            e.repeat(lane, kv, sub, &vec![zero; rb * nm], |e, kk, acc| {
                let wv: Vec<Val> = ws
                    .iter()
                    .map(|&(m, words, dt, rbytes)| weight(e, m, words, dt, col, kk, rbytes))
                    .collect();
                let mut next = acc.to_vec();
                for r in 0..rb {
                    let mk = row_base(e, r);
                    let at = e.kb.add(mk, kk);
                    let mut xv = e.kb.load(xm, at, 1);
                    if let Some(nm_) = nwm {
                        let nw1 = e.kb.load(nm_, kk, 1);
                        let y = e.kb.mul(xv, scales[r]);
                        xv = e.kb.mul(y, nw1);
                    }
                    for (i, &w) in wv.iter().enumerate() {
                        next[i * rb + r] = e.kb.fma(xv, w, next[i * rb + r]);
                    }
                }
                Ok(next)
            })?
        };
        let sums: Vec<Val> = acc
            .iter()
            .map(|&a| e.kb.subgroup_reduce(ReduceOp::Add, a))
            .collect();
        let zero_u = e.u(0);
        let first = e.kb.cmp(CmpOp::Eq, lane, zero_u);
        e.when(first, |e| {
            for r in 0..rb {
                let rv = e.u(r);
                let m = e.kb.add(m0, rv);
                let rows_v = e.u(rows);
                let ok = e.kb.cmp(CmpOp::Lt, m, rows_v);
                e.when(ok, |e| {
                    let mn = e.kb.mul(m, nv);
                    let at = e.kb.add(mn, col);
                    let y = if mms == [root] {
                        sums[r]
                    } else {
                        for (i, &mm) in mms.iter().enumerate() {
                            e.set_override(mm, sums[i * rb + r]);
                        }
                        let idx = e.unravel(&root_ty.shape.0, at);
                        e.compute(root, &idx)?
                    };
                    store(e, out, at, y, root_ty.dtype);
                    Ok(())
                })?;
            }
            Ok(())
        })
    })?;
    let wbytes: usize = ws.iter().map(|w| n * w.3).sum();
    Ok(launch(
        [n.div_ceil(MM_WARPS), rows.div_ceil(rb), 1],
        wbytes + 4 * rows * k,
    ))
}

const NORM_THREADS: usize = 256;

/// RMS norm: one work-group per row; thread sums in a subgroup reduction, subgroup sums in
/// shared memory added in subgroup order by every thread.
pub fn rms_norm(e: &mut Emit, root: Value, eps: f32, sub: u32) -> Result<Launch> {
    let [x, w] = args(e, root)?;
    let ty = e.g.ty(root).clone();
    let n = ty.shape.last();
    let rows = ty.shape.numel() / n;
    let warps = NORM_THREADS / sub as usize;
    let out = e.buffer(root, Access::Write)?;
    let sh = e.kb.shared(Scalar::F32, warps as u32);
    let row = e.kb.special(Special::GroupX);
    let local = e.kb.special(Special::LocalX);
    let nv = e.u(n);
    let base = e.kb.mul(row, nv);
    let zero = e.kb.f32(0.0);
    let dims = ty.shape.0.clone();
    let element = |e: &mut Emit, kk: Val| -> Result<Val> {
        let at = e.kb.add(base, kk);
        let idx = e.unravel(&dims, at);
        e.value(x, &idx)
    };
    let ss = e.repeat(local, nv, NORM_THREADS as u32, &[zero], |e, kk, s| {
        let xv = element(e, kk)?;
        Ok(vec![e.kb.fma(xv, xv, s[0])])
    })?;
    let part = e.kb.subgroup_reduce(ReduceOp::Add, ss[0]);
    let lane = e.kb.special(Special::Lane);
    let zero_u = e.u(0);
    let first = e.kb.cmp(CmpOp::Eq, lane, zero_u);
    let sub_v = e.u(sub as usize);
    let warp = e.kb.bin(BinOp::Div, local, sub_v);
    e.when(first, |e| {
        e.kb.store(sh, warp, part);
        Ok(())
    })?;
    e.kb.barrier();
    let mut total = zero;
    for i in 0..warps {
        let iv = e.u(i);
        let p = e.kb.load(sh, iv, 1);
        total = e.kb.add(total, p);
    }
    let nf = e.kb.f32(n as f32);
    let ms = e.kb.bin(BinOp::Div, total, nf);
    let epsv = e.kb.f32(eps);
    let t = e.kb.add(ms, epsv);
    let s = e.kb.un(UnOp::Sqrt, t);
    let one = e.kb.f32(1.0);
    let r = e.kb.bin(BinOp::Div, one, s);
    e.repeat(local, nv, NORM_THREADS as u32, &[], |e, kk, _| {
        let xv = element(e, kk)?;
        let wv = e.value(w, &[kk])?;
        let y = e.kb.mul(xv, r);
        let y = e.kb.mul(y, wv);
        let at = e.kb.add(base, kk);
        e.kb.store(out, at, y);
        Ok(vec![])
    })?;
    Ok(launch([rows, 1, 1], 8 * rows * n))
}

/// `dynamic_update_slice` in place into its (state) operand: one thread per update element;
/// a start that would write past the axis traps with `TRAP_CACHE_OVERFLOW`.
pub fn update_slice(e: &mut Emit, root: Value, axis: usize) -> Result<Launch> {
    let [x, upd, start] = args(e, root)?;
    let xd = e.g.ty(x).shape.0.clone();
    let ud = e.g.ty(upd).shape.0.clone();
    let n = ud.iter().product::<usize>();
    let dst = e.buffer(root, Access::Write)?;
    let i = gid(e, 256);
    let nv = e.u(n);
    let inside = e.kb.cmp(CmpOp::Lt, i, nv);
    e.when(inside, |e| {
        let idx = e.unravel(&ud, i);
        let s = e.value(start, &idx[..1])?;
        let su = e.kb.bitcast(s, Scalar::U32);
        let room = e.u(xd[axis] - ud[axis]);
        let bad = e.kb.cmp(CmpOp::Gt, su, room);
        e.when(bad, |e| {
            e.kb.trap(TRAP_CACHE_OVERFLOW);
            Ok(())
        })?;
        let mut at = idx.clone();
        at[axis] = e.kb.add(idx[axis], su);
        let lin = e.linear(&xd, &at);
        let v = e.value(upd, &idx)?;
        store(e, dst, lin, v, e.g.ty(root).dtype);
        Ok(())
    })?;
    Ok(launch([n.div_ceil(256), 1, 1], 8 * n))
}

/// `scatter_update` in place: row `index[i]` of the operand gets row `i` of the update.
pub fn scatter(e: &mut Emit, root: Value) -> Result<Launch> {
    let [x, upd, index] = args(e, root)?;
    let xd = e.g.ty(x).shape.0.clone();
    let ud = e.g.ty(upd).shape.0.clone();
    let n = ud.iter().product::<usize>();
    let row = n / ud[0].max(1);
    let dst = e.buffer(root, Access::Write)?;
    let i = gid(e, 256);
    let nv = e.u(n);
    let inside = e.kb.cmp(CmpOp::Lt, i, nv);
    e.when(inside, |e| {
        let rv = e.u(row);
        let m = e.kb.bin(BinOp::Div, i, rv);
        let k = e.kb.bin(BinOp::Rem, i, rv);
        let id = e.value(index, &[m])?;
        let r = e.checked_id(id, xd[0]);
        let base = e.kb.mul(r, rv);
        let at = e.kb.add(base, k);
        let idx = e.unravel(&ud, i);
        let v = e.value(upd, &idx)?;
        store(e, dst, at, v, e.g.ty(root).dtype);
        Ok(())
    })?;
    Ok(launch([n.div_ceil(256), 1, 1], 8 * n))
}

/// Combines two threads' partial results in a tree reduction.
type Combine = dyn Fn(&mut Emit, &[Val], &[Val]) -> Vec<Val>;

/// Threads of the reduction kernels (argmax, non-finite flag).
pub const RED_THREADS: usize = 1024;

/// A fixed-order tree reduction of `vals` (per-thread values) over the work-group through
/// shared arrays; `combine(e, mine, other)` returns the combined values.
fn tree(e: &mut Emit, vals: Vec<Val>, combine: &Combine) -> Result<Vec<Val>> {
    let local = e.kb.special(Special::LocalX);
    let shs: Vec<_> = vals
        .iter()
        .map(|v| e.kb.shared(e.kb.ty(*v).scalar, RED_THREADS as u32))
        .collect();
    for (s, &v) in shs.iter().zip(&vals) {
        e.kb.store(*s, local, v);
    }
    e.kb.barrier();
    let mut stride = RED_THREADS / 2;
    while stride > 0 {
        let sv = e.u(stride);
        let active = e.kb.cmp(CmpOp::Lt, local, sv);
        e.when(active, |e| {
            let other = e.kb.add(local, sv);
            let mine: Vec<Val> = shs.iter().map(|s| e.kb.load(*s, local, 1)).collect();
            let theirs: Vec<Val> = shs.iter().map(|s| e.kb.load(*s, other, 1)).collect();
            let c = combine(e, &mine, &theirs);
            for (s, &x) in shs.iter().zip(&c) {
                e.kb.store(*s, local, x);
            }
            Ok(())
        })?;
        e.kb.barrier();
        stride /= 2;
    }
    let zero = e.u(0);
    Ok(shs.iter().map(|s| e.kb.load(*s, zero, 1)).collect())
}

/// `argmax` over the last axis: the first index of the largest non-NaN value, else the first
/// NaN (as `poot_eval` defines it); one work-group per row.
pub fn argmax(e: &mut Emit, root: Value) -> Result<Launch> {
    let [x] = args(e, root)?;
    let xt = e.g.ty(x).clone();
    let n = xt.shape.last();
    let rows = xt.shape.numel() / n;
    let xm = e.buffer(x, Access::Read)?;
    let out = e.buffer(root, Access::Write)?;
    let row = e.kb.special(Special::GroupX);
    let local = e.kb.special(Special::LocalX);
    let nv = e.u(n);
    let base = e.kb.mul(row, nv);
    let ninf = e.kb.f32(f32::NEG_INFINITY);
    let none = e.kb.u32(u32::MAX);
    // Each thread scans 4-element groups in increasing index order (4-lane loads).
    let lanes = if n.is_multiple_of(4) { 4 } else { 1 };
    let four = e.u(lanes);
    let start = e.kb.mul(local, four);
    let step = (RED_THREADS * lanes) as u32;
    let found = e.repeat(start, nv, step, &[ninf, none, none], |e, k0, c| {
        let at = e.kb.add(base, k0);
        let vs = e.kb.load(xm, at, lanes as u8);
        let mut c = c.to_vec();
        for i in 0..lanes {
            let v = if lanes == 1 {
                vs
            } else {
                e.kb.extract(vs, i as u8)
            };
            let iv = e.u(i);
            let k = e.kb.add(k0, iv);
            let nan = e.kb.un(UnOp::IsNan, v);
            let ok = e.kb.un(UnOp::Not, nan);
            let empty = e.kb.cmp(CmpOp::Eq, c[1], none);
            let gt = e.kb.cmp(CmpOp::Gt, v, c[0]);
            let better = e.kb.bin(BinOp::Or, empty, gt);
            let take = e.kb.bin(BinOp::And, ok, better);
            let bv = e.kb.select(take, v, c[0]);
            let bi = e.kb.select(take, k, c[1]);
            let first_nan = e.kb.bin(BinOp::Min, c[2], k);
            let fi = e.kb.select(nan, first_nan, c[2]);
            c = vec![bv, bi, fi];
        }
        Ok(c)
    })?;
    let r = tree(e, found, &move |e, a, b| {
        let a_empty = e.kb.cmp(CmpOp::Eq, a[1], none);
        let b_some = e.kb.cmp(CmpOp::Ne, b[1], none);
        let gt = e.kb.cmp(CmpOp::Gt, b[0], a[0]);
        let eq = e.kb.cmp(CmpOp::Eq, b[0], a[0]);
        let lower = e.kb.cmp(CmpOp::Lt, b[1], a[1]);
        let tie = e.kb.bin(BinOp::And, eq, lower);
        let wins = e.kb.bin(BinOp::Or, gt, tie);
        let wins = e.kb.bin(BinOp::Or, a_empty, wins);
        let take = e.kb.bin(BinOp::And, b_some, wins);
        let v = e.kb.select(take, b[0], a[0]);
        let i = e.kb.select(take, b[1], a[1]);
        let f = e.kb.bin(BinOp::Min, a[2], b[2]);
        vec![v, i, f]
    })?;
    let zero = e.u(0);
    let is_first = e.kb.cmp(CmpOp::Eq, local, zero);
    e.when(is_first, |e| {
        let empty = e.kb.cmp(CmpOp::Eq, r[1], none);
        let nan_empty = e.kb.cmp(CmpOp::Eq, r[2], none);
        let fallback = e.kb.select(nan_empty, zero, r[2]);
        let i = e.kb.select(empty, fallback, r[1]);
        let i = e.kb.bitcast(i, Scalar::I32);
        e.kb.store(out, row, i);
        Ok(())
    })?;
    Ok(launch([rows, 1, 1], 4 * rows * n))
}

/// `any_nonfinite`: one work-group ORs every element's non-finiteness.
pub fn any_nonfinite(e: &mut Emit, root: Value) -> Result<Launch> {
    let [x] = args(e, root)?;
    let n = e.g.ty(x).shape.numel();
    let xm = e.buffer(x, Access::Read)?;
    let out = e.buffer(root, Access::Write)?;
    let local = e.kb.special(Special::LocalX);
    let nv = e.u(n);
    let zero = e.u(0);
    let lanes = if n.is_multiple_of(4) { 4 } else { 1 };
    let four = e.u(lanes);
    let start = e.kb.mul(local, four);
    let step = (RED_THREADS * lanes) as u32;
    let flag = e.repeat(start, nv, step, &[zero], |e, k, f| {
        let vs = e.kb.load(xm, k, lanes as u8);
        let mut f = f[0];
        for i in 0..lanes {
            let v = if lanes == 1 {
                vs
            } else {
                e.kb.extract(vs, i as u8)
            };
            let fin = e.kb.un(UnOp::IsFinite, v);
            let one = e.u(1);
            let z = e.u(0);
            let bad = e.kb.select(fin, z, one);
            f = e.kb.bin(BinOp::Or, f, bad);
        }
        Ok(vec![f])
    })?;
    let r = tree(e, flag, &|e, a, b| vec![e.kb.bin(BinOp::Or, a[0], b[0])])?;
    let is_first = e.kb.cmp(CmpOp::Eq, local, zero);
    e.when(is_first, |e| {
        e.kb.store(out, zero, r[0]);
        Ok(())
    })?;
    Ok(launch([1, 1, 1], 4 * n))
}

/// Cache positions each lane of the attention kernel covers per split (one: short splits keep
/// the dependent memory round trips per kernel few; the combine reads all splits at once).
const ATT_CHUNK_PER_LANE: usize = 1;

/// The dot product of `d` values of shared `q` with `d` values of `k` at word `kbase`, in
/// 4-lane loads when `d` is a multiple of 4, with four accumulators combined as
/// `(a0 + a1) + (a2 + a3)`; the loads are independent, so they are issued back to back.
fn dot_q(e: &mut Emit, qs: poot_kir::Mem, km: poot_kir::Mem, kbase: Val, d: usize) -> Val {
    let zero = e.kb.f32(0.0);
    let mut acc = [zero; 4];
    if d.is_multiple_of(4) {
        for i in 0..d / 4 {
            let o = e.u(4 * i);
            let qv = e.kb.load(qs, o, 4);
            let at = e.kb.add(kbase, o);
            let kv = e.kb.load(km, at, 4);
            for (c, a) in acc.iter_mut().enumerate() {
                let x = e.kb.extract(qv, c as u8);
                let y = e.kb.extract(kv, c as u8);
                *a = e.kb.fma(x, y, *a);
            }
        }
    } else {
        for i in 0..d {
            let o = e.u(i);
            let x = e.kb.load(qs, o, 1);
            let at = e.kb.add(kbase, o);
            let y = e.kb.load(km, at, 1);
            acc[i % 4] = e.kb.fma(x, y, acc[i % 4]);
        }
    }
    let l = e.kb.add(acc[0], acc[1]);
    let r = e.kb.add(acc[2], acc[3]);
    e.kb.add(l, r)
}

/// Attention, split over the cache: the first kernel computes, per (row, token, head) and
/// per chunk of cache positions, the chunk's max score, sum of exponentials and unnormalised
/// output; the second combines the chunks. Scores are lane-per-position (a hidden position
/// skips its key reads); the weighted sum of values is lane-per-dimension over the chunk's
/// visible prefix only, so a step reads the K/V its position needs, not the whole cache.
/// One subgroup per work-group.
pub fn attention_partial(
    e: &mut Emit,
    root: Value,
    a: &super::place::Attention,
    sub: u32,
) -> Result<(Launch, usize)> {
    let g = e.g;
    let qd = g.ty(a.q).shape.0.clone();
    let kd = g.ty(a.k).shape.0.clone();
    let (r, t, h, d) = (qd[0], qd[1], qd[2], qd[3]);
    let (c, groups) = (kd[1], kd[2]);
    let per = h / groups;
    let subn = sub as usize;
    let chunk = subn * ATT_CHUNK_PER_LANE;
    let splits = c.div_ceil(chunk);
    let km = e.buffer(a.k, Access::Read)?;
    let vm = e.buffer(a.v, Access::Read)?;
    let part = e.mem(Buf::Scratch(root, 0), Scalar::F32, Access::Write);
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
    // Queries into shared memory, computed once per work-group.
    let dv = e.u(d);
    for i in 0..d.div_ceil(subn) {
        let off = e.u(i * subn);
        let dd = e.kb.add(lane, off);
        let ok = e.kb.cmp(CmpOp::Lt, dd, dv);
        e.when(ok, |e| {
            let q = e.value(a.q, &[ri, ti, hi, dd])?;
            e.kb.store(qs, dd, q);
            Ok(())
        })?;
    }
    e.kb.barrier();
    let chunk_v = e.u(chunk);
    let c0 = e.kb.mul(split, chunk_v);
    let scale = e.kb.f32(a.scale);
    let ninf = e.kb.f32(f32::NEG_INFINITY);
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
    let mut scores = Vec::with_capacity(ATT_CHUNK_PER_LANE);
    let mut end = zero_u;
    for j in 0..ATT_CHUNK_PER_LANE {
        let off = e.u(j * subn);
        let cc = e.kb.add(c0, off);
        let cc = e.kb.add(cc, lane);
        let inside = e.kb.cmp(CmpOp::Lt, cc, cv);
        let last = e.u(c - 1);
        let ci = e.kb.bin(BinOp::Min, cc, last);
        let mi = e.broadcast_idx(a.mask, 4, &[ri, hi, ti, ci]);
        let visible = e.value(a.mask, &mi)?;
        let live = e.kb.bin(BinOp::And, inside, visible);
        let sc = e.branch(
            live,
            |e| {
                let kbase = row_of(e, ci);
                let dot = dot_q(e, qs, km, kbase, d);
                Ok(vec![e.kb.mul(dot, scale)])
            },
            |_| Ok(vec![ninf]),
        )?;
        scores.push(sc[0]);
        let one = e.u(1);
        let next = e.kb.add(cc, one);
        let mine = e.kb.select(live, next, zero_u);
        end = e.kb.bin(BinOp::Max, end, mine);
    }
    let mut m = ninf;
    for &sc in &scores {
        m = e.kb.bin(BinOp::Max, m, sc);
    }
    let m = e.kb.subgroup_reduce(ReduceOp::Max, m);
    let end = e.kb.subgroup_reduce(ReduceOp::Max, end);
    let empty = e.kb.cmp(CmpOp::Eq, m, ninf);
    let zero = e.kb.f32(0.0);
    let safe_m = e.kb.select(empty, zero, m);
    let mut l = zero;
    for (j, &sc) in scores.iter().enumerate() {
        let x = e.kb.sub(sc, safe_m);
        let p = e.kb.un(UnOp::Exp, x);
        l = e.kb.add(l, p);
        let off = e.u(j * subn);
        let at = e.kb.add(off, lane);
        e.kb.store(ps, at, p);
    }
    let l = e.kb.subgroup_reduce(ReduceOp::Add, l);
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
        let one = e.u(1);
        let at = e.kb.add(pbase, one);
        e.kb.store(part, at, l);
        Ok(())
    })?;
    // Visible positions of this chunk: c0 .. end (a prefix for a causal mask).
    let has = e.kb.cmp(CmpOp::Gt, end, c0);
    let span = e.kb.sub(end, c0);
    let count = e.kb.select(has, span, zero_u);
    let last = e.u(c - 1);
    // Lane-per-dimension weighted sum: two consecutive dimensions per lane (2-lane loads)
    // when the head splits evenly, 32 positions per iteration with every load issued before
    // the multiply-adds (a chunk is at most four iterations).
    let w = if d % (2 * subn) == 0 { 2 } else { 1 };
    let unroll = 32;
    let wv = e.u(w);
    let dstart = e.kb.mul(lane, wv);
    e.repeat(dstart, dv, sub * w as u32, &[], |e, dd, _| {
        let acc = e.repeat(
            zero_u,
            count,
            unroll as u32,
            &vec![zero; 2 * w],
            |e, q0, acc| {
                let mut loads = Vec::with_capacity(unroll);
                for u in 0..unroll {
                    let uo = e.u(u);
                    let qi = e.kb.add(q0, uo);
                    let ok = e.kb.cmp(CmpOp::Lt, qi, count);
                    let last_p = e.u(chunk - 1);
                    let pi = e.kb.bin(BinOp::Min, qi, last_p);
                    let p = e.kb.load(ps, pi, 1);
                    let p = e.kb.select(ok, p, zero);
                    let cc = e.kb.add(c0, pi);
                    let ci = e.kb.bin(BinOp::Min, cc, last);
                    let vb = row_of(e, ci);
                    let at = e.kb.add(vb, dd);
                    let vv = e.kb.load(vm, at, w as u8);
                    loads.push((p, vv));
                }
                let mut next = acc.to_vec();
                for (u, (p, vv)) in loads.into_iter().enumerate() {
                    for comp in 0..w {
                        let x = if w == 1 {
                            vv
                        } else {
                            e.kb.extract(vv, comp as u8)
                        };
                        let slot = 2 * comp + u % 2;
                        next[slot] = e.kb.fma(p, x, next[slot]);
                    }
                }
                Ok(next)
            },
        )?;
        for comp in 0..w {
            let o = e.kb.add(acc[2 * comp], acc[2 * comp + 1]);
            let off = e.u(2 + comp);
            let at = e.kb.add(pbase, off);
            let at = e.kb.add(at, dd);
            e.kb.store(part, at, o);
        }
        Ok(vec![])
    })?;
    let mut l = launch([r * t * h, splits, 1], 8 * r * c * groups * d);
    l.scratch = vec![(4 * r * t * h * splits * rec) as u64];
    Ok((l, splits))
}

/// Combines the chunks of `attention_partial` into `root`'s `[r, t, h, d]` output.
pub fn attention_combine(e: &mut Emit, root: Value, splits: usize, sub: u32) -> Result<Launch> {
    let od = e.g.ty(root).shape.0.clone();
    let (r, t, h, d) = (od[0], od[1], od[2], od[3]);
    let part = e.mem(Buf::Scratch(root, 0), Scalar::F32, Access::Read);
    let out = e.buffer(root, Access::Write)?;
    let rth = e.kb.special(Special::GroupX);
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
    let dv = e.u(d);
    e.repeat(lane, dv, sub, &[], |e, dd, _| {
        let mut o = zero;
        let two = e.u(2);
        let loads: Vec<Val> = bases
            .iter()
            .map(|&at| {
                let at2 = e.kb.add(at, two);
                let at2 = e.kb.add(at2, dd);
                e.kb.load(part, at2, 1)
            })
            .collect();
        for (os, &w) in loads.into_iter().zip(&weights) {
            o = e.kb.fma(os, w, o);
        }
        let y = e.kb.bin(BinOp::Div, o, total);
        let dstb = e.kb.mul(rth, dv);
        let at = e.kb.add(dstb, dd);
        e.kb.store(out, at, y);
        Ok(vec![])
    })?;
    Ok(launch([r * t * h, 1, 1], 4 * r * t * h * splits * (d + 2)))
}
