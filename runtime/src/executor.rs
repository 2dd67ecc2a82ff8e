//! The object-safe contract the driver runs on every backend.

use crate::error::Result;
use poot_bundle::{EntryKey, OpenedBundle, SlotKind, Target};

/// An entry added to an executor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EntryId(pub usize);

/// What one step read back.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepOutput {
    /// The sampled token of each row.
    pub tokens: Vec<u32>,
    /// True when any logit was NaN or infinite.
    pub nonfinite: bool,
    /// Every read-back output's bytes, by name (logits only in verification bundles).
    pub outputs: Vec<(String, Vec<u8>)>,
}

/// Counters of an executor.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Steps run.
    pub steps: u64,
    /// Dispatches replayed.
    pub dispatches: u64,
    /// Entries currently added.
    pub entries: usize,
    /// Bytes uploaded as weights.
    pub weight_bytes: u64,
}

/// Runs a bundle's entries on one device: load once, add entries (captured once), step many.
pub trait Executor {
    /// The bundle targets this executor runs, best first.
    fn target_set(&self) -> Vec<Target>;
    /// Uploads the bundle's weights (for the first target it accepts) and allocates arenas.
    fn load_weights(&mut self, bundle: &OpenedBundle) -> Result<()>;
    /// Adds (and captures) the entry `key`.
    fn add_entry(&mut self, key: &EntryKey) -> Result<EntryId>;
    /// Writes the slots, replays the entry, reads back its outputs.
    fn step(&mut self, id: EntryId, slots: &[(SlotKind, Vec<i32>)]) -> Result<StepOutput>;
    /// Zeroes the carried state and clears a failed step's mark.
    fn reset_state(&mut self) -> Result<()>;
    /// Drops an entry.
    fn remove_entry(&mut self, id: EntryId) -> Result<()>;
    /// Counters.
    fn stats(&self) -> Stats;
    /// Frees everything on the device.
    fn unload(&mut self) -> Result<()>;
    /// The device, in words.
    fn device_name(&self) -> String;
}
