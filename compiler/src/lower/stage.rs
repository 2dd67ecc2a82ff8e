//! Staging a kernel's input rows in shared memory: the work-group copies rows it reads from
//! many lanes (a decode matmul's input row and its prologue norm's weight) into one shared
//! array once, so each lane then reads them at shared-memory latency instead of sending one
//! batch of global loads after another.
//!
//! Invariants: every thread of the work-group runs the copy and the barrier after it (the
//! caller places `stage` in uniform control flow, before any guard); each thread issues all
//! its loads before its first store, so the copy costs one global round trip; the copy is
//! exact (4-lane loads and stores of whole rows, `len` a multiple of 4), so a kernel reading
//! the staged rows computes the same values as one reading global memory.

use super::expr::Emit;
use crate::Result;
use poot_kir::{BinOp, CmpOp, Mem, Scalar, Special, Val};

/// The most bytes of shared memory a decode matmul stages. With 24 KiB, Qwen2.5-0.5B's down
/// projections staged their 19 KiB input row and its Vulkan decode step went from 886-892 to
/// 1022-1027 us on the H200 (CUDA 678 to 682-689); with 8 KiB they read global memory as
/// before and every other matmul of both models still stages.
pub(super) const MAX_STAGE: usize = 8 * 1024;

/// Copies `src.len()` rows of `len` floats (row `i` at global element `src[i].1` of
/// `src[i].0`, 16-byte aligned) into a new shared array, row `i` at element `i * len`, with
/// the work-group's `threads` threads, then waits at a barrier. Returns the array.
pub(super) fn stage(e: &mut Emit, src: &[(Mem, Val)], len: usize, threads: usize) -> Result<Mem> {
    debug_assert!(len.is_multiple_of(4));
    let sh = e.kb.shared(Scalar::F32, (src.len() * len) as u32);
    let local = e.kb.special(Special::LocalX);
    let vecs = len / 4;
    let last = e.u(vecs - 1);
    let vecs_v = e.u(vecs);
    let four = e.u(4);
    let mut copies = Vec::new();
    for (i, &(mem, base)) in src.iter().enumerate() {
        for round in 0..vecs.div_ceil(threads) {
            let off = e.u(round * threads);
            let j = e.kb.add(local, off);
            let valid = e.kb.cmp(CmpOp::Lt, j, vecs_v);
            let j = e.kb.bin(BinOp::Min, j, last);
            let j4 = e.kb.mul(j, four);
            let at = e.kb.add(base, j4);
            let v = e.kb.load(mem, at, 4);
            let row = e.u(i * len);
            let to = e.kb.add(row, j4);
            copies.push(((round + 1) * threads <= vecs, valid, to, v));
        }
    }
    for (always, valid, to, v) in copies {
        e.when_unless(always, valid, |e| {
            e.kb.store(sh, to, v);
            Ok(())
        })?;
    }
    e.kb.barrier();
    Ok(sh)
}
