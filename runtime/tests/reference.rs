//! The reference device's execution core against plain Rust: every kir expression and
//! statement, divergence, subgroups, memory faults and bindings. Comparisons are bit-exact
//! wherever the module's semantics say so (all of them here).

use poot_kir::{
    Access, BinOp, CmpOp, Expr, Kernel, KernelBuilder, Mem, ReduceOp, Scalar, Special, UnOp, Val,
};
use poot_runtime::reference::{
    BAD_DISPATCH, Binding, INVALID_KERNEL, OUT_OF_BOUNDS, Prepared, run,
};

/// Binds parameter `i` to the whole of arena `i`.
fn whole(arenas: &[Vec<u32>]) -> Vec<Binding> {
    arenas
        .iter()
        .enumerate()
        .map(|(i, a)| Binding {
            arena: i,
            offset: 0,
            len: a.len(),
        })
        .collect()
}

/// Runs `k` with one arena per parameter, both drivers, and checks they agree bit for bit.
fn exec(k: &Kernel, grid: [u32; 3], arenas: Vec<Vec<u32>>) -> Vec<Vec<u32>> {
    let p = Prepared::new(k).expect("prepare");
    let mut par = arenas.clone();
    p.run(grid, &whole(&par), &mut par).expect("run");
    let mut seq = arenas;
    p.run_sequential(grid, &whole(&seq), &mut seq)
        .expect("run sequential");
    assert_eq!(par, seq, "parallel and sequential runs differ");
    seq
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `group_id.x * wx + local_id.x`.
fn gid(b: &mut KernelBuilder, wx: u32) -> Val {
    let g = b.special(Special::GroupX);
    let l = b.special(Special::LocalX);
    let w = b.u32(wx);
    let gw = b.mul(g, w);
    b.add(gw, l)
}

const SPECIAL_F32: [f32; 20] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    1.5,
    -2.75,
    f32::MIN_POSITIVE,
    1e-45,
    f32::MAX,
    -f32::MAX,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
    3.0e9,
    -3.0e9,
    0.1,
    123456.78,
    -0.5,
    2.5,
    16777217.0,
];

const SPECIAL_I32: [i32; 12] = [
    0,
    1,
    -1,
    2,
    -7,
    31,
    32,
    33,
    i32::MIN,
    i32::MAX,
    1 << 20,
    -123456,
];

/// `out[i] = f(a[i], b[i])` for `n` lanes of `ty`, one thread per element.
fn binary_kernel(
    ty: Scalar,
    out: Scalar,
    f: impl FnOnce(&mut KernelBuilder, Val, Val) -> Val,
) -> Kernel {
    let mut b = KernelBuilder::new("binary", [64, 1, 1], 1);
    let pa = b.param("a", ty, Access::Read);
    let pb = b.param("b", ty, Access::Read);
    let po = b.param("out", out, Access::Write);
    let i = gid(&mut b, 64);
    let x = b.load(pa, i, 1);
    let y = b.load(pb, i, 1);
    let r = f(&mut b, x, y);
    b.store(po, i, r);
    b.finish()
}

/// Checks `op` on every pair of `vals` against `want`.
fn check_binary(
    ty: Scalar,
    out: Scalar,
    vals: &[u32],
    f: impl FnOnce(&mut KernelBuilder, Val, Val) -> Val,
    want: impl Fn(u32, u32) -> u32,
    what: &str,
) -> Vec<(u32, u32, u32)> {
    let n = vals.len() * vals.len();
    let padded = n.div_ceil(64) * 64;
    let mut a = vec![0u32; padded];
    let mut bv = vec![0u32; padded];
    for (k, (x, y)) in vals
        .iter()
        .flat_map(|x| vals.iter().map(move |y| (*x, *y)))
        .enumerate()
    {
        a[k] = x;
        bv[k] = y;
    }
    let k = binary_kernel(ty, out, f);
    let r = exec(
        &k,
        [(padded / 64) as u32, 1, 1],
        vec![a.clone(), bv.clone(), vec![0; padded]],
    );
    for i in 0..n {
        assert!(
            same(out, r[2][i], want(a[i], bv[i])),
            "{what}({:#x}, {:#x}) = {:#x}, want {:#x}",
            a[i],
            bv[i],
            r[2][i],
            want(a[i], bv[i])
        );
    }
    (0..n).map(|i| (a[i], bv[i], r[2][i])).collect()
}

/// Equal bits, or both NaN for f32 (Rust leaves a NaN result's sign and payload open).
fn same(ty: Scalar, got: u32, want: u32) -> bool {
    got == want || (ty == Scalar::F32 && fb(got).is_nan() && fb(want).is_nan())
}

fn fb(x: u32) -> f32 {
    f32::from_bits(x)
}

fn min_max(x: f32, y: f32, max: bool) -> u32 {
    if x.is_nan() || y.is_nan() {
        return 0x7FC0_0000;
    }
    let r = if x == 0.0 && y == 0.0 {
        let neg = if max {
            x.is_sign_negative() && y.is_sign_negative()
        } else {
            x.is_sign_negative() || y.is_sign_negative()
        };
        if neg { -0.0 } else { 0.0 }
    } else if (x > y) == max {
        x
    } else {
        y
    };
    r.to_bits()
}

#[test]
fn f32_binary_ops_and_comparisons() {
    let v = bits(&SPECIAL_F32);
    let f = Scalar::F32;
    let cases: [(BinOp, fn(f32, f32) -> f32); 4] = [
        (BinOp::Add, |x, y| x + y),
        (BinOp::Sub, |x, y| x - y),
        (BinOp::Mul, |x, y| x * y),
        (BinOp::Div, |x, y| x / y),
    ];
    for (op, g) in cases {
        check_binary(
            f,
            f,
            &v,
            |b, x, y| b.bin(op, x, y),
            |x, y| g(fb(x), fb(y)).to_bits(),
            op.name(),
        );
    }
    check_binary(
        f,
        f,
        &v,
        |b, x, y| b.bin(BinOp::Min, x, y),
        |x, y| min_max(fb(x), fb(y), false),
        "min",
    );
    check_binary(
        f,
        f,
        &v,
        |b, x, y| b.bin(BinOp::Max, x, y),
        |x, y| min_max(fb(x), fb(y), true),
        "max",
    );
    let cmps: [(CmpOp, fn(f32, f32) -> bool); 6] = [
        (CmpOp::Lt, |x, y| x < y),
        (CmpOp::Le, |x, y| x <= y),
        (CmpOp::Eq, |x, y| x == y),
        (CmpOp::Ne, |x, y| x != y),
        (CmpOp::Gt, |x, y| x > y),
        (CmpOp::Ge, |x, y| x >= y),
    ];
    for (op, g) in cmps {
        let k = |b: &mut KernelBuilder, x, y| {
            let c = b.cmp(op, x, y);
            b.convert(c, Scalar::U32)
        };
        check_binary(
            f,
            Scalar::U32,
            &v,
            k,
            |x, y| g(fb(x), fb(y)) as u32,
            op.name(),
        );
    }
    // fma with a third operand derived from the first two.
    let k = |b: &mut KernelBuilder, x, y| {
        let c = b.f32(0.3);
        let z = b.bin(BinOp::Sub, y, c);
        b.fma(x, y, z)
    };
    check_binary(
        f,
        f,
        &v,
        k,
        |x, y| fb(x).mul_add(fb(y), fb(y) - 0.3).to_bits(),
        "fma",
    );
}

#[test]
fn integer_binary_ops_and_comparisons() {
    let v: Vec<u32> = SPECIAL_I32.iter().map(|&x| x as u32).collect();
    let ops: [(BinOp, fn(i32, i32) -> i32, fn(u32, u32) -> u32); 12] = [
        (
            BinOp::Add,
            |x, y| x.wrapping_add(y),
            |x, y| x.wrapping_add(y),
        ),
        (
            BinOp::Sub,
            |x, y| x.wrapping_sub(y),
            |x, y| x.wrapping_sub(y),
        ),
        (
            BinOp::Mul,
            |x, y| x.wrapping_mul(y),
            |x, y| x.wrapping_mul(y),
        ),
        (
            BinOp::Div,
            |x, y| if y == 0 { 0 } else { x.wrapping_div(y) },
            |x, y| x.checked_div(y).unwrap_or(0),
        ),
        (
            BinOp::Rem,
            |x, y| if y == 0 { 0 } else { x.wrapping_rem(y) },
            |x, y| x.checked_rem(y).unwrap_or(0),
        ),
        (BinOp::Min, |x, y| x.min(y), |x, y| x.min(y)),
        (BinOp::Max, |x, y| x.max(y), |x, y| x.max(y)),
        (BinOp::And, |x, y| x & y, |x, y| x & y),
        (BinOp::Or, |x, y| x | y, |x, y| x | y),
        (BinOp::Xor, |x, y| x ^ y, |x, y| x ^ y),
        (
            BinOp::Shl,
            |x, y| x.wrapping_shl(y as u32),
            |x, y| x.wrapping_shl(y),
        ),
        (
            BinOp::Shr,
            |x, y| x.wrapping_shr(y as u32),
            |x, y| x.wrapping_shr(y),
        ),
    ];
    for (op, gi, gu) in ops {
        let k = |b: &mut KernelBuilder, x, y| b.bin(op, x, y);
        check_binary(
            Scalar::I32,
            Scalar::I32,
            &v,
            k,
            |x, y| gi(x as i32, y as i32) as u32,
            op.name(),
        );
        check_binary(Scalar::U32, Scalar::U32, &v, k, gu, op.name());
    }
    for (op, gi, gu) in [
        (
            CmpOp::Lt,
            (|x, y| x < y) as fn(i32, i32) -> bool,
            (|x, y| x < y) as fn(u32, u32) -> bool,
        ),
        (CmpOp::Ge, |x, y| x >= y, |x, y| x >= y),
        (CmpOp::Ne, |x, y| x != y, |x, y| x != y),
    ] {
        let k = |b: &mut KernelBuilder, x, y| {
            let c = b.cmp(op, x, y);
            let (one, zero) = (b.u32(1), b.u32(0));
            b.select(c, one, zero)
        };
        check_binary(
            Scalar::I32,
            Scalar::U32,
            &v,
            k,
            |x, y| gi(x as i32, y as i32) as u32,
            op.name(),
        );
        check_binary(
            Scalar::U32,
            Scalar::U32,
            &v,
            k,
            |x, y| gu(x, y) as u32,
            op.name(),
        );
    }
    // Boolean and/or/not, bool comparisons (kir's verifier refuses xor of bool) and bool -> number conversions.
    let k = |b: &mut KernelBuilder, x, y| {
        let z = b.i32(0);
        let (p, q) = (b.cmp(CmpOp::Lt, x, z), b.cmp(CmpOp::Gt, y, z));
        let (a, o, e) = (
            b.bin(BinOp::And, p, q),
            b.bin(BinOp::Or, p, q),
            b.cmp(CmpOp::Ne, p, q),
        );
        let n = b.un(UnOp::Not, a);
        let lt = b.cmp(CmpOp::Lt, p, q);
        let mut acc = b.convert(n, Scalar::I32);
        for (sh, v) in [(1, o), (2, e), (3, lt)] {
            let c = b.convert(v, Scalar::I32);
            let s = b.i32(sh);
            let c = b.bin(BinOp::Shl, c, s);
            acc = b.bin(BinOp::Or, acc, c);
        }
        let fl = b.convert(q, Scalar::F32);
        let fl = b.bitcast(fl, Scalar::I32);
        let s = b.i32(4);
        let fl = b.bin(BinOp::Shr, fl, s);
        b.bin(BinOp::Or, acc, fl)
    };
    let want = |x: u32, y: u32| {
        let (p, q) = ((x as i32) < 0, (y as i32) > 0);
        let r = (!(p & q)) as u32
            | ((p | q) as u32) << 1
            | ((p ^ q) as u32) << 2
            | ((!p & q) as u32) << 3;
        r | if q { 1.0f32.to_bits() >> 4 } else { 0 }
    };
    check_binary(Scalar::I32, Scalar::I32, &v, k, want, "bool ops");
}

/// `out[i] = f(a[i])`, one thread per element.
fn check_unary(
    ty: Scalar,
    out: Scalar,
    vals: &[u32],
    f: impl FnOnce(&mut KernelBuilder, Val) -> Val,
    want: impl Fn(u32) -> u32,
    what: &str,
) {
    let k = |b: &mut KernelBuilder, x, _| f(b, x);
    let n = vals.len();
    let padded = n.div_ceil(64) * 64;
    let mut a = vals.to_vec();
    a.resize(padded, 0);
    let kernel = binary_kernel(ty, out, k);
    let r = exec(
        &kernel,
        [(padded / 64) as u32, 1, 1],
        vec![a.clone(), vec![0; padded], vec![0; padded]],
    );
    for i in 0..n {
        let w = want(a[i]);
        assert!(same(out, r[2][i], w), "{what}({:#x}) = {:#x}, want {w:#x}", a[i], r[2][i]);
    }
}

#[test]
fn unary_ops_and_conversions() {
    let v = bits(&SPECIAL_F32);
    let f = Scalar::F32;
    let un: [(UnOp, fn(f32) -> f32); 8] = [
        (UnOp::Neg, |x| -x),
        (UnOp::Exp, f32::exp),
        (UnOp::Sqrt, f32::sqrt),
        (UnOp::Rsqrt, |x| 1.0 / x.sqrt()),
        (UnOp::Recip, |x| 1.0 / x),
        (UnOp::Sin, f32::sin),
        (UnOp::Cos, f32::cos),
        (UnOp::Abs, f32::abs),
    ];
    for (op, g) in un {
        check_unary(
            f,
            f,
            &v,
            |b, x| b.un(op, x),
            |x| g(fb(x)).to_bits(),
            op.name(),
        );
    }
    for (op, g) in [
        (UnOp::IsFinite, f32::is_finite as fn(f32) -> bool),
        (UnOp::IsNan, f32::is_nan),
    ] {
        let k = |b: &mut KernelBuilder, x| {
            let c = b.un(op, x);
            b.convert(c, Scalar::U32)
        };
        check_unary(f, Scalar::U32, &v, k, |x| g(fb(x)) as u32, op.name());
    }
    check_unary(
        f,
        Scalar::I32,
        &v,
        |b, x| b.convert(x, Scalar::I32),
        |x| fb(x) as i32 as u32,
        "f32->i32",
    );
    check_unary(
        f,
        Scalar::U32,
        &v,
        |b, x| b.convert(x, Scalar::U32),
        |x| fb(x) as u32,
        "f32->u32",
    );
    check_unary(
        f,
        Scalar::U32,
        &v,
        |b, x| b.bitcast(x, Scalar::U32),
        |x| x,
        "bitcast",
    );
    let iv: Vec<u32> = SPECIAL_I32
        .iter()
        .map(|&x| x as u32)
        .chain([u32::MAX, 16777217])
        .collect();
    check_unary(
        Scalar::I32,
        f,
        &iv,
        |b, x| b.convert(x, f),
        |x| (x as i32 as f32).to_bits(),
        "i32->f32",
    );
    check_unary(
        Scalar::U32,
        f,
        &iv,
        |b, x| b.convert(x, f),
        |x| (x as f32).to_bits(),
        "u32->f32",
    );
    check_unary(
        Scalar::I32,
        Scalar::U32,
        &iv,
        |b, x| b.convert(x, Scalar::U32),
        |x| x,
        "i32->u32",
    );
    check_unary(
        Scalar::I32,
        Scalar::I32,
        &iv,
        |b, x| b.un(UnOp::Neg, x),
        |x| (x as i32).wrapping_neg() as u32,
        "neg i32",
    );
    check_unary(
        Scalar::I32,
        Scalar::I32,
        &iv,
        |b, x| b.un(UnOp::Abs, x),
        |x| (x as i32).wrapping_abs() as u32,
        "abs i32",
    );
    check_unary(
        Scalar::U32,
        Scalar::U32,
        &iv,
        |b, x| b.un(UnOp::Not, x),
        |x| !x,
        "not u32",
    );
    check_unary(
        Scalar::U32,
        Scalar::U32,
        &iv,
        |b, x| b.un(UnOp::Abs, x),
        |x| x,
        "abs u32",
    );
}

#[test]
fn half_and_bf16_conversions() {
    let halves: [u16; 12] = [
        0x0000, 0x8000, 0x3C00, 0xC000, 0x0001, 0x03FF, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x7D00,
        0x3555,
    ];
    let words: Vec<u32> = halves
        .iter()
        .flat_map(|&lo| halves.iter().map(move |&hi| lo as u32 | (hi as u32) << 16))
        .collect();
    for (high, bf) in [(false, false), (true, false), (false, true), (true, true)] {
        let k = |b: &mut KernelBuilder, x| {
            if bf {
                b.expr(Expr::Bf16ToF32(x, high))
            } else {
                b.expr(Expr::HalfToF32(x, high))
            }
        };
        let want = |w: u32| {
            let h = if high { (w >> 16) as u16 } else { w as u16 };
            if bf {
                half::bf16::from_bits(h).to_f32().to_bits()
            } else {
                half::f16::from_bits(h).to_f32().to_bits()
            }
        };
        check_unary(Scalar::U32, Scalar::F32, &words, k, want, "half");
    }
}

#[test]
fn elementwise_with_broadcast_and_3d_grid() {
    // out[z][r][c] = a[z][r][c] * s[c] + bias[r], one work-group row of 16 x 4 threads per
    // (r-block, z): grid [cols/16, rows/4, depth].
    let (depth, rows, cols) = (3usize, 8usize, 48usize);
    let mut b = KernelBuilder::new("bcast", [16, 4, 1], 1);
    let pa = b.param("a", Scalar::F32, Access::Read);
    let ps = b.param("s", Scalar::F32, Access::Read);
    let pb = b.param("bias", Scalar::F32, Access::Read);
    let po = b.param("out", Scalar::F32, Access::Write);
    let (gx, gy, gz) = (
        b.special(Special::GroupX),
        b.special(Special::GroupY),
        b.special(Special::GroupZ),
    );
    let (lx, ly) = (b.special(Special::LocalX), b.special(Special::LocalY));
    let (c16, c4, ccols, crows) = (b.u32(16), b.u32(4), b.u32(cols as u32), b.u32(rows as u32));
    let cx = b.mul(gx, c16);
    let c = b.add(cx, lx);
    let ry = b.mul(gy, c4);
    let r = b.add(ry, ly);
    let zr = b.mul(gz, crows);
    let zr = b.add(zr, r);
    let i = b.mul(zr, ccols);
    let i = b.add(i, c);
    let x = b.load(pa, i, 1);
    let s = b.load(ps, c, 1);
    let bias = b.load(pb, r, 1);
    let m = b.mul(x, s);
    let y = b.add(m, bias);
    b.store(po, i, y);
    let k = b.finish();
    let a: Vec<f32> = (0..depth * rows * cols)
        .map(|i| (i as f32 * 0.37).sin())
        .collect();
    let s: Vec<f32> = (0..cols).map(|i| 1.0 + i as f32 / 7.0).collect();
    let bias: Vec<f32> = (0..rows).map(|i| i as f32 - 3.5).collect();
    let grid = [(cols / 16) as u32, (rows / 4) as u32, depth as u32];
    let out = exec(
        &k,
        grid,
        vec![bits(&a), bits(&s), bits(&bias), vec![0; a.len()]],
    );
    for (i, &x) in a.iter().enumerate() {
        let (c, r) = (i % cols, (i / cols) % rows);
        assert_eq!(out[3][i], (x * s[c] + bias[r]).to_bits(), "element {i}");
    }
}

#[test]
fn loop_with_carried_accumulators() {
    // Thread t sums x[k]^2 and counts k over (t..100).step_by(3): per-thread trip counts.
    let mut b = KernelBuilder::new("loop", [32, 1, 1], 1);
    let px = b.param("x", Scalar::F32, Access::Read);
    let po = b.param("out", Scalar::F32, Access::Write);
    let t = b.special(Special::LocalX);
    let (n, zf, zu) = (b.u32(100), b.f32(0.0), b.u32(0));
    let r = b.for_loop(t, n, 3, &[zf, zu], |b, k, c| {
        let v = b.load(px, k, 1);
        let s = b.fma(v, v, c[0]);
        let one = b.u32(1);
        vec![s, b.add(c[1], one)]
    });
    let two = b.u32(2);
    let i = b.mul(t, two);
    b.store(po, i, r[0]);
    let one = b.u32(1);
    let i1 = b.add(i, one);
    let cnt = b.convert(r[1], Scalar::F32);
    b.store(po, i1, cnt);
    let k = b.finish();
    let x: Vec<f32> = (0..100).map(|i| (i as f32).sqrt() - 4.0).collect();
    let out = exec(&k, [1, 1, 1], vec![bits(&x), vec![0; 64]]);
    for t in 0..32 {
        let (mut s, mut c) = (0.0f32, 0u32);
        for k in (t..100).step_by(3) {
            s = x[k].mul_add(x[k], s);
            c += 1;
        }
        assert_eq!(out[1][2 * t], s.to_bits(), "sum of thread {t}");
        assert_eq!(
            out[1][2 * t + 1],
            (c as f32).to_bits(),
            "count of thread {t}"
        );
    }
}

#[test]
fn divergent_loop_with_if_results_and_overflowing_bounds() {
    let mut b = KernelBuilder::new("divergent", [64, 1, 1], 1);
    let pe = b.param("ends", Scalar::U32, Access::Read);
    let po = b.param("out", Scalar::U32, Access::Write);
    let t = b.special(Special::LocalX);
    let end = b.load(pe, t, 1);
    let five = b.u32(5);
    let start = b.bin(BinOp::Rem, t, five);
    let (one, zero) = (b.u32(1), b.u32(0));
    let r = b.for_loop(start, end, 2, &[one, zero], |b, k, c| {
        let three = b.u32(3);
        let m = b.bin(BinOp::Rem, k, three);
        let z = b.u32(0);
        let is0 = b.cmp(CmpOp::Eq, m, z);
        let acc = b.if_else(
            is0,
            |b| {
                let t3 = b.mul(c[0], three);
                vec![b.add(t3, k)]
            },
            |b| vec![b.bin(BinOp::Xor, c[0], k)],
        );
        let one = b.u32(1);
        vec![acc[0], b.add(c[1], one)]
    });
    // A loop whose induction variable would wrap: it stops instead.
    let four = b.u32(4);
    let tm = b.bin(BinOp::Rem, t, four);
    let hi = b.u32(0xFFFF_FFF0);
    let s2 = b.add(hi, tm);
    let e2 = b.u32(u32::MAX);
    let w = b.for_loop(s2, e2, 4, &[zero], |b, _, c| {
        let one = b.u32(1);
        vec![b.add(c[0], one)]
    });
    let three = b.u32(3);
    let i = b.mul(t, three);
    b.store(po, i, r[0]);
    let i1 = b.add(i, one);
    b.store(po, i1, r[1]);
    let i2 = b.add(i1, one);
    b.store(po, i2, w[0]);
    let k = b.finish();
    let ends: Vec<u32> = (0..64u32).map(|t| (t * 7) % 23).collect();
    let out = exec(&k, [1, 1, 1], vec![ends.clone(), vec![0; 192]]);
    for t in 0..64u32 {
        let (mut acc, mut n) = (1u32, 0u32);
        for k in (t % 5..ends[t as usize]).step_by(2) {
            acc = if k % 3 == 0 {
                acc.wrapping_mul(3).wrapping_add(k)
            } else {
                acc ^ k
            };
            n += 1;
        }
        let wrap = (0xFFFF_FFF0 + t % 4..u32::MAX).step_by(4).count() as u32;
        assert_eq!(
            &out[1][3 * t as usize..3 * t as usize + 3],
            &[acc, n, wrap],
            "thread {t}"
        );
    }
}

#[test]
fn if_else_results_under_divergence() {
    let mut b = KernelBuilder::new("if_else", [32, 1, 1], 1);
    let px = b.param("x", Scalar::F32, Access::Read);
    let po = b.param("out", Scalar::F32, Access::Write);
    let pc = b.param("codes", Scalar::U32, Access::Write);
    let t = b.special(Special::LocalX);
    let v = b.load(px, t, 1);
    let zero = b.f32(0.0);
    let pos = b.cmp(CmpOp::Gt, v, zero);
    let r = b.if_else(
        pos,
        |b| vec![b.un(UnOp::Sqrt, v), b.u32(1)],
        |b| {
            let z = b.f32(0.0);
            let is0 = b.cmp(CmpOp::Eq, v, z);
            b.if_else(
                is0,
                |b| vec![b.f32(1.0), b.u32(2)],
                |b| {
                    let n = b.un(UnOp::Neg, v);
                    let two = b.f32(2.0);
                    vec![b.mul(n, two), b.u32(3)]
                },
            )
        },
    );
    b.store(po, t, r[0]);
    b.store(pc, t, r[1]);
    let k = b.finish();
    let mut x = SPECIAL_F32.to_vec();
    x.extend((0..12).map(|i| i as f32 - 6.0));
    let out = exec(&k, [1, 1, 1], vec![bits(&x), vec![0; 32], vec![0; 32]]);
    for (i, &v) in x.iter().enumerate() {
        let (r, c) = if v > 0.0 {
            (v.sqrt(), 1)
        } else if v == 0.0 {
            (1.0, 2)
        } else {
            (-v * 2.0, 3)
        };
        assert!(same(Scalar::F32, out[1][i], r.to_bits()), "x = {v}");
        assert_eq!(out[2][i], c, "x = {v}");
    }
}

#[test]
fn shared_memory_tree_reduction_with_barriers() {
    let mut b = KernelBuilder::new("wg_sum", [128, 1, 1], 1);
    let px = b.param("x", Scalar::F32, Access::Read);
    let po = b.param("out", Scalar::F32, Access::Write);
    let sh = b.shared(Scalar::F32, 128);
    let t = b.special(Special::LocalX);
    let g = b.special(Special::GroupX);
    let i = gid(&mut b, 128);
    let v = b.load(px, i, 1);
    b.store(sh, t, v);
    b.barrier();
    let (z, seven) = (b.u32(0), b.u32(7));
    b.for_loop(z, seven, 1, &[], |b, k, _| {
        let c64 = b.u32(64);
        let s = b.bin(BinOp::Shr, c64, k);
        let lt = b.cmp(CmpOp::Lt, t, s);
        b.if_then(lt, |b| {
            let a = b.load(sh, t, 1);
            let ts = b.add(t, s);
            let c = b.load(sh, ts, 1);
            let sum = b.add(a, c);
            b.store(sh, t, sum);
        });
        b.barrier();
        vec![]
    });
    let first = b.cmp(CmpOp::Eq, t, z);
    b.if_then(first, |b| {
        let s = b.load(sh, z, 1);
        b.store(po, g, s);
    });
    let k = b.finish();
    let x: Vec<f32> = (0..512)
        .map(|i| ((i * 37 % 101) as f32).ln_1p() * 1.7)
        .collect();
    let out = exec(&k, [4, 1, 1], vec![bits(&x), vec![0; 4]]);
    for g in 0..4 {
        let mut v = x[g * 128..(g + 1) * 128].to_vec();
        let mut s = 64;
        while s > 0 {
            for t in 0..s {
                v[t] += v[t + s];
            }
            s /= 2;
        }
        assert_eq!(out[1][g], v[0].to_bits(), "group {g}");
    }
}

/// The reference's butterfly: inactive lanes give `id`, then `own op lane ^ m` for
/// m = w/2 .. 1.
fn butterfly(
    v: &[u32],
    active: &[bool],
    w: usize,
    id: u32,
    op: impl Fn(u32, u32) -> u32,
) -> Vec<u32> {
    let mut cur: Vec<u32> = v
        .iter()
        .zip(active)
        .map(|(&x, &a)| if a { x } else { id })
        .collect();
    let mut m = w / 2;
    while m > 0 {
        cur = (0..cur.len()).map(|i| op(cur[i], cur[i ^ m])).collect();
        m /= 2;
    }
    cur
}

#[test]
fn subgroup_reduce_and_shuffle_widths_32_and_8() {
    for w in [32u32, 8] {
        let mut b = KernelBuilder::new("subgroup", [64, 1, 1], w);
        let px = b.param("x", Scalar::F32, Access::Read);
        let pi = b.param("xi", Scalar::I32, Access::Read);
        let po = b.param("out", Scalar::U32, Access::Write);
        let t = b.special(Special::LocalX);
        let lane = b.special(Special::Lane);
        let v = b.load(px, t, 1);
        let vi = b.load(pi, t, 1);
        let vu = b.bitcast(vi, Scalar::U32);
        let three = b.u32(3);
        let m3 = b.bin(BinOp::Rem, t, three);
        let zero = b.u32(0);
        let some = b.cmp(CmpOp::Ne, m3, zero);
        let div = b.if_else(
            some,
            |b| vec![b.subgroup_reduce(ReduceOp::Add, v)],
            |b| vec![b.f32(-1.0)],
        );
        let two = b.u32(2);
        let t2 = b.mul(t, two);
        let v2 = b.load(px, t2, 2);
        let r2 = b.subgroup_reduce(ReduceOp::Max, v2);
        let results = [
            b.subgroup_reduce(ReduceOp::Add, v),
            b.subgroup_reduce(ReduceOp::Max, vi),
            b.subgroup_reduce(ReduceOp::Min, vu),
            b.subgroup_reduce(ReduceOp::Or, vu),
            b.expr(Expr::ShuffleXor(v, 1)),
            b.expr(Expr::ShuffleXor(v, w / 2 + 1)),
            b.expr(Expr::ShuffleXor(v, w)),
            div[0],
            b.extract(r2, 0),
            b.extract(r2, 1),
            lane,
        ];
        for (j, r) in results.into_iter().enumerate() {
            let r = if b.ty(r).scalar == Scalar::U32 {
                r
            } else {
                b.bitcast(r, Scalar::U32)
            };
            let base = b.u32(64 * j as u32);
            let i = b.add(base, t);
            b.store(po, i, r);
        }
        let k = b.finish();
        let x: Vec<f32> = (0..128)
            .map(|i| ((i * 7919 % 257) as f32 - 128.0) * 1.0e-3 + (i as f32).exp2().recip())
            .collect();
        let xi: Vec<u32> = (0..64)
            .map(|i: i32| (i * 40503 % 1013 - 500) as u32)
            .collect();
        let out = exec(&k, [1, 1, 1], vec![bits(&x), xi.clone(), vec![0; 64 * 11]]);
        let (wu, all) = (w as usize, vec![true; 64]);
        let xb = bits(&x[..64]);
        let add = |a: u32, b: u32| (fb(a) + fb(b)).to_bits();
        let mut want = butterfly(&xb, &all, wu, 0x8000_0000, add);
        want.extend(butterfly(&xi, &all, wu, i32::MIN as u32, |a, b| {
            (a as i32).max(b as i32) as u32
        }));
        want.extend(butterfly(&xi, &all, wu, u32::MAX, u32::min));
        want.extend(butterfly(&xi, &all, wu, 0, |a, b| a | b));
        for m in [1, wu / 2 + 1, wu] {
            want.extend((0..64).map(|t| if (t % wu) ^ m < wu { xb[t ^ m] } else { xb[t] }));
        }
        let act: Vec<bool> = (0..64).map(|t| t % 3 != 0).collect();
        let d = butterfly(&xb, &act, wu, 0x8000_0000, add);
        want.extend((0..64).map(|t| if act[t] { d[t] } else { (-1.0f32).to_bits() }));
        for c in 0..2 {
            let comp: Vec<u32> = (0..64).map(|t| bits(&x)[2 * t + c]).collect();
            let max = |a: u32, b: u32| if fb(a) >= fb(b) { a } else { b };
            want.extend(butterfly(&comp, &all, wu, f32::NEG_INFINITY.to_bits(), max));
        }
        want.extend((0..64).map(|t| (t % wu) as u32));
        for (i, (got, want)) in out[2].iter().zip(&want).enumerate() {
            assert_eq!(got, want, "width {w}, result {}, thread {}", i / 64, i % 64);
        }
        // Width 32: every lane of a subgroup holds the same bits.
        if w == 32 {
            assert!(out[2][..32].iter().all(|&s| s == out[2][0]));
        }
    }
}

#[test]
fn vector_loads_stores_selects() {
    let mut b = KernelBuilder::new("vectors", [16, 1, 1], 1);
    let pa = b.param("a", Scalar::U32, Access::Read);
    let po = b.param("out", Scalar::U32, Access::Write);
    let t = b.special(Special::LocalX);
    let (one, two, four) = (b.u32(1), b.u32(2), b.u32(4));
    let t4 = b.mul(t, four);
    let v4 = b.load(pa, t4, 4);
    let t41 = b.add(t4, one);
    let v2 = b.load(pa, t41, 2);
    let t42 = b.add(t4, two);
    let w4 = b.load(pa, t42, 4);
    b.store(po, t4, v4);
    let (e3, e1) = (b.extract(v4, 3), b.extract(v2, 1));
    let s = b.add(e3, e1);
    let c64 = b.u32(64);
    let i = b.add(c64, t);
    b.store(po, i, s);
    let lt = b.cmp(CmpOp::Lt, v4, w4);
    let mn = b.select(lt, v4, w4);
    let c80 = b.u32(80);
    let i = b.add(c80, t4);
    b.store(po, i, mn);
    let sum = b.add(v4, w4);
    let c144 = b.u32(144);
    let i = b.add(c144, t4);
    b.store(po, i, sum);
    let odd = b.bin(BinOp::And, t, one);
    let odd = b.cmp(CmpOp::Eq, odd, one);
    let pick = b.select(odd, v2, v2);
    let sw = b.select(odd, w4, v4);
    let t2 = b.mul(t, two);
    let c208 = b.u32(208);
    let i = b.add(c208, t2);
    b.store(po, i, pick);
    let c240 = b.u32(240);
    let i = b.add(c240, t4);
    b.store(po, i, sw);
    let k = b.finish();
    let a: Vec<u32> = (0..66u32)
        .map(|i| i.wrapping_mul(2654435761) >> 7)
        .collect();
    let out = exec(&k, [1, 1, 1], vec![a.clone(), vec![0; 304]]);
    let o = &out[1];
    for t in 0..16 {
        let (v4, v2, w4) = (
            &a[4 * t..4 * t + 4],
            &a[4 * t + 1..4 * t + 3],
            &a[4 * t + 2..4 * t + 6],
        );
        assert_eq!(&o[4 * t..4 * t + 4], v4);
        assert_eq!(o[64 + t], v4[3].wrapping_add(v2[1]));
        for c in 0..4 {
            assert_eq!(o[80 + 4 * t + c], v4[c].min(w4[c]));
            assert_eq!(o[144 + 4 * t + c], v4[c].wrapping_add(w4[c]));
            assert_eq!(o[240 + 4 * t + c], if t % 2 == 1 { w4[c] } else { v4[c] });
        }
        assert_eq!(&o[208 + 2 * t..210 + 2 * t], v2);
    }
}

#[test]
fn atomics_global_and_shared_in_lane_order() {
    let mut b = KernelBuilder::new("atomics", [64, 1, 1], 1);
    let pk = b.param("keys", Scalar::U32, Access::Read);
    let pv = b.param("vals", Scalar::F32, Access::Read);
    let ph = b.param("hist", Scalar::U32, Access::Write);
    let pf = b.param("fsum", Scalar::F32, Access::Write);
    let pm = b.param("imax", Scalar::I32, Access::ReadWrite);
    let pn = b.param("umin", Scalar::U32, Access::Write);
    let po = b.param("bits", Scalar::U32, Access::Write);
    let ps = b.param("shared_out", Scalar::U32, Access::Write);
    let sh = b.shared(Scalar::U32, 8);
    let t = b.special(Special::LocalX);
    let g = b.special(Special::GroupX);
    let i = gid(&mut b, 64);
    let k = b.load(pk, i, 1);
    let v = b.load(pv, i, 1);
    let one = b.u32(1);
    b.atomic(ReduceOp::Add, ph, k, one);
    b.atomic(ReduceOp::Add, pf, k, v);
    let hundred = b.f32(100.0);
    let vi = b.mul(v, hundred);
    let vi = b.convert(vi, Scalar::I32);
    b.atomic(ReduceOp::Max, pm, k, vi);
    b.atomic(ReduceOp::Min, pn, k, i);
    let c31 = b.u32(31);
    let sft = b.bin(BinOp::And, i, c31);
    let bit = b.bin(BinOp::Shl, one, sft);
    b.atomic(ReduceOp::Or, po, k, bit);
    let c7 = b.u32(7);
    let sk = b.bin(BinOp::And, k, c7);
    b.atomic(ReduceOp::Add, sh, sk, i);
    b.barrier();
    let c8 = b.u32(8);
    let lt = b.cmp(CmpOp::Lt, t, c8);
    b.if_then(lt, |b| {
        let s = b.load(sh, t, 1);
        let g8 = b.mul(g, c8);
        let j = b.add(g8, t);
        b.store(ps, j, s);
    });
    let kernel = b.finish();
    let n = 256;
    let keys: Vec<u32> = (0..n as u32)
        .map(|i| i.wrapping_mul(2654435761) >> 29)
        .collect();
    let vals: Vec<f32> = (0..n)
        .map(|i| ((i * 31 % 97) as f32 - 48.0) / 7.0)
        .collect();
    let init = vec![
        vec![0; 8],
        vec![0; 8],
        vec![i32::MIN as u32; 8],
        vec![u32::MAX; 8],
        vec![0; 8],
        vec![0; 32],
    ];
    let mut arenas = vec![keys.clone(), bits(&vals)];
    arenas.extend(init);
    let out = exec(&kernel, [4, 1, 1], arenas);
    let (mut h, mut f, mut mx, mut mn, mut or, mut s) = (
        [0u32; 8],
        [0f32; 8],
        [i32::MIN; 8],
        [u32::MAX; 8],
        [0u32; 8],
        [0u32; 32],
    );
    for i in 0..n {
        let k = keys[i] as usize;
        h[k] += 1;
        f[k] += vals[i];
        mx[k] = mx[k].max((vals[i] * 100.0) as i32);
        mn[k] = mn[k].min(i as u32);
        or[k] |= 1 << (i % 32);
        s[(i / 64) * 8 + (k & 7)] += i as u32;
    }
    assert_eq!(out[2], h);
    assert_eq!(out[3], bits(&f));
    assert_eq!(out[4], mx.map(|x| x as u32));
    assert_eq!(out[5], mn);
    assert_eq!(out[6], or);
    assert_eq!(out[7], s);
}

/// `out[i] = x[i]` for every thread, then `trap(42)` in threads whose word is 7.
fn trap_kernel() -> Kernel {
    let mut b = KernelBuilder::new("trapper", [32, 1, 1], 1);
    let px = b.param("x", Scalar::U32, Access::Read);
    let po = b.param("out", Scalar::U32, Access::Write);
    let i = gid(&mut b, 32);
    let v = b.load(px, i, 1);
    b.store(po, i, v);
    let seven = b.u32(7);
    let hit = b.cmp(CmpOp::Eq, v, seven);
    b.if_then(hit, |b| b.trap(42));
    b.finish()
}

#[test]
fn trap_faults_with_its_code_and_keeps_earlier_effects() {
    let k = trap_kernel();
    let p = Prepared::new(&k).unwrap();
    let x: Vec<u32> = (0..64).map(|i| i % 5 + 10).collect();
    let mut arenas = vec![x.clone(), vec![0; 64]];
    p.run([2, 1, 1], &whole(&arenas), &mut arenas).unwrap();
    assert_eq!(arenas[1], x, "no thread traps");
    let mut x2 = x.clone();
    x2[45] = 7;
    for sequential in [false, true] {
        let mut arenas = vec![x2.clone(), vec![0; 64]];
        let binds = whole(&arenas);
        let f = if sequential {
            p.run_sequential([2, 1, 1], &binds, &mut arenas)
        } else {
            p.run([2, 1, 1], &binds, &mut arenas)
        };
        let f = f.unwrap_err();
        assert_eq!((f.kernel.as_str(), f.code), ("trapper", 42));
        assert!(
            f.detail
                .contains("thread [13, 0, 0] of work-group [1, 0, 0]"),
            "{}",
            f.detail
        );
        assert_eq!(arenas[1], x2, "stores before the trap stay done");
        assert!(f.to_string().contains("0x0000002a"), "{f}");
    }
}

#[test]
fn out_of_bounds_loads_and_stores_fault_naming_the_param() {
    // Scalar load past the binding.
    let mut b = KernelBuilder::new("oob", [32, 1, 1], 1);
    let px = b.param("x", Scalar::F32, Access::Read);
    let po = b.param("out", Scalar::F32, Access::Write);
    let t = b.special(Special::LocalX);
    let v = b.load(px, t, 1);
    b.store(po, t, v);
    let k = b.finish();
    let mut arenas = vec![vec![1; 10], vec![0; 32]];
    let f = run(&k, [1, 1, 1], &whole(&arenas), &mut arenas).unwrap_err();
    assert_eq!(f.code, OUT_OF_BOUNDS);
    assert!(
        f.detail
            .contains("load of param 0 `x` at index 10 is outside its 10 elements"),
        "{}",
        f.detail
    );
    assert_eq!(arenas[1], vec![0; 32], "nothing stored");
    // Store past the binding: the faulting store has no effect.
    let mut arenas = vec![vec![1; 32], vec![0; 20]];
    let f = run(&k, [1, 1, 1], &whole(&arenas), &mut arenas).unwrap_err();
    assert_eq!(f.code, OUT_OF_BOUNDS);
    assert!(
        f.detail
            .contains("store of param 1 `out` at index 20 is outside its 20 elements"),
        "{}",
        f.detail
    );
    assert!(f.detail.contains("thread [20, 0, 0]"), "{}", f.detail);
    assert_eq!(arenas[1], vec![0; 20]);
    // A vector load whose last lane leaves the binding; inactive threads never fault.
    let mut b = KernelBuilder::new("oob4", [32, 1, 1], 1);
    let px = b.param("x", Scalar::U32, Access::Read);
    let po = b.param("out", Scalar::U32, Access::Write);
    let sh = b.shared(Scalar::U32, 16);
    let t = b.special(Special::LocalX);
    let limit = b.load(px, t, 1);
    let lt = b.cmp(CmpOp::Lt, t, limit);
    b.if_then(lt, |b| {
        let four = b.u32(4);
        let i = b.mul(t, four);
        let v = b.load(px, i, 4);
        let e = b.extract(v, 3);
        b.store(po, t, e);
        b.store(sh, t, e);
    });
    let k = b.finish();
    let p = Prepared::new(&k).unwrap();
    let mut arenas = vec![vec![8; 32], vec![0; 32]];
    p.run([1, 1, 1], &whole(&arenas), &mut arenas).unwrap();
    assert_eq!(&arenas[1][..8], &[8; 8]);
    let mut arenas = vec![vec![9; 34], vec![0; 32]];
    let f = p.run([1, 1, 1], &whole(&arenas), &mut arenas).unwrap_err();
    assert!(
        f.detail
            .contains("load of param 0 `x` at index 32 (x4) is outside its 34 elements"),
        "{}",
        f.detail
    );
    let mut arenas = vec![vec![17; 100], vec![0; 32]];
    let f = p.run([1, 1, 1], &whole(&arenas), &mut arenas).unwrap_err();
    assert!(
        f.detail
            .contains("store of shared array 0 at index 16 is outside its 16 elements"),
        "{}",
        f.detail
    );
}

#[test]
fn bindings_are_checked_and_may_share_an_arena() {
    let mut b = KernelBuilder::new("double", [16, 1, 1], 1);
    let px = b.param("x", Scalar::F32, Access::Read);
    let po = b.param("out", Scalar::F32, Access::Write);
    let t = b.special(Special::LocalX);
    let v = b.load(px, t, 1);
    let s = b.add(v, v);
    b.store(po, t, s);
    let k = b.finish();
    let p = Prepared::new(&k).unwrap();
    let mut arenas = vec![vec![0; 64]];
    let f = p.run([1, 1, 1], &whole(&arenas), &mut arenas).unwrap_err();
    assert_eq!(f.code, BAD_DISPATCH);
    assert!(
        f.detail
            .contains("2 buffer parameters but the dispatch binds 1"),
        "{}",
        f.detail
    );
    let bind = |arena, offset, len| Binding { arena, offset, len };
    let f = p
        .run([1, 1, 1], &[bind(0, 0, 16), bind(0, 50, 16)], &mut arenas)
        .unwrap_err();
    assert_eq!(f.code, BAD_DISPATCH);
    assert!(
        f.detail
            .contains("param 1 `out`: binding of words 50+16 is outside arena 0 of 64 words"),
        "{}",
        f.detail
    );
    let f = p
        .run([1, 1, 1], &[bind(0, 0, 16), bind(3, 0, 16)], &mut arenas)
        .unwrap_err();
    assert!(
        f.detail.contains("bound to arena 3 but there are 1 arenas"),
        "{}",
        f.detail
    );
    // Two ranges of one arena, and the same range read and written (in place).
    let x: Vec<f32> = (0..64).map(|i| i as f32 * 0.25).collect();
    let mut arenas = vec![bits(&x)];
    p.run([1, 1, 1], &[bind(0, 5, 16), bind(0, 40, 16)], &mut arenas)
        .unwrap();
    for i in 0..16 {
        assert_eq!(arenas[0][40 + i], (x[5 + i] * 2.0).to_bits());
    }
    let mut arenas = vec![bits(&x)];
    p.run([1, 1, 1], &[bind(0, 8, 16), bind(0, 8, 16)], &mut arenas)
        .unwrap();
    assert_eq!(
        arenas[0][8..24],
        bits(&x[8..24].iter().map(|v| v * 2.0).collect::<Vec<_>>())
    );
    // A grid with a zero dimension runs nothing.
    p.run([0, 1, 1], &[bind(0, 0, 16), bind(0, 0, 16)], &mut arenas)
        .unwrap();
}

#[test]
fn kernels_without_a_defined_meaning_are_refused() {
    let refused = |k: &Kernel, what: &str| {
        let f = Prepared::new(k).unwrap_err();
        assert_eq!(f.code, INVALID_KERNEL, "{f}");
        assert!(f.detail.contains(what), "{what}: {f}");
    };
    let mut b = KernelBuilder::new("not_f32", [1, 1, 1], 1);
    let x = b.f32(1.0);
    b.un(UnOp::Not, x);
    refused(&b.finish(), "not of f32");
    let mut b = KernelBuilder::new("scope", [4, 1, 1], 1);
    let po = b.param("out", Scalar::U32, Access::Write);
    let t = b.special(Special::LocalX);
    let c = b.cmp(CmpOp::Eq, t, t);
    let mut inner = None;
    b.if_then(c, |b| inner = Some(b.u32(1)));
    b.store(po, t, inner.unwrap());
    refused(&b.finish(), "is used where it is not defined");
    refused(
        &KernelBuilder::new("sg", [24, 1, 1], 24).finish(),
        "not a power of two",
    );
    // A work-group whose size wraps u32 to 2 threads.
    refused(
        &KernelBuilder::new("wrap", [3, 1_431_655_766, 1], 1).finish(),
        "is not 1..=1024 threads",
    );
    // A value id the kernel has no type for (taken from a larger kernel).
    let mut big = KernelBuilder::new("big", [1, 1, 1], 1);
    let far = (0..10).map(|i| big.u32(i)).last().unwrap();
    let mut b = KernelBuilder::new("foreign", [1, 1, 1], 1);
    let po = b.param("out", Scalar::U32, Access::Write);
    b.store(po, far, far);
    refused(&b.finish(), "has no type");
}

#[test]
fn parallel_runs_are_deterministic_and_fault_like_sequential_ones() {
    let mut b = KernelBuilder::new("poly", [64, 1, 1], 1);
    let px = b.param("x", Scalar::F32, Access::Read);
    let po = b.param("out", Scalar::F32, Access::Write);
    let i = gid(&mut b, 64);
    let n = b.u32(20_000);
    let inb = b.cmp(CmpOp::Lt, i, n);
    b.if_then(inb, |b| {
        let v = b.load(px, i, 1);
        let e = b.un(UnOp::Exp, v);
        let c = b.un(UnOp::Cos, v);
        let y = b.fma(e, c, v);
        b.store(po, i, y);
    });
    let k = b.finish();
    let x: Vec<f32> = (0..20_000)
        .map(|i| (i as f32 * 0.001).sin() * 3.0)
        .collect();
    let grid = [20_000u32.div_ceil(64), 1, 1];
    let out = exec(&k, grid, vec![bits(&x), vec![0; 20_000]]);
    for (i, &v) in x.iter().enumerate() {
        assert_eq!(out[1][i], v.exp().mul_add(v.cos(), v).to_bits());
    }
    let p = Prepared::new(&k).unwrap();
    let mut again = vec![bits(&x), vec![0; 20_000]];
    p.run(grid, &whole(&again), &mut again).unwrap();
    assert_eq!(again, out, "a second run on pooled registers");
    // A fault in the middle of a parallel dispatch: the same arenas and fault as sequential.
    let k = trap_kernel();
    let p = Prepared::new(&k).unwrap();
    let mut x: Vec<u32> = (0..32 * 600).map(|i| i % 5 + 10).collect();
    x[32 * 300 + 3] = 7;
    x[32 * 500 + 9] = 7;
    let mut par = vec![x.clone(), vec![0; x.len()]];
    let mut seq = par.clone();
    let fp = p.run([600, 1, 1], &whole(&par), &mut par).unwrap_err();
    let fs = p
        .run_sequential([600, 1, 1], &whole(&seq), &mut seq)
        .unwrap_err();
    assert_eq!(fp, fs);
    assert_eq!(par, seq);
    assert!(fp.detail.contains("work-group [300, 0, 0]"), "{fp}");
    assert_eq!(par[1][32 * 301 - 1], x[32 * 301 - 1]);
    assert_eq!(par[1][32 * 301], 0);
}

/// `out[r] = sum_c w[r * cols + c] * x[c]`: one subgroup of 32 per row, 8 rows per
/// work-group, x4 vector loads, fma accumulation, subgroup reduce, lane 0 stores.
fn matvec(rows: u32, cols: u32) -> Kernel {
    let mut b = KernelBuilder::new("matvec", [32, 8, 1], 32);
    let pw = b.param("w", Scalar::F32, Access::Read);
    let px = b.param("x", Scalar::F32, Access::Read);
    let po = b.param("out", Scalar::F32, Access::Write);
    let (g, ly, lane) = (
        b.special(Special::GroupX),
        b.special(Special::LocalY),
        b.special(Special::Lane),
    );
    let (eight, four, ncols) = (b.u32(8), b.u32(4), b.u32(cols));
    let g8 = b.mul(g, eight);
    let row = b.add(g8, ly);
    let base = b.mul(row, ncols);
    let start = b.mul(lane, four);
    let zero = b.f32(0.0);
    let acc = b.for_loop(start, ncols, 128, &[zero], |b, k, c| {
        let wi = b.add(base, k);
        let w4 = b.load(pw, wi, 4);
        let x4 = b.load(px, k, 4);
        let mut acc = c[0];
        for l in 0..4 {
            let (wl, xl) = (b.extract(w4, l), b.extract(x4, l));
            acc = b.fma(wl, xl, acc);
        }
        vec![acc]
    });
    let total = b.subgroup_reduce(ReduceOp::Add, acc[0]);
    let z = b.u32(0);
    let first = b.cmp(CmpOp::Eq, lane, z);
    b.if_then(first, |b| b.store(po, row, total));
    assert!(rows % 8 == 0);
    b.finish()
}

fn matvec_inputs(rows: usize, cols: usize) -> (Vec<f32>, Vec<f32>) {
    let w = (0..rows * cols)
        .map(|i| ((i * 7919 % 1009) as f32 - 504.0) / 1009.0)
        .collect();
    let x = (0..cols)
        .map(|i| ((i * 31 % 17) as f32 - 8.0) / 3.0)
        .collect();
    (w, x)
}

#[test]
fn matvec_is_bit_exact() {
    let (rows, cols) = (64usize, 512usize);
    let (w, x) = matvec_inputs(rows, cols);
    let out = exec(
        &matvec(rows as u32, cols as u32),
        [rows as u32 / 8, 1, 1],
        vec![bits(&w), bits(&x), vec![0; rows]],
    );
    for r in 0..rows {
        let lanes: Vec<u32> = (0..32)
            .map(|l| {
                let mut acc = 0.0f32;
                for k in (l * 4..cols).step_by(128) {
                    for c in 0..4 {
                        acc = w[r * cols + k + c].mul_add(x[k + c], acc);
                    }
                }
                acc.to_bits()
            })
            .collect();
        let sum = butterfly(&lanes, &[true; 32], 32, 0x8000_0000, |a, b| {
            (fb(a) + fb(b)).to_bits()
        });
        assert_eq!(out[2][r], sum[0], "row {r}");
    }
}

/// `cargo test -p poot-runtime --release -- --ignored --nocapture`
#[test]
#[ignore]
fn bench_matvec_4096x1024() {
    let (rows, cols): (usize, usize) = std::env::var("MV")
        .ok()
        .map(|s| (s.parse().unwrap(), 1024))
        .unwrap_or((4096, 1024));
    let (w, x) = matvec_inputs(rows, cols);
    let p = Prepared::new(&matvec(rows as u32, cols as u32)).unwrap();
    let mut arenas = vec![bits(&w), bits(&x), vec![0; rows]];
    let binds = whole(&arenas);
    let grid = [rows as u32 / 8, 1, 1];
    for (name, parallel) in [("parallel", true), ("sequential", false)] {
        let go = |arenas: &mut Vec<Vec<u32>>| {
            if parallel {
                p.run(grid, &binds, arenas)
            } else {
                p.run_sequential(grid, &binds, arenas)
            }
        };
        go(&mut arenas).unwrap();
        let mut times: Vec<f64> = (0..30)
            .map(|_| {
                let t = std::time::Instant::now();
                go(&mut arenas).unwrap();
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let threads = rayon::current_num_threads();
        println!(
            "matvec {rows}x{cols} f32 ({name}, {threads} threads): {:.2} ms per call (min), {:.2} ms (median)",
            times[0],
            times[times.len() / 2]
        );
    }
}
