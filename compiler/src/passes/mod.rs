//! The graph passes, run in one explicit, named order.
//!
//! Invariants: every pass is a plain `fn(&mut Graph) -> Result<()>` in its own file and is a
//! semantic no-op: `poot_eval` gives bit-identical outputs and state before and after it (the
//! tier-1 tests check this on both families). The driver verifies the input, and between
//! passes when asked, and times each pass by name.

mod canonicalize;
mod cse;
mod dce;
mod fold;

use crate::Result;
use poot_ir::{Graph, verify};
use std::time::{Duration, Instant};

/// A pass.
pub type PassFn = fn(&mut Graph) -> Result<()>;

/// The pipeline, in order.
pub const PIPELINE: [(&str, PassFn); 4] = [
    ("canonicalize", canonicalize::run),
    ("fold", fold::run),
    ("cse", cse::run),
    ("dce", dce::run),
];

/// Pipeline switches.
#[derive(Clone, Copy, Debug, Default)]
pub struct PassOptions {
    /// Run the verifier after every pass (always before the first).
    pub verify_each: bool,
}

/// What one pass did.
#[derive(Clone, Debug)]
pub struct PassTiming {
    /// The pass's name.
    pub name: &'static str,
    /// Wall time.
    pub time: Duration,
    /// Nodes left after it.
    pub nodes: usize,
}

/// Runs the pipeline on `g`, calling `after(name, g)` after each pass.
pub fn optimize_observed(
    g: &mut Graph,
    opts: PassOptions,
    after: &mut dyn FnMut(&str, &Graph),
) -> Result<Vec<PassTiming>> {
    verify(g)?;
    let mut timings = Vec::with_capacity(PIPELINE.len());
    for (name, pass) in PIPELINE {
        let start = Instant::now();
        pass(g)?;
        let time = start.elapsed();
        if opts.verify_each {
            verify(g)?;
        }
        after(name, g);
        timings.push(PassTiming {
            name,
            time,
            nodes: g.nodes.len(),
        });
    }
    Ok(timings)
}

/// Runs the pipeline on `g`.
pub fn optimize(g: &mut Graph, opts: PassOptions) -> Result<Vec<PassTiming>> {
    optimize_observed(g, opts, &mut |_, _| {})
}
