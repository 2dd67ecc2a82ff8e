//! Expressions: one kir `let` becomes a few SPIR-V instructions on whole vectors.
//!
//! Semantics follow kir (`poot_kir::types`, the reference device) wherever SPIR-V leaves room:
//! - f32 `add`/`sub`/`mul` carry `NoContraction`, so a driver never fuses them into an fma
//!   kir did not ask for; `fma` is `GLSL.std.450 Fma`.
//! - NaN and infinity tests are integer tests on the bits (`(x & 0x7fffffff) > 0x7f800000`):
//!   Vulkan lets a driver assume floats are never NaN or infinite unless the entry point
//!   declares `SignedZeroInfNanPreserve`, which naga (the wgpu path) does not accept, so a
//!   float `OpIsNan` could legally be folded to false. Integer tests cannot.
//! - f32 `min`/`max` are IEEE 754-2019 minimum/maximum like the reference device: NaN
//!   (`0x7fc00000`) if either operand is NaN, and `-0 < +0` (equal operands combine their
//!   bits with and/or). `GLSL.std.450 NMin/NMax/FMin/FMax` drop NaNs or leave them undefined.
//! - Integer `div`/`rem` divide by 1 where the divisor is 0 (then give 0) or where the
//!   division is `i32::MIN / -1` (giving `i32::MIN` and 0, as the reference does); SPIR-V
//!   leaves both undefined. Shift amounts are masked with 31.
//! - `convert` f32 -> i32/u32 clamps before `OpConvertFToS/U` (undefined out of range):
//!   truncation toward zero, saturation, NaN -> 0, like Rust's `as`.
//! - `f16_to_f32` is `GLSL.std.450 UnpackHalf2x16` (exact); `bf16_to_f32` is a shift or mask
//!   and a bit cast (exact).
//! - Accuracy of what Vulkan does not make exact (its precision table, the floor every
//!   conformant driver meets; desktop GPUs do better): `div` and `recip` (`OpFDiv`) 2.5 ulp;
//!   `sqrt` as `1 / inversesqrt`; `rsqrt` (`InverseSqrt`) 2 ulp; `exp` 3 + 2|x| ulp; `fma`
//!   may round twice (lavapipe does: `tests/lavapipe.rs` measures every case against the
//!   reference device); add/sub/mul/conversions are correctly rounded, to nearest even on
//!   every desktop GPU (Vulkan also allows round-toward-zero without float controls).
//!   `sin`/`cos` first reduce `x` by `k = roundEven(x / 2pi)` with the two-constant
//!   Cody-Waite step of the PTX renderer (`r = fma(k, -C2, fma(k, -C1, x))`), so the device
//!   function sees `|r| <= pi`, where Vulkan bounds its absolute error by 2^-11 (desktop
//!   hardware: about 2^-20); inf and NaN give NaN.

use crate::error::Result;
use crate::module::id;
use crate::writer::Writer;
use poot_kir::{BinOp, CmpOp, Const, Expr, Scalar, Ty, UnOp, Val};
use rspirv::dr::Operand;
use rspirv::spirv::{Decoration, GlslStd450Op as Gl, Op, Word};

/// `1 / (2pi)` as f32.
const INV_2PI: u32 = 0x3E22_F983;
/// `-C1` where `C1` is 2pi rounded to f32.
const NEG_2PI_HI: u32 = 0xC0C9_0FDB;
/// `-C2` where `C2` is `2pi - C1` rounded to f32.
const NEG_2PI_LO: u32 = 0x343B_BD2E;
/// The canonical quiet NaN kir's `min`/`max` produce.
const QNAN: u32 = 0x7FC0_0000;

/// `t` with scalar `s`.
pub(crate) fn with(t: Ty, s: Scalar) -> Ty {
    Ty {
        scalar: s,
        lanes: t.lanes,
    }
}

impl Writer<'_> {
    /// Computes `e`, the definition of `v`; `guard` is the active-thread condition of a
    /// subgroup operation hoisted out of a branch (see `subgroup`).
    pub(crate) fn expr(&mut self, v: Val, e: &Expr, guard: Option<Word>) -> Result<Word> {
        let t = self.ty(v);
        Ok(match e {
            Expr::Const(c) => self.konst(*c, 1),
            Expr::Special(s) => self.special(*s),
            Expr::Unary(op, a) => self.unary(*op, self.val(*a), self.ty(*a), v)?,
            Expr::Binary(op, a, b) => {
                let (a, b, at) = (self.val(*a), self.val(*b), self.ty(*a));
                self.binary(*op, a, b, at, v)?
            }
            Expr::Fma(a, b, c) => {
                let ty = self.m.ty(t);
                let args = [self.val(*a), self.val(*b), self.val(*c)];
                self.m.glsl(Gl::Fma, ty, &args)
            }
            Expr::Cmp(op, a, b) => {
                let (a, b, at) = (self.val(*a), self.val(*b), self.ty(*a));
                self.cmp(*op, a, b, at)
            }
            Expr::Select(c, a, b) => {
                let c = self.broadcast(self.val(*c), self.ty(*c), t.lanes);
                let (a, b) = (self.val(*a), self.val(*b));
                self.select(t, c, a, b)
            }
            Expr::Convert(a, to) => self.convert(self.val(*a), self.ty(*a), *to),
            Expr::Bitcast(a, to) => self.bitcast(self.val(*a), self.ty(*a), *to),
            Expr::HalfToF32(a, high) => {
                let v2 = self.m.ty(Ty {
                    scalar: Scalar::F32,
                    lanes: 2,
                });
                let pair = self.m.glsl(Gl::UnpackHalf2x16, v2, &[self.val(*a)]);
                let f = self.m.scalar(Scalar::F32);
                let lane = Operand::LiteralBit32(u32::from(*high));
                self.m.op(Op::CompositeExtract, f, vec![id(pair), lane])
            }
            Expr::Bf16ToF32(a, high) => {
                let u = self.m.scalar(Scalar::U32);
                let x = self.val(*a);
                let bits = if *high {
                    let mask = self.m.u32(0xFFFF_0000);
                    self.m.ids(Op::BitwiseAnd, u, &[x, mask])
                } else {
                    let sixteen = self.m.u32(16);
                    self.m.ids(Op::ShiftLeftLogical, u, &[x, sixteen])
                };
                let f = self.m.scalar(Scalar::F32);
                self.m.ids(Op::Bitcast, f, &[bits])
            }
            Expr::Load(mem, index, lanes) => self.load(*mem, *index, *lanes),
            Expr::Extract(a, lane) => {
                let s = self.m.scalar(t.scalar);
                let lane = Operand::LiteralBit32(u32::from(*lane));
                self.m
                    .op(Op::CompositeExtract, s, vec![id(self.val(*a)), lane])
            }
            Expr::SubgroupReduce(op, a) => self.reduce(*op, *a, v, guard)?,
            Expr::ShuffleXor(a, mask) => self.shuffle_xor(*a, *mask, v, guard)?,
            // `render` removes matrices first (`poot_kir::without_matrix`).
            Expr::Mma { .. } => return Err(self.unsupported("matrix multiply-accumulate".into())),
        })
    }

    /// An instruction on `args` with result type `t`.
    pub(crate) fn emit(&mut self, op: Op, t: Ty, args: &[Word]) -> Word {
        let ty = self.m.ty(t);
        self.m.ids(op, ty, args)
    }

    /// A float instruction that must not be contracted with its neighbours.
    pub(crate) fn exact(&mut self, op: Op, t: Ty, args: &[Word]) -> Word {
        let w = self.emit(op, t, args);
        self.m.decorate(w, Decoration::NoContraction, &[]);
        w
    }

    /// `a || b` (`or`) or `a && b` on bools of type `t`. naga only accepts the logical
    /// instructions on scalars, so vectors use `OpSelect`.
    pub(crate) fn logic(&mut self, or: bool, a: Word, b: Word, t: Ty) -> Word {
        if t.lanes == 1 {
            let code = if or { Op::LogicalOr } else { Op::LogicalAnd };
            return self.emit(code, t, &[a, b]);
        }
        if or {
            let yes = self.konst(Const::Bool(true), t.lanes);
            self.select(t, a, yes, b)
        } else {
            let no = self.konst(Const::Bool(false), t.lanes);
            self.select(t, a, b, no)
        }
    }

    /// `OpSelect` with a condition of as many lanes as `t`.
    pub(crate) fn select(&mut self, t: Ty, c: Word, a: Word, b: Word) -> Word {
        self.emit(Op::Select, t, &[c, a, b])
    }

    /// A bool `c` of type `ct` as a vector of `lanes` (SPIR-V 1.3's `OpSelect` wants one
    /// condition per lane).
    pub(crate) fn broadcast(&mut self, c: Word, ct: Ty, lanes: u8) -> Word {
        if ct.lanes == lanes {
            return c;
        }
        let t = Ty {
            scalar: Scalar::Bool,
            lanes,
        };
        let parts = vec![c; lanes as usize];
        self.emit(Op::CompositeConstruct, t, &parts)
    }

    /// A `u32` constant splatted to `lanes`.
    pub(crate) fn cu(&mut self, x: u32, lanes: u8) -> Word {
        self.konst(Const::U32(x), lanes)
    }

    /// An f32 constant (by bits) splatted to `lanes`.
    pub(crate) fn cf(&mut self, bits: u32, lanes: u8) -> Word {
        self.konst(Const::F32(bits), lanes)
    }

    /// `|bits(x)|`: the f32 bits of `x` without the sign, as u32.
    fn magnitude(&mut self, x: Word, t: Ty) -> Word {
        let ut = with(t, Scalar::U32);
        let bits = self.emit(Op::Bitcast, ut, &[x]);
        let mask = self.cu(0x7FFF_FFFF, t.lanes);
        self.emit(Op::BitwiseAnd, ut, &[bits, mask])
    }

    /// True where `x` (f32) is NaN, by its bits.
    pub(crate) fn is_nan(&mut self, x: Word, t: Ty) -> Word {
        let m = self.magnitude(x, t);
        let inf = self.cu(0x7F80_0000, t.lanes);
        self.emit(Op::UGreaterThan, with(t, Scalar::Bool), &[m, inf])
    }

    /// True where `x` (f32) is finite, by its bits.
    fn is_finite(&mut self, x: Word, t: Ty) -> Word {
        let m = self.magnitude(x, t);
        let inf = self.cu(0x7F80_0000, t.lanes);
        self.emit(Op::ULessThan, with(t, Scalar::Bool), &[m, inf])
    }

    /// NaN-propagating f32 `max` (or `min`) with `-0 < +0`, lane-wise.
    pub(crate) fn fminmax(&mut self, max: bool, a: Word, b: Word, t: Ty) -> Word {
        let bt = with(t, Scalar::Bool);
        let ut = with(t, Scalar::U32);
        // Ordered and different: pick the larger (smaller).
        let b_wins = if max { [a, b] } else { [b, a] };
        let lt = self.emit(Op::FOrdLessThan, bt, &b_wins);
        let pick = self.select(t, lt, b, a);
        // Equal (both zeros of either sign, or the same number): and / or of the bits.
        let (ua, ub) = (
            self.emit(Op::Bitcast, ut, &[a]),
            self.emit(Op::Bitcast, ut, &[b]),
        );
        let comb = if max { Op::BitwiseAnd } else { Op::BitwiseOr };
        let zb = self.emit(comb, ut, &[ua, ub]);
        let z = self.emit(Op::Bitcast, t, &[zb]);
        let eq = self.emit(Op::FOrdEqual, bt, &[a, b]);
        let r = self.select(t, eq, z, pick);
        let (na, nb) = (self.is_nan(a, t), self.is_nan(b, t));
        let nan = self.logic(true, na, nb, bt);
        let q = self.cf(QNAN, t.lanes);
        self.select(t, nan, q, r)
    }

    fn unary(&mut self, op: UnOp, a: Word, t: Ty, v: Val) -> Result<Word> {
        let s = t.scalar;
        let ty = self.m.ty(t);
        Ok(match (op, s) {
            (UnOp::Neg, Scalar::F32) => self.emit(Op::FNegate, t, &[a]),
            (UnOp::Neg, Scalar::I32) => self.emit(Op::SNegate, t, &[a]),
            (UnOp::Neg, Scalar::U32) => {
                let zero = self.cu(0, t.lanes);
                self.emit(Op::ISub, t, &[zero, a])
            }
            (UnOp::Not, Scalar::I32 | Scalar::U32) => self.emit(Op::Not, t, &[a]),
            (UnOp::Not, Scalar::Bool) => self.emit(Op::LogicalNot, t, &[a]),
            (UnOp::Abs, Scalar::F32) => self.m.glsl(Gl::FAbs, ty, &[a]),
            (UnOp::Abs, Scalar::I32) => {
                // Wraps at i32::MIN like the reference.
                let zero = self.konst(Const::I32(0), t.lanes);
                let neg = self.emit(Op::SLessThan, with(t, Scalar::Bool), &[a, zero]);
                let n = self.emit(Op::SNegate, t, &[a]);
                self.select(t, neg, n, a)
            }
            (UnOp::Abs, Scalar::U32) => a,
            (UnOp::Exp, _) => self.m.glsl(Gl::Exp, ty, &[a]),
            (UnOp::Sqrt, _) => self.m.glsl(Gl::Sqrt, ty, &[a]),
            (UnOp::Rsqrt, _) => self.m.glsl(Gl::InverseSqrt, ty, &[a]),
            (UnOp::Recip, _) => {
                let one = self.cf(1.0f32.to_bits(), t.lanes);
                self.emit(Op::FDiv, t, &[one, a])
            }
            (UnOp::Sin | UnOp::Cos, _) => {
                let inv = self.cf(INV_2PI, t.lanes);
                let k = self.exact(Op::FMul, t, &[a, inv]);
                let k = self.m.glsl(Gl::RoundEven, ty, &[k]);
                let hi = self.cf(NEG_2PI_HI, t.lanes);
                let lo = self.cf(NEG_2PI_LO, t.lanes);
                let r = self.m.glsl(Gl::Fma, ty, &[k, hi, a]);
                let r = self.m.glsl(Gl::Fma, ty, &[k, lo, r]);
                let f = if op == UnOp::Sin { Gl::Sin } else { Gl::Cos };
                self.m.glsl(f, ty, &[r])
            }
            (UnOp::IsFinite, Scalar::F32) => self.is_finite(a, t),
            (UnOp::IsNan, Scalar::F32) => self.is_nan(a, t),
            _ => return Err(self.unsupported(format!("{v} = {} of {s}", op.name()))),
        })
    }

    /// A binary operator on `a` and `b` of type `t`.
    pub(crate) fn binary(&mut self, op: BinOp, a: Word, b: Word, t: Ty, v: Val) -> Result<Word> {
        let s = t.scalar;
        let int = matches!(s, Scalar::I32 | Scalar::U32);
        let ty = self.m.ty(t);
        Ok(match (op, s) {
            (BinOp::Add, Scalar::F32) => self.exact(Op::FAdd, t, &[a, b]),
            (BinOp::Sub, Scalar::F32) => self.exact(Op::FSub, t, &[a, b]),
            (BinOp::Mul, Scalar::F32) => self.exact(Op::FMul, t, &[a, b]),
            (BinOp::Div, Scalar::F32) => self.emit(Op::FDiv, t, &[a, b]),
            (BinOp::Min, Scalar::F32) => self.fminmax(false, a, b, t),
            (BinOp::Max, Scalar::F32) => self.fminmax(true, a, b, t),
            (BinOp::Add, _) if int => self.emit(Op::IAdd, t, &[a, b]),
            (BinOp::Sub, _) if int => self.emit(Op::ISub, t, &[a, b]),
            (BinOp::Mul, _) if int => self.emit(Op::IMul, t, &[a, b]),
            (BinOp::Div | BinOp::Rem, _) if int => self.divide(op, a, b, t),
            (BinOp::Min, Scalar::I32) => self.m.glsl(Gl::SMin, ty, &[a, b]),
            (BinOp::Min, Scalar::U32) => self.m.glsl(Gl::UMin, ty, &[a, b]),
            (BinOp::Max, Scalar::I32) => self.m.glsl(Gl::SMax, ty, &[a, b]),
            (BinOp::Max, Scalar::U32) => self.m.glsl(Gl::UMax, ty, &[a, b]),
            (BinOp::And, _) if int => self.emit(Op::BitwiseAnd, t, &[a, b]),
            (BinOp::Or, _) if int => self.emit(Op::BitwiseOr, t, &[a, b]),
            (BinOp::Xor, _) if int => self.emit(Op::BitwiseXor, t, &[a, b]),
            (BinOp::And, Scalar::Bool) => self.logic(false, a, b, t),
            (BinOp::Or, Scalar::Bool) => self.logic(true, a, b, t),
            (BinOp::Xor, Scalar::Bool) => self.emit(Op::LogicalNotEqual, t, &[a, b]),
            (BinOp::Shl | BinOp::Shr, _) if int => {
                let k = match s {
                    Scalar::I32 => self.konst(Const::I32(31), t.lanes),
                    _ => self.cu(31, t.lanes),
                };
                let n = self.emit(Op::BitwiseAnd, t, &[b, k]);
                let code = match (op, s) {
                    (BinOp::Shl, _) => Op::ShiftLeftLogical,
                    (_, Scalar::I32) => Op::ShiftRightArithmetic,
                    _ => Op::ShiftRightLogical,
                };
                self.emit(code, t, &[a, n])
            }
            _ => return Err(self.unsupported(format!("{v} = {} of {s}", op.name()))),
        })
    }

    /// Integer `div`/`rem` with kir's results where SPIR-V's are undefined.
    fn divide(&mut self, op: BinOp, a: Word, b: Word, t: Ty) -> Word {
        let bt = with(t, Scalar::Bool);
        let signed = t.scalar == Scalar::I32;
        let zero = self.konst(Const::U32(0), t.lanes);
        let zero = if signed {
            self.konst(Const::I32(0), t.lanes)
        } else {
            zero
        };
        let one = if signed {
            self.konst(Const::I32(1), t.lanes)
        } else {
            self.cu(1, t.lanes)
        };
        let by_zero = self.emit(Op::IEqual, bt, &[b, zero]);
        let mut avoid = by_zero;
        if signed {
            let min = self.konst(Const::I32(i32::MIN), t.lanes);
            let neg1 = self.konst(Const::I32(-1), t.lanes);
            let a_min = self.emit(Op::IEqual, bt, &[a, min]);
            let b_neg1 = self.emit(Op::IEqual, bt, &[b, neg1]);
            let overflow = self.logic(false, a_min, b_neg1, bt);
            avoid = self.logic(true, by_zero, overflow, bt);
        }
        let d = self.select(t, avoid, one, b);
        let code = match (op, signed) {
            (BinOp::Div, true) => Op::SDiv,
            (BinOp::Div, false) => Op::UDiv,
            (_, true) => Op::SRem,
            (_, false) => Op::UMod,
        };
        let q = self.emit(code, t, &[a, d]);
        self.select(t, by_zero, zero, q)
    }

    fn cmp(&mut self, op: CmpOp, a: Word, b: Word, t: Ty) -> Word {
        let bt = with(t, Scalar::Bool);
        let code = match (t.scalar, op) {
            (Scalar::F32, CmpOp::Lt) => Op::FOrdLessThan,
            (Scalar::F32, CmpOp::Le) => Op::FOrdLessThanEqual,
            (Scalar::F32, CmpOp::Eq) => Op::FOrdEqual,
            (Scalar::F32, CmpOp::Ne) => Op::FUnordNotEqual,
            (Scalar::F32, CmpOp::Gt) => Op::FOrdGreaterThan,
            (Scalar::F32, CmpOp::Ge) => Op::FOrdGreaterThanEqual,
            (_, CmpOp::Eq) if t.scalar != Scalar::Bool => Op::IEqual,
            (_, CmpOp::Ne) if t.scalar != Scalar::Bool => Op::INotEqual,
            (Scalar::I32, CmpOp::Lt) => Op::SLessThan,
            (Scalar::I32, CmpOp::Le) => Op::SLessThanEqual,
            (Scalar::I32, CmpOp::Gt) => Op::SGreaterThan,
            (Scalar::I32, CmpOp::Ge) => Op::SGreaterThanEqual,
            (Scalar::U32, CmpOp::Lt) => Op::ULessThan,
            (Scalar::U32, CmpOp::Le) => Op::ULessThanEqual,
            (Scalar::U32, CmpOp::Gt) => Op::UGreaterThan,
            (Scalar::U32, CmpOp::Ge) => Op::UGreaterThanEqual,
            (_, CmpOp::Eq) => Op::LogicalEqual,
            (_, CmpOp::Ne) => Op::LogicalNotEqual,
            // Bool orderings compare as 0/1 (`false < true`).
            (_, _) => {
                let ut = with(t, Scalar::U32);
                let (x, y) = (self.bool_to(a, ut, 1), self.bool_to(b, ut, 1));
                return self.cmp(op, x, y, ut);
            }
        };
        self.emit(code, bt, &[a, b])
    }

    /// A bool as 1/0 of numeric type `t` (`one` is the bits of 1 in it).
    fn bool_to(&mut self, c: Word, t: Ty, one: u32) -> Word {
        let one = self.konst(konst_of(t.scalar, one), t.lanes);
        let zero = self.konst(konst_of(t.scalar, 0), t.lanes);
        self.select(t, c, one, zero)
    }

    /// Numeric conversion of `a` (type `t`) to `to`.
    pub(crate) fn convert(&mut self, a: Word, t: Ty, to: Scalar) -> Word {
        let rt = with(t, to);
        match (t.scalar, to) {
            (f, g) if f == g => a,
            (Scalar::Bool, Scalar::F32) => self.bool_to(a, rt, 1.0f32.to_bits()),
            (Scalar::Bool, _) => self.bool_to(a, rt, 1),
            (Scalar::I32 | Scalar::U32, Scalar::I32 | Scalar::U32) => {
                self.emit(Op::Bitcast, rt, &[a])
            }
            (Scalar::I32, _) => self.emit(Op::ConvertSToF, rt, &[a]),
            (Scalar::U32, _) => self.emit(Op::ConvertUToF, rt, &[a]),
            (_, to) => self.saturate(a, t, to),
        }
    }

    /// f32 -> i32/u32: truncate toward zero, saturate, NaN -> 0.
    fn saturate(&mut self, a: Word, t: Ty, to: Scalar) -> Word {
        let (bt, rt, n) = (with(t, Scalar::Bool), with(t, to), t.lanes);
        let signed = to == Scalar::I32;
        // `hi` is the first f32 past the range; `lo` the lowest value that truncates inside.
        let (hi, lo) = if signed {
            (2147483648.0f32, -2147483648.0f32)
        } else {
            (4294967296.0f32, 0.0f32)
        };
        let (hi_c, lo_c) = (self.cf(hi.to_bits(), n), self.cf(lo.to_bits(), n));
        let zero = self.cf(0, n);
        let over = self.emit(Op::FOrdGreaterThanEqual, bt, &[a, hi_c]);
        let under = self.emit(Op::FOrdLessThan, bt, &[a, lo_c]);
        let nan = self.is_nan(a, t);
        let x = self.select(t, under, lo_c, a);
        let x = self.select(t, over, zero, x);
        let x = self.select(t, nan, zero, x);
        let code = if signed {
            Op::ConvertFToS
        } else {
            Op::ConvertFToU
        };
        let r = self.emit(code, rt, &[x]);
        let max = if signed {
            self.konst(Const::I32(i32::MAX), n)
        } else {
            self.cu(u32::MAX, n)
        };
        self.select(rt, over, max, r)
    }

    /// Bit reinterpretation of `a` (type `t`) as `to`.
    pub(crate) fn bitcast(&mut self, a: Word, t: Ty, to: Scalar) -> Word {
        if t.scalar == to {
            return a;
        }
        self.emit(Op::Bitcast, with(t, to), &[a])
    }
}

/// The constant of scalar type `s` with bits `bits`.
pub(crate) fn konst_of(s: Scalar, bits: u32) -> Const {
    match s {
        Scalar::F32 => Const::F32(bits),
        Scalar::I32 => Const::I32(bits as i32),
        Scalar::U32 => Const::U32(bits),
        Scalar::Bool => Const::Bool(bits != 0),
    }
}
