//! Expressions: one kir `Let` becomes a few PTX instructions per lane.
//!
//! Invariants and accuracy (everything not listed is exact, as kir specifies):
//! - f32 `add/sub/mul/div/fma/sqrt/recip` use the `.rn` IEEE forms; no `.ftz`, no contraction.
//! - `min`/`max` on f32 use `min.NaN`/`max.NaN`: NaN if either operand is NaN.
//! - `exp(x)` is `ex2.approx.f32(x * log2(e))`: `ex2.approx` is within 2 ulp, and rounding the
//!   product adds a relative error of about `|x| * 2^-24` (under 1e-6 for `|x| <= 16`, 5.3e-6 at
//!   the overflow edge `|x| = 88.7`). `exp(-inf) = 0`, `exp(inf) = inf`, NaN stays NaN.
//!   Measured on an H200: 3.8e-6 relative over `[-87, 88]`, 8.4e-7 for `|x| < 16`.
//! - `rsqrt` is `rsqrt.approx.f32`: relative error at most 2^-22.9 over the positive range
//!   (measured on an H200: 2^-23.2).
//! - `sin`/`cos` reduce `x` by `k = rint(x / 2pi)` with a two-constant Cody-Waite step
//!   (`r = x - k*C1 - k*C2`, both `fma`; the first step is exact) and then use
//!   `sin/cos.approx.f32`, whose absolute error on `[-2pi, 2pi]` is at most 2^-20.5. The
//!   result's absolute error is below 1e-6 for `|x|` up to about 1e6 (RoPE angles), where the
//!   unreduced instruction is only specified to 2^-14.7 within `100pi`. inf and NaN give NaN.
//!   Measured on an H200: 4.4e-7 for `|x| <= 1e5`, 5.6e-7 for `|x| <= 1e6`.
//! - Integer `div`/`rem` by zero give 0 (the divisor is replaced by 1 and the result by 0);
//!   `i32::MIN / -1` is what `div.s32` gives (`i32::MIN`), `i32::MIN % -1` is 0. Shifts use
//!   `b & 31`; `shr` is arithmetic for i32 and logical for u32.
//! - Conversions: f32 -> int is `cvt.rzi` (truncates, saturates, NaN -> 0); int -> f32 is
//!   `cvt.rn`; i32 <-> u32 keeps the bits; bool -> number is 1 or 0. Half conversions are exact.
//! - Subgroup reductions are a `shfl.sync.bfly` butterfly over the whole warp (mask all ones):
//!   every lane combines the same operands in the same order, so all lanes get the same bits.
//!   Bool reductions use `vote.sync` (`or`/`max` = any, `min` = all). `shuffle_xor` is one
//!   `shfl.sync.bfly`; a mask of 32 or more leaves each lane its own value, as kir's reference
//!   device defines it.

use crate::error::Result;
use crate::writer::{Class, Reg, Writer, class, emit, mov_ty};
use poot_kir::{BinOp, CmpOp, Const, Expr, ReduceOp, Scalar, Special, UnOp, Val};
use std::fmt::Write;

/// `log2(e)` as f32.
const LOG2_E: &str = "0f3FB8AA3B";
/// `1 / (2pi)` as f32.
const INV_2PI: &str = "0f3E22F983";
/// `-C1` where `C1` is 2pi rounded to f32.
const NEG_2PI_HI: &str = "0fC0C90FDB";
/// `-C2` where `C2` is `2pi - C1` rounded to f32.
const NEG_2PI_LO: &str = "0f343BBD2E";
/// 1.0 and 0.0 as f32.
const ONE: &str = "0f3F800000";
const ZERO: &str = "0f00000000";
/// Every lane of the warp takes part.
const FULL: &str = "0xffffffff";

/// The PTX type suffix of an arithmetic scalar.
fn arith(s: Scalar) -> &'static str {
    match s {
        Scalar::F32 => "f32",
        Scalar::I32 => "s32",
        Scalar::U32 => "u32",
        Scalar::Bool => "pred",
    }
}

impl Writer<'_> {
    /// Defines `v` as `e`.
    pub(crate) fn expr(&mut self, v: Val, e: &Expr) -> Result<()> {
        let d = self.of(v);
        match e {
            Expr::Const(c) => {
                let r = d[0];
                match c {
                    Const::F32(b) => emit!(self, "mov.f32 {r}, 0f{b:08X};"),
                    Const::I32(x) => emit!(self, "mov.s32 {r}, {x};"),
                    Const::U32(x) => emit!(self, "mov.u32 {r}, {x};"),
                    Const::Bool(x) => emit!(self, "mov.pred {r}, {};", u8::from(*x)),
                }
            }
            Expr::Special(s) => {
                let src = match s {
                    Special::LocalX => "%tid.x",
                    Special::LocalY => "%tid.y",
                    Special::GroupX => "%ctaid.x",
                    Special::GroupY => "%ctaid.y",
                    Special::GroupZ => "%ctaid.z",
                    // A subgroup of one thread: every thread is lane 0.
                    Special::Lane if self.k.subgroup == 1 => "0",
                    Special::Lane => "%laneid",
                };
                emit!(self, "mov.u32 {}, {src};", d[0]);
            }
            Expr::Unary(op, a) => {
                let s = self.ty(*a).scalar;
                for (rd, ra) in d.into_iter().zip(self.of(*a)) {
                    self.unary(*op, s, rd, ra, v)?;
                }
            }
            Expr::Binary(op, a, b) => {
                let s = self.ty(*a).scalar;
                if d.len() == 1
                    && matches!(s, Scalar::U32 | Scalar::I32)
                    && let Some(p) = self.patterns.permute(*op, *a, *b)
                {
                    let (rd, ra) = (d[0], self.of(p.a)[0]);
                    let rb = self.of(p.b)[0];
                    emit!(self, "prmt.b32 {rd}, {ra}, {rb}, {:#06x};", p.selector);
                    return Ok(());
                }
                if d.len() == 1
                    && s == Scalar::U32
                    && matches!(op, BinOp::Div | BinOp::Rem)
                    && let Some(c) = self.patterns.konst(*b).filter(|&c| c != 0)
                {
                    let (rd, ra) = (d[0], self.of(*a)[0]);
                    self.div_by_constant(*op, rd, ra, c);
                    return Ok(());
                }
                for ((rd, ra), rb) in d.into_iter().zip(self.of(*a)).zip(self.of(*b)) {
                    self.binary(*op, s, rd, ra, rb, v)?;
                }
            }
            Expr::Fma(a, b, c) => {
                let (ra, rb, rc) = (self.of(*a), self.of(*b), self.of(*c));
                for (i, rd) in d.into_iter().enumerate() {
                    emit!(self, "fma.rn.f32 {rd}, {}, {}, {};", ra[i], rb[i], rc[i]);
                }
            }
            Expr::Cmp(op, a, b) => {
                let s = self.ty(*a).scalar;
                for ((rd, ra), rb) in d.into_iter().zip(self.of(*a)).zip(self.of(*b)) {
                    self.cmp(*op, s, rd, ra, rb);
                }
            }
            Expr::Select(c, a, b) => {
                let s = self.ty(*a).scalar;
                let (rc, ra, rb) = (self.of(*c), self.of(*a), self.of(*b));
                for (i, rd) in d.into_iter().enumerate() {
                    let c = rc[i.min(rc.len() - 1)];
                    if s == Scalar::Bool {
                        emit!(self, "mov.pred {rd}, {};", rb[i]);
                        emit!(self, "@{c} mov.pred {rd}, {};", ra[i]);
                    } else {
                        emit!(self, "selp.{} {rd}, {}, {}, {c};", mov_ty(s), ra[i], rb[i]);
                    }
                }
            }
            Expr::Convert(a, to) => {
                let from = self.ty(*a).scalar;
                for (rd, ra) in d.into_iter().zip(self.of(*a)) {
                    self.convert(from, *to, rd, ra, v)?;
                }
            }
            Expr::Bitcast(a, _) => {
                for (rd, ra) in d.into_iter().zip(self.of(*a)) {
                    emit!(self, "mov.b32 {rd}, {ra};");
                }
            }
            Expr::HalfToF32(a, high) => {
                let (lo, hi) = (self.reg(Class::B16), self.reg(Class::B16));
                emit!(self, "mov.b32 {{{lo}, {hi}}}, {};", self.of(*a)[0]);
                emit!(
                    self,
                    "cvt.f32.f16 {}, {};",
                    d[0],
                    if *high { hi } else { lo }
                );
            }
            Expr::Bf16ToF32(a, high) => {
                let (t, ra) = (self.reg(Class::B32), self.of(*a)[0]);
                if *high {
                    emit!(self, "and.b32 {t}, {ra}, 0xFFFF0000;");
                } else {
                    emit!(self, "shl.b32 {t}, {ra}, 16;");
                }
                emit!(self, "mov.b32 {}, {t};", d[0]);
            }
            Expr::Load(mem, index, lanes) => self.load(v, *mem, *index, *lanes),
            Expr::Extract(a, lane) => {
                let ty = mov_ty(self.ty(v).scalar);
                emit!(self, "mov.{ty} {}, {};", d[0], self.of(*a)[*lane as usize]);
            }
            Expr::SubgroupReduce(op, a) => {
                let s = self.ty(*a).scalar;
                for (rd, ra) in d.into_iter().zip(self.of(*a)) {
                    self.subgroup_reduce(*op, s, rd, ra, v)?;
                }
            }
            Expr::Mma { a, b, c } => {
                if !self.t.mma {
                    return Err(self.unsupported("mma".into()));
                }
                // The tf32 operands are `.b32` registers: each f32 moves into one.
                let mut bits = |r: &[Val]| {
                    let r: Vec<String> = r
                        .iter()
                        .map(|&x| {
                            let (t, f) = (self.reg(Class::B32), self.of(x)[0]);
                            emit!(self, "mov.b32 {t}, {f};");
                            t.to_string()
                        })
                        .collect();
                    r.join(", ")
                };
                let (ra, rb) = (bits(a), bits(b));
                let rc: Vec<String> = c.iter().map(|&x| self.of(x)[0].to_string()).collect();
                let d: Vec<String> = d.iter().map(|x| x.to_string()).collect();
                let (d, rc) = (d.join(", "), rc.join(", "));
                emit!(
                    self,
                    "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {{{}}}, {{{}}}, {{{}}}, {{{}}};",
                    d,
                    ra,
                    rb,
                    rc
                );
            }
            Expr::ShuffleXor(a, mask) => {
                let s = self.ty(*a).scalar;
                let (warp, clamp) = (self.t.warp, self.t.warp - 1);
                for (rd, ra) in d.into_iter().zip(self.of(*a)) {
                    if *mask >= warp {
                        // `lane ^ mask` is outside the warp: kir gives the lane its own value.
                        emit!(self, "mov.{} {rd}, {ra};", mov_ty(s));
                    } else if s == Scalar::Bool {
                        let (t, u) = (self.reg(Class::B32), self.reg(Class::B32));
                        emit!(self, "selp.u32 {t}, 1, 0, {ra};");
                        emit!(
                            self,
                            "shfl.sync.bfly.b32 {u}, {t}, {mask}, {clamp}, {FULL};"
                        );
                        emit!(self, "setp.ne.u32 {rd}, {u}, 0;");
                    } else {
                        emit!(
                            self,
                            "shfl.sync.bfly.b32 {rd}, {ra}, {mask}, {clamp}, {FULL};"
                        );
                    }
                }
            }
        }
        Ok(())
    }

    fn unary(&mut self, op: UnOp, s: Scalar, d: Reg, a: Reg, v: Val) -> Result<()> {
        match (op, s) {
            (UnOp::Neg, Scalar::F32) => emit!(self, "neg.f32 {d}, {a};"),
            (UnOp::Neg, Scalar::I32 | Scalar::U32) => emit!(self, "neg.s32 {d}, {a};"),
            (UnOp::Not, Scalar::I32 | Scalar::U32) => emit!(self, "not.b32 {d}, {a};"),
            (UnOp::Not, Scalar::Bool) => emit!(self, "not.pred {d}, {a};"),
            (UnOp::Abs, Scalar::F32) => emit!(self, "abs.f32 {d}, {a};"),
            (UnOp::Abs, Scalar::I32) => emit!(self, "abs.s32 {d}, {a};"),
            (UnOp::Abs, Scalar::U32) => emit!(self, "mov.b32 {d}, {a};"),
            (UnOp::Exp, _) => {
                emit!(self, "mul.rn.f32 {d}, {a}, {LOG2_E};");
                emit!(self, "ex2.approx.f32 {d}, {d};");
            }
            (UnOp::Sqrt, _) => emit!(self, "sqrt.rn.f32 {d}, {a};"),
            (UnOp::Rsqrt, _) => emit!(self, "rsqrt.approx.f32 {d}, {a};"),
            (UnOp::Recip, _) => emit!(self, "rcp.rn.f32 {d}, {a};"),
            (UnOp::Sin | UnOp::Cos, _) => {
                let k = self.reg(Class::F32);
                emit!(self, "mul.rn.f32 {k}, {a}, {INV_2PI};");
                emit!(self, "cvt.rni.f32.f32 {k}, {k};");
                emit!(self, "fma.rn.f32 {d}, {k}, {NEG_2PI_HI}, {a};");
                emit!(self, "fma.rn.f32 {d}, {k}, {NEG_2PI_LO}, {d};");
                let f = if op == UnOp::Sin { "sin" } else { "cos" };
                emit!(self, "{f}.approx.f32 {d}, {d};");
            }
            (UnOp::IsFinite, _) => emit!(self, "testp.finite.f32 {d}, {a};"),
            (UnOp::IsNan, _) => emit!(self, "testp.notanumber.f32 {d}, {a};"),
            _ => return Err(self.unsupported(format!("{v} = {} of {s}", op.name()))),
        }
        Ok(())
    }

    /// `u32` division (or remainder) of `a` by the nonzero constant `c`, without a divide:
    /// ptxas gives `div.u32` its general routine (a reciprocal through floating point, a few
    /// dependent steps) even when the divisor is an immediate. A power of two is a shift (a
    /// mask); any other divisor is a high multiply by its `magic` number, exact for every
    /// `u32` (`magic` documents the method).
    fn div_by_constant(&mut self, op: BinOp, d: Reg, a: Reg, c: u32) {
        if c.is_power_of_two() && op == BinOp::Rem {
            emit!(self, "and.b32 {d}, {a}, {};", c - 1);
            return;
        }
        let q = if op == BinOp::Div {
            d
        } else {
            self.reg(Class::B32)
        };
        if c.is_power_of_two() {
            emit!(self, "shr.u32 {q}, {a}, {};", c.trailing_zeros());
        } else {
            let (m, sh) = magic(c);
            let (t, u) = (self.reg(Class::B32), self.reg(Class::B32));
            emit!(self, "mul.hi.u32 {t}, {a}, {m};");
            emit!(self, "sub.u32 {u}, {a}, {t};");
            emit!(self, "shr.u32 {u}, {u}, 1;");
            emit!(self, "add.u32 {u}, {u}, {t};");
            emit!(self, "shr.u32 {q}, {u}, {};", sh - 1);
        }
        if op == BinOp::Rem {
            let p = self.reg(Class::B32);
            emit!(self, "mul.lo.u32 {p}, {q}, {c};");
            emit!(self, "sub.u32 {d}, {a}, {p};");
        }
    }

    fn binary(&mut self, op: BinOp, s: Scalar, d: Reg, a: Reg, b: Reg, v: Val) -> Result<()> {
        let t = arith(s);
        let int = matches!(s, Scalar::I32 | Scalar::U32);
        match op {
            BinOp::Add | BinOp::Sub if s == Scalar::F32 => {
                emit!(self, "{}.rn.f32 {d}, {a}, {b};", op.name())
            }
            BinOp::Mul if s == Scalar::F32 => emit!(self, "mul.rn.f32 {d}, {a}, {b};"),
            BinOp::Div if s == Scalar::F32 => emit!(self, "div.rn.f32 {d}, {a}, {b};"),
            BinOp::Add | BinOp::Sub if int => emit!(self, "{}.{t} {d}, {a}, {b};", op.name()),
            BinOp::Mul if int => emit!(self, "mul.lo.{t} {d}, {a}, {b};"),
            BinOp::Div | BinOp::Rem if int => {
                // By zero gives 0: divide by 1 instead, then select 0.
                let (z, one) = (self.reg(Class::Pred), self.reg(Class::B32));
                emit!(self, "setp.eq.u32 {z}, {b}, 0;");
                emit!(self, "selp.b32 {one}, 1, {b}, {z};");
                emit!(self, "{}.{t} {d}, {a}, {one};", op.name());
                emit!(self, "selp.b32 {d}, 0, {d}, {z};");
            }
            BinOp::Min | BinOp::Max if s == Scalar::F32 => {
                if !self.t.nan_min_max {
                    return Err(self.unsupported(format!("{v} = f32 {} with NaN", op.name())));
                }
                emit!(self, "{}.NaN.f32 {d}, {a}, {b};", op.name());
            }
            BinOp::Min | BinOp::Max if int => emit!(self, "{}.{t} {d}, {a}, {b};", op.name()),
            BinOp::And | BinOp::Or | BinOp::Xor if int => {
                emit!(self, "{}.b32 {d}, {a}, {b};", op.name())
            }
            BinOp::And | BinOp::Or | BinOp::Xor if s == Scalar::Bool => {
                emit!(self, "{}.pred {d}, {a}, {b};", op.name())
            }
            BinOp::Shl | BinOp::Shr if int => {
                let n = self.reg(Class::B32);
                emit!(self, "and.b32 {n}, {b}, 31;");
                let ty = if op == BinOp::Shl { "b32" } else { t };
                emit!(self, "{}.{ty} {d}, {a}, {n};", op.name());
            }
            _ => return Err(self.unsupported(format!("{v} = {} of {s}", op.name()))),
        }
        Ok(())
    }

    fn cmp(&mut self, op: CmpOp, s: Scalar, d: Reg, a: Reg, b: Reg) {
        // Ordered comparisons are false on NaN; `ne` is unordered so NaN != x holds.
        let name = match (op, s) {
            (CmpOp::Ne, Scalar::F32) => "neu",
            _ => op.name(),
        };
        if s == Scalar::Bool {
            // Compare as 0/1 integers (false < true).
            let (x, y) = (self.reg(Class::B32), self.reg(Class::B32));
            emit!(self, "selp.u32 {x}, 1, 0, {a};");
            emit!(self, "selp.u32 {y}, 1, 0, {b};");
            emit!(self, "setp.{name}.u32 {d}, {x}, {y};");
        } else {
            emit!(self, "setp.{name}.{} {d}, {a}, {b};", arith(s));
        }
    }

    fn convert(&mut self, from: Scalar, to: Scalar, d: Reg, a: Reg, v: Val) -> Result<()> {
        match (from, to) {
            (Scalar::F32, Scalar::F32) => emit!(self, "mov.f32 {d}, {a};"),
            (Scalar::F32, Scalar::I32 | Scalar::U32) => {
                emit!(self, "cvt.rzi.{}.f32 {d}, {a};", arith(to))
            }
            (Scalar::I32 | Scalar::U32, Scalar::F32) => {
                emit!(self, "cvt.rn.f32.{} {d}, {a};", arith(from))
            }
            (Scalar::I32 | Scalar::U32, Scalar::I32 | Scalar::U32) => {
                emit!(self, "mov.b32 {d}, {a};")
            }
            (Scalar::Bool, Scalar::F32) => emit!(self, "selp.f32 {d}, {ONE}, {ZERO}, {a};"),
            (Scalar::Bool, Scalar::I32 | Scalar::U32) => emit!(self, "selp.b32 {d}, 1, 0, {a};"),
            _ => return Err(self.unsupported(format!("{v} = convert {from} to {to}"))),
        }
        Ok(())
    }

    fn subgroup_reduce(&mut self, op: ReduceOp, s: Scalar, d: Reg, a: Reg, v: Val) -> Result<()> {
        let combine = match (op, s) {
            (ReduceOp::Or | ReduceOp::Max, Scalar::Bool) => {
                emit!(self, "vote.sync.any.pred {d}, {a}, {FULL};");
                return Ok(());
            }
            (ReduceOp::Min, Scalar::Bool) => {
                emit!(self, "vote.sync.all.pred {d}, {a}, {FULL};");
                return Ok(());
            }
            (ReduceOp::Add, Scalar::F32) => "add.rn.f32",
            (ReduceOp::Max, Scalar::F32) if self.t.nan_min_max => "max.NaN.f32",
            (ReduceOp::Min, Scalar::F32) if self.t.nan_min_max => "min.NaN.f32",
            (ReduceOp::Add, Scalar::I32 | Scalar::U32) => "add.u32",
            (ReduceOp::Max, Scalar::I32) => "max.s32",
            (ReduceOp::Min, Scalar::I32) => "min.s32",
            (ReduceOp::Max, Scalar::U32) => "max.u32",
            (ReduceOp::Min, Scalar::U32) => "min.u32",
            (ReduceOp::Or, Scalar::I32 | Scalar::U32) => "or.b32",
            _ => {
                return Err(self.unsupported(format!("{v} = subgroup_{} of {s}", op.name())));
            }
        };
        let (t, clamp) = (self.reg(class(s)), self.t.warp - 1);
        let mut src = a;
        let mut offset = self.t.warp / 2;
        while offset > 0 {
            emit!(
                self,
                "shfl.sync.bfly.b32 {t}, {src}, {offset}, {clamp}, {FULL};"
            );
            emit!(self, "{combine} {d}, {src}, {t};");
            src = d;
            offset /= 2;
        }
        Ok(())
    }
}

/// The multiplier and shift dividing a `u32` by `c` (not a power of two, so `c >= 3`):
/// with `s = ceil(log2 c)` and `m = floor(2^32 * (2^s - c) / c) + 1`, `t = mulhi(n, m)` gives
/// `n / c = (t + (n - t) / 2) >> (s - 1)` for every `u32` `n` (Granlund and Montgomery,
/// "Division by invariant integers using multiplication", 1994, figure 4.1).
pub(crate) fn magic(c: u32) -> (u32, u32) {
    let s = 32 - (c - 1).leading_zeros();
    let m = ((1u64 << 32) * ((1u64 << s) - u64::from(c))) / u64::from(c) + 1;
    (m as u32, s)
}

#[cfg(test)]
mod tests {
    use super::magic;

    /// The emitted sequence, evaluated as PTX defines each instruction.
    fn divide(n: u32, c: u32) -> u32 {
        let (m, s) = magic(c);
        let t = ((u64::from(n) * u64::from(m)) >> 32) as u32;
        (t + ((n - t) >> 1)) >> (s - 1)
    }

    #[test]
    fn magic_division_is_exact() {
        let divisors = (3..2000u32)
            .chain([
                576,
                896,
                4864,
                151_936,
                49_152,
                1 << 31 | 1,
                u32::MAX,
                u32::MAX - 1,
            ])
            .filter(|c| !c.is_power_of_two());
        for c in divisors {
            let near = |x: u64| [x.saturating_sub(1), x, x + 1];
            let edges =
                (1..=u64::from(u32::MAX / c)).step_by(((u32::MAX / c) / 64).max(1) as usize);
            let ns = edges
                .flat_map(|q| near(q * u64::from(c)))
                .chain([0, 1, 2, u64::from(u32::MAX), u64::from(u32::MAX) - 1])
                .filter_map(|n| u32::try_from(n).ok());
            for n in ns {
                assert_eq!(divide(n, c), n / c, "{n} / {c}");
            }
        }
    }
}
