//! The Vulkan device on whatever Vulkan device this machine has best (the H200 on the GPU
//! machine, lavapipe in CI): tier 2 on the tiny configs, capture versus eager, a watchdog
//! budget that splits replays into several submissions with bit-identical results, a trap
//! that becomes a typed fault, a timeout that poisons, and tier 3 on SmolLM2 (and
//! Qwen2.5-0.5B where the device's storage range holds its embedding table).
//!
//! Without a Vulkan device each test prints `SKIP`, and fails instead when
//! `POOT_REQUIRE_GPU=1` or `POOT_REQUIRE_LAVAPIPE=1`.

use poot_bundle::Target;
use poot_compiler::families::Family;
use poot_runtime::devices::vulkan::{VulkanDevice, VulkanOptions};
use poot_runtime::{DeviceError, Engine, Executor};
use poot_tests::faults::{timeout_poisons, trap_needs_reset};
use poot_tests::tier2::{
    Outputs, capture_vs_eager, decode_run, nonfinite_flag, run_heads_16, run_tiny, run_wide_ffn,
    tiny_bundle,
};
use poot_tests::tier3::tier3_sized;
use poot_tests::{Checkpoint, engine_or_skip, require_spirv_device};
use std::time::Duration;

fn device_with(test: &str, opts: &VulkanOptions) -> Option<Engine<VulkanDevice>> {
    engine_or_skip(test, VulkanDevice::new(opts), require_spirv_device())
}

fn device(test: &str) -> Option<Engine<VulkanDevice>> {
    device_with(test, &VulkanOptions::default())
}

/// The best target the device runs.
fn target(e: &Engine<VulkanDevice>) -> Target {
    e.target_set()[0]
}

#[test]
fn vulkan_tier2_llama_tiny() {
    if let Some(e) = device("vulkan_tier2_llama_tiny") {
        let t = target(&e);
        run_tiny(e, Family::Llama, t);
    }
}

#[test]
fn vulkan_tier2_qwen2_tiny() {
    if let Some(e) = device("vulkan_tier2_qwen2_tiny") {
        let t = target(&e);
        run_tiny(e, Family::Qwen2, t);
    }
}

#[test]
fn vulkan_tier2_llama_wide_ffn() {
    if let Some(e) = device("vulkan_tier2_llama_wide_ffn") {
        let t = target(&e);
        run_wide_ffn(e, t);
    }
}

#[test]
fn vulkan_tier2_qwen2_heads_16() {
    if let Some(e) = device("vulkan_tier2_qwen2_heads_16") {
        let t = target(&e);
        run_heads_16(e, t);
    }
}

#[test]
fn vulkan_nonfinite_flag() {
    if let Some(e) = device("vulkan_nonfinite_flag") {
        let t = target(&e);
        nonfinite_flag(e, t);
    }
}

#[test]
fn vulkan_capture_matches_eager_64_steps() {
    if let Some(e) = device("vulkan_capture_matches_eager_64_steps") {
        let t = target(&e);
        capture_vs_eager(e, Family::Qwen2, t, 64);
    }
}

/// Twelve decode steps of the tiny llama: outputs, and submissions per step.
fn decode(mut e: Engine<VulkanDevice>) -> (Outputs, u64) {
    let t = target(&e);
    decode_run(&mut e, t, 12, VulkanDevice::submissions)
}

#[test]
fn vulkan_watchdog_budget_splits_replay() {
    let test = "vulkan_watchdog_budget_splits_replay";
    let Some(whole) = device(test) else {
        return;
    };
    let (want, one) = decode(whole);
    assert_eq!(one, 1, "without a budget a replay is one submission");
    let (_, bundle) = tiny_bundle(Family::Llama, Target::Reference, 16, 2);
    let entry = &bundle.manifest().entries[0];
    let total: u64 = entry.dispatches.iter().map(|d| d.work).sum();
    let heaviest = entry.dispatches.iter().map(|d| d.work).max().unwrap_or(0);
    let opts = VulkanOptions {
        watchdog: Some(heaviest.max(total / 4)),
        ..VulkanOptions::default()
    };
    let Some(split) = device_with(test, &opts) else {
        return;
    };
    let (got, many) = decode(split);
    println!(
        "{} dispatches of total work {total}: budget {} gives {many} submissions per step",
        entry.dispatches.len(),
        heaviest.max(total / 4)
    );
    assert!(
        many >= 4,
        "a quarter of the work per buffer gave {many} submissions"
    );
    assert!(want == got, "split replays read back different bytes");
}

#[test]
fn vulkan_trap_is_a_typed_fault() {
    if let Some(mut e) = device("vulkan_trap_is_a_typed_fault") {
        let t = target(&e);
        trap_needs_reset(&mut e, t);
    }
}

#[test]
fn vulkan_timeout_poisons() {
    let opts = VulkanOptions {
        timeout: Duration::from_nanos(1),
        ..VulkanOptions::default()
    };
    if let Some(mut e) = device_with("vulkan_timeout_poisons", &opts) {
        let t = target(&e);
        timeout_poisons(&mut e, t);
    }
}

#[test]
fn vulkan_tier3_smollm2() {
    tier3("vulkan_tier3_smollm2", Checkpoint::SmolLm2);
}

#[test]
fn vulkan_tier3_qwen05() {
    tier3("vulkan_tier3_qwen05", Checkpoint::Qwen05);
}

fn tier3(test: &str, c: Checkpoint) {
    if let Some(mut e) = device(test) {
        let (t, cpu) = (target(&e), e.device().is_cpu());
        tier3_sized(test, &mut e, c, t, cpu);
    }
}

#[test]
fn vulkan_unknown_device_name_is_refused() {
    let opts = VulkanOptions {
        name: Some("no such device, poot".into()),
        ..VulkanOptions::default()
    };
    match VulkanDevice::new(&opts) {
        Err(DeviceError::Unavailable(msg)) => {
            println!("{msg}");
            assert!(
                msg.contains("no Vulkan device named like") || msg.contains("no Vulkan driver"),
                "{msg}"
            );
        }
        Err(other) => panic!("expected Unavailable, got {other}"),
        Ok(_) => panic!("a device matched an impossible name"),
    }
}
