//! poot-runtime: opens bundles, captures each entry once and replays it per token.
//!
//! Design invariants: the runtime links no compiler and no graph IR; the `Driver` runs on a
//! `dyn Executor` and never branches on a backend; `Engine<D>` implements the executor once
//! for every `Device`; every failure is a typed error and nothing here panics.
//!
//! Modules: `executor` (the contract), `engine` (the generic implementation), `device` (the
//! per-backend trait), `devices` (reference; CUDA behind the `cuda` feature), `reference`
//! (the reference device's execution core), `driver` (generation over an executor).

mod device;
pub mod devices;
pub mod driver;
mod engine;
mod error;
mod executor;
pub mod reference;
pub mod text;

pub use device::Device;
pub use engine::Engine;
pub use error::{DeviceError, Result, RuntimeError};
pub use executor::{EntryId, Executor, Stats, StepOutput};
