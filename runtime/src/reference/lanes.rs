//! Lane loops: the scalar meaning of every specialised operator, and the tight loops that
//! apply them to whole register ranges.
//!
//! Invariants: every function here is total (no panics for any bit pattern: integer division
//! by zero gives 0, shifts mask their amount, conversions saturate); register ranges are
//! borrowed through [`split`], which returns `None` instead of panicking when a range is out
//! of the register file or a source overlaps the destination.

use super::program::{Bin, Comb, Un};

#[inline(always)]
fn f(x: u32) -> f32 {
    f32::from_bits(x)
}

#[inline(always)]
fn b(x: bool) -> u32 {
    x as u32
}

/// The quiet NaN `min`/`max` return when an operand is NaN (PTX's canonical NaN).
pub(crate) const CANONICAL_NAN: u32 = 0x7FC0_0000;

/// IEEE 754-2019 `maximum`: NaN if either is NaN (canonical), `+0 > -0`.
#[inline(always)]
pub(crate) fn max_f(x: u32, y: u32) -> u32 {
    let (a, c) = (f(x), f(y));
    if a.is_nan() || c.is_nan() {
        CANONICAL_NAN
    } else if a == c {
        // Equal values have equal bits except for zeros, where `and` keeps +0.
        x & y
    } else if a > c {
        x
    } else {
        y
    }
}

/// IEEE 754-2019 `minimum`: NaN if either is NaN (canonical), `-0 < +0`.
#[inline(always)]
pub(crate) fn min_f(x: u32, y: u32) -> u32 {
    let (a, c) = (f(x), f(y));
    if a.is_nan() || c.is_nan() {
        CANONICAL_NAN
    } else if a == c {
        x | y
    } else if a < c {
        x
    } else {
        y
    }
}

#[inline(always)]
pub(crate) fn un(op: Un, x: u32) -> u32 {
    match op {
        Un::NegF => x ^ 0x8000_0000,
        Un::NegI => x.wrapping_neg(),
        Un::NotI => !x,
        Un::NotB => x ^ 1,
        Un::Exp => f(x).exp().to_bits(),
        Un::Sqrt => f(x).sqrt().to_bits(),
        Un::Rsqrt => (1.0 / f(x).sqrt()).to_bits(),
        Un::Recip => (1.0 / f(x)).to_bits(),
        Un::Sin => f(x).sin().to_bits(),
        Un::Cos => f(x).cos().to_bits(),
        Un::AbsF => x & 0x7FFF_FFFF,
        Un::AbsI => (x as i32).wrapping_abs() as u32,
        Un::IsFinite => b(f(x).is_finite()),
        Un::IsNan => b(f(x).is_nan()),
        Un::F2I => (f(x) as i32) as u32,
        Un::F2U => f(x) as u32,
        Un::I2F => ((x as i32) as f32).to_bits(),
        Un::U2F => (x as f32).to_bits(),
        Un::Bf16Lo => half::bf16::from_bits(x as u16).to_f32().to_bits(),
        Un::Bf16Hi => half::bf16::from_bits((x >> 16) as u16).to_f32().to_bits(),
    }
}

#[inline(always)]
pub(crate) fn bin(op: Bin, x: u32, y: u32) -> u32 {
    let (si, sj) = (x as i32, y as i32);
    match op {
        Bin::AddF => (f(x) + f(y)).to_bits(),
        Bin::SubF => (f(x) - f(y)).to_bits(),
        Bin::MulF => (f(x) * f(y)).to_bits(),
        Bin::DivF => (f(x) / f(y)).to_bits(),
        Bin::MinF => min_f(x, y),
        Bin::MaxF => max_f(x, y),
        Bin::AddI => x.wrapping_add(y),
        Bin::SubI => x.wrapping_sub(y),
        Bin::MulI => x.wrapping_mul(y),
        // ok: the divisor is checked non-zero; wrapping_div handles MIN / -1.
        Bin::DivI => match sj {
            0 => 0,
            _ => si.wrapping_div(sj) as u32,
        },
        Bin::DivU => x.checked_div(y).unwrap_or(0),
        // ok: as above.
        Bin::RemI => match sj {
            0 => 0,
            _ => si.wrapping_rem(sj) as u32,
        },
        Bin::RemU => x.checked_rem(y).unwrap_or(0),
        Bin::MinI => si.min(sj) as u32,
        Bin::MinU => x.min(y),
        Bin::MaxI => si.max(sj) as u32,
        Bin::MaxU => x.max(y),
        Bin::And => x & y,
        Bin::Or => x | y,
        Bin::Xor => x ^ y,
        Bin::Shl => x << (y & 31),
        Bin::ShrI => (si >> (y & 31)) as u32,
        Bin::ShrU => x >> (y & 31),
        Bin::LtF => b(f(x) < f(y)),
        Bin::LeF => b(f(x) <= f(y)),
        Bin::EqF => b(f(x) == f(y)),
        Bin::NeF => b(f(x) != f(y)),
        Bin::LtI => b(si < sj),
        Bin::LeI => b(si <= sj),
        Bin::LtU => b(x < y),
        Bin::LeU => b(x <= y),
        Bin::EqBits => b(x == y),
        Bin::NeBits => b(x != y),
    }
}

/// The combining function of a reduction or atomic.
#[inline(always)]
pub(crate) fn comb(op: Comb, x: u32, y: u32) -> u32 {
    match op {
        Comb::AddF => (f(x) + f(y)).to_bits(),
        Comb::MaxF => max_f(x, y),
        Comb::MinF => min_f(x, y),
        Comb::AddI => x.wrapping_add(y),
        Comb::MaxI => (x as i32).max(y as i32) as u32,
        Comb::MinI => (x as i32).min(y as i32) as u32,
        Comb::MaxU => x.max(y),
        Comb::MinU => x.min(y),
        Comb::Or => x | y,
        Comb::AndB => x & y,
    }
}

/// The identity of a combining function, which inactive lanes contribute to a reduction.
/// For f32 addition it is `-0.0`: `x + -0.0 == x` for every `x`, signed zeros included.
pub(crate) fn identity(op: Comb) -> u32 {
    match op {
        Comb::AddF => 0x8000_0000,
        Comb::MaxF => f32::NEG_INFINITY.to_bits(),
        Comb::MinF => f32::INFINITY.to_bits(),
        Comb::AddI | Comb::Or | Comb::MaxU => 0,
        Comb::MaxI => i32::MIN as u32,
        Comb::MinI => i32::MAX as u32,
        Comb::MinU => u32::MAX,
        Comb::AndB => 1,
    }
}

/// One butterfly over `cur` for subgroups of width `w` (a power of two): for
/// `m = w/2, ..., 1`, lane `i` becomes `op(lane i, lane i ^ m)`. The result is in `cur`.
pub(crate) fn butterfly(op: Comb, cur: &mut Vec<u32>, next: &mut Vec<u32>, w: usize) {
    macro_rules! go {
        ($($v:ident),*) => {
            match op {
                $(Comb::$v => butterfly_with(cur, next, w, |x, y| comb(Comb::$v, x, y)),)*
            }
        };
    }
    go!(AddF, MaxF, MinF, AddI, MaxI, MinI, MaxU, MinU, Or, AndB)
}

#[inline(always)]
fn butterfly_with(cur: &mut Vec<u32>, next: &mut Vec<u32>, w: usize, g: impl Fn(u32, u32) -> u32) {
    let mut step = w / 2;
    while step > 0 {
        if step >= 8 {
            // Blocks of 2 * step lanes: each half combines with the other, own value first.
            for (nb, cb) in next.chunks_mut(2 * step).zip(cur.chunks(2 * step)) {
                let (nlo, nhi) = nb.split_at_mut(step.min(nb.len()));
                let (clo, chi) = cb.split_at(step.min(cb.len()));
                for ((n, &a), &b) in nlo.iter_mut().zip(clo).zip(chi) {
                    *n = g(a, b);
                }
                for ((n, &a), &b) in nhi.iter_mut().zip(chi).zip(clo) {
                    *n = g(a, b);
                }
            }
        } else {
            for (i, (n, &a)) in next.iter_mut().zip(cur.iter()).enumerate() {
                *n = g(a, cur.get(i ^ step).copied().unwrap_or(a));
            }
        }
        std::mem::swap(cur, next);
        step /= 2;
    }
}

/// `len` elements at `at` of the part of the register file below (`lo`, starting at 0) or
/// above (`hi`, starting at `hi_at`) a borrowed destination.
#[inline(always)]
fn src<'a>(lo: &'a [u32], hi: &'a [u32], hi_at: usize, at: usize, len: usize) -> Option<&'a [u32]> {
    let end = at.checked_add(len)?;
    if end <= lo.len() {
        lo.get(at..end)
    } else {
        let a = at.checked_sub(hi_at)?;
        hi.get(a..a.checked_add(len)?)
    }
}

/// The destination `regs[dst..dst + n]` mutably and `N` sources of `lens[i]` elements at
/// `srcs[i]`; `None` when a range is outside the file or a source overlaps the destination.
#[inline(always)]
pub(crate) fn split<const N: usize>(
    regs: &mut [u32],
    dst: usize,
    n: usize,
    srcs: [(usize, usize); N],
) -> Option<(&mut [u32], [&[u32]; N])> {
    let (lo, rest) = regs.split_at_mut_checked(dst)?;
    let (d, hi) = rest.split_at_mut_checked(n)?;
    let hi_at = dst.checked_add(n)?;
    let (lo, hi): (&[u32], &[u32]) = (lo, hi);
    let mut out: [&[u32]; N] = [&[]; N];
    for (o, (at, len)) in out.iter_mut().zip(srcs) {
        *o = src(lo, hi, hi_at, at, len)?;
    }
    Some((d, out))
}

/// `dst[i] = g(a[i])` over `n` elements.
#[inline(always)]
pub(crate) fn map1(
    regs: &mut [u32],
    dst: usize,
    a: usize,
    n: usize,
    g: impl Fn(u32) -> u32,
) -> Option<()> {
    let (d, [a]) = split(regs, dst, n, [(a, n)])?;
    for (d, &x) in d.iter_mut().zip(a) {
        *d = g(x);
    }
    Some(())
}

/// `dst[i] = g(a[i], b[i])` over `n` elements.
#[inline(always)]
pub(crate) fn map2(
    regs: &mut [u32],
    dst: usize,
    a: usize,
    b: usize,
    n: usize,
    g: impl Fn(u32, u32) -> u32,
) -> Option<()> {
    let (d, [a, b]) = split(regs, dst, n, [(a, n), (b, n)])?;
    for ((d, &x), &y) in d.iter_mut().zip(a).zip(b) {
        *d = g(x, y);
    }
    Some(())
}

/// `dst[i] = g(a[i], b[i], c[i])` over `n` elements.
#[inline(always)]
pub(crate) fn map3(
    regs: &mut [u32],
    dst: usize,
    [a, b, c]: [usize; 3],
    n: usize,
    g: impl Fn(u32, u32, u32) -> u32,
) -> Option<()> {
    let (d, [a, b, c]) = split(regs, dst, n, [(a, n), (b, n), (c, n)])?;
    for (((d, &x), &y), &z) in d.iter_mut().zip(a).zip(b).zip(c) {
        *d = g(x, y, z);
    }
    Some(())
}

/// `dst[i] = a[i]` where `mask[i % threads] != 0`, over `n` elements.
pub(crate) fn masked_copy(
    regs: &mut [u32],
    dst: usize,
    a: usize,
    mask: usize,
    n: usize,
    threads: usize,
) -> Option<()> {
    let (d, [a, m]) = split(regs, dst, n, [(a, n), (mask, threads)])?;
    for (d, a) in d.chunks_mut(threads.max(1)).zip(a.chunks(threads.max(1))) {
        for ((d, &x), &m) in d.iter_mut().zip(a).zip(m) {
            if m != 0 {
                *d = x;
            }
        }
    }
    Some(())
}

macro_rules! dispatch_un {
    ($op:expr, $regs:expr, $dst:expr, $a:expr, $n:expr, [$($v:ident),*]) => {
        match $op {
            $(Un::$v => map1($regs, $dst, $a, $n, |x| un(Un::$v, x)),)*
        }
    };
}

macro_rules! dispatch_bin {
    ($op:expr, $regs:expr, $dst:expr, $a:expr, $b:expr, $n:expr, [$($v:ident),*]) => {
        match $op {
            $(Bin::$v => map2($regs, $dst, $a, $b, $n, |x, y| bin(Bin::$v, x, y)),)*
        }
    };
}

/// Applies a unary operator over a register range, one specialised loop per operator.
pub(crate) fn run_un(op: Un, regs: &mut [u32], dst: usize, a: usize, n: usize) -> Option<()> {
    dispatch_un!(
        op,
        regs,
        dst,
        a,
        n,
        [
            NegF, NegI, NotI, NotB, Exp, Sqrt, Rsqrt, Recip, Sin, Cos, AbsF, AbsI, IsFinite, IsNan,
            F2I, F2U, I2F, U2F, Bf16Lo, Bf16Hi
        ]
    )
}

/// Applies a binary operator over a register range, one specialised loop per operator.
pub(crate) fn run_bin(
    op: Bin,
    regs: &mut [u32],
    dst: usize,
    a: usize,
    b: usize,
    n: usize,
) -> Option<()> {
    dispatch_bin!(
        op,
        regs,
        dst,
        a,
        b,
        n,
        [
            AddF, SubF, MulF, DivF, MinF, MaxF, AddI, SubI, MulI, DivI, DivU, RemI, RemU, MinI,
            MinU, MaxI, MaxU, And, Or, Xor, Shl, ShrI, ShrU, LtF, LeF, EqF, NeF, LtI, LeI, LtU,
            LeU, EqBits, NeBits
        ]
    )
}

/// `dst = a * b + c` rounded once, over a register range.
pub(crate) fn run_fma(regs: &mut [u32], dst: usize, abc: [usize; 3], n: usize) -> Option<()> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        let (d, [a, b, c]) = split(regs, dst, n, [(abc[0], n), (abc[1], n), (abc[2], n)])?;
        // SAFETY: the `fma` target feature was detected at run time just above, which is
        // the only requirement of `fma_hw` (a safe function compiled with that feature).
        unsafe { fma_hw(d, a, b, c) };
        return Some(());
    }
    map3(regs, dst, abc, n, fma1)
}

#[inline(always)]
fn fma1(x: u32, y: u32, z: u32) -> u32 {
    f(x).mul_add(f(y), f(z)).to_bits()
}

/// The fma loop compiled for CPUs with a fused multiply-add unit, so `mul_add` becomes
/// vector instructions instead of a `fmaf` call per lane (the result is the same: one rounding).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma,avx2")]
fn fma_hw(d: &mut [u32], a: &[u32], b: &[u32], c: &[u32]) {
    for (((d, &x), &y), &z) in d.iter_mut().zip(a).zip(b).zip(c) {
        *d = fma1(x, y, z);
    }
}
