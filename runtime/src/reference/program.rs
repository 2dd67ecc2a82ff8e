//! The compact program a [`Prepared`](super::Prepared) kernel runs: kir resolved once into
//! flat register offsets and type-specialised operations.
//!
//! Invariants (established by `prepare`, relied on by `exec`):
//! - Registers are one `Vec<u32>` per work-group executor. A value of `n` components owns `n`
//!   consecutive slots of `threads` lanes each, component-major, so slot `s` is
//!   `regs[s * threads .. (s + 1) * threads]`; every offset stored here is already in elements.
//! - Every operation that writes registers writes a range no operand range overlaps (SSA gives
//!   every definition fresh slots; `extract`, `bitcast` and bit-preserving conversions are
//!   aliases that write nothing). A violation is reported as an internal fault, never a panic.
//! - Booleans and masks are stored as `0` or `1` in a `u32` lane.
//! - Constants and `local_id`/`lane` values are written once per register file (they are never
//!   overwritten); `group_id` values are written at the start of every work-group.

/// A lane-wise operation with one operand, specialised by type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Un {
    NegF,
    NegI,
    NotI,
    NotB,
    Exp,
    Sqrt,
    Rsqrt,
    Recip,
    Sin,
    Cos,
    AbsF,
    AbsI,
    IsFinite,
    IsNan,
    F2I,
    F2U,
    I2F,
    U2F,
    Bf16Lo,
    Bf16Hi,
}

/// A lane-wise operation with two operands of one type, specialised by type (comparisons
/// give booleans; `Gt`/`Ge` are `Lt`/`Le` with swapped operands).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bin {
    AddF,
    SubF,
    MulF,
    DivF,
    MinF,
    MaxF,
    AddI,
    SubI,
    MulI,
    DivI,
    DivU,
    RemI,
    RemU,
    MinI,
    MinU,
    MaxI,
    MaxU,
    And,
    Or,
    Xor,
    Shl,
    ShrI,
    ShrU,
    LtF,
    LeF,
    EqF,
    NeF,
    LtI,
    LeI,
    LtU,
    LeU,
    EqBits,
    NeBits,
}

/// A combining operator of a subgroup reduction or an atomic, specialised by type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Comb {
    AddF,
    MaxF,
    MinF,
    AddI,
    MaxI,
    MinI,
    MaxU,
    MinU,
    /// Bitwise or; also boolean or (and boolean max).
    Or,
    /// Boolean and (boolean min).
    AndB,
}

/// What a load, store or atomic addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Space {
    /// Buffer parameter `i` (its binding).
    Param(usize),
    /// Shared array `i`.
    Shared(usize),
}

/// One operation. Offsets are element offsets into the register file; `n` is a component
/// count times `threads` (the number of register elements a value spans).
#[derive(Clone, Debug)]
pub(crate) enum Op {
    Un {
        f: Un,
        dst: usize,
        a: usize,
        n: usize,
    },
    Bin {
        f: Bin,
        dst: usize,
        a: usize,
        b: usize,
        n: usize,
    },
    Fma {
        dst: usize,
        a: usize,
        b: usize,
        c: usize,
        n: usize,
    },
    /// `dst = cond ? a : b` per component; `cond_vec` when the condition has one component
    /// per value component (else one condition per thread for all components).
    Select {
        dst: usize,
        cond: usize,
        a: usize,
        b: usize,
        comps: usize,
        cond_vec: bool,
    },
    /// f16 in the low or high half of each `u32`, as f32 (through `half`).
    HalfToF32 {
        dst: usize,
        a: usize,
        high: bool,
    },
    Load {
        space: Space,
        dst: usize,
        index: usize,
        comps: usize,
    },
    Reduce {
        f: Comb,
        dst: usize,
        a: usize,
        comps: usize,
    },
    Shuffle {
        dst: usize,
        a: usize,
        mask: u32,
        comps: usize,
    },
    /// A subgroup's 16x8x8 matrix multiply-accumulate (`Expr::Mma`): `dst` holds 4
    /// components; `a` (4), `b` (2) and `c` (4) are scalar registers.
    Mma {
        dst: usize,
        a: Vec<usize>,
        b: Vec<usize>,
        c: Vec<usize>,
    },
    Store {
        space: Space,
        index: usize,
        value: usize,
        comps: usize,
    },
    Atomic {
        f: Comb,
        space: Space,
        index: usize,
        value: usize,
        /// Where the old values go (0 in inactive lanes), when they are used.
        old: Option<usize>,
    },
    /// Checks that each active lane's range lies in the binding (the hint itself does nothing).
    Prefetch {
        space: Space,
        index: usize,
        count: usize,
    },
    Trap(u32),
    If(Box<IfOp>),
    For(Box<ForOp>),
}

/// A resolved `if`.
#[derive(Clone, Debug)]
pub(crate) struct IfOp {
    pub cond: usize,
    /// Scratch slots for the masks of the two branches.
    pub then_mask: usize,
    pub else_mask: usize,
    pub then: Vec<Op>,
    pub els: Vec<Op>,
    /// `(dst, then value, else value, n)`: results selected per thread by `cond`.
    pub merges: Vec<(usize, usize, usize, usize)>,
}

/// A resolved `for`.
#[derive(Clone, Debug)]
pub(crate) struct ForOp {
    pub var: usize,
    pub start: usize,
    pub end: usize,
    pub step: u32,
    /// Scratch slot for the loop's mask (threads still iterating); always `var + threads`,
    /// so one borrow covers both.
    pub mask: usize,
    pub carried: Vec<Carry>,
    /// Whether a yield reads a carried slot, so yields go through `stage` first.
    pub staged: bool,
    pub body: Vec<Op>,
}

/// One loop-carried value.
#[derive(Clone, Debug)]
pub(crate) struct Carry {
    pub param: usize,
    pub init: usize,
    pub yielded: usize,
    pub result: usize,
    /// Scratch the yields pass through when `ForOp::staged`.
    pub stage: usize,
    pub n: usize,
}

/// A value written once per register file.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Fixed {
    Const(u32),
    LocalX,
    LocalY,
    Lane,
    /// The all-active mask.
    Ones,
}

/// A kernel resolved for execution.
#[derive(Clone, Debug)]
pub(crate) struct Program {
    pub name: String,
    /// `(name, whether the kernel may write it)` per buffer parameter.
    pub params: Vec<(String, bool)>,
    pub workgroup: [u32; 3],
    pub threads: usize,
    pub subgroup: usize,
    pub regs_len: usize,
    /// Offset of the all-active mask.
    pub ones: usize,
    pub fixed: Vec<(usize, Fixed)>,
    /// `(offset, axis)` of every `group_id` value.
    pub group_ids: Vec<(usize, usize)>,
    /// `(offset, len)` of every shared array within the shared buffer.
    pub shared: Vec<(usize, usize)>,
    pub shared_len: usize,
    /// Whether some parameter is loaded and stored, or updated atomically: such kernels run
    /// their work-groups one after another (see `memory`).
    pub order_dependent: bool,
    pub body: Vec<Op>,
}
