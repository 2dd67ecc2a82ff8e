//! Kernels: parameters, shared memory, and a structured SSA body.
//!
//! Invariants (checked by `verify`): every value is defined once, before its uses, in an
//! enclosing block; `if` and `for` are the only control flow and pass values out only through
//! their `results` (a `for`'s carried values enter as block parameters and leave as results);
//! loads and stores index whole elements of their buffer, and a vector access of `n` lanes
//! reads `n` consecutive elements from an index that is a multiple of `n` (renderers use
//! aligned vector instructions; the reference device faults on a misaligned one); `trap`
//! ends the whole dispatch with its code; cluster operations appear only in the clustered
//! form of a `clustered`, and a kernel's `clustered` statements share one cluster shape;
//! matrix multiply-accumulates appear only in the matrix form of a `matrix`.

use crate::types::{BinOp, CmpOp, Const, ReduceOp, Scalar, Special, Ty, UnOp};
use cranelift_entity::{PrimaryMap, entity_impl};
use serde::{Deserialize, Serialize};

/// An SSA value. Prints as `%12`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Val(u32);
entity_impl!(Val, "%");

/// How a kernel uses a buffer parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Access {
    /// Only loaded.
    Read,
    /// Only stored (or atomically updated).
    Write,
    /// Loaded and stored.
    ReadWrite,
}

/// A buffer parameter: one binding of the dispatch, an array of 32-bit elements.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Param {
    /// A name for diagnostics (`x`, `w`, `out`).
    pub name: String,
    /// Element type (`f32`, `i32` or `u32`).
    pub elem: Scalar,
    /// How the kernel uses it.
    pub access: Access,
}

/// A work-group shared array.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SharedArray {
    /// Element type.
    pub elem: Scalar,
    /// Elements.
    pub len: u32,
}

/// Memory a load or store addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Mem {
    /// Buffer parameter `i`.
    Param(u32),
    /// Shared array `i`.
    Shared(u32),
}

/// A pure computation defining one value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Expr {
    /// A constant.
    Const(Const),
    /// A thread coordinate (`u32`).
    Special(Special),
    /// Unary operator.
    Unary(UnOp, Val),
    /// Binary operator.
    Binary(BinOp, Val, Val),
    /// `a * b + c` rounded once (f32).
    Fma(Val, Val, Val),
    /// Comparison.
    Cmp(CmpOp, Val, Val),
    /// `a` where `cond`, else `b`.
    Select(Val, Val, Val),
    /// Numeric conversion (f32 -> integer truncates toward zero and saturates).
    Convert(Val, Scalar),
    /// Reinterpretation of the bits.
    Bitcast(Val, Scalar),
    /// The f16 in the low (`high = false`) or high half of a `u32`, as f32.
    HalfToF32(Val, bool),
    /// The bf16 in the low or high half of a `u32`, as f32.
    Bf16ToF32(Val, bool),
    /// `lanes` consecutive elements at `index` (element units).
    Load(Mem, Val, u8),
    /// One lane of a vector.
    Extract(Val, u8),
    /// The reduction of a value over the subgroup, in every lane.
    SubgroupReduce(ReduceOp, Val),
    /// The value of lane `lane ^ mask`.
    ShuffleXor(Val, u32),
    /// A subgroup matrix multiply-accumulate `D = A B + C` of one 16x8 tile over 8 (PTX's
    /// `mma.m16n8k8` with tf32 inputs): each lane gives its fragment of A (four f32), of B
    /// (two) and of C (four) and gets its fragment of D (a `vec4<f32>`). Lane `l`
    /// (`g = l / 4`, `q = l % 4`) holds A's `(g, q), (g + 8, q), (g, q + 4), (g + 8, q + 4)`,
    /// B's `(q, g), (q + 4, g)` and C's and D's `(g, 2q), (g, 2q + 1), (g + 8, 2q),
    /// (g + 8, 2q + 1)`. Every element of A and B must be exact in tf32 (the low 13 bits of
    /// its f32 pattern zero): each product is then exact in f32, and the order and rounding
    /// of each element's sum of its eight products and C are the device's. The kernel's
    /// subgroup is 32 lanes, all of which reach it together; it appears only in the matrix
    /// form of a `Matrix`.
    Mma {
        /// The lane's elements of A.
        a: [Val; 4],
        /// The lane's elements of B.
        b: [Val; 2],
        /// The lane's elements of C.
        c: [Val; 4],
    },
}

impl Expr {
    /// The values `self` reads, in operand order.
    pub fn operands(&self) -> Vec<Val> {
        match *self {
            Expr::Const(_) | Expr::Special(_) => Vec::new(),
            Expr::Unary(_, a)
            | Expr::Convert(a, _)
            | Expr::Bitcast(a, _)
            | Expr::HalfToF32(a, _)
            | Expr::Bf16ToF32(a, _)
            | Expr::Load(_, a, _)
            | Expr::Extract(a, _)
            | Expr::SubgroupReduce(_, a)
            | Expr::ShuffleXor(a, _) => vec![a],
            Expr::Binary(_, a, b) | Expr::Cmp(_, a, b) => vec![a, b],
            Expr::Fma(a, b, c) | Expr::Select(a, b, c) => vec![a, b, c],
            Expr::Mma { a, b, c } => [&a[..], &b[..], &c[..]].concat(),
        }
    }
}

/// A loop-carried value: a block parameter of the loop body, initialised from `init`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Carried {
    /// The value inside the body.
    pub param: Val,
    /// Its value on entry.
    pub init: Val,
}

/// A statement.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Inst {
    /// Defines a value.
    Let(Val, Expr),
    /// Stores `value` (1, 2 or 4 lanes) at `index`.
    Store {
        /// Destination.
        mem: Mem,
        /// Element index.
        index: Val,
        /// Stored value.
        value: Val,
    },
    /// Atomically combines `value` into the element at `index` (relaxed: it orders nothing
    /// else; see `Fence`).
    Atomic {
        /// Combining operator.
        op: ReduceOp,
        /// Destination.
        mem: Mem,
        /// Element index.
        index: Val,
        /// Operand.
        value: Val,
        /// Defined, when present, as the element's value just before this update (the type
        /// of `value`).
        old: Option<Val>,
    },
    /// Work-group barrier with shared- and global-memory ordering.
    Barrier,
    /// A hint that elements `index .. index + count` of buffer parameter `mem` will be read
    /// soon (renderers may start moving them toward the device's cache, or do nothing); it
    /// has no effect on any result. The range must lie inside the binding, `index` and
    /// `count` multiples of 4 (16-byte units; bindings are 16-byte aligned).
    Prefetch {
        /// A buffer parameter.
        mem: Mem,
        /// First element.
        index: Val,
        /// Elements.
        count: Val,
    },
    /// Device-scope acquire-release fence over buffer memory: the buffer writes a thread made
    /// before its fence are visible to the loads a thread of any work-group makes after its
    /// own fence, once the second thread has observed (through an atomic, directly or after a
    /// barrier) an atomic update the first made after its fence.
    Fence,
    /// Structured conditional; `results` take `then_yield` or `else_yield`.
    If {
        /// Condition (bool).
        cond: Val,
        /// Taken when true.
        then: Vec<Inst>,
        /// Values the true branch yields.
        then_yield: Vec<Val>,
        /// Taken when false.
        els: Vec<Inst>,
        /// Values the false branch yields.
        else_yield: Vec<Val>,
        /// Values defined by the `if`.
        results: Vec<Val>,
    },
    /// `for var in (start..end).step_by(step)` over `u32`; `results` are the carried values
    /// after the last iteration (their `init` if none ran).
    For {
        /// Induction variable.
        var: Val,
        /// First value.
        start: Val,
        /// Exclusive bound.
        end: Val,
        /// Increment (non-zero).
        step: u32,
        /// Loop-carried values.
        carried: Vec<Carried>,
        /// The body.
        body: Vec<Inst>,
        /// New values of the carried values at the end of the body.
        yields: Vec<Val>,
        /// Values defined by the loop.
        results: Vec<Val>,
    },
    /// Ends the dispatch with a fault code (a failed kernel check).
    Trap(u32),
    /// A hint that the work-group's remaining work is short: the device may start the next
    /// dispatch's work-groups (which still wait for this dispatch to complete before they
    /// touch memory). The first thread of a work-group to reach it counts for the group;
    /// renderers may do nothing. It has no effect on any result.
    LaunchDependents,
    /// Waits until the previous dispatch of the entry has completed and its writes are
    /// visible. A kernel without one waits before its first statement; a kernel with one
    /// executes exactly one on every path (at the top level of its body or of a branch of an
    /// `if` so placed, never in a loop), and before it reads no buffer parameter but those
    /// listed in some wait of the kernel (which the previous dispatch must not write: the
    /// lowering checks its bindings) and writes none. Renderers without grid dependency
    /// control do nothing.
    GridWait {
        /// Buffer parameters the kernel may read before its wait.
        early: Vec<u32>,
    },
    /// Two forms of the same computation: `then` where the device runs the kernel's
    /// work-groups in clusters of `dims` (consecutive along each axis, co-scheduled, each
    /// able to store to the others' shared memory), `els` where it does not. A renderer picks
    /// one by its capabilities and emits only that one; the forms bind the same parameters,
    /// so every target shares one dispatch list. Every `Clustered` of a kernel has the same
    /// `dims`, which divide the grid; cluster operations appear only in a `then`.
    Clustered {
        /// Work-groups a cluster, along x, y and z (2 to 8 in all).
        dims: [u32; 3],
        /// The clustered form.
        then: Vec<Inst>,
        /// The form without clusters.
        els: Vec<Inst>,
    },
    /// Two forms of the same computation: `then` where the device has subgroup matrix
    /// multiply-accumulate (`Expr::Mma`), `els` where it does not. As with `Clustered`, the
    /// forms bind the same parameters and a renderer emits one; `Mma` appears only in a
    /// `then`, and a `Matrix` holds no other.
    Matrix {
        /// The form with matrix multiply-accumulate.
        then: Vec<Inst>,
        /// The form without.
        els: Vec<Inst>,
    },
    /// The thread arrives at the cluster's barrier. With `release`, its shared- and
    /// buffer-memory writes before it, remote stores included, are visible to every thread
    /// after that thread's next `ClusterWait` (release at cluster scope); without, the arrival
    /// orders nothing (it only tells the others this work-group has started), and does not
    /// wait for the thread's memory operations in flight. A thread alternates arrivals and
    /// waits, and every thread of a work-group makes the same ones, like `Barrier`.
    ClusterArrive {
        /// Release ordering.
        release: bool,
    },
    /// Waits until every thread of every work-group of the cluster that has not ended has
    /// arrived as many times as this thread (acquire at cluster scope).
    ClusterWait,
    /// Stores `value` (one lane) at `index` of shared array `mem` of the cluster's work-group
    /// `rank` (linear within the cluster, x fastest), which must have started and must not
    /// have ended: a store after a `ClusterWait` whose arrivals every work-group of the
    /// cluster made before the store's destination is read, and before the `ClusterWait`
    /// the reader passes, guarantees both.
    StoreRemote {
        /// A shared array.
        mem: Mem,
        /// The destination work-group's rank in the cluster (`u32`).
        rank: Val,
        /// Element index.
        index: Val,
        /// Stored value.
        value: Val,
    },
}

/// A kernel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Kernel {
    /// Unique name within a bundle target (also the PTX entry name).
    pub name: String,
    /// Buffer parameters, in binding order.
    pub params: Vec<Param>,
    /// Shared arrays.
    pub shared: Vec<SharedArray>,
    /// Work-group size.
    pub workgroup: [u32; 3],
    /// The subgroup width the kernel's subgroup operations assume (1 when it uses none).
    pub subgroup: u32,
    /// The type of every value.
    pub types: PrimaryMap<Val, Ty>,
    /// The body.
    pub body: Vec<Inst>,
}

impl Kernel {
    /// Threads per work-group.
    pub fn threads(&self) -> u32 {
        self.workgroup.iter().product()
    }
    /// Bytes of shared memory.
    pub fn shared_bytes(&self) -> u32 {
        self.shared.iter().map(|s| 4 * s.len).sum()
    }
}
