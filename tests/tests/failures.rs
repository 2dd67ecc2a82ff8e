//! Failure semantics on the reference device: a kernel check that fails (a position past the
//! cache traps in the K/V write) is a typed fault naming the kernel and its code; the engine
//! then refuses to step until `reset_state`, and works again after it. Unknown entries and
//! wrong slot data are typed errors that say what is wrong.

use poot_bundle::{SlotKind, Target};
use poot_compiler::families::Family;
use poot_runtime::devices::reference::ReferenceDevice;
use poot_runtime::{Engine, Executor};
use poot_tests::faults::{decode_key, trap_needs_reset};
use poot_tests::tier2::tiny_bundle;

/// The reference device with the tiny `family` bundle (cap 16, two rows) loaded.
fn loaded(family: Family) -> Engine<ReferenceDevice> {
    let (_, bundle) = tiny_bundle(family, Target::Reference, 16, 2);
    let mut e = Engine::new(ReferenceDevice::new());
    e.load_weights(&bundle).unwrap();
    e
}

#[test]
fn trap_needs_reset_then_recovers() {
    trap_needs_reset(&mut Engine::new(ReferenceDevice::new()), Target::Reference);
}

#[test]
fn unknown_entry_names_the_flag() {
    let mut e = loaded(Family::Qwen2);
    let err = e.add_entry(&decode_key(32)).unwrap_err().to_string();
    assert!(err.contains("--cap 32"), "{err}");
}

#[test]
fn wrong_slot_data_is_refused() {
    let mut e = loaded(Family::Qwen2);
    let id = e.add_entry(&decode_key(16)).unwrap();
    let err = e
        .step(
            id,
            &[
                (SlotKind::Token, vec![1, 2, 3]),
                (SlotKind::Pos, vec![0, 0]),
            ],
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("takes 2 values, got 3"), "{err}");
    let err = e
        .step(id, &[(SlotKind::Token, vec![1, 2])])
        .unwrap_err()
        .to_string();
    assert!(err.contains("slot Pos"), "{err}");
}

#[test]
fn no_target_for_the_device() {
    let (_, bundle) = tiny_bundle(Family::Llama, Target::Ptx { sm: 90 }, 16, 2);
    let mut e = Engine::new(ReferenceDevice::new());
    let err = e.load_weights(&bundle).unwrap_err().to_string();
    assert!(err.contains("reference"), "{err}");
}

#[test]
fn unknown_token_id_traps() {
    let mut e = loaded(Family::Llama);
    let id = e.add_entry(&decode_key(16)).unwrap();
    let err = e
        .step(
            id,
            &[(SlotKind::Token, vec![1, 64]), (SlotKind::Pos, vec![0, 0])],
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("gather") && err.contains("code 2"), "{err}");
}
