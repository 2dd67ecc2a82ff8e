//! Every operator on special values (signed zeros, subnormals, infinities, NaN, integer
//! extremes) against Rust, one thread per operand pair.

use super::{bits, exec, fb, gid, same};
use poot_kir::{Access, BinOp, CmpOp, Expr, Kernel, KernelBuilder, Scalar, UnOp, Val};

type F32Op = fn(f32, f32) -> f32;
type F32Cmp = fn(f32, f32) -> bool;
type F32Un = fn(f32) -> f32;
type I32Op = fn(i32, i32) -> i32;
type U32Op = fn(u32, u32) -> u32;

pub(crate) const SPECIAL_F32: [f32; 20] = [
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
    let cases: [(BinOp, F32Op); 4] = [
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
    for (op, max) in [(BinOp::Min, false), (BinOp::Max, true)] {
        let k = |b: &mut KernelBuilder, x, y| b.bin(op, x, y);
        let want = |x, y| min_max(fb(x), fb(y), max);
        for (x, y, got) in check_binary(f, f, &v, k, want, op.name()) {
            if fb(x).is_nan() || fb(y).is_nan() {
                assert_eq!(got, 0x7FC0_0000, "{}: the canonical NaN", op.name());
            }
        }
    }
    let cmps: [(CmpOp, F32Cmp); 6] = [
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
    let ops: [(BinOp, I32Op, U32Op); 12] = [
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
        assert!(
            same(out, r[2][i], w),
            "{what}({:#x}) = {:#x}, want {w:#x}",
            a[i],
            r[2][i]
        );
    }
}

#[test]
fn unary_ops_and_conversions() {
    let v = bits(&SPECIAL_F32);
    let f = Scalar::F32;
    let un: [(UnOp, F32Un); 8] = [
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
