//! Staging a kernel's input rows in shared memory: the work-group copies rows it reads from
//! many lanes (a decode matmul's input rows) into one shared array once, so each lane then
//! reads them at shared-memory latency instead of sending one batch of global loads after
//! another; rows that an RMS norm scales are copied times the norm's weight, with their sums
//! of squares reduced over the work-group on the way.
//!
//! Invariants: every thread of the work-group runs the copy and the barrier after it (the
//! caller places `stage` in uniform control flow, before any guard); the copy is whole
//! 4-lane vectors (`len` a multiple of 4, rows 16-byte aligned); a copied element is the
//! input element, or its product with the weight element rounded once (the product a lane
//! forms from the two loads), so a kernel reading the copy computes what one reading global
//! memory would; the sums of squares add each thread's squares in its order, then the
//! subgroups' butterflies, then the subgroups' sums in subgroup order, the same in every
//! run.

use super::expr::Emit;
use crate::Result;
use poot_kir::{BinOp, CmpOp, Mem, ReduceOp, Scalar, Special, Val};

/// The most bytes of shared memory a decode matmul stages. With 24 KiB, Qwen2.5-0.5B's down
/// projections staged their 19 KiB input row and its Vulkan decode step went from 886-892 to
/// 1022-1027 us on the H200 (CUDA 678 to 682-689); with 8 KiB they read global memory as
/// before and every other matmul of both models still stages.
const MAX_STAGE: usize = 8 * 1024;

/// Whether `rows` rows of `len` floats (with `norm`, plus one sum per row and subgroup of
/// the work-group's `warps`) fit `MAX_STAGE`, so `stage` may copy them.
pub(super) fn fits(rows: usize, len: usize, norm: bool, warps: usize) -> bool {
    4 * (rows * len + if norm { rows * warps } else { 0 }) <= MAX_STAGE
}

/// Copies `rows.len()` rows of `len` floats (row `i` at global element `rows[i].1` of
/// `rows[i].0`) into a new shared array, row `i` at element `i * len`, with the
/// work-group's `threads` threads in subgroups of `sub`, then waits at a barrier. With
/// `norm`, an RMS norm's weight, each element is copied times its weight element and every
/// row's sum of squares of the input comes back, valid in every thread.
pub(super) fn stage(
    e: &mut Emit,
    rows: &[(Mem, Val)],
    norm: Option<Mem>,
    len: usize,
    [threads, sub]: [usize; 2],
) -> Result<(Mem, Option<Vec<Val>>)> {
    debug_assert!(len.is_multiple_of(4));
    let n = rows.len();
    let warps = threads / sub;
    let sums_len = if norm.is_some() { n * warps } else { 0 };
    let sh = e.kb.shared(Scalar::F32, (n * len + sums_len) as u32);
    let local = e.kb.special(Special::LocalX);
    let vecs = len / 4;
    let last = e.u(vecs - 1);
    let vecs_v = e.u(vecs);
    let four = e.u(4);
    let mut squares = match norm {
        Some(_) => vec![e.kb.f32(0.0); n],
        None => Vec::new(),
    };
    let mut copies = Vec::new();
    for round in 0..vecs.div_ceil(threads) {
        let always = (round + 1) * threads <= vecs;
        let off = e.u(round * threads);
        let j = e.kb.add(local, off);
        let valid = e.kb.cmp(CmpOp::Lt, j, vecs_v);
        let j = e.kb.bin(BinOp::Min, j, last);
        let j4 = e.kb.mul(j, four);
        let w = norm.map(|nw| e.kb.load(nw, j4, 4));
        for (r, &(mem, base)) in rows.iter().enumerate() {
            let at = e.kb.add(base, j4);
            let x = e.kb.load(mem, at, 4);
            if w.is_some() {
                let mut s = squares[r];
                for c in 0..4 {
                    let xc = e.kb.extract(x, c);
                    s = e.kb.fma(xc, xc, s);
                }
                squares[r] = if always {
                    s
                } else {
                    e.kb.select(valid, s, squares[r])
                };
            }
            let row = e.u(r * len);
            let to = e.kb.add(row, j4);
            let y = match w {
                Some(w) => e.kb.mul(x, w),
                None => x,
            };
            copies.push((always, valid, to, y));
        }
    }
    for (always, valid, to, v) in copies {
        e.when_unless(always, valid, |e| {
            e.kb.store(sh, to, v);
            Ok(())
        })?;
    }
    if norm.is_none() {
        e.kb.barrier();
        return Ok((sh, None));
    }
    let sub_v = e.u(sub);
    let warp = e.kb.bin(BinOp::Div, local, sub_v);
    let lane = e.kb.special(Special::Lane);
    let zero_u = e.u(0);
    let lead = e.kb.cmp(CmpOp::Eq, lane, zero_u);
    let sums: Vec<Val> = squares
        .iter()
        .map(|&s| e.kb.subgroup_reduce(ReduceOp::Add, s))
        .collect();
    e.when(lead, |e| {
        for (r, &s) in sums.iter().enumerate() {
            let base = e.u(n * len + r * warps);
            let at = e.kb.add(base, warp);
            e.kb.store(sh, at, s);
        }
        Ok(())
    })?;
    e.kb.barrier();
    let totals = (0..n)
        .map(|r| {
            let parts: Vec<Val> = (0..warps)
                .map(|w| {
                    let at = e.u(n * len + r * warps + w);
                    e.kb.load(sh, at, 1)
                })
                .collect();
            parts[1..].iter().fold(parts[0], |a, &x| e.kb.add(a, x))
        })
        .collect();
    Ok((sh, Some(totals)))
}
