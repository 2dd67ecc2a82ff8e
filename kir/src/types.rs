//! Scalar and vector types, constants and the operator sets of the kernel IR.
//!
//! Invariant: every value is a scalar or a vector of 2 or 4 lanes of one of four scalar
//! types; buffers hold 32-bit words (`f32`, `i32`, `u32`), so packed weights are read as
//! `u32` words and unpacked with shifts, masks and the half-precision conversions.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A scalar element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Scalar {
    /// IEEE binary32.
    F32,
    /// Two's-complement 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
    /// Boolean (not storable).
    Bool,
}

/// A value type: a scalar or a short vector of one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Ty {
    /// Element type.
    pub scalar: Scalar,
    /// 1, 2 or 4.
    pub lanes: u8,
}

impl Ty {
    /// `f32`.
    pub const F32: Ty = Ty::scalar(Scalar::F32);
    /// `i32`.
    pub const I32: Ty = Ty::scalar(Scalar::I32);
    /// `u32`.
    pub const U32: Ty = Ty::scalar(Scalar::U32);
    /// `bool`.
    pub const BOOL: Ty = Ty::scalar(Scalar::Bool);
    /// A one-lane type.
    pub const fn scalar(scalar: Scalar) -> Ty {
        Ty { scalar, lanes: 1 }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scalar::F32 => "f32",
            Scalar::I32 => "i32",
            Scalar::U32 => "u32",
            Scalar::Bool => "bool",
        })
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lanes == 1 {
            write!(f, "{}", self.scalar)
        } else {
            write!(f, "{}x{}", self.scalar, self.lanes)
        }
    }
}

/// A constant, stored by bits so kernels compare and hash exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Const {
    /// An f32 by its bits.
    F32(u32),
    /// An i32.
    I32(i32),
    /// A u32.
    U32(u32),
    /// A boolean.
    Bool(bool),
}

impl Const {
    /// The constant's type.
    pub fn ty(self) -> Ty {
        Ty::scalar(match self {
            Const::F32(_) => Scalar::F32,
            Const::I32(_) => Scalar::I32,
            Const::U32(_) => Scalar::U32,
            Const::Bool(_) => Scalar::Bool,
        })
    }
}

impl fmt::Display for Const {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Const::F32(b) => write!(f, "{:?}", f32::from_bits(*b)),
            Const::I32(x) => write!(f, "{x}"),
            Const::U32(x) => write!(f, "{x}u"),
            Const::Bool(x) => write!(f, "{x}"),
        }
    }
}

macro_rules! ops {
    ($(#[$m:meta])* $ty:ident { $($(#[$vm:meta])* $v:ident = $s:literal,)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $ty { $($(#[$vm])* $v,)* }
        impl $ty {
            /// The text name.
            pub fn name(self) -> &'static str { match self { $($ty::$v => $s,)* } }
        }
    };
}

ops!(
    /// Unary operators (lane-wise).
    UnOp {
        /// Negation (floats and integers).
        Neg = "neg",
        /// Bitwise not (integers), logical not (bool).
        Not = "not",
        /// `e^x` (f32; devices may approximate within the stated tolerance).
        Exp = "exp",
        /// Square root (f32).
        Sqrt = "sqrt",
        /// `1 / sqrt(x)` (f32).
        Rsqrt = "rsqrt",
        /// `1 / x` (f32).
        Recip = "recip",
        /// Sine (f32).
        Sin = "sin",
        /// Cosine (f32).
        Cos = "cos",
        /// Absolute value.
        Abs = "abs",
        /// True when finite (f32 -> bool).
        IsFinite = "is_finite",
        /// True when NaN (f32 -> bool).
        IsNan = "is_nan",
    }
);

ops!(
    /// Binary operators (lane-wise, both operands of one type).
    BinOp {
        /// Sum (integers wrap).
        Add = "add",
        /// Difference (integers wrap).
        Sub = "sub",
        /// Product (integers wrap).
        Mul = "mul",
        /// Quotient (integer division truncates; by zero gives 0).
        Div = "div",
        /// Remainder (integers; by zero gives 0).
        Rem = "rem",
        /// Minimum (f32: NaN if either is NaN).
        Min = "min",
        /// Maximum (f32: NaN if either is NaN).
        Max = "max",
        /// Bitwise and (integers), logical and (bool).
        And = "and",
        /// Bitwise or (integers), logical or (bool).
        Or = "or",
        /// Bitwise xor.
        Xor = "xor",
        /// Shift left by `b & 31`.
        Shl = "shl",
        /// Shift right by `b & 31` (arithmetic for i32, logical for u32).
        Shr = "shr",
    }
);

ops!(
    /// Comparisons (lane-wise, giving bool; any comparison with NaN is false except `ne`).
    CmpOp {
        /// `<`.
        Lt = "lt",
        /// `<=`.
        Le = "le",
        /// `==`.
        Eq = "eq",
        /// `!=`.
        Ne = "ne",
        /// `>`.
        Gt = "gt",
        /// `>=`.
        Ge = "ge",
    }
);

ops!(
    /// Subgroup reductions and atomics' combining operators.
    ReduceOp {
        /// Sum.
        Add = "add",
        /// Maximum.
        Max = "max",
        /// Minimum.
        Min = "min",
        /// Bitwise or.
        Or = "or",
    }
);

ops!(
    /// Built-in thread coordinates.
    Special {
        /// Thread index in the work-group, x.
        LocalX = "local_id.x",
        /// Thread index in the work-group, y.
        LocalY = "local_id.y",
        /// Work-group index in the grid, x.
        GroupX = "group_id.x",
        /// Work-group index in the grid, y.
        GroupY = "group_id.y",
        /// Work-group index in the grid, z.
        GroupZ = "group_id.z",
        /// Lane index within the subgroup.
        Lane = "lane",
    }
);
