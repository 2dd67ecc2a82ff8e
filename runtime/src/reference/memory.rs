//! Bindings, the global memory work-groups see, and the drivers that run a dispatch's
//! work-groups one after another or in parallel.
//!
//! Invariants:
//! - Every binding is checked against its arena before any work-group runs; accesses then go
//!   through `get`, never through a held `&mut` to two bindings at once, so bindings that
//!   overlap (even of the same arena) are memory-safe.
//! - The result of a dispatch is the result of running its work-groups one after another in
//!   linear order (x fastest, then y, then z). The parallel driver is used only where it
//!   provably gives that same result: no parameter is both loaded and stored, no parameter is
//!   updated atomically, and no written binding overlaps another binding. Then no work-group
//!   can observe another's writes, each runs against the unchanged arenas while its stores
//!   are logged, and the logs are applied in work-group order (later groups win, as in the
//!   sequential order); the first fault in work-group order is returned after applying the
//!   stores that precede it.

use super::exec::{State, run_groups};
use super::program::Program;
use super::{BAD_DISPATCH, Binding, Fault, Prepared, internal};
use rayon::prelude::*;

/// A binding checked against its arena: words `start..end` of arena `arena`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bound {
    pub arena: usize,
    pub start: usize,
    pub end: usize,
}

/// Where a store's values go.
pub(crate) enum Sink<'a> {
    /// Straight into the binding's words.
    Direct(&'a mut [u32]),
    /// Into a log of a parallel run, applied later; `len` is the binding's length.
    Log {
        log: &'a mut Vec<Write>,
        param: usize,
        len: usize,
    },
}

/// A logged store.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Write {
    pub param: usize,
    pub index: usize,
    pub value: u32,
}

/// The buffer parameters as a work-group sees them.
pub(crate) trait Global {
    /// The words bound to parameter `p`, for loads.
    fn read(&self, p: usize) -> Option<&[u32]>;
    /// Where stores to parameter `p` go.
    fn sink(&mut self, p: usize) -> Option<Sink<'_>>;
}

/// Loads and stores straight to the arenas.
pub(crate) struct Direct<'a> {
    pub arenas: &'a mut [Vec<u32>],
    pub binds: &'a [Bound],
}

impl Global for Direct<'_> {
    fn read(&self, p: usize) -> Option<&[u32]> {
        let b = self.binds.get(p)?;
        self.arenas.get(b.arena)?.get(b.start..b.end)
    }
    fn sink(&mut self, p: usize) -> Option<Sink<'_>> {
        let b = self.binds.get(p)?;
        let words = self.arenas.get_mut(b.arena)?.get_mut(b.start..b.end)?;
        Some(Sink::Direct(words))
    }
}

/// Loads from unchanged arenas, stores into a log.
struct Logged<'a> {
    arenas: &'a [Vec<u32>],
    binds: &'a [Bound],
    log: Vec<Write>,
}

impl Global for Logged<'_> {
    fn read(&self, p: usize) -> Option<&[u32]> {
        let b = self.binds.get(p)?;
        self.arenas.get(b.arena)?.get(b.start..b.end)
    }
    fn sink(&mut self, p: usize) -> Option<Sink<'_>> {
        let b = self.binds.get(p)?;
        Some(Sink::Log {
            log: &mut self.log,
            param: p,
            len: b.end.saturating_sub(b.start),
        })
    }
}

fn bad(prog: &Program, detail: String) -> Fault {
    Fault {
        kernel: prog.name.clone(),
        code: BAD_DISPATCH,
        detail,
    }
}

/// Checks the bindings against the kernel's parameters and the arenas.
pub(crate) fn resolve(
    prog: &Program,
    bindings: &[Binding],
    arenas: &[Vec<u32>],
) -> Result<Vec<Bound>, Fault> {
    if bindings.len() != prog.params.len() {
        return Err(bad(
            prog,
            format!(
                "the kernel has {} buffer parameters but the dispatch binds {}",
                prog.params.len(),
                bindings.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(bindings.len());
    for (i, (b, (name, _))) in bindings.iter().zip(&prog.params).enumerate() {
        let arena = arenas.get(b.arena).ok_or_else(|| {
            bad(
                prog,
                format!(
                    "param {i} `{name}` is bound to arena {} but there are {} arenas",
                    b.arena,
                    arenas.len()
                ),
            )
        })?;
        let end = b.offset.checked_add(b.len).filter(|&e| e <= arena.len());
        let end = end.ok_or_else(|| {
            bad(
                prog,
                format!(
                    "param {i} `{name}`: binding of words {}+{} is outside arena {} of {} words",
                    b.offset,
                    b.len,
                    b.arena,
                    arena.len()
                ),
            )
        })?;
        out.push(Bound {
            arena: b.arena,
            start: b.offset,
            end,
        });
    }
    Ok(out)
}

/// The number of work-groups of a grid.
fn group_count(prog: &Program, grid: [u32; 3]) -> Result<u64, Fault> {
    grid.iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
        .ok_or_else(|| bad(prog, format!("grid {grid:?} has too many work-groups")))
}

/// Whether the parallel driver gives the sequential result (module docs).
fn parallel_safe(prog: &Program, binds: &[Bound]) -> bool {
    if prog.order_dependent {
        return false;
    }
    binds
        .iter()
        .zip(&prog.params)
        .enumerate()
        .all(|(i, (w, (_, writes)))| {
            !writes
                || binds.iter().enumerate().all(|(j, o)| {
                    i == j
                        || o.arena != w.arena
                        || o.start >= o.end
                        || w.start >= w.end
                        || o.end <= w.start
                        || w.end <= o.start
                })
        })
}

/// Runs one dispatch; `parallel` allows the parallel driver where it is safe.
pub(crate) fn dispatch(
    prep: &Prepared,
    grid: [u32; 3],
    bindings: &[Binding],
    arenas: &mut [Vec<u32>],
    parallel: bool,
) -> Result<(), Fault> {
    let prog = &prep.prog;
    let binds = resolve(prog, bindings, arenas)?;
    let groups = group_count(prog, grid)?;
    if groups == 0 {
        return Ok(());
    }
    let workers = rayon::current_num_threads() as u64;
    let work = groups.saturating_mul(prog.threads as u64);
    if parallel && workers > 1 && groups > 1 && work >= 8192 && parallel_safe(prog, &binds) {
        return run_parallel(prep, grid, &binds, arenas, groups, workers);
    }
    let mut st = prep.take_state();
    let mut mem = Direct {
        arenas,
        binds: &binds,
    };
    let r = run_groups(prog, &mut st, &mut mem, grid, 0, groups);
    prep.put_state(st);
    r
}

fn run_parallel(
    prep: &Prepared,
    grid: [u32; 3],
    binds: &[Bound],
    arenas: &mut [Vec<u32>],
    groups: u64,
    workers: u64,
) -> Result<(), Fault> {
    let prog = &prep.prog;
    let chunks = groups.min(workers.saturating_mul(4));
    let shared: &[Vec<u32>] = arenas;
    let logs: Vec<(Vec<Write>, Result<(), Fault>)> = (0..chunks)
        .into_par_iter()
        .map(|c| {
            // ok: c < chunks <= groups, so the products fit in u128 and the bounds in u64.
            let lo = (c as u128 * groups as u128 / chunks as u128) as u64;
            let hi = ((c as u128 + 1) * groups as u128 / chunks as u128) as u64;
            let mut st: State = prep.take_state();
            let mut mem = Logged {
                arenas: shared,
                binds,
                log: Vec::new(),
            };
            let r = run_groups(prog, &mut st, &mut mem, grid, lo, hi);
            prep.put_state(st);
            (mem.log, r)
        })
        .collect();
    for (log, r) in logs {
        for w in log {
            let slot = binds.get(w.param).and_then(|b| {
                let i = b.start.checked_add(w.index)?;
                arenas.get_mut(b.arena)?.get_mut(i)
            });
            *slot.ok_or_else(|| internal(prog, "a logged store is outside its binding"))? = w.value;
        }
        r?;
    }
    Ok(())
}
