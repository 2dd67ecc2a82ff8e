//! Kernel templates: one function per kind of materialized value (the decode matmul is in
//! `matmul`, the tiled matmul in `gemm`, attention in `attention`, the row reductions in
//! `reduce`).
//!
//! Invariants: every template computes its root value with the semantics `poot_eval`
//! documents, reading inline operands through `Emit::value`; grids and shapes are baked and
//! per-step data (positions, token ids) is loaded from slot buffers; every subgroup
//! operation runs with whole subgroups active (the guards around them are uniform per
//! subgroup); work-group reductions combine partial results in a fixed order.

use super::expr::{Emit, TRAP_CACHE_OVERFLOW};
use super::place::unsupported;
use super::quant::{unit, weight};
use crate::Result;
use poot_ir::{DType, Value};
use poot_kir::{Access, BinOp, CmpOp, Mem, ReduceOp, Scalar, Special, UnOp, Val};

/// Lane `first` of each subgroup stores the subgroup's `op` of `x` at `warp` of `slots` (one
/// shared word a subgroup); the caller places the barrier before the parts are read.
pub(super) fn subgroup_parts(
    e: &mut Emit,
    op: ReduceOp,
    x: Val,
    slots: Mem,
    [warp, first]: [Val; 2],
) -> Result<()> {
    let part = e.kb.subgroup_reduce(op, x);
    e.when(first, |e| {
        e.kb.store(slots, warp, part);
        Ok(())
    })
}

/// The `n` subgroup parts in `slots` folded by `op` from `init` in subgroup order, so every
/// thread holds the same bits.
pub(super) fn fold_parts(e: &mut Emit, op: ReduceOp, slots: Mem, n: usize, init: Val) -> Val {
    let op = match op {
        ReduceOp::Add => BinOp::Add,
        ReduceOp::Max => BinOp::Max,
        ReduceOp::Min => BinOp::Min,
        ReduceOp::Or => BinOp::Or,
    };
    let mut acc = init;
    for i in 0..n {
        let iv = e.u(i);
        let y = e.kb.load(slots, iv, 1);
        acc = e.kb.bin(op, acc, y);
    }
    acc
}

/// The work-group's `op` of `x` over its `n` subgroups: `subgroup_parts`, a barrier, then
/// `fold_parts` from `init`.
pub(super) fn group_reduce(
    e: &mut Emit,
    (op, x, init): (ReduceOp, Val, Val),
    slots: Mem,
    at: [Val; 2],
    n: usize,
) -> Result<Val> {
    subgroup_parts(e, op, x, slots, at)?;
    e.kb.barrier();
    Ok(fold_parts(e, op, slots, n, init))
}

/// A kernel's launch: grid, work weight and private scratch.
pub struct Launch {
    /// Work-groups.
    pub grid: [u32; 3],
    /// Bytes the dispatch reads (the planner's work weight).
    pub work: u64,
    /// Bytes of each kernel-private scratch buffer (`Buf::Scratch(root, i)`).
    pub scratch: Vec<u64>,
    /// Words of `Buf::Counters` the kernel uses.
    pub counters: usize,
    /// How each tiled matmul of the kernel computes (`Dispatch::tiles`).
    pub tiles: Vec<super::TileForm>,
}

pub(super) fn launch(grid: [usize; 3], work: usize) -> Launch {
    Launch {
        grid: grid.map(|g| g.max(1) as u32),
        work: work as u64,
        scratch: Vec::new(),
        counters: 0,
        tiles: Vec::new(),
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
pub(super) fn store(e: &mut Emit, out: poot_kir::Mem, at: Val, x: Val, dtype: DType) {
    let x = if dtype == DType::Bool {
        let one = e.kb.u32(1);
        let zero = e.kb.u32(0);
        e.kb.select(x, one, zero)
    } else {
        x
    };
    e.kb.store(out, at, x);
}

pub(super) fn bytes(e: &Emit, v: Value) -> usize {
    let t = e.g.ty(v);
    t.dtype.bytes_for(t.shape.numel()).unwrap_or(0)
}

pub(super) fn args<const N: usize>(e: &Emit, v: Value) -> Result<[Value; N]> {
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

/// An RMS norm's `1 / sqrt(sum_sq / n + eps)`, with `poot_eval`'s operations.
pub(super) fn inv_rms(e: &mut Emit, sum_sq: Val, n: usize, eps: f32) -> Val {
    let nf = e.kb.f32(n as f32);
    let ms = e.kb.bin(BinOp::Div, sum_sq, nf);
    let epsv = e.kb.f32(eps);
    let t = e.kb.add(ms, epsv);
    let s = e.kb.un(UnOp::Sqrt, t);
    let one = e.kb.f32(1.0);
    e.kb.bin(BinOp::Div, one, s)
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
    let lane = e.kb.special(Special::Lane);
    let zero_u = e.u(0);
    let first = e.kb.cmp(CmpOp::Eq, lane, zero_u);
    let sub_v = e.u(sub as usize);
    let warp = e.kb.bin(BinOp::Div, local, sub_v);
    let total = group_reduce(e, (ReduceOp::Add, ss[0], zero), sh, [warp, first], warps)?;
    let r = inv_rms(e, total, n, eps);
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
