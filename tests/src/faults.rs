//! Failure semantics every device must show, as functions the device test files call.
//!
//! - [`trap_needs_reset`]: on a device that reports a trap through an error word (Vulkan,
//!   wgpu), a position past the cache traps in the K/V write (which the decode attention
//!   kernel performs); the step fails with a typed fault naming that kernel and code 1, the
//!   engine then refuses to step until `reset_state`, and steps normally after it.
//! - [`trap_poisons`]: on a device where a trap is a sticky error (CUDA), the same trap is
//!   a typed device-lost error naming the device's error, and every later call is refused
//!   as poisoned.
//! - [`timeout_poisons`]: with a wait bound far below the work (1 ns), the first wait is a
//!   typed timeout, and every later call is refused as poisoned.

use crate::tier2::tiny_bundle;
use poot_bundle::{EntryKey, OpenedBundle, Sampling, SlotKind, StepKind, Target};
use poot_compiler::families::Family;
use poot_compiler::lower::TRAP_CACHE_OVERFLOW;
use poot_runtime::{DeviceError, EntryId, Executor, RuntimeError};

/// The decode entry of a tiny bundle of two rows.
pub fn decode_key(cap: u32) -> EntryKey {
    EntryKey {
        program: "generate".into(),
        kind: StepKind::Decode,
        rows: 2,
        cap,
        sampling: Sampling::Greedy,
    }
}

/// The slots of a decode step of the two-row tiny bundle, the second row at `pos`.
fn slots(pos: i32) -> Vec<(SlotKind, Vec<i32>)> {
    vec![(SlotKind::Token, vec![1, 2]), (SlotKind::Pos, vec![0, pos])]
}

/// Loads the two-row tiny llama with a 16-position cache into `e` and steps its decode
/// entry at position 16, which traps; returns the bundle, the entry and the step's error.
fn trap(e: &mut dyn Executor, target: Target) -> (OpenedBundle, EntryId, RuntimeError) {
    let (_, bundle) = tiny_bundle(Family::Llama, target, 16, 2);
    e.load_weights(&bundle).expect("load_weights");
    let id = e.add_entry(&decode_key(16)).expect("add_entry");
    let err = e
        .step(id, &slots(16))
        .expect_err("position 16 of a 16-position cache");
    println!("trap: {err}");
    (bundle, id, err)
}

/// A trap is a typed fault, then needs `reset_state`, then the engine recovers.
pub fn trap_needs_reset(e: &mut dyn Executor, target: Target) {
    let (_, id, err) = trap(e, target);
    match &err {
        RuntimeError::Device {
            source: DeviceError::Fault { kernel, code, .. },
            ..
        } => {
            assert!(kernel.starts_with("attention"), "{err}");
            assert_eq!(*code, TRAP_CACHE_OVERFLOW, "{err}");
        }
        other => panic!("expected a kernel fault, got {other}"),
    }
    let again = e.step(id, &slots(3)).expect_err("needs reset").to_string();
    assert!(
        again.contains("call reset_state before stepping again"),
        "{again}"
    );
    e.reset_state().expect("reset_state");
    let ok = e.step(id, &slots(3)).expect("step after reset");
    assert_eq!(ok.tokens.len(), 2);
}

/// A trap is a typed device-lost error naming `error` (the device's name for it), and every
/// later call is refused as poisoned.
pub fn trap_poisons(e: &mut dyn Executor, target: Target, error: &str) {
    let (bundle, id, err) = trap(e, target);
    match &err {
        RuntimeError::Device {
            source: DeviceError::Lost(msg),
            ..
        } => assert!(msg.contains(error), "{err}"),
        other => panic!("expected a lost device, got {other}"),
    }
    let refused: [(&str, RuntimeError); 4] = [
        ("step", e.step(id, &slots(3)).expect_err("poisoned")),
        ("reset_state", e.reset_state().expect_err("poisoned")),
        (
            "add_entry",
            e.add_entry(&decode_key(16)).expect_err("poisoned"),
        ),
        (
            "load_weights",
            e.load_weights(&bundle).expect_err("poisoned"),
        ),
    ];
    for (call, err) in refused {
        assert!(matches!(err, RuntimeError::Poisoned(_)), "{call}: {err}");
    }
}

/// `e` must bound its waits by 1 ns: its first wait (in `load_weights` where weights go
/// through staging copies, else in the first prefill step) is a typed timeout that poisons.
pub fn timeout_poisons(e: &mut dyn Executor, target: Target) {
    let (_, bundle) = tiny_bundle(Family::Qwen2, target, 64, 2);
    let first = e.load_weights(&bundle).and_then(|()| {
        let entry = &bundle.manifest().entries[1];
        let id = e.add_entry(&entry.key)?;
        let slots: Vec<_> = entry
            .slots
            .iter()
            .map(|s| (s.kind, vec![0i32; s.len as usize / 4]))
            .collect();
        e.step(id, &slots)
    });
    let err = first.expect_err("a 1 ns bound cannot hold a prefill step");
    assert!(
        matches!(
            err,
            RuntimeError::Device {
                source: DeviceError::Timeout(_),
                ..
            }
        ),
        "{err}"
    );
    let later = e.reset_state().expect_err("poisoned").to_string();
    assert!(later.contains("poisoned"), "{later}");
}
