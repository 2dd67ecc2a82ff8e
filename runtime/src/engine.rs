//! `Engine<D>`: the `Executor` implemented once over any `Device`.
//!
//! Invariants: weights are uploaded once per `load_weights`; each entry is recorded once in
//! `add_entry` and only replayed afterwards; a step writes only slot bytes and reads only the
//! readback arena; a device error that poisons (loss, timeout) makes every later call fail as
//! poisoned without touching the device; any failure after replay marks the state as needing
//! `reset_state`, and `step` refuses until it is called.

use crate::device::Device;
use crate::error::{DeviceError, Result, RuntimeError};
use crate::executor::{EntryId, Executor, Stats, StepOutput};
use poot_bundle::{Arena, Entry, EntryKey, Manifest, OpenedBundle, SlotKind, Target};

struct Loaded<D: Device> {
    entry: Entry,
    rec: D::Recording,
}

/// The generic executor. Field order is drop order: recordings and kernels go before the
/// device whose context they live in.
pub struct Engine<D: Device> {
    entries: Vec<Option<Loaded<D>>>,
    kernels: Vec<D::Kernel>,
    dev: D,
    manifest: Option<Manifest>,
    poisoned: Option<String>,
    needs_reset: Option<String>,
    stats: Stats,
}

impl<D: Device> Engine<D> {
    /// An engine over `dev`.
    pub fn new(dev: D) -> Engine<D> {
        Engine {
            dev,
            manifest: None,
            kernels: Vec::new(),
            entries: Vec::new(),
            poisoned: None,
            needs_reset: None,
            stats: Stats::default(),
        }
    }

    fn live(&self) -> Result<()> {
        match &self.poisoned {
            Some(why) => Err(RuntimeError::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    /// Converts a device error, poisoning the engine when it must.
    fn fail(&mut self, e: DeviceError) -> RuntimeError {
        if e.poisons() {
            self.poisoned = Some(e.to_string());
        }
        RuntimeError::Device {
            device: self.dev.describe(),
            source: e,
        }
    }

    fn entry(&self, id: EntryId) -> Result<&Loaded<D>> {
        self.entries
            .get(id.0)
            .and_then(|e| e.as_ref())
            .ok_or_else(|| RuntimeError::Usage(format!("entry {} is not added", id.0)))
    }

    fn write_slots(&mut self, entry: &Entry, slots: &[(SlotKind, Vec<i32>)]) -> Result<()> {
        for info in &entry.slots {
            let data = slots.iter().find(|(k, _)| *k == info.kind).ok_or_else(|| {
                RuntimeError::Usage(format!(
                    "slot {:?} of {} is not given",
                    info.kind, entry.key
                ))
            })?;
            let bytes: Vec<u8> = data.1.iter().flat_map(|x| x.to_le_bytes()).collect();
            if bytes.len() as u64 != info.len {
                return Err(RuntimeError::Usage(format!(
                    "slot {:?} of {} takes {} values, got {}",
                    info.kind,
                    entry.key,
                    info.len / 4,
                    data.1.len()
                )));
            }
            self.dev
                .write(Arena::Slots, info.offset, &bytes)
                .map_err(|e| self.fail(e))?;
        }
        Ok(())
    }

    fn read_back(&mut self, entry: &Entry) -> Result<StepOutput> {
        let mut out = StepOutput::default();
        for r in &entry.readback {
            let mut bytes = vec![0u8; r.len as usize];
            self.dev
                .read(Arena::Readback, r.offset, &mut bytes)
                .map_err(|e| self.fail(e))?;
            let words = || {
                bytes
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            };
            match r.name.as_str() {
                "token" => out.tokens = words().collect(),
                "nonfinite" => out.nonfinite = words().any(|w| w != 0),
                _ => {}
            }
            out.outputs.push((r.name.clone(), bytes));
        }
        Ok(out)
    }

    /// Runs a step, by replay or (for capture-versus-eager checks) eagerly.
    pub fn run_step(
        &mut self,
        id: EntryId,
        slots: &[(SlotKind, Vec<i32>)],
        eager: bool,
    ) -> Result<StepOutput> {
        self.step_timed(id, slots, eager).map(|(o, _)| o)
    }

    /// `run_step`, also returning the host seconds spent before waiting for the device
    /// (slot writes and the replay or launches).
    pub fn step_timed(
        &mut self,
        id: EntryId,
        slots: &[(SlotKind, Vec<i32>)],
        eager: bool,
    ) -> Result<(StepOutput, f64)> {
        let start = std::time::Instant::now();
        self.live()?;
        if let Some(why) = &self.needs_reset {
            return Err(RuntimeError::NeedsReset(why.clone()));
        }
        // The entry is moved out for the step (no per-step copy of its dispatch list) and
        // put back whatever the step's outcome.
        let loaded = self
            .entries
            .get_mut(id.0)
            .and_then(Option::take)
            .ok_or_else(|| RuntimeError::Usage(format!("entry {} is not added", id.0)))?;
        let out = self.step_loaded(&loaded, slots, eager, start);
        if let Some(slot) = self.entries.get_mut(id.0) {
            *slot = Some(loaded);
        }
        out
    }

    fn step_loaded(
        &mut self,
        loaded: &Loaded<D>,
        slots: &[(SlotKind, Vec<i32>)],
        eager: bool,
        start: std::time::Instant,
    ) -> Result<(StepOutput, f64)> {
        let entry = &loaded.entry;
        self.write_slots(entry, slots)?;
        let ran = if eager {
            self.dev.eager(&self.kernels, &entry.dispatches)
        } else {
            self.dev.replay(&self.kernels, &loaded.rec)
        };
        let host = start.elapsed().as_secs_f64();
        if let Err(e) = ran.and_then(|()| self.dev.synchronize()) {
            let err = self.fail(e);
            self.needs_reset = Some(err.to_string());
            return Err(err);
        }
        self.stats.steps += 1;
        self.stats.dispatches += entry.dispatches.len() as u64;
        Ok((self.read_back(entry)?, host))
    }

    /// Per-dispatch device seconds of entry `id` (as `Device::profile` measures them), if the
    /// device can time them.
    pub fn profile(
        &mut self,
        id: EntryId,
        slots: &[(SlotKind, Vec<i32>)],
    ) -> Result<Option<Vec<f64>>> {
        self.live()?;
        let entry = self.entry(id)?.entry.clone();
        self.write_slots(&entry, slots)?;
        let Engine { dev, kernels, .. } = self;
        let r = dev.profile(kernels, &entry.dispatches);
        r.map_err(|e| self.fail(e))
    }

    /// The device's measured copy bandwidth (bytes per second), if it can time one.
    pub fn copy_bandwidth(&mut self) -> Result<Option<f64>> {
        self.live()?;
        self.dev.copy_bandwidth().map_err(|e| self.fail(e))
    }

    /// The manifest entry added as `id`.
    pub fn entry_info(&self, id: EntryId) -> Result<&Entry> {
        self.entry(id).map(|l| &l.entry)
    }

    fn state_info(&self, name: &str) -> Result<poot_bundle::StateInfo> {
        let m = self
            .manifest
            .as_ref()
            .ok_or_else(|| RuntimeError::Usage("no weights loaded".into()))?;
        m.entries
            .iter()
            .flat_map(|e| &e.state)
            .find(|s| s.name == name)
            .cloned()
            .ok_or_else(|| RuntimeError::Usage(format!("no state `{name}`")))
    }

    /// The bytes of carried state `name` (verification).
    pub fn read_state(&mut self, name: &str) -> Result<Vec<u8>> {
        self.live()?;
        let info = self.state_info(name)?;
        let mut out = vec![0u8; info.len as usize];
        self.dev
            .read(Arena::State, info.offset, &mut out)
            .map_err(|e| self.fail(e))?;
        Ok(out)
    }

    /// Overwrites carried state `name` (verification: start from a known cache).
    pub fn write_state(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        self.live()?;
        let info = self.state_info(name)?;
        if bytes.len() as u64 != info.len {
            return Err(RuntimeError::Usage(format!(
                "state `{name}` takes {} bytes, got {}",
                info.len,
                bytes.len()
            )));
        }
        self.dev
            .write(Arena::State, info.offset, bytes)
            .map_err(|e| self.fail(e))
    }

    /// The device.
    pub fn device(&mut self) -> &mut D {
        &mut self.dev
    }
}

impl<D: Device> Executor for Engine<D> {
    fn target_set(&self) -> Vec<Target> {
        self.dev.accepts()
    }

    fn load_weights(&mut self, bundle: &OpenedBundle) -> Result<()> {
        self.live()?;
        let target = bundle.target(&self.dev.accepts())?.clone();
        let m = bundle.manifest().clone();
        self.dev.alloc(&m.arenas).map_err(|e| self.fail(e))?;
        self.dev
            .write(Arena::Weights, 0, bundle.weights())
            .map_err(|e| self.fail(e))?;
        let mut kernels = Vec::with_capacity(target.kernels.len());
        for k in &target.kernels {
            kernels.push(self.dev.load_kernel(k).map_err(|e| self.fail(e))?);
        }
        self.kernels = kernels;
        self.entries.clear();
        self.stats = Stats {
            weight_bytes: bundle.weights().len() as u64,
            ..Stats::default()
        };
        self.manifest = Some(m);
        self.needs_reset = None;
        Ok(())
    }

    fn add_entry(&mut self, key: &EntryKey) -> Result<EntryId> {
        self.live()?;
        let m = self
            .manifest
            .as_ref()
            .ok_or_else(|| RuntimeError::Usage("load_weights first".into()))?;
        let entry = m
            .entries
            .iter()
            .find(|e| &e.key == key)
            .cloned()
            .ok_or_else(|| RuntimeError::Bundle(poot_bundle::missing_entry(&m.entries, key)))?;
        let rec = self
            .dev
            .record(&self.kernels, &entry.dispatches)
            .map_err(|e| self.fail(e))?;
        self.entries.push(Some(Loaded { entry, rec }));
        self.stats.entries += 1;
        Ok(EntryId(self.entries.len() - 1))
    }

    fn step(&mut self, id: EntryId, slots: &[(SlotKind, Vec<i32>)]) -> Result<StepOutput> {
        self.run_step(id, slots, false)
    }

    fn reset_state(&mut self) -> Result<()> {
        self.live()?;
        self.dev.zero(Arena::State).map_err(|e| self.fail(e))?;
        self.needs_reset = None;
        Ok(())
    }

    fn remove_entry(&mut self, id: EntryId) -> Result<()> {
        self.entry(id)?;
        if let Some(slot) = self.entries.get_mut(id.0) {
            *slot = None;
            self.stats.entries -= 1;
        }
        Ok(())
    }

    fn stats(&self) -> Stats {
        self.stats.clone()
    }

    fn unload(&mut self) -> Result<()> {
        self.entries.clear();
        self.kernels.clear();
        self.manifest = None;
        self.dev.free();
        Ok(())
    }

    fn device_name(&self) -> String {
        self.dev.describe()
    }
}
