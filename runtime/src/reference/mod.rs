//! The reference device's execution core: runs `kir` kernels on the CPU, bit-exactly and
//! deterministically, checking every memory access.
//!
//! [`Prepared::new`] resolves a kernel once (verify, register allocation, type-specialised
//! operators; see `prepare`); [`Prepared::run`] executes one dispatch of it over `arenas`
//! (vectors of 32-bit words) through `bindings`. [`run`] does both for a one-off dispatch.
//!
//! # Execution model
//! - Work-groups run in linear order (x fastest, then y, then z). Where it provably gives the
//!   same arenas, groups run in parallel on rayon's pool (see `memory`): no parameter both
//!   loaded and stored, no parameter atomics, no written binding overlapping another. The same
//!   inputs always give bit-identical arenas, whatever the driver, the thread count or what
//!   ran before (registers are pooled, but stale lanes are never observable: see `exec`).
//!   A grid with a zero dimension runs nothing.
//! - Within a work-group every kir instruction runs for all threads at once: each SSA value is
//!   a vector of `threads` lanes of raw 32-bit patterns (a vector value of 2 or 4 components
//!   takes 2 or 4 such vectors), under an active mask. Thread linear id is
//!   `x + y * wx + z * wx * wy`; `local_id.x = id % wx`, `local_id.y = (id / wx) % wy`;
//!   subgroup `s` is threads `[s * w, (s + 1) * w)` for the kernel's subgroup width `w` (a
//!   power of two), and `lane = id % w`.
//! - `if` runs the then-block under `mask & cond` and the else-block under `mask & !cond`
//!   (a block no thread takes is skipped), then selects each result per thread by `cond`.
//! - `for` sets `var = start` and the carried values to their inits, then repeats while some
//!   thread of its mask has `var < end`: the body runs under those threads, only they take
//!   their yields and advance `var` by `step`; a thread whose `var + step` would overflow
//!   `u32` stops (as `(start..end).step_by(step)` does). Results are the carried values.
//! - `barrier` is a sequence point. Lockstep execution satisfies it trivially: every thread
//!   finishes each instruction before any thread starts the next, so it is a no-op.
//! - `subgroup_reduce` replaces inactive lanes by the operator's identity (`-0.0` for f32
//!   add, so `x + -0.0 == x`) and runs a butterfly: for `m = w/2, ..., 2, 1` every lane takes
//!   `own op lane(i ^ m)` (for `w = 32`: xor 16, 8, 4, 2, 1, as PTX's `shfl.bfly`), so f32
//!   sums round exactly as the CUDA renderer's do; every lane gets its result.
//! - `mma(a, b, c)` gathers each subgroup's fragments (kir's layout) and computes every element
//!   of D as C plus its eight products in `k` order, each sum rounded (the products are exact:
//!   every operand of A and B must be exact in tf32, else the dispatch faults with
//!   [`INEXACT_MMA`], as it does when only part of a subgroup reaches it). The reference runs
//!   the matrix form of every `matrix`.
//! - `shuffle_xor(v, m)` gives lane `l` the value of lane `l ^ m` of its subgroup, or its own
//!   value when `l ^ m >= w` or that lane is inactive (undefined on GPUs; defined here so
//!   results never depend on stale registers).
//!
//! # Arithmetic (all lane-wise, total)
//! - f32: one IEEE round-to-nearest-even per operation (Rust `f32` ops, no flush of
//!   subnormals); `fma` is `f32::mul_add` (one rounding); `exp`, `sqrt`, `sin`, `cos` are
//!   Rust std; `rsqrt(x) = 1 / sqrt(x)` and `recip(x) = 1 / x` (two and one roundings);
//!   `neg` and `abs` flip and clear the sign bit; `min`/`max` are IEEE 754-2019
//!   minimum/maximum: NaN (the canonical `0x7FC00000`) if either operand is NaN, and
//!   `-0 < +0`. Comparisons are IEEE (`ne` is true for NaN, the others false). Any other
//!   NaN result has the sign and payload the CPU gives (Rust leaves them open), and `exp`,
//!   `sin`, `cos` come from the platform's libm, so those may differ in the last bit between
//!   platforms; everything else is the same bits everywhere.
//! - Integers wrap (`add`, `sub`, `mul`, `neg`, `abs(i32::MIN)`); `div`/`rem` by zero give 0,
//!   `i32::MIN / -1` gives `i32::MIN` and `i32::MIN % -1` gives 0; `shr` is arithmetic for
//!   i32 and logical for u32; shift amounts are taken `& 31`; `min`/`max`/comparisons are
//!   signed for i32 and unsigned for u32 (and `false < true` for bool).
//! - `convert` f32 -> i32/u32 truncates toward zero and saturates, NaN -> 0 (Rust `as`);
//!   i32/u32 -> f32 rounds to nearest even; i32 <-> u32 and bool -> integer keep the bits
//!   (bool is 0 or 1); bool -> f32 gives 0.0 or 1.0. `bitcast` keeps the bits.
//! - `f16_to_f32`/`bf16_to_f32` convert the low or high half of a `u32` through the `half`
//!   crate (exact; NaNs come out quiet).
//! - Operators kir's verifier accepts but gives no meaning (`not` of f32, `neg`/`abs` of bool,
//!   `and`/`or` of f32, `add` reductions or atomics of bool, `or` of f32) make the kernel
//!   [`INVALID_KERNEL`].
//!
//! # Memory
//! - Loads and stores index 32-bit elements relative to the binding (or shared array). An
//!   active thread whose index `i` has `i + lanes > len` faults with [`OUT_OF_BOUNDS`], naming
//!   the parameter, index, length, thread and work-group (the first such thread). A faulting
//!   instruction has no effect; what ran before it stays done.
//! - Stores and atomics apply per active thread in lane order (the highest lane wins a
//!   conflicting store); within a thread a vector's components in order. Atomics combine as
//!   the arithmetic above (f32 add rounds each step; min/max as above); one that returns the
//!   old value gives each active lane the element as it was just before that lane's update,
//!   and 0 to inactive lanes. `fence` is a sequence point, satisfied because work-groups of
//!   a kernel with parameter atomics run one after another.
//! - Shared arrays are per work-group and zero at its start.
//! - `trap(code)` in any active thread ends the dispatch with a [`Fault`] carrying `code`.
//!   Kernels should keep their codes below `0xFFFF_0000`: that range is the device's own.
//!
//! # Speed
//! A kernel is resolved once into flat operations over one register file (`program`):
//! constants and thread coordinates are written once, `extract`/`bitcast`/bit-preserving
//! conversions are free aliases, and each operation is one tight loop over contiguous lanes
//! (`lanes`). Register files are pooled per [`Prepared`]. Loads copy runs of lanes that read
//! consecutive vectors as slices and transpose them with AVX2 where the CPU has it; `fma`
//! uses the FMA unit where present (same result, one rounding). Where the parallel driver
//! applies, work-groups spread over rayon's pool. A 4096x1024 f32 matrix-vector product (one
//! subgroup per row, x4 loads) takes about 5 ms on one core of a shared 2-core machine.
//!
//! # Failure
//! Nothing here panics: every index goes through `get` or is proven in range (marked
//! `// ok:`), arithmetic on sizes is checked, and every failure is a [`Fault`].

mod exec;
mod gather;
mod lanes;
mod memory;
mod prepare;
mod program;

use exec::State;
use program::Program;
use std::sync::Mutex;

/// A memory access outside its binding or shared array.
pub const OUT_OF_BOUNDS: u32 = 0xFFFF_0001;
/// [`Prepared::new`] refused the kernel: kir's verifier rejected it, an operator has no
/// defined meaning for its type, its subgroup width is not a power of two, its blocks nest
/// deeper than 256, or it needs more registers or shared memory than the reference allows.
pub const INVALID_KERNEL: u32 = 0xFFFF_0002;
/// The dispatch is malformed: its binding count differs from the kernel's parameter count,
/// a binding names a missing arena or reaches past its arena's end, or the grid has more
/// than `u64::MAX` work-groups.
pub const BAD_DISPATCH: u32 = 0xFFFF_0003;
/// An `mma` the kernel gave an operand of A or B that is not exact in tf32, or reached with
/// only part of a subgroup.
pub const INEXACT_MMA: u32 = 0xFFFF_0004;
/// An invariant of the reference device itself broke (a bug in this module, never in the
/// kernel).
pub const INTERNAL: u32 = 0xFFFF_00FF;

/// Where a kernel parameter lives: words `offset..offset + len` of arena `arena`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Binding {
    /// Index of the arena in the `arenas` of a dispatch.
    pub arena: usize,
    /// First word, in 32-bit words.
    pub offset: usize,
    /// Number of 32-bit words.
    pub len: usize,
}

/// A dispatch that failed: a kernel's `trap`, an out-of-bounds access, or a dispatch or
/// kernel the device refuses. `code` is the trap code or one of this module's constants.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("kernel `{kernel}` faulted with code {code:#010x}: {detail}")]
pub struct Fault {
    /// The kernel's name.
    pub kernel: String,
    /// The trap code, [`OUT_OF_BOUNDS`], [`INVALID_KERNEL`], [`BAD_DISPATCH`] or [`INTERNAL`].
    pub code: u32,
    /// What happened and where.
    pub detail: String,
}

pub(crate) fn internal(prog: &Program, what: &str) -> Fault {
    Fault {
        kernel: prog.name.clone(),
        code: INTERNAL,
        detail: format!("reference device bug: {what}"),
    }
}

/// How many idle register files a [`Prepared`] keeps for later dispatches.
const POOL: usize = 64;

/// A kernel resolved for execution, prepared once (at bundle load) and run per dispatch.
/// It is `Send + Sync`; concurrent runs each take their own register file.
pub struct Prepared {
    prog: Program,
    pool: Mutex<Vec<State>>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("kernel", &self.prog.name)
            .field("threads", &self.prog.threads)
            .field("register_words", &self.prog.regs_len)
            .finish_non_exhaustive()
    }
}

impl Prepared {
    /// Verifies and resolves `kernel`; an [`INVALID_KERNEL`] fault when the reference cannot
    /// give it a meaning (see the module docs).
    pub fn new(kernel: &poot_kir::Kernel) -> Result<Prepared, Fault> {
        Ok(Prepared {
            prog: prepare::prepare(kernel)?,
            pool: Mutex::new(Vec::new()),
        })
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.prog.name
    }

    /// Runs one dispatch of `grid` work-groups; `bindings[i]` backs parameter `i`. Uses the
    /// parallel driver where it gives the sequential result (module docs).
    pub fn run(
        &self,
        grid: [u32; 3],
        bindings: &[Binding],
        arenas: &mut [Vec<u32>],
    ) -> Result<(), Fault> {
        memory::dispatch(self, grid, bindings, arenas, true)
    }

    /// [`Prepared::run`] on the calling thread only, work-groups one after another.
    pub fn run_sequential(
        &self,
        grid: [u32; 3],
        bindings: &[Binding],
        arenas: &mut [Vec<u32>],
    ) -> Result<(), Fault> {
        memory::dispatch(self, grid, bindings, arenas, false)
    }

    pub(crate) fn take_state(&self) -> State {
        let pooled = match self.pool.lock() {
            Ok(mut p) => p.pop(),
            Err(poisoned) => poisoned.into_inner().pop(),
        };
        pooled.unwrap_or_else(|| State::new(&self.prog))
    }

    pub(crate) fn put_state(&self, st: State) {
        let mut pool = match self.pool.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        };
        if pool.len() < POOL {
            pool.push(st);
        }
    }
}

/// Prepares `kernel` and runs one dispatch of it: [`Prepared::new`] then [`Prepared::run`].
pub fn run(
    kernel: &poot_kir::Kernel,
    grid: [u32; 3],
    bindings: &[Binding],
    arenas: &mut [Vec<u32>],
) -> Result<(), Fault> {
    Prepared::new(kernel)?.run(grid, bindings, arenas)
}
