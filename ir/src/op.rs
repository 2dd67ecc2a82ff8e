//! Operations, their attributes and their typing rules.
//!
//! Invariants: `Op::infer` is the single typing rule used by the builder and the verifier;
//! ops that take their result type from the declaration (inputs, `iota`, `cast`, `reshape`)
//! check it instead of computing it. Element-wise ops broadcast numpy-style.

use crate::{DType, Shape, Type};
use std::fmt;
use std::hash::{Hash, Hasher};

/// What a weight is for. The family's weight map binds each role to a checkpoint tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WeightRole {
    /// Which tensor of the block (or of the model).
    pub kind: RoleKind,
    /// Block index, for per-block tensors.
    pub layer: Option<u32>,
}

macro_rules! names {
    ($(#[$m:meta])* $ty:ident { $($(#[$vm:meta])* $v:ident = $s:literal,)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $ty { $($(#[$vm])* $v,)* }
        impl $ty {
            /// Every variant.
            pub const ALL: &'static [$ty] = &[$($ty::$v,)*];
            /// The text-form name.
            pub fn name(self) -> &'static str { match self { $($ty::$v => $s,)* } }
            /// Parses a text-form name.
            pub fn from_name(s: &str) -> Option<$ty> { Self::ALL.iter().copied().find(|v| v.name() == s) }
        }
    };
}

names!(
    /// The kind of a weight role; names follow GGUF tensor names.
    RoleKind {
        /// Token embedding table `[vocab, embd]`.
        TokenEmbd = "token_embd",
        /// Final norm weight.
        OutputNorm = "output_norm",
        /// Output head `[vocab, embd]`.
        Output = "output",
        /// Attention norm weight.
        AttnNorm = "attn_norm",
        /// Query projection.
        AttnQ = "attn_q",
        /// Key projection.
        AttnK = "attn_k",
        /// Value projection.
        AttnV = "attn_v",
        /// Query bias.
        AttnQBias = "attn_q_bias",
        /// Key bias.
        AttnKBias = "attn_k_bias",
        /// Value bias.
        AttnVBias = "attn_v_bias",
        /// Attention output projection.
        AttnOutput = "attn_output",
        /// Feed-forward norm weight.
        FfnNorm = "ffn_norm",
        /// Feed-forward gate projection.
        FfnGate = "ffn_gate",
        /// Feed-forward up projection.
        FfnUp = "ffn_up",
        /// Feed-forward down projection.
        FfnDown = "ffn_down",
    }
);

names!(
    /// Per-step inputs the host writes before each replay.
    SlotKind {
        /// Token ids `i32[rows, tokens]`.
        Token = "token",
        /// First position of each row's tokens `i32[rows]`.
        Pos = "pos",
        /// Index, within the step's tokens, of each row's token whose logits are read `i32[rows]`.
        LogitIndex = "logit_index",
        /// Paged KV: logical page to physical page per row.
        SlotMap = "slot_map",
        /// Paged KV: where this step's K/V rows go.
        WriteMap = "write_map",
    }
);

names!(
    /// Element-wise unary functions.
    UnaryOp {
        /// `-x`.
        Neg = "neg",
        /// `e^x`.
        Exp = "exp",
        /// `sqrt(x)`.
        Sqrt = "sqrt",
        /// `1 / sqrt(x)`.
        Rsqrt = "rsqrt",
        /// `1 / x`.
        Recip = "recip",
        /// `x / (1 + e^-x)`.
        Silu = "silu",
    }
);

names!(
    /// Element-wise binary functions (broadcasting).
    BinaryOp {
        /// `a + b`.
        Add = "add",
        /// `a - b`.
        Sub = "sub",
        /// `a * b`.
        Mul = "mul",
        /// `a / b`.
        Div = "div",
        /// IEEE maximum (NaN-propagating).
        Max = "max",
        /// IEEE minimum (NaN-propagating).
        Min = "min",
    }
);

names!(
    /// Element-wise comparisons (broadcasting), giving `bool`.
    CmpOp {
        /// `a < b`.
        Lt = "lt",
        /// `a <= b`.
        Le = "le",
        /// `a == b`.
        Eq = "eq",
    }
);

names!(
    /// Reductions over one axis, keeping it as size 1.
    ReduceOp {
        /// Sum.
        Sum = "reduce_sum",
        /// Maximum.
        Max = "reduce_max",
    }
);

names!(
    /// Which pairs of a head vector rope rotates.
    RopeLayout {
        /// Adjacent pairs `(x[2i], x[2i+1])` (GGUF llama after the converter's permutation).
        Pairs = "pairs",
        /// Halves `(x[i], x[i + dims/2])` (NeoX, qwen2).
        Halves = "halves",
    }
);

impl BinaryOp {
    /// True when `a op b == b op a` bit for bit.
    pub fn is_commutative(self) -> bool {
        matches!(
            self,
            BinaryOp::Add | BinaryOp::Mul | BinaryOp::Max | BinaryOp::Min
        )
    }
}

/// A constant scalar; a `const` node splats it over its declared shape.
#[derive(Clone, Copy, Debug)]
pub enum Scalar {
    /// An f32 (compared and hashed by its bits).
    F32(f32),
    /// An i32.
    I32(i32),
    /// A u32.
    U32(u32),
    /// A byte.
    U8(u8),
    /// A boolean.
    Bool(bool),
}

impl Scalar {
    /// The scalar's dtype.
    pub fn dtype(self) -> DType {
        match self {
            Scalar::F32(_) => DType::F32,
            Scalar::I32(_) => DType::I32,
            Scalar::U32(_) => DType::U32,
            Scalar::U8(_) => DType::U8,
            Scalar::Bool(_) => DType::Bool,
        }
    }
    fn key(self) -> (u8, u32) {
        match self {
            Scalar::F32(x) => (0, x.to_bits()),
            Scalar::I32(x) => (1, x as u32),
            Scalar::U32(x) => (2, x),
            Scalar::U8(x) => (3, x as u32),
            Scalar::Bool(x) => (4, x as u32),
        }
    }
    /// Parses the text of a scalar of `dtype`.
    pub fn parse(dtype: DType, s: &str) -> Option<Scalar> {
        Some(match dtype {
            DType::F32 => Scalar::F32(s.parse().ok()?),
            DType::I32 => Scalar::I32(s.parse().ok()?),
            DType::U32 => Scalar::U32(s.parse().ok()?),
            DType::U8 => Scalar::U8(s.parse().ok()?),
            DType::Bool => Scalar::Bool(s.parse().ok()?),
            _ => return None,
        })
    }
}

impl PartialEq for Scalar {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Scalar {}
impl Hash for Scalar {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state)
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::F32(x) => write!(f, "{x:?}"),
            Scalar::I32(x) => write!(f, "{x}"),
            Scalar::U32(x) => write!(f, "{x}"),
            Scalar::U8(x) => write!(f, "{x}"),
            Scalar::Bool(x) => write!(f, "{x}"),
        }
    }
}

/// An f32 attribute compared and hashed by its bits, so ops stay `Eq + Hash` for CSE.
#[derive(Clone, Copy, Debug)]
pub struct F32Bits(pub f32);
impl PartialEq for F32Bits {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}
impl Eq for F32Bits {}
impl Hash for F32Bits {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state)
    }
}

/// An operation. Operands are the node's `args`; see each variant for their order and types.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// A model weight bound by role (no args).
    Weight(WeightRole),
    /// Carried state, read at the start of the step (no args).
    State(String),
    /// A per-step slot buffer (no args).
    Slot(SlotKind),
    /// A constant splat over the declared shape (no args).
    Const(Scalar),
    /// `i32` indices along `axis`, broadcast over the other dimensions (no args).
    Iota {
        /// The counting axis.
        axis: usize,
    },
    /// Element-wise unary `(x)`.
    Unary(UnaryOp),
    /// Element-wise binary `(a, b)`.
    Binary(BinaryOp),
    /// Comparison `(a, b) -> bool`.
    Compare(CmpOp),
    /// `(cond, a, b)`: `a` where `cond`, else `b`.
    Select,
    /// `(x)` converted to the declared dtype.
    Cast,
    /// `(x)` with the declared shape (same element count, row-major).
    Reshape,
    /// `(x)` reduced over `axis`, which stays as size 1.
    Reduce {
        /// Which reduction.
        op: ReduceOp,
        /// The reduced axis.
        axis: usize,
    },
    /// `(x)` softmax over `axis`.
    Softmax {
        /// The normalised axis.
        axis: usize,
    },
    /// `(x [.., n], w [n])`: `x * rsqrt(mean(x^2) + eps) * w` over the last axis.
    RmsNorm {
        /// Added to the mean square.
        eps: F32Bits,
    },
    /// `(x f32[.., k], w [n, k])` -> `f32[.., n]`: `x @ w^T`; `w` may be packed.
    MatMul,
    /// `(table [v, d], ids i32[..])` -> `f32[.., d]`: rows of the table; it may be packed.
    Gather,
    /// `(x f32[r, t, h, d], pos i32[r, t])`: rotary embedding of the first `dims` of each head.
    Rope {
        /// Which pairs rotate.
        layout: RopeLayout,
        /// Frequency base.
        base: F32Bits,
        /// Rotated dimensions per head (even, at most `d`).
        dims: usize,
    },
    /// `(q f32[r, t, h, d], k f32[r, c, g, d])` -> `f32[r, h, t, c]`; head `i` reads kv head `i / (h / g)`.
    AttnScores,
    /// `(p f32[r, h, t, c], v f32[r, c, g, d])` -> `f32[r, t, h, d]`.
    AttnMix,
    /// `(x, update, start i32[r])`: `x` with `update` written along `axis` at `start[row]` per row (axis 0).
    DynamicUpdateSlice {
        /// The axis `start` indexes (at least 1).
        axis: usize,
    },
    /// `(x [n, ..], update [m, ..], index i32[m])`: `x` with row `index[i]` replaced by `update[i]`.
    ScatterUpdate,
    /// `(x f32)` -> `i32` index of the maximum over `axis` (kept as size 1; first index on ties).
    ArgMax {
        /// The searched axis.
        axis: usize,
    },
    /// `(x f32)` -> `bool[]`: true when any element is NaN or infinite.
    AnyNonFinite,
}

impl Op {
    /// The op's name in the text form.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Weight(_) => "weight",
            Op::State(_) => "state",
            Op::Slot(_) => "slot",
            Op::Const(_) => "const",
            Op::Iota { .. } => "iota",
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Compare(c) => c.name(),
            Op::Select => "select",
            Op::Cast => "cast",
            Op::Reshape => "reshape",
            Op::Reduce { op, .. } => op.name(),
            Op::Softmax { .. } => "softmax",
            Op::RmsNorm { .. } => "rms_norm",
            Op::MatMul => "matmul",
            Op::Gather => "gather",
            Op::Rope { .. } => "rope",
            Op::AttnScores => "attn_scores",
            Op::AttnMix => "attn_mix",
            Op::DynamicUpdateSlice { .. } => "dynamic_update_slice",
            Op::ScatterUpdate => "scatter_update",
            Op::ArgMax { .. } => "argmax",
            Op::AnyNonFinite => "any_nonfinite",
        }
    }

    /// Number of operands the op takes.
    pub fn arity(&self) -> usize {
        match self {
            Op::Weight(_) | Op::State(_) | Op::Slot(_) | Op::Const(_) | Op::Iota { .. } => 0,
            Op::Unary(_)
            | Op::Cast
            | Op::Reshape
            | Op::Reduce { .. }
            | Op::Softmax { .. }
            | Op::ArgMax { .. }
            | Op::AnyNonFinite => 1,
            Op::Binary(_)
            | Op::Compare(_)
            | Op::RmsNorm { .. }
            | Op::MatMul
            | Op::Gather
            | Op::Rope { .. }
            | Op::AttnScores
            | Op::AttnMix => 2,
            Op::Select | Op::DynamicUpdateSlice { .. } | Op::ScatterUpdate => 3,
        }
    }

    /// True for ops without operands that read something from outside the graph.
    pub fn is_input(&self) -> bool {
        matches!(self, Op::Weight(_) | Op::State(_) | Op::Slot(_))
    }

    /// The result type of the op on operands of types `args`, checking `declared` where the
    /// op takes its type from the declaration. The error says what is wrong, without context.
    pub fn infer(&self, args: &[&Type], declared: &Type) -> Result<Type, String> {
        if args.len() != self.arity() {
            return Err(format!(
                "{} takes {} operands, got {}",
                self.name(),
                self.arity(),
                args.len()
            ));
        }
        let f32_only = |i: usize| -> Result<(), String> {
            if args[i].dtype == DType::F32 {
                Ok(())
            } else {
                Err(format!("operand {i} must be f32, is {}", args[i]))
            }
        };
        let i32_only = |i: usize| -> Result<(), String> {
            if args[i].dtype == DType::I32 {
                Ok(())
            } else {
                Err(format!("operand {i} must be i32, is {}", args[i]))
            }
        };
        let rank = |i: usize, r: usize| -> Result<&[usize], String> {
            if args[i].shape.rank() == r {
                Ok(args[i].shape.dims())
            } else {
                Err(format!("operand {i} must have rank {r}, is {}", args[i]))
            }
        };
        let axis_ok = |axis: usize| -> Result<(), String> {
            if axis < args[0].shape.rank() {
                Ok(())
            } else {
                Err(format!("axis {axis} out of range for {}", args[0]))
            }
        };
        let bcast = |a: &Type, b: &Type| -> Result<Shape, String> {
            a.shape
                .broadcast(&b.shape)
                .ok_or_else(|| format!("shapes {} and {} do not broadcast", a.shape, b.shape))
        };
        match self {
            Op::Weight(_) | Op::State(_) | Op::Slot(_) => Ok(declared.clone()),
            Op::Const(s) => {
                if s.dtype() != declared.dtype {
                    return Err(format!("constant {s} is not a {}", declared.dtype));
                }
                Ok(declared.clone())
            }
            Op::Iota { axis } => {
                if declared.dtype != DType::I32 || *axis >= declared.shape.rank() {
                    return Err(format!("iota axis={axis} cannot produce {declared}"));
                }
                Ok(declared.clone())
            }
            Op::Unary(_) | Op::Softmax { .. } => {
                f32_only(0)?;
                if let Op::Softmax { axis } = self {
                    axis_ok(*axis)?;
                }
                Ok(args[0].clone())
            }
            Op::Binary(_) | Op::Compare(_) => {
                if args[0].dtype != args[1].dtype || !args[0].dtype.is_computable() {
                    return Err(format!(
                        "operands {} and {} differ in dtype",
                        args[0], args[1]
                    ));
                }
                let dtype = if matches!(self, Op::Compare(_)) {
                    DType::Bool
                } else {
                    args[0].dtype
                };
                Ok(Type {
                    dtype,
                    shape: bcast(args[0], args[1])?,
                })
            }
            Op::Select => {
                if args[0].dtype != DType::Bool || args[1].dtype != args[2].dtype {
                    return Err("select takes (bool, a, b) with a and b of one dtype".into());
                }
                let s = bcast(args[0], args[1])?;
                let s = bcast(
                    &Type {
                        dtype: args[1].dtype,
                        shape: s,
                    },
                    args[2],
                )?;
                Ok(Type {
                    dtype: args[1].dtype,
                    shape: s,
                })
            }
            Op::Cast => {
                if args[0].shape != declared.shape || !declared.dtype.is_computable() {
                    return Err(format!("cannot cast {} to {declared}", args[0]));
                }
                Ok(declared.clone())
            }
            Op::Reshape => {
                if args[0].shape.numel() != declared.shape.numel()
                    || args[0].dtype != declared.dtype
                {
                    return Err(format!("cannot reshape {} to {declared}", args[0]));
                }
                Ok(declared.clone())
            }
            Op::Reduce { axis, .. } | Op::ArgMax { axis } => {
                f32_only(0)?;
                axis_ok(*axis)?;
                let mut dims = args[0].shape.0.clone();
                dims[*axis] = 1;
                let dtype = if matches!(self, Op::ArgMax { .. }) {
                    DType::I32
                } else {
                    DType::F32
                };
                Ok(Type::new(dtype, dims))
            }
            Op::RmsNorm { .. } => {
                f32_only(0)?;
                f32_only(1)?;
                let w = rank(1, 1)?;
                if w[0] != args[0].shape.last() {
                    return Err(format!(
                        "norm weight {} does not match {}",
                        args[1], args[0]
                    ));
                }
                Ok(args[0].clone())
            }
            Op::MatMul => {
                f32_only(0)?;
                let w = rank(1, 2)?;
                if !args[1].dtype.is_float() || w[1] != args[0].shape.last() {
                    return Err(format!("cannot multiply {} by {}^T", args[0], args[1]));
                }
                let mut dims = args[0].shape.0.clone();
                *dims.last_mut().ok_or("matmul operand 0 is a scalar")? = w[0];
                Ok(Type::new(DType::F32, dims))
            }
            Op::Gather => {
                let t = rank(0, 2)?;
                i32_only(1)?;
                if !args[0].dtype.is_float() {
                    return Err(format!("cannot gather rows of {}", args[0]));
                }
                let mut dims = args[1].shape.0.clone();
                dims.push(t[1]);
                Ok(Type::new(DType::F32, dims))
            }
            Op::Rope { dims, .. } => {
                f32_only(0)?;
                i32_only(1)?;
                let x = rank(0, 4)?;
                let p = rank(1, 2)?;
                if p != &x[..2] || *dims % 2 != 0 || *dims > x[3] || *dims == 0 {
                    return Err(format!(
                        "rope dims={dims} cannot rotate {} at positions {}",
                        args[0], args[1]
                    ));
                }
                Ok(args[0].clone())
            }
            Op::AttnScores | Op::AttnMix => {
                f32_only(0)?;
                f32_only(1)?;
                let a = rank(0, 4)?;
                let k = rank(1, 4)?;
                let (r, h, t, c, d) = match self {
                    Op::AttnScores => (a[0], a[2], a[1], k[1], a[3]),
                    _ => (a[0], a[1], a[2], a[3], k[3]),
                };
                let ok = k[0] == r
                    && k[1] == c
                    && k[2] > 0
                    && h % k[2] == 0
                    && (matches!(self, Op::AttnMix) || k[3] == d);
                if !ok {
                    return Err(format!("{} and {} do not match", args[0], args[1]));
                }
                Ok(match self {
                    Op::AttnScores => Type::new(DType::F32, [r, h, t, c]),
                    _ => Type::new(DType::F32, [r, t, h, d]),
                })
            }
            Op::DynamicUpdateSlice { axis } => {
                i32_only(2)?;
                let x = args[0].shape.dims();
                let u = args[1].shape.dims();
                let s = rank(2, 1)?;
                let ok = args[0].dtype == args[1].dtype
                    && x.len() == u.len()
                    && *axis >= 1
                    && *axis < x.len()
                    && s[0] == x[0]
                    && (0..x.len()).all(|i| {
                        if i == *axis {
                            u[i] <= x[i]
                        } else {
                            u[i] == x[i]
                        }
                    });
                if !ok {
                    return Err(format!(
                        "cannot write {} into {} along axis {axis} at {}",
                        args[1], args[0], args[2]
                    ));
                }
                Ok(args[0].clone())
            }
            Op::ScatterUpdate => {
                i32_only(2)?;
                let x = args[0].shape.dims();
                let u = args[1].shape.dims();
                let i = rank(2, 1)?;
                let ok = args[0].dtype == args[1].dtype
                    && x.len() == u.len()
                    && !x.is_empty()
                    && u[0] == i[0]
                    && x[1..] == u[1..];
                if !ok {
                    return Err(format!(
                        "cannot scatter {} into {} at {}",
                        args[1], args[0], args[2]
                    ));
                }
                Ok(args[0].clone())
            }
            Op::AnyNonFinite => {
                f32_only(0)?;
                Ok(Type::scalar(DType::Bool))
            }
        }
    }
}
