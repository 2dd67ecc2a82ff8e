//! The conformance kernels: together they use every kir expression, statement, operator and
//! special value (`missing_coverage` checks it). The `subgroup_*` and `trap_*` cases exercise
//! what renderers without native subgroups or traps need (a shared-memory subgroup fallback and
//! its hoisting out of branches, traps beside barriers). Every kernel is race-free, so any
//! backend can run it and compare with the reference device.

use crate::{Access, BinOp, CmpOp, Kernel, KernelBuilder, Mem, ReduceOp, Scalar, Special, UnOp};

/// Every case, by snapshot name.
pub fn cases() -> Vec<(&'static str, Kernel)> {
    vec![
        ("dot_x4", dot_x4()),
        ("if_else", if_else()),
        ("shared_reduce", shared_reduce()),
        ("atomics", atomics()),
        ("atomics_f32", atomics_f32()),
        ("conversions", conversions()),
        ("traps", traps()),
        ("divergent_loop", divergent_loop()),
        ("ops_f32", ops_f32()),
        ("ops_int", ops_int()),
        ("subgroup_ops", subgroup_ops()),
        ("subgroup8", subgroup8()),
        ("subgroup_guarded", subgroup_guarded()),
        ("subgroup_batch", subgroup_batch()),
        ("subgroup_loop", subgroup_loop()),
        ("trap_barrier", trap_barrier()),
        ("last_group", last_group()),
        ("mixed_widths", mixed_widths()),
        ("cluster_exchange", cluster_exchange()),
        ("matrix_tile", matrix_tile()),
    ]
}

/// Buffers accessed at several widths: `x` by 4-lane, 2-lane and scalar loads, `out` by
/// scalar and 4-lane stores (a renderer that declares a buffer by its widest access reaches
/// the narrower ones by component).
pub fn mixed_widths() -> Kernel {
    let mut b = KernelBuilder::new("mixed_widths", [64, 1, 1], 1);
    let x = b.param("x", Scalar::F32, Access::Read);
    let out = b.param("out", Scalar::F32, Access::Write);
    let t = b.special(Special::LocalX);
    let (two, four, base) = (b.u32(2), b.u32(4), b.u32(64));
    let i4 = b.mul(t, four);
    let v = b.load(x, i4, 4);
    let i2 = b.mul(t, two);
    let p = b.load(x, i2, 2);
    let s = b.load(x, t, 1);
    let (v0, p1) = (b.extract(v, 0), b.extract(p, 1));
    let sum = b.add(v0, p1);
    let sum = b.add(sum, s);
    b.store(out, t, sum);
    let at = b.add(base, i4);
    b.store(out, at, v);
    b.finish()
}

/// One warp per row: a `x4` vector-load dot product with two carried values, reduced over
/// the warp, plus the row's first weight, stored by lane 0; each lane first prefetches its
/// 32 elements of the row and loads that weight before the grid wait (which lists `w`), and
/// lets the next dispatch launch once its products are done.
pub fn dot_x4() -> Kernel {
    let mut b = KernelBuilder::new("dot_x4", [32, 1, 1], 32);
    let x = b.param("x", Scalar::F32, Access::Read);
    let w = b.param("w", Scalar::F32, Access::Read);
    let out = b.param("out", Scalar::F32, Access::Write);
    let lane = b.special(Special::Lane);
    let row = b.special(Special::GroupX);
    let n = b.u32(1024);
    let four = b.u32(4);
    let start = b.mul(lane, four);
    let base = b.mul(row, n);
    let per = b.u32(32);
    let mine = b.mul(lane, per);
    let from = b.add(base, mine);
    b.prefetch(w, from, per);
    let w0 = b.load(w, base, 1);
    b.grid_wait(vec![1]);
    let zero = b.f32(0.0);
    let count = b.u32(0);
    let r = b.for_loop(start, n, 128, &[zero, count], |b, i, c| {
        let xv = b.load(x, i, 4);
        let wi = b.add(base, i);
        let wv = b.load(w, wi, 4);
        let mut acc = c[0];
        for l in 0..4 {
            let (xl, wl) = (b.extract(xv, l), b.extract(wv, l));
            acc = b.fma(xl, wl, acc);
        }
        let one = b.u32(1);
        let cnt = b.add(c[1], one);
        vec![acc, cnt]
    });
    b.launch_dependents();
    let sum = b.subgroup_reduce(ReduceOp::Add, r[0]);
    let sum = b.add(sum, w0);
    let z = b.u32(0);
    let first = b.cmp(CmpOp::Eq, lane, z);
    b.if_then(first, |b| b.store(out, row, sum));
    b.finish()
}

/// An `if`/`else` with two results of different types, a nested `if` with a result, vector
/// selects and a `x2` read-modify-write.
pub fn if_else() -> Kernel {
    let mut b = KernelBuilder::new("if_else", [64, 1, 1], 1);
    let x = b.param("x", Scalar::F32, Access::Read);
    let out = b.param("out", Scalar::F32, Access::ReadWrite);
    let codes = b.param("codes", Scalar::U32, Access::Write);
    let t = b.special(Special::LocalX);
    let g = b.special(Special::GroupX);
    let wg = b.u32(64);
    let gi = b.mul(g, wg);
    let i = b.add(gi, t);
    let v = b.load(x, i, 1);
    let zero = b.f32(0.0);
    let pos = b.cmp(CmpOp::Gt, v, zero);
    let r = b.if_else(
        pos,
        |b| {
            let s = b.un(UnOp::Sqrt, v);
            let one = b.u32(1);
            vec![s, one]
        },
        |b| {
            let n = b.un(UnOp::Neg, v);
            let e = b.un(UnOp::Exp, n);
            let one = b.f32(1.0);
            let small = b.cmp(CmpOp::Lt, e, one);
            let m = b.if_else(small, |_| vec![e], |_| vec![one]);
            let two = b.u32(2);
            vec![m[0], two]
        },
    );
    let sel = b.select(pos, r[0], v);
    let two = b.u32(2);
    let j = b.mul(i, two);
    let old = b.load(out, j, 2);
    let big = b.load(out, j, 2);
    let lt = b.cmp(CmpOp::Lt, old, big);
    let lo = b.select(lt, old, big);
    let bump = b.add(lo, big);
    b.store(out, j, bump);
    // Past the pairs, so no thread stores where another loads.
    let half = b.u32(256);
    let si = b.add(half, i);
    b.store(out, si, sel);
    b.store(codes, i, r[1]);
    b.finish()
}

/// A 16x16 work-group: a tree reduction through shared memory with barriers, plus `x2`
/// shared stores read back as `x4`.
pub fn shared_reduce() -> Kernel {
    let mut b = KernelBuilder::new("shared_reduce", [16, 16, 1], 1);
    let x = b.param("x", Scalar::F32, Access::Read);
    let words = b.param("words", Scalar::U32, Access::ReadWrite);
    let out = b.param("out", Scalar::F32, Access::Write);
    let s = b.shared(Scalar::F32, 256);
    let sw = b.shared(Scalar::U32, 512);
    let tx = b.special(Special::LocalX);
    let ty = b.special(Special::LocalY);
    let g = b.special(Special::GroupX);
    let sixteen = b.u32(16);
    let row = b.mul(ty, sixteen);
    let lin = b.add(row, tx);
    let n = b.u32(256);
    let gb = b.mul(g, n);
    let gi = b.add(gb, lin);
    let v = b.load(x, gi, 1);
    b.store(s, lin, v);
    let two = b.u32(2);
    let wi = b.mul(lin, two);
    let pair = b.load(words, wi, 2);
    b.store(sw, wi, pair);
    b.barrier();
    let (k0, k1) = (b.u32(0), b.u32(8));
    b.for_loop(k0, k1, 1, &[], |b, k, _| {
        let half0 = b.u32(128);
        let half = b.bin(BinOp::Shr, half0, k);
        let active = b.cmp(CmpOp::Lt, lin, half);
        b.if_then(active, |b| {
            let a = b.load(s, lin, 1);
            let oi = b.add(lin, half);
            let c = b.load(s, oi, 1);
            let sum = b.add(a, c);
            b.store(s, lin, sum);
        });
        b.barrier();
        vec![]
    });
    let lane = b.special(Special::Lane);
    let z = b.u32(0);
    let first = b.cmp(CmpOp::Eq, lin, z);
    let l0 = b.cmp(CmpOp::Eq, lane, z);
    let both = b.bin(BinOp::And, first, l0);
    b.if_then(both, |b| {
        let total = b.load(s, z, 1);
        b.store(out, g, total);
    });
    let four = b.u32(4);
    let q = b.bin(BinOp::Div, lin, two);
    let qi = b.mul(q, four);
    let quad = b.load(sw, qi, 4);
    b.store(words, qi, quad);
    b.finish()
}

/// Every integer atomic, on global and shared memory (zeroed first: it starts undefined on
/// GPUs, zero on the reference device), and a shared array read back after them. Each
/// operator has its own elements, so the result does not depend on how threads interleave.
pub fn atomics() -> Kernel {
    let mut b = KernelBuilder::new("atomics", [128, 1, 1], 1);
    let i = b.param("acci", Scalar::I32, Access::ReadWrite);
    let u = b.param("accu", Scalar::U32, Access::Write);
    let si = b.shared(Scalar::I32, 8);
    let su = b.shared(Scalar::U32, 8);
    let t = b.special(Special::LocalX);
    let three = b.u32(3);
    let slot = b.bin(BinOp::And, t, three);
    let eight = b.u32(8);
    let first = b.cmp(CmpOp::Lt, t, eight);
    b.if_then(first, |b| {
        let (zi, zu) = (b.i32(0), b.u32(0));
        b.store(si, t, zi);
        b.store(su, t, zu);
    });
    b.barrier();
    let ti = b.bitcast(t, Scalar::I32);
    let neg = b.un(UnOp::Neg, ti);
    let four = b.u32(4);
    let mut at = slot;
    for op in [ReduceOp::Add, ReduceOp::Max, ReduceOp::Min, ReduceOp::Or] {
        b.atomic(op, i, at, neg);
        b.atomic(op, u, at, t);
        at = b.add(at, four);
    }
    let s4 = b.add(slot, four);
    b.atomic(ReduceOp::Min, si, slot, neg);
    b.atomic(ReduceOp::Add, si, s4, neg);
    b.atomic(ReduceOp::Max, su, slot, t);
    b.atomic(ReduceOp::Or, su, s4, t);
    b.barrier();
    let v = b.load(si, s4, 1);
    b.atomic(ReduceOp::Max, i, at, v);
    b.finish()
}

/// f32 atomic add on a parameter read back after a barrier (targets with
/// `atomic_float_add` only).
pub fn atomics_f32() -> Kernel {
    let mut b = KernelBuilder::new("atomics_f32", [128, 1, 1], 1);
    let f = b.param("accf", Scalar::F32, Access::ReadWrite);
    let t = b.special(Special::LocalX);
    let three = b.u32(3);
    let slot = b.bin(BinOp::And, t, three);
    let tf = b.convert(t, Scalar::F32);
    b.atomic(ReduceOp::Add, f, slot, tf);
    b.barrier();
    let v = b.load(f, slot, 1);
    let four = b.u32(4);
    let next = b.add(slot, four);
    b.atomic(ReduceOp::Add, f, next, v);
    b.finish()
}

/// f32 atomic add on shared memory (targets with `shared_atomic_float_add` only).
pub fn atomics_f32_shared() -> Kernel {
    let mut b = KernelBuilder::new("atomics_f32_shared", [128, 1, 1], 1);
    let f = b.param("out", Scalar::F32, Access::Write);
    let sf = b.shared(Scalar::F32, 4);
    let t = b.special(Special::LocalX);
    let three = b.u32(3);
    let slot = b.bin(BinOp::And, t, three);
    let tf = b.convert(t, Scalar::F32);
    b.atomic(ReduceOp::Add, sf, slot, tf);
    b.barrier();
    let v = b.load(sf, slot, 1);
    b.store(f, t, v);
    b.finish()
}

/// Half and bf16 unpacking, every numeric conversion and bit cast, on scalars and vectors.
pub fn conversions() -> Kernel {
    let mut b = KernelBuilder::new("conversions", [256, 1, 1], 1);
    let packed = b.param("packed", Scalar::U32, Access::Read);
    let of = b.param("out_f32", Scalar::F32, Access::Write);
    let oi = b.param("out_i32", Scalar::I32, Access::Write);
    let ou = b.param("out_u32", Scalar::U32, Access::Write);
    let t = b.special(Special::LocalX);
    let w = b.load(packed, t, 1);
    let h0 = b.expr(crate::Expr::HalfToF32(w, false));
    let h1 = b.expr(crate::Expr::HalfToF32(w, true));
    let b0 = b.expr(crate::Expr::Bf16ToF32(w, false));
    let b1 = b.expr(crate::Expr::Bf16ToF32(w, true));
    let hs = b.add(h0, h1);
    let bs = b.add(b0, b1);
    let f = b.add(hs, bs);
    let four = b.u32(4);
    let o = b.mul(t, four);
    let quad = b.load(packed, o, 4);
    let qf = b.convert(quad, Scalar::F32);
    b.store(of, o, qf);
    let fi = b.convert(f, Scalar::I32);
    let fu = b.convert(f, Scalar::U32);
    let iff = b.convert(fi, Scalar::F32);
    let uf = b.convert(fu, Scalar::F32);
    let iu = b.convert(fi, Scalar::U32);
    let ui = b.convert(fu, Scalar::I32);
    let ff = b.convert(f, Scalar::F32);
    let pos = b.cmp(CmpOp::Ge, ff, iff);
    let pf = b.convert(pos, Scalar::F32);
    let pi = b.convert(pos, Scalar::I32);
    let pu = b.convert(pos, Scalar::U32);
    let bits = b.bitcast(uf, Scalar::U32);
    let back = b.bitcast(bits, Scalar::F32);
    let ib = b.bitcast(iu, Scalar::I32);
    let sum = b.add(back, pf);
    b.store(of, t, sum);
    let isum = b.add(ui, pi);
    let isum = b.add(isum, ib);
    b.store(oi, t, isum);
    let usum = b.add(iu, pu);
    b.store(ou, t, usum);
    b.finish()
}

/// Traps: a bounds check against a slot, a NaN check inside a loop, and an `else` that traps.
pub fn traps() -> Kernel {
    let mut b = KernelBuilder::new("traps", [32, 1, 1], 1);
    let slot = b.param("slot", Scalar::U32, Access::Read);
    let x = b.param("x", Scalar::F32, Access::ReadWrite);
    let t = b.special(Special::LocalX);
    let z = b.u32(0);
    let n = b.load(slot, z, 1);
    let oob = b.cmp(CmpOp::Ge, t, n);
    b.if_then(oob, |b| b.trap(1));
    let end = b.u32(64);
    b.for_loop(t, end, 32, &[], |b, i, _| {
        let v = b.load(x, i, 1);
        let nan = b.un(UnOp::IsNan, v);
        b.if_then(nan, |b| b.trap(2));
        vec![]
    });
    let v = b.load(x, t, 1);
    let fin = b.un(UnOp::IsFinite, v);
    b.if_else(
        fin,
        |b| {
            let d = b.add(v, v);
            b.store(x, t, d);
            vec![]
        },
        |b| {
            b.trap(3);
            vec![]
        },
    );
    b.finish()
}

/// Per-thread loop bounds, a carried pair whose yields cross (needs a parallel copy), a
/// strided loop nested in another, and a loop that yields its carried values swapped.
pub fn divergent_loop() -> Kernel {
    let mut b = KernelBuilder::new("divergent_loop", [64, 1, 1], 1);
    let lens = b.param("lens", Scalar::U32, Access::Read);
    let out = b.param("out", Scalar::U32, Access::Write);
    let t = b.special(Special::LocalX);
    let len = b.load(lens, t, 1);
    let (z, one) = (b.u32(0), b.u32(1));
    // Fibonacci: (a, b) <- (b, a + b).
    let fib = b.for_loop(z, len, 1, &[z, one], |b, _, c| {
        let s = b.add(c[0], c[1]);
        vec![c[1], s]
    });
    // Swap (a, b) <- (b, a) every iteration, inside a strided loop.
    let end = b.u32(1000);
    let outer = b.for_loop(t, end, 7, &[fib[0]], |b, i, c| {
        let inner = b.for_loop(z, i, 3, &[c[0], i], |_, _, p| vec![p[1], p[0]]);
        let x = b.bin(BinOp::Xor, inner[0], inner[1]);
        vec![x]
    });
    let r = b.add(outer[0], fib[1]);
    b.store(out, t, r);
    b.finish()
}

/// Every f32 operator, on a 4-lane vector where kir allows it. Vector accesses in every case
/// are at multiples of their lane count, as the planner guarantees.
pub fn ops_f32() -> Kernel {
    let mut b = KernelBuilder::new("ops_f32", [64, 1, 1], 1);
    let x = b.param("x", Scalar::F32, Access::Read);
    let out = b.param("out", Scalar::F32, Access::Write);
    let flags = b.param("flags", Scalar::U32, Access::Write);
    let t = b.special(Special::LocalX);
    let four = b.u32(4);
    let i = b.mul(t, four);
    let v = b.load(x, i, 4);
    let off = b.u32(256);
    let wi = b.add(i, off);
    let w = b.load(x, wi, 4);
    let mut acc = v;
    for op in [
        UnOp::Neg,
        UnOp::Exp,
        UnOp::Sqrt,
        UnOp::Rsqrt,
        UnOp::Recip,
        UnOp::Sin,
        UnOp::Cos,
        UnOp::Abs,
    ] {
        let r = b.un(op, acc);
        acc = b.add(acc, r);
    }
    for op in [
        BinOp::Add,
        BinOp::Sub,
        BinOp::Mul,
        BinOp::Div,
        BinOp::Min,
        BinOp::Max,
    ] {
        acc = b.bin(op, acc, w);
    }
    acc = b.fma(acc, w, v);
    let fin = b.un(UnOp::IsFinite, acc);
    let nan = b.un(UnOp::IsNan, acc);
    let zero = b.f32(0.0);
    let first = b.extract(acc, 0);
    let mut bits = b.u32(0);
    for (k, op) in [
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Gt,
        CmpOp::Ge,
    ]
    .into_iter()
    .enumerate()
    {
        let c = b.cmp(op, first, zero);
        let cu = b.convert(c, Scalar::U32);
        let sh = b.u32(k as u32);
        let m = b.bin(BinOp::Shl, cu, sh);
        bits = b.bin(BinOp::Or, bits, m);
    }
    let cleaned = b.select(fin, acc, w);
    let r = b.select(nan, w, cleaned);
    b.store(out, i, r);
    b.store(flags, t, bits);
    b.finish()
}

/// Every i32, u32 and bool operator, with a 2-lane u32 vector.
pub fn ops_int() -> Kernel {
    let mut b = KernelBuilder::new("ops_int", [64, 1, 1], 1);
    let xi = b.param("xi", Scalar::I32, Access::Read);
    let xu = b.param("xu", Scalar::U32, Access::Read);
    let oi = b.param("out_i32", Scalar::I32, Access::Write);
    let ou = b.param("out_u32", Scalar::U32, Access::Write);
    let t = b.special(Special::LocalX);
    let two = b.u32(2);
    let j = b.mul(t, two);
    let a = b.load(xi, t, 1);
    let c = b.i32(-7);
    let u = b.load(xu, j, 2);
    let off = b.u32(128);
    let vj = b.add(j, off);
    let v = b.load(xu, vj, 2);
    let (mut ai, mut au) = (a, u);
    for op in [UnOp::Neg, UnOp::Not, UnOp::Abs] {
        let r = b.un(op, ai);
        ai = b.add(ai, r);
        let r = b.un(op, au);
        au = b.add(au, r);
    }
    for op in [
        BinOp::Add,
        BinOp::Sub,
        BinOp::Mul,
        BinOp::Div,
        BinOp::Rem,
        BinOp::Min,
        BinOp::Max,
        BinOp::And,
        BinOp::Or,
        BinOp::Xor,
        BinOp::Shl,
        BinOp::Shr,
    ] {
        ai = b.bin(op, ai, c);
        au = b.bin(op, au, v);
    }
    let yes = b.bool(true);
    let mut p = b.bool(false);
    for op in [
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Gt,
        CmpOp::Ge,
    ] {
        let ci = b.cmp(op, ai, c);
        let cu = b.cmp(op, au, v);
        let cu0 = b.extract(cu, 0);
        let cb = b.cmp(op, ci, yes);
        let both = b.bin(BinOp::And, cb, cu0);
        p = b.bin(BinOp::Or, p, both);
    }
    let np = b.un(UnOp::Not, p);
    let q = b.select(np, yes, p);
    let r = b.select(q, ai, c);
    b.store(oi, t, r);
    let one = b.u32(1);
    let au0 = b.extract(au, 1);
    let s = b.select(q, au0, one);
    b.store(ou, t, s);
    b.finish()
}

/// Every subgroup reduction and shuffle on every type, every special value, a 64x2x1
/// work-group of 32-lane subgroups.
pub fn subgroup_ops() -> Kernel {
    let mut b = KernelBuilder::new("subgroup_ops", [64, 2, 1], 32);
    let x = b.param("x", Scalar::F32, Access::Read);
    let out = b.param("out", Scalar::F32, Access::Write);
    let outu = b.param("out_u32", Scalar::U32, Access::Write);
    let tx = b.special(Special::LocalX);
    let ty = b.special(Special::LocalY);
    let gx = b.special(Special::GroupX);
    let gy = b.special(Special::GroupY);
    let gz = b.special(Special::GroupZ);
    let lane = b.special(Special::Lane);
    let g = b.add(gx, gy);
    let g = b.add(g, gz);
    let sixty_four = b.u32(64);
    let r = b.mul(ty, sixty_four);
    let i = b.add(r, tx);
    let i = b.add(i, g);
    let v = b.load(x, i, 1);
    let two = b.u32(2);
    let pi = b.mul(i, two);
    let pair = b.load(x, pi, 2);
    let vi = b.convert(v, Scalar::I32);
    let mut f = v;
    for op in [ReduceOp::Add, ReduceOp::Max, ReduceOp::Min] {
        let r = b.subgroup_reduce(op, v);
        f = b.add(f, r);
    }
    let (mut si, mut su) = (vi, lane);
    for op in [ReduceOp::Add, ReduceOp::Max, ReduceOp::Min, ReduceOp::Or] {
        let r = b.subgroup_reduce(op, vi);
        si = b.add(si, r);
        let r = b.subgroup_reduce(op, lane);
        su = b.add(su, r);
    }
    let zero = b.f32(0.0);
    let pos = b.cmp(CmpOp::Gt, v, zero);
    let any = b.subgroup_reduce(ReduceOp::Or, pos);
    let any2 = b.subgroup_reduce(ReduceOp::Max, pos);
    let all = b.subgroup_reduce(ReduceOp::Min, pos);
    let pr = b.subgroup_reduce(ReduceOp::Add, pair);
    let sf = b.expr(crate::Expr::ShuffleXor(f, 1));
    let ssu = b.expr(crate::Expr::ShuffleXor(su, 16));
    let sp = b.expr(crate::Expr::ShuffleXor(pos, 2));
    let spair = b.expr(crate::Expr::ShuffleXor(pr, 31));
    // Outside the warp: every lane keeps its own value.
    let own = b.expr(crate::Expr::ShuffleXor(spair, 32));
    let a = b.bin(BinOp::And, any, all);
    let a = b.bin(BinOp::Or, a, any2);
    let a = b.bin(BinOp::And, a, sp);
    let sum = b.add(pr, own);
    let sel = b.select(a, sum, pair);
    let s0 = b.extract(sel, 0);
    let s0 = b.add(s0, sf);
    b.store(out, i, s0);
    let siu = b.bitcast(si, Scalar::U32);
    let us = b.add(ssu, siu);
    b.store(outu, i, us);
    b.finish()
}

/// A run of fourteen words of independent subgroup operations (reductions of scalars and
/// of 4-lane vectors, a shuffle, integer reductions of the lane), which a renderer may
/// batch (the SPIR-V fallback publishes at most eight words behind one pair of barriers, so
/// a vector's lanes straddle two batches), then one thread's sum of them stored.
pub fn subgroup_batch() -> Kernel {
    let mut b = KernelBuilder::new("subgroup_batch", [64, 1, 1], 32);
    let x = b.param("x", Scalar::F32, Access::Read);
    let out = b.param("out", Scalar::F32, Access::Write);
    let outu = b.param("out_u32", Scalar::U32, Access::Write);
    let t = b.special(Special::LocalX);
    let lane = b.special(Special::Lane);
    let four = b.u32(4);
    let v = b.load(x, t, 1);
    let t4 = b.mul(t, four);
    let q = b.load(x, t4, 4);
    let rs = [
        b.subgroup_reduce(ReduceOp::Add, v),
        b.subgroup_reduce(ReduceOp::Max, v),
        b.subgroup_reduce(ReduceOp::Min, v),
    ];
    let qa = b.subgroup_reduce(ReduceOp::Add, q);
    let sv = b.expr(crate::Expr::ShuffleXor(v, 3));
    let uo = b.subgroup_reduce(ReduceOp::Or, lane);
    let ua = b.subgroup_reduce(ReduceOp::Add, lane);
    let qm = b.subgroup_reduce(ReduceOp::Max, q);
    let mut f = sv;
    for r in rs {
        f = b.add(f, r);
    }
    for c in 0..4 {
        let a = b.extract(qa, c);
        let m = b.extract(qm, c);
        f = b.add(f, a);
        f = b.add(f, m);
    }
    b.store(out, t, f);
    let u = b.add(uo, ua);
    b.store(outu, t, u);
    b.finish()
}

/// A kernel whose subgroup operations assume 8 lanes (not a warp).
pub fn subgroup8() -> Kernel {
    let mut b = KernelBuilder::new("subgroup8", [64, 1, 1], 8);
    let x = b.param("x", Scalar::F32, Access::ReadWrite);
    let t = b.special(Special::LocalX);
    let v = b.load(x, t, 1);
    let s = b.subgroup_reduce(ReduceOp::Add, v);
    b.store(x, t, s);
    b.finish()
}

/// A matmul-like kernel whose subgroup operations sit inside a branch that is uniform per
/// subgroup but not per work-group (`col < 5` with two subgroups per work-group), with
/// results, a nested `if`/`else` reducing in both branches, and a shuffle. Each work-group
/// writes its own 64 results after the first 64 elements, so the output does not depend on
/// the order work-groups run in.
pub fn subgroup_guarded() -> Kernel {
    let mut b = KernelBuilder::new("subgroup_guarded", [64, 1, 1], 32);
    let x = b.param("x", Scalar::F32, Access::Read);
    let w = b.param("w", Scalar::F32, Access::Read);
    let out = b.param("out", Scalar::F32, Access::Write);
    let local = b.special(Special::LocalX);
    let lane = b.special(Special::Lane);
    let gx = b.special(Special::GroupX);
    let (sub, two, n) = (b.u32(32), b.u32(2), b.u32(5));
    let warp = b.bin(BinOp::Div, local, sub);
    let c0 = b.mul(gx, two);
    let col = b.add(c0, warp);
    let inside = b.cmp(CmpOp::Lt, col, n);
    let zero = b.f32(0.0);
    let r = b.if_else(
        inside,
        |b| {
            let k = b.u32(256);
            let acc = b.for_loop(lane, k, 32, &[zero], |b, i, c| {
                let xv = b.load(x, i, 1);
                let row = b.mul(col, k);
                let wi = b.add(row, i);
                let wv = b.load(w, wi, 1);
                vec![b.fma(xv, wv, c[0])]
            });
            let s = b.subgroup_reduce(ReduceOp::Add, acc[0]);
            let m = b.subgroup_reduce(ReduceOp::Max, acc[0]);
            let t = b.expr(crate::Expr::ShuffleXor(s, 1));
            let z = b.u32(0);
            let first = b.cmp(CmpOp::Eq, lane, z);
            b.if_then(first, |b| {
                let sm = b.add(s, m);
                let v = b.add(sm, t);
                b.store(out, col, v);
            });
            let pos = b.cmp(CmpOp::Gt, s, zero);
            let r = b.if_else(
                pos,
                |b| vec![b.subgroup_reduce(ReduceOp::Min, acc[0])],
                |b| {
                    let l = b.subgroup_reduce(ReduceOp::Add, lane);
                    vec![b.convert(l, Scalar::F32)]
                },
            );
            vec![r[0]]
        },
        |_| vec![zero],
    );
    let (base, width) = (b.u32(64), b.u32(64));
    let group_base = b.mul(gx, width);
    let row = b.add(base, group_base);
    let at = b.add(row, local);
    b.store(out, at, r[0]);
    b.finish()
}

/// A subgroup reduction inside a loop whose trip count is the same in every thread.
pub fn subgroup_loop() -> Kernel {
    let mut b = KernelBuilder::new("subgroup_loop", [64, 1, 1], 32);
    let x = b.param("x", Scalar::F32, Access::Read);
    let out = b.param("out", Scalar::F32, Access::Write);
    let local = b.special(Special::LocalX);
    let (z, four, n) = (b.u32(0), b.u32(4), b.u32(64));
    let zero = b.f32(0.0);
    let acc = b.for_loop(z, four, 1, &[zero], |b, i, c| {
        let row = b.mul(i, n);
        let at = b.add(row, local);
        let v = b.load(x, at, 1);
        let s = b.subgroup_reduce(ReduceOp::Add, v);
        vec![b.add(c[0], s)]
    });
    b.store(out, local, acc[0]);
    b.finish()
}

/// A trap before a barrier: the trapping thread must carry on to the barrier.
pub fn trap_barrier() -> Kernel {
    let mut b = KernelBuilder::new("trap_barrier", [64, 1, 1], 1);
    let x = b.param("x", Scalar::F32, Access::Read);
    let out = b.param("out", Scalar::F32, Access::Write);
    let s = b.shared(Scalar::F32, 64);
    let local = b.special(Special::LocalX);
    let v = b.load(x, local, 1);
    let nan = b.un(UnOp::IsNan, v);
    b.if_then(nan, |b| b.trap(5));
    b.store(s, local, v);
    b.barrier();
    let one = b.u32(1);
    let other = b.bin(BinOp::Xor, local, one);
    let y = b.load(s, other, 1);
    b.store(out, local, y);
    b.finish()
}

/// Work-groups in the last-arrival pattern (run with `LAST_GROUP_GROUPS` groups): each
/// publishes twice its slice of `x` to `part`, fences, and counts itself in `counter` with a
/// fetched atomic add; the group that sees `groups - 1` fences again, sums `part` over the
/// groups in group order into `out` and restores the counter to zero. Whichever group
/// arrives last, the results are the same.
pub fn last_group() -> Kernel {
    let mut b = KernelBuilder::new("last_group", [32, 1, 1], 1);
    let x = b.param("x", Scalar::F32, Access::Read);
    let part = b.param("part", Scalar::F32, Access::ReadWrite);
    let counter = b.param("counter", Scalar::U32, Access::ReadWrite);
    let out = b.param("out", Scalar::F32, Access::Write);
    let seen = b.shared(Scalar::U32, 1);
    let local = b.special(Special::LocalX);
    let group = b.special(Special::GroupX);
    let width = b.u32(32);
    let base = b.mul(group, width);
    let at = b.add(base, local);
    let v = b.load(x, at, 1);
    let twice = b.add(v, v);
    b.store(part, at, twice);
    b.fence();
    b.barrier();
    let zero = b.u32(0);
    let first = b.cmp(CmpOp::Eq, local, zero);
    b.if_then(first, |b| {
        let one = b.u32(1);
        let old = b.atomic_fetch(ReduceOp::Add, counter, zero, one);
        b.store(seen, zero, old);
    });
    b.barrier();
    let arrived = b.load(seen, zero, 1);
    let before_last = b.u32(LAST_GROUP_GROUPS - 1);
    let last = b.cmp(CmpOp::Eq, arrived, before_last);
    b.if_then(last, |b| {
        b.fence();
        let mut sum = b.f32(0.0);
        for g in 0..LAST_GROUP_GROUPS {
            let off = b.u32(32 * g);
            let i = b.add(off, local);
            let p = b.load(part, i, 1);
            sum = b.add(sum, p);
        }
        b.store(out, local, sum);
        b.if_then(first, |b| b.atomic(ReduceOp::Min, counter, zero, zero));
    });
    b.finish()
}

/// Two work-groups (run with grid 1x2x1) that trade their slices of `x`. Where they run as
/// one cluster, each stores its 32 elements, doubled, into the other's shared array between
/// two cluster barriers and writes what it received; without clusters each loads the other's
/// slice itself. Either way group `g` writes `2 * x[(1 - g) * 32 + i]` at `out[g * 32 + i]`.
pub fn cluster_exchange() -> Kernel {
    let mut b = KernelBuilder::new("cluster_exchange", [32, 1, 1], 1);
    let x = b.param("x", Scalar::F32, Access::Read);
    let out = b.param("out", Scalar::F32, Access::Write);
    let inbox = b.shared(Scalar::F32, 32);
    let local = b.special(Special::LocalX);
    let group = b.special(Special::GroupY);
    let one = b.u32(1);
    let other = b.sub(one, group);
    let width = b.u32(32);
    let base = b.mul(group, width);
    let at = b.add(base, local);
    b.begin();
    b.cluster_arrive(false);
    b.cluster_wait();
    let v = b.load(x, at, 1);
    let twice = b.add(v, v);
    b.store_remote(inbox, other, local, twice);
    b.cluster_arrive(true);
    b.cluster_wait();
    let got = b.load(inbox, local, 1);
    b.store(out, at, got);
    let with = b.end();
    b.begin();
    let theirs = b.mul(other, width);
    let theirs = b.add(theirs, local);
    let v = b.load(x, theirs, 1);
    let twice = b.add(v, v);
    b.store(out, at, twice);
    let without = b.end();
    b.finish_clustered([1, 2, 1], with, without);
    b.finish()
}

/// One subgroup computes `D = A B + C` for a 16x8 `A`, an 8x8 `B` and a 16x8 `C` (row-major,
/// each element `x - 8` for its `u32` `x`): through `mma` in the matrix form, by each lane's
/// four sums in the form without. The elements are small integers, so every product and sum
/// is exact and both forms give the same bits on every device.
pub fn matrix_tile() -> Kernel {
    let mut b = KernelBuilder::new("matrix_tile", [32, 1, 1], 32);
    let am = b.param("a", Scalar::U32, Access::Read);
    let bm = b.param("b", Scalar::U32, Access::Read);
    let cm = b.param("c", Scalar::U32, Access::Read);
    let out = b.param("out", Scalar::F32, Access::Write);
    let lane = b.special(Special::LocalX);
    let four = b.u32(4);
    let g = b.bin(BinOp::Div, lane, four);
    let q = b.bin(BinOp::Rem, lane, four);
    let eight = b.u32(8);
    let g8 = b.add(g, eight);
    let q4 = b.add(q, four);
    let two = b.u32(2);
    let q2 = b.mul(q, two);
    let one = b.u32(1);
    let q21 = b.add(q2, one);
    let eight_f = b.f32(8.0);
    // Element (r, c) of an 8-column matrix `m`, as f32.
    let elem = |b: &mut KernelBuilder, m: Mem, r: crate::Val, c: crate::Val| {
        let at = b.mul(r, eight);
        let at = b.add(at, c);
        let x = b.load(m, at, 1);
        let x = b.convert(x, Scalar::F32);
        b.sub(x, eight_f)
    };
    let d_at = [(g, q2), (g, q21), (g8, q2), (g8, q21)];
    b.begin();
    let a = [(g, q), (g8, q), (g, q4), (g8, q4)].map(|(r, c)| elem(&mut b, am, r, c));
    let bv = [q, q4].map(|k| elem(&mut b, bm, k, g));
    let c = d_at.map(|(r, n)| elem(&mut b, cm, r, n));
    let d = b.expr(crate::Expr::Mma { a, b: bv, c });
    for (i, (r, n)) in d_at.into_iter().enumerate() {
        let at = b.mul(r, eight);
        let at = b.add(at, n);
        let x = b.extract(d, i as u8);
        b.store(out, at, x);
    }
    let with = b.end();
    b.begin();
    for (r, n) in d_at {
        let mut acc = elem(&mut b, cm, r, n);
        for k in 0..8 {
            let kv = b.u32(k);
            let x = elem(&mut b, am, r, kv);
            let y = elem(&mut b, bm, kv, n);
            acc = b.fma(x, y, acc);
        }
        let at = b.mul(r, eight);
        let at = b.add(at, n);
        b.store(out, at, acc);
    }
    let without = b.end();
    b.finish_matrix(with, without);
    b.finish()
}

/// The work-groups `last_group` runs with.
pub const LAST_GROUP_GROUPS: u32 = 4;

/// A one-parameter kernel applying `f` to the loaded element, for error tests.
pub fn unary_kernel(
    name: &str,
    elem: Scalar,
    f: impl FnOnce(&mut KernelBuilder, crate::Val) -> Option<crate::Val>,
) -> Kernel {
    let mut b = KernelBuilder::new(name, [32, 1, 1], 32);
    let x = b.param("x", elem, Access::ReadWrite);
    let t = b.special(Special::LocalX);
    let v = b.load(x, t, 1);
    if let Some(r) = f(&mut b, v) {
        b.store(x, t, r);
    }
    b.finish()
}

/// `Mem` of the first parameter (for error tests).
pub const P0: Mem = Mem::Param(0);
