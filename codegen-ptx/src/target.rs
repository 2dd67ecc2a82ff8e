//! What a PTX target offers, as data: the renderer consults these fields instead of
//! branching on the SM version, so a new target is a new constructor.
//!
//! Invariant: [`PtxTarget::check`] accepts a verified kernel only if every whole-kernel
//! property (name, subgroup width, threads, shared bytes, parameter bytes) fits the target;
//! per-instruction capabilities are checked by the writer as it meets them.

use crate::error::{PtxError, Result};
use poot_kir::Kernel;

/// A PTX target and its capabilities.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PtxTarget {
    /// Compute capability as `major * 10 + minor` (`.target sm_90`).
    pub sm: u32,
    /// PTX ISA version written in `.version`.
    pub ptx_version: (u32, u32),
    /// Threads per warp: the only subgroup width a kernel may assume.
    pub warp: u32,
    /// Threads per work-group (CTA).
    pub max_threads: u32,
    /// Bytes of statically declared `.shared` memory per CTA (what this renderer emits).
    pub max_shared: u32,
    /// Bytes of shared memory per CTA with the dynamic opt-in; not used by this renderer,
    /// recorded for the planner.
    pub max_shared_optin: u32,
    /// Bytes of kernel parameters (8 per kir buffer parameter).
    pub max_param_bytes: u32,
    /// `min.NaN.f32` / `max.NaN.f32` exist (PTX 7.0, sm_80+); without them f32 min/max is
    /// refused rather than silently dropping NaNs.
    pub nan_min_max: bool,
    /// Loads from read-only parameters may use the non-coherent path (`ld.global.nc`).
    pub nc_loads: bool,
    /// Grid dependency control (PTX 7.8, sm_90+): every kernel begins with
    /// `griddepcontrol.wait`, so the runtime may launch it as a programmatic dependent of the
    /// previous kernel (it is scheduled as that kernel's blocks exit, without waiting for the
    /// kernel's completion; the wait orders every memory access after that completion). kir's
    /// `launch_dependents` becomes `griddepcontrol.launch_dependents`, which schedules the
    /// next kernel before this one's blocks exit: lowering places it late, once the products
    /// are done (placed at every kernel's start, it made SmolLM2 decode 35% slower on the
    /// H200, the waiting blocks crowding the running kernel). Without it the hint is dropped.
    pub grid_dependency: bool,
    /// Bulk prefetch into L2 (`cp.async.bulk.prefetch.L2`, PTX 8.0, sm_90+): kir's
    /// `prefetch` becomes one; without it the hint is dropped.
    pub bulk_prefetch: bool,
    /// Thread-block clusters (PTX 7.8, sm_90+): a kernel with kir's `clustered` gets
    /// `.reqnctapercluster` and the clustered form, whose cluster barriers become
    /// `barrier.cluster.arrive.release` and `wait.acquire` and whose remote stores become
    /// `mapa` and `st.shared::cluster`. Without it the form without clusters is emitted.
    pub clusters: bool,
    /// Warp matrix multiply-accumulate on tf32 (`mma.sync.aligned.m16n8k8`, PTX 7.0, sm_80+):
    /// a `matrix` renders its matrix form and kir's `mma` becomes one instruction. Without
    /// it the form without is emitted.
    pub mma: bool,
}

impl PtxTarget {
    /// Ampere (A100): PTX 8.0, 48 KiB static shared, 163 KiB with opt-in.
    pub const fn sm80() -> PtxTarget {
        PtxTarget {
            sm: 80,
            ptx_version: (8, 0),
            warp: 32,
            max_threads: 1024,
            max_shared: 48 * 1024,
            max_shared_optin: 163 * 1024,
            max_param_bytes: 4096,
            nan_min_max: true,
            nc_loads: true,
            grid_dependency: false,
            bulk_prefetch: false,
            clusters: false,
            mma: true,
        }
    }

    /// Hopper (H100/H200): PTX 8.0, 48 KiB static shared, 227 KiB with opt-in, grid
    /// dependency control, bulk L2 prefetch, thread-block clusters.
    pub const fn sm90() -> PtxTarget {
        PtxTarget {
            sm: 90,
            max_shared_optin: 227 * 1024,
            grid_dependency: true,
            bulk_prefetch: true,
            clusters: true,
            ..PtxTarget::sm80()
        }
    }

    /// The `.target` name (`sm_90`).
    pub fn name(&self) -> String {
        format!("sm_{}", self.sm)
    }

    /// Checks the whole-kernel limits of a verified kernel.
    pub(crate) fn check(&self, k: &Kernel) -> Result<()> {
        let kernel = || k.name.clone();
        if !is_identifier(&k.name) {
            return Err(PtxError::Name { kernel: kernel() });
        }
        if k.subgroup != 1 && k.subgroup != self.warp {
            return Err(PtxError::Subgroup {
                kernel: kernel(),
                subgroup: k.subgroup,
                warp: self.warp,
                target: self.name(),
            });
        }
        if k.threads() > self.max_threads {
            return Err(PtxError::Threads {
                kernel: kernel(),
                threads: k.threads(),
                max: self.max_threads,
                target: self.name(),
            });
        }
        let bytes: u64 = k.shared.iter().map(|s| 4 * u64::from(s.len)).sum();
        if bytes > u64::from(self.max_shared) {
            return Err(PtxError::Shared {
                kernel: kernel(),
                bytes,
                max: self.max_shared,
                target: self.name(),
            });
        }
        let param_bytes = 8 * k.params.len() as u64;
        if param_bytes > u64::from(self.max_param_bytes) {
            return Err(PtxError::Params {
                kernel: kernel(),
                params: k.params.len(),
                bytes: param_bytes,
                max: self.max_param_bytes,
                target: self.name(),
            });
        }
        Ok(())
    }
}

/// A PTX identifier: `[a-zA-Z][a-zA-Z0-9_$]*` or `[_$%][a-zA-Z0-9_$]+`; we also refuse `%`
/// (register names) and a leading `$` (our labels).
fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$';
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() => chars.all(word),
        Some('_') => s.len() > 1 && chars.all(word),
        _ => false,
    }
}
