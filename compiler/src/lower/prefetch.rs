//! Weight prefetch: every dispatch asks the device to start moving the weights of the
//! dispatch after it into its cache, so a matmul finds its weights in L2 instead of waiting
//! a DRAM round trip for them (a target without a prefetch drops the hint).
//!
//! Invariants: the prefetch is a prologue run by thread 0 of each work-group, changing no
//! result: for each of the next dispatch's (at most `MAX_AHEAD` largest) weights, bound as
//! `Buf::Ahead` (which no load reads), work-group `j` asks for words `[j * s, (j + 1) * s)`
//! clipped to the weight's whole 16-byte units, with `s` a multiple of 4; every range lies
//! inside its binding and starts 16-byte aligned.

use super::Dispatch;
use super::expr::Buf;
use poot_ir::{Graph, Op, Value};
use poot_kir::{Access, BinOp, CmpOp, Const, Expr, Inst, Kernel, Param, Scalar, Special, Ty, Val};

/// The most weights one dispatch prefetches for the next (the largest ones).
const MAX_AHEAD: usize = 4;
/// The largest share of a weight one work-group prefetches, in words (32 KiB): a dispatch
/// with fewer work-groups than that needs (the final norm before a large output matrix)
/// prefetches nothing, since one prefetch of megabytes keeps its issuing group busy.
const MAX_SHARE_WORDS: u32 = 8 * 1024;

/// The weights `d` reads, largest first, with their sizes in whole 16-byte units (as words).
fn weights(g: &Graph, d: &Dispatch) -> Vec<(Value, u32)> {
    let mut out: Vec<(Value, u32)> = Vec::new();
    for (b, _) in &d.args {
        if let Buf::Value(v) = *b
            && matches!(g.nodes[v].op, Op::Weight(_))
            && !out.iter().any(|(w, _)| *w == v)
        {
            let t = g.ty(v);
            let bytes = t.dtype.bytes_for(t.shape.numel()).unwrap_or(0);
            let words = (bytes / 16 * 4) as u32;
            if words > 0 {
                out.push((v, words));
            }
        }
    }
    out.sort_by_key(|&(v, w)| (std::cmp::Reverse(w), v));
    out.truncate(MAX_AHEAD);
    out
}

/// Adds to each dispatch (with its own kernel) the prefetch of the next dispatch's weights,
/// where its work-groups' shares are at most `MAX_SHARE_WORDS` each.
pub fn add(g: &Graph, mut pairs: Vec<(Kernel, Dispatch)>) -> Vec<(Kernel, Dispatch)> {
    for i in 0..pairs.len().saturating_sub(1) {
        let groups: u32 = pairs[i].1.grid.iter().product();
        let ahead: Vec<(Value, u32)> = weights(g, &pairs[i + 1].1)
            .into_iter()
            .filter(|&(_, w)| w.div_ceil(groups.max(1)) <= MAX_SHARE_WORDS)
            .collect();
        if ahead.is_empty() {
            continue;
        }
        let (k, d) = &mut pairs[i];
        prologue(k, d.grid, &ahead);
        d.args
            .extend(ahead.iter().map(|&(v, _)| (Buf::Ahead(v), Access::Read)));
    }
    pairs
}

/// Prepends to `k` (launched on `grid`) the prefetch of `ahead` (one new parameter each,
/// after the others): thread 0 of work-group `j` (linear, x fastest) asks for share `j`.
fn prologue(k: &mut Kernel, grid: [u32; 3], ahead: &[(Value, u32)]) {
    let mut body = Vec::new();
    let def = |k: &mut Kernel, body: &mut Vec<Inst>, ty: Ty, e: Expr| -> Val {
        let v = k.types.push(ty);
        body.push(Inst::Let(v, e));
        v
    };
    let u = |x: u32| Expr::Const(Const::U32(x));
    let lx = def(k, &mut body, Ty::U32, Expr::Special(Special::LocalX));
    let zero = def(k, &mut body, Ty::U32, u(0));
    let first = def(k, &mut body, Ty::BOOL, Expr::Cmp(CmpOp::Eq, lx, zero));
    let mut then = Vec::new();
    let gx = def(k, &mut then, Ty::U32, Expr::Special(Special::GroupX));
    let gy = def(k, &mut then, Ty::U32, Expr::Special(Special::GroupY));
    let gz = def(k, &mut then, Ty::U32, Expr::Special(Special::GroupZ));
    let nx = def(k, &mut then, Ty::U32, u(grid[0]));
    let nxy = def(k, &mut then, Ty::U32, u(grid[0] * grid[1]));
    let y = def(k, &mut then, Ty::U32, Expr::Binary(BinOp::Mul, gy, nx));
    let z = def(k, &mut then, Ty::U32, Expr::Binary(BinOp::Mul, gz, nxy));
    let j = def(k, &mut then, Ty::U32, Expr::Binary(BinOp::Add, gx, y));
    let j = def(k, &mut then, Ty::U32, Expr::Binary(BinOp::Add, j, z));
    let groups: u32 = grid.iter().product();
    for &(_, words) in ahead {
        let p = k.params.len() as u32;
        k.params.push(Param {
            name: "ahead".into(),
            elem: Scalar::U32,
            access: Access::Read,
        });
        let per = words.div_ceil(groups.max(1)).next_multiple_of(4);
        let s = def(k, &mut then, Ty::U32, u(per));
        let start = def(k, &mut then, Ty::U32, Expr::Binary(BinOp::Mul, j, s));
        let w = def(k, &mut then, Ty::U32, u(words));
        let inside = def(k, &mut then, Ty::BOOL, Expr::Cmp(CmpOp::Lt, start, w));
        let rest = def(k, &mut then, Ty::U32, Expr::Binary(BinOp::Sub, w, start));
        let n = def(k, &mut then, Ty::U32, Expr::Binary(BinOp::Min, rest, s));
        let count = def(k, &mut then, Ty::U32, Expr::Select(inside, n, zero));
        let at = def(k, &mut then, Ty::U32, Expr::Binary(BinOp::Min, start, w));
        then.push(Inst::Prefetch {
            mem: poot_kir::Mem::Param(p),
            index: at,
            count,
        });
    }
    body.push(Inst::If {
        cond: first,
        then,
        then_yield: Vec::new(),
        els: Vec::new(),
        else_yield: Vec::new(),
        results: Vec::new(),
    });
    body.append(&mut k.body);
    k.body = body;
}
