//! TEMPORARY: writes numeric-check kernels for a GPU run.
mod common;
use poot_codegen_ptx::{PtxTarget, render};
use poot_kir::{
    Access, BinOp, CmpOp, Expr, Kernel, KernelBuilder, ReduceOp, Scalar, Special, UnOp, Val,
};

fn idx(b: &mut KernelBuilder) -> Val {
    let t = b.special(Special::LocalX);
    let g = b.special(Special::GroupX);
    let n = b.u32(128);
    let gi = b.mul(g, n);
    b.add(gi, t)
}

fn un(op: UnOp) -> Kernel {
    let mut b = KernelBuilder::new(format!("un_{}", op.name()), [128, 1, 1], 1);
    let x = b.param("x", Scalar::F32, Access::Read);
    let out = b.param("out", Scalar::F32, Access::Write);
    let i = idx(&mut b);
    let v = b.load(x, i, 1);
    let r = b.un(op, v);
    b.store(out, i, r);
    b.finish()
}

fn bin(op: BinOp, s: Scalar) -> Kernel {
    let mut b = KernelBuilder::new(format!("bin_{}_{s}", op.name()), [128, 1, 1], 1);
    let x = b.param("x", s, Access::Read);
    let y = b.param("y", s, Access::Read);
    let out = b.param("out", s, Access::Write);
    let i = idx(&mut b);
    let (u, v) = (b.load(x, i, 1), b.load(y, i, 1));
    let r = b.bin(op, u, v);
    b.store(out, i, r);
    b.finish()
}

fn cmp(op: CmpOp) -> Kernel {
    let mut b = KernelBuilder::new(format!("cmp_{}", op.name()), [128, 1, 1], 1);
    let x = b.param("x", Scalar::F32, Access::Read);
    let y = b.param("y", Scalar::F32, Access::Read);
    let out = b.param("out", Scalar::U32, Access::Write);
    let i = idx(&mut b);
    let (u, v) = (b.load(x, i, 1), b.load(y, i, 1));
    let r = b.cmp(op, u, v);
    let r = b.convert(r, Scalar::U32);
    b.store(out, i, r);
    b.finish()
}

fn conv(from: Scalar, to: Scalar) -> Kernel {
    let mut b = KernelBuilder::new(format!("conv_{from}_{to}"), [128, 1, 1], 1);
    let x = b.param("x", from, Access::Read);
    let out = b.param("out", to, Access::Write);
    let i = idx(&mut b);
    let v = b.load(x, i, 1);
    let r = b.convert(v, to);
    b.store(out, i, r);
    b.finish()
}

fn halves() -> Kernel {
    let mut b = KernelBuilder::new("halves", [128, 1, 1], 1);
    let x = b.param("x", Scalar::U32, Access::Read);
    let out = b.param("out", Scalar::F32, Access::Write);
    let i = idx(&mut b);
    let v = b.load(x, i, 1);
    let four = b.u32(4);
    let o = b.mul(i, four);
    let rs = [
        b.expr(Expr::HalfToF32(v, false)),
        b.expr(Expr::HalfToF32(v, true)),
        b.expr(Expr::Bf16ToF32(v, false)),
        b.expr(Expr::Bf16ToF32(v, true)),
    ];
    for (k, r) in rs.into_iter().enumerate() {
        let kk = b.u32(k as u32);
        let oi = b.add(o, kk);
        b.store(out, oi, r);
    }
    b.finish()
}

fn loop_step(step: u32) -> Kernel {
    let mut b = KernelBuilder::new(format!("loop_s{step}"), [128, 1, 1], 1);
    let st = b.param("start", Scalar::U32, Access::Read);
    let en = b.param("end", Scalar::U32, Access::Read);
    let out = b.param("out", Scalar::U32, Access::Write);
    let i = idx(&mut b);
    let (s, e) = (b.load(st, i, 1), b.load(en, i, 1));
    let (z, one) = (b.u32(0), b.u32(1));
    let r = b.for_loop(s, e, step, &[z, z], |b, v, c| {
        let n = b.add(c[0], one);
        let x = b.bin(BinOp::Xor, c[1], v);
        vec![n, x]
    });
    let two = b.u32(2);
    let o = b.mul(i, two);
    b.store(out, o, r[0]);
    let o1 = b.add(o, one);
    b.store(out, o1, r[1]);
    b.finish()
}

fn warp() -> Kernel {
    let mut b = KernelBuilder::new("warp", [128, 1, 1], 32);
    let x = b.param("x", Scalar::F32, Access::Read);
    let xi = b.param("xi", Scalar::I32, Access::Read);
    let out = b.param("out", Scalar::F32, Access::Write);
    let outi = b.param("outi", Scalar::I32, Access::Write);
    let i = idx(&mut b);
    let v = b.load(x, i, 1);
    let w = b.load(xi, i, 1);
    let eight = b.u32(8);
    let o = b.mul(i, eight);
    let fr = [
        b.subgroup_reduce(ReduceOp::Add, v),
        b.subgroup_reduce(ReduceOp::Max, v),
        b.subgroup_reduce(ReduceOp::Min, v),
        b.expr(Expr::ShuffleXor(v, 5)),
    ];
    let ir = [
        b.subgroup_reduce(ReduceOp::Add, w),
        b.subgroup_reduce(ReduceOp::Max, w),
        b.subgroup_reduce(ReduceOp::Min, w),
        b.subgroup_reduce(ReduceOp::Or, w),
        b.expr(Expr::ShuffleXor(w, 17)),
    ];
    let z = b.i32(0);
    let pos = b.cmp(CmpOp::Gt, w, z);
    let any = b.subgroup_reduce(ReduceOp::Or, pos);
    let all = b.subgroup_reduce(ReduceOp::Min, pos);
    let anyi = b.convert(any, Scalar::I32);
    let alli = b.convert(all, Scalar::I32);
    let lane = b.special(Special::Lane);
    let lanei = b.bitcast(lane, Scalar::I32);
    for (k, r) in fr.into_iter().enumerate() {
        let kk = b.u32(k as u32);
        let oi = b.add(o, kk);
        b.store(out, oi, r);
    }
    for (k, r) in ir.into_iter().chain([anyi, alli, lanei]).enumerate() {
        let kk = b.u32(k as u32);
        let oi = b.add(o, kk);
        b.store(outi, oi, r);
    }
    b.finish()
}

#[test]
fn dump() {
    let Some(dir) = std::env::var_os("POOT_PTX_DUMP") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let mut ks: Vec<Kernel> = vec![];
    for op in [
        UnOp::Exp,
        UnOp::Sin,
        UnOp::Cos,
        UnOp::Rsqrt,
        UnOp::Sqrt,
        UnOp::Recip,
        UnOp::Abs,
        UnOp::Neg,
    ] {
        ks.push(un(op));
    }
    for op in [BinOp::Min, BinOp::Max, BinOp::Div] {
        ks.push(bin(op, Scalar::F32));
    }
    for s in [Scalar::I32, Scalar::U32] {
        for op in [
            BinOp::Div,
            BinOp::Rem,
            BinOp::Shl,
            BinOp::Shr,
            BinOp::Mul,
            BinOp::Min,
        ] {
            ks.push(bin(op, s));
        }
    }
    for op in [
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Gt,
        CmpOp::Ge,
    ] {
        ks.push(cmp(op));
    }
    for (f, t) in [
        (Scalar::F32, Scalar::I32),
        (Scalar::F32, Scalar::U32),
        (Scalar::I32, Scalar::F32),
        (Scalar::U32, Scalar::F32),
        (Scalar::I32, Scalar::U32),
    ] {
        ks.push(conv(f, t));
    }
    ks.push(halves());
    for s in [1, 3, 8, 1 << 31] {
        ks.push(loop_step(s));
    }
    ks.push(warp());
    for (_, k) in common::cases() {
        ks.push(k);
    }
    for k in ks {
        let text = render(&k, &PtxTarget::sm90()).unwrap();
        std::fs::write(dir.join(format!("{}.ptx", k.name)), text).unwrap();
    }
}
