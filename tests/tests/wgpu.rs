//! The wgpu device (built with `--features wgpu`) on this machine's best adapter (the H200
//! through NVIDIA's Vulkan driver on the GPU machine, lavapipe in CI): tier 2 on the tiny
//! configs, capture versus eager, a trap that becomes a typed fault, a timeout that poisons,
//! and tier 3 on SmolLM2 (and Qwen2.5-0.5B on a GPU).
//!
//! Without an adapter each test prints `SKIP`, and fails instead when `POOT_REQUIRE_GPU=1` or
//! `POOT_REQUIRE_LAVAPIPE=1`.
#![cfg(feature = "wgpu")]

use poot_bundle::{EntryKey, Sampling, SlotKind, StepKind, Target};
use poot_compiler::families::Family;
use poot_compiler::lower::TRAP_CACHE_OVERFLOW;
use poot_runtime::devices::wgpu::{WgpuDevice, WgpuOptions};
use poot_runtime::{DeviceError, Engine, Executor, RuntimeError};
use poot_tests::tier2::{capture_vs_eager, run_tiny, tiny_bundle};
use poot_tests::tier3::tier3_device;
use poot_tests::{Checkpoint, require_gpu};
use std::time::Duration;

fn device_with(test: &str, opts: &WgpuOptions) -> Option<Engine<WgpuDevice>> {
    match WgpuDevice::new(opts) {
        Ok(d) => {
            println!("{test}: {}", poot_runtime::Device::describe(&d));
            Some(Engine::new(d))
        }
        Err(e) if require_gpu() || std::env::var("POOT_REQUIRE_LAVAPIPE").as_deref() == Ok("1") => {
            panic!("{test}: a wgpu adapter is required but {e}")
        }
        Err(e) => {
            println!("SKIP {test}: {e}");
            None
        }
    }
}

fn device(test: &str) -> Option<Engine<WgpuDevice>> {
    device_with(test, &WgpuOptions::default())
}

fn target(e: &Engine<WgpuDevice>) -> Target {
    e.target_set()[0]
}

#[test]
fn wgpu_tier2_llama_tiny() {
    if let Some(e) = device("wgpu_tier2_llama_tiny") {
        let t = target(&e);
        run_tiny(e, Family::Llama, t);
    }
}

#[test]
fn wgpu_tier2_qwen2_tiny() {
    if let Some(e) = device("wgpu_tier2_qwen2_tiny") {
        let t = target(&e);
        run_tiny(e, Family::Qwen2, t);
    }
}

#[test]
fn wgpu_capture_matches_eager_64_steps() {
    if let Some(e) = device("wgpu_capture_matches_eager_64_steps") {
        let t = target(&e);
        capture_vs_eager(e, Family::Qwen2, t, 64);
    }
}

#[test]
fn wgpu_trap_is_a_typed_fault() {
    let Some(mut e) = device("wgpu_trap_is_a_typed_fault") else {
        return;
    };
    let (_, bundle) = tiny_bundle(Family::Llama, target(&e), 16, 2);
    e.load_weights(&bundle).unwrap();
    let key = EntryKey {
        program: "generate".into(),
        kind: StepKind::Decode,
        rows: 2,
        cap: 16,
        sampling: Sampling::Greedy,
    };
    let id = e.add_entry(&key).unwrap();
    let slots = |pos: i32| vec![(SlotKind::Token, vec![1, 2]), (SlotKind::Pos, vec![0, pos])];
    let err = e.step(id, &slots(16)).unwrap_err();
    match &err {
        RuntimeError::Device {
            source: DeviceError::Fault { kernel, code, .. },
            ..
        } => {
            assert!(kernel.starts_with("update_slice"), "{err}");
            assert_eq!(*code, TRAP_CACHE_OVERFLOW, "{err}");
        }
        other => panic!("expected a kernel fault, got {other}"),
    }
    println!("trap: {err}");
    let again = e.step(id, &slots(3)).unwrap_err().to_string();
    assert!(
        again.contains("call reset_state before stepping again"),
        "{again}"
    );
    e.reset_state().unwrap();
    let ok = e.step(id, &slots(3)).unwrap();
    assert_eq!(ok.tokens.len(), 2);
}

#[test]
fn wgpu_timeout_poisons() {
    let opts = WgpuOptions {
        timeout: Duration::from_nanos(1),
        ..WgpuOptions::default()
    };
    let Some(mut e) = device_with("wgpu_timeout_poisons", &opts) else {
        return;
    };
    let (_, bundle) = tiny_bundle(Family::Qwen2, target(&e), 64, 2);
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
    let later = e.reset_state().unwrap_err().to_string();
    assert!(later.contains("poisoned"), "{later}");
}

#[test]
fn wgpu_tier3_smollm2() {
    let Some(mut e) = device("wgpu_tier3_smollm2") else {
        return;
    };
    let cases = if e.device().is_cpu() { 2 } else { 8 };
    let t = target(&e);
    let (matched, total) = tier3_device(&mut e, Checkpoint::SmolLm2, t, cases);
    assert!(matched > 0 && total == 32 * cases, "{matched}/{total}");
}

#[test]
fn wgpu_tier3_qwen05() {
    let test = "wgpu_tier3_qwen05";
    let Some(mut e) = device(test) else {
        return;
    };
    if e.device().is_cpu() {
        println!("SKIP {test}: a CPU adapter (CI runs tier 3 on SmolLM2 only)");
        return;
    }
    let t = target(&e);
    let (matched, total) = tier3_device(&mut e, Checkpoint::Qwen05, t, 8);
    assert!(matched > 0 && total == 256, "{matched}/{total}");
}
