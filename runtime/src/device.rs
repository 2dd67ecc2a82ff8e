//! The thin per-backend `Device` trait that `Engine` drives.
//!
//! Invariants: a device owns five arenas (weights, state, slots, scratch, readback) sized once
//! by `alloc`; dispatch bindings are byte ranges of them that the bundle validated; `record`
//! captures a dispatch list once and `replay` runs it again without re-issuing it; `eager`
//! launches the same list without capture (capture-versus-eager checks); every wait is bounded.

use crate::error::DeviceError;
use poot_bundle::{Arena, ArenaSizes, Dispatch, KernelCode, Target};

/// The arenas in the order devices keep them (`arena_index`).
pub const ARENAS: [Arena; 5] = [
    Arena::Weights,
    Arena::State,
    Arena::Slots,
    Arena::Scratch,
    Arena::Readback,
];

/// Where `a` is in [`ARENAS`].
pub fn arena_index(a: Arena) -> usize {
    match a {
        Arena::Weights => 0,
        Arena::State => 1,
        Arena::Slots => 2,
        Arena::Scratch => 3,
        Arena::Readback => 4,
    }
}

/// The sizes of `s` in [`ARENAS`] order.
pub fn arena_sizes(s: &ArenaSizes) -> [u64; 5] {
    [s.weights, s.state, s.slots, s.scratch, s.readback]
}

/// One backend.
pub trait Device {
    /// A loaded kernel.
    type Kernel;
    /// A captured dispatch list.
    type Recording;
    /// A human name (`reference (CPU)`, `NVIDIA H200`).
    fn describe(&self) -> String;
    /// The bundle targets this device runs, best first.
    fn accepts(&self) -> Vec<Target>;
    /// Allocates the arenas (zeroed).
    fn alloc(&mut self, sizes: &ArenaSizes) -> Result<(), DeviceError>;
    /// Copies `data` into `arena` at byte `offset`.
    fn write(&mut self, arena: Arena, offset: u64, data: &[u8]) -> Result<(), DeviceError>;
    /// Copies bytes of `arena` at `offset` into `out`.
    fn read(&mut self, arena: Arena, offset: u64, out: &mut [u8]) -> Result<(), DeviceError>;
    /// Zeroes a whole arena.
    fn zero(&mut self, arena: Arena) -> Result<(), DeviceError>;
    /// Loads one kernel of the device's target.
    fn load_kernel(&mut self, code: &KernelCode) -> Result<Self::Kernel, DeviceError>;
    /// Captures `dispatches` over `kernels`.
    fn record(
        &mut self,
        kernels: &[Self::Kernel],
        dispatches: &[Dispatch],
    ) -> Result<Self::Recording, DeviceError>;
    /// Runs a capture.
    fn replay(
        &mut self,
        kernels: &[Self::Kernel],
        rec: &Self::Recording,
    ) -> Result<(), DeviceError>;
    /// Launches `dispatches` one by one without capture.
    fn eager(
        &mut self,
        kernels: &[Self::Kernel],
        dispatches: &[Dispatch],
    ) -> Result<(), DeviceError>;
    /// Waits for all submitted work (bounded).
    fn synchronize(&mut self) -> Result<(), DeviceError>;
    /// Frees the arenas.
    fn free(&mut self);
    /// Device time of each dispatch, in seconds, where the device can time one (profiling:
    /// `poot bench --profile`); each device documents how it measures.
    fn profile(
        &mut self,
        kernels: &[Self::Kernel],
        dispatches: &[Dispatch],
    ) -> Result<Option<Vec<f64>>, DeviceError> {
        let _ = (kernels, dispatches);
        Ok(None)
    }
    /// Measured device-to-device copy bandwidth in bytes per second (read plus written), where
    /// the device can time it.
    fn copy_bandwidth(&mut self) -> Result<Option<f64>, DeviceError> {
        Ok(None)
    }
}
