//! The wgpu device (built with `--features wgpu`) on this machine's best adapter (the H200
//! through NVIDIA's Vulkan driver on the GPU machine, lavapipe in CI): tier 2 on the tiny
//! configs, capture versus eager, replays cut into several submissions with bit-identical
//! results, a trap that becomes a typed fault, a timeout that poisons, and tier 3 on SmolLM2
//! (and Qwen2.5-0.5B on a GPU).
//!
//! Without an adapter each test prints `SKIP`, and fails instead when `POOT_REQUIRE_GPU=1` or
//! `POOT_REQUIRE_LAVAPIPE=1`.
#![cfg(feature = "wgpu")]

use poot_bundle::Target;
use poot_compiler::families::Family;
use poot_runtime::devices::wgpu::{WgpuDevice, WgpuOptions};
use poot_runtime::{Engine, Executor};
use poot_tests::faults::{timeout_poisons, trap_needs_reset};
use poot_tests::tier2::{
    capture_vs_eager, decode_run, nonfinite_flag, run_heads_16, run_tiny, run_wide_ffn,
};
use poot_tests::tier3::tier3_sized;
use poot_tests::{Checkpoint, engine_or_skip, require_spirv_device};
use std::time::Duration;

fn device_with(test: &str, opts: &WgpuOptions) -> Option<Engine<WgpuDevice>> {
    engine_or_skip(test, WgpuDevice::new(opts), require_spirv_device())
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
fn wgpu_tier2_llama_wide_ffn() {
    if let Some(e) = device("wgpu_tier2_llama_wide_ffn") {
        let t = target(&e);
        run_wide_ffn(e, t);
    }
}

#[test]
fn wgpu_tier2_qwen2_heads_16() {
    if let Some(e) = device("wgpu_tier2_qwen2_heads_16") {
        let t = target(&e);
        run_heads_16(e, t);
    }
}

#[test]
fn wgpu_nonfinite_flag() {
    if let Some(e) = device("wgpu_nonfinite_flag") {
        let t = target(&e);
        nonfinite_flag(e, t);
    }
}

#[test]
fn wgpu_capture_matches_eager_64_steps() {
    if let Some(e) = device("wgpu_capture_matches_eager_64_steps") {
        let t = target(&e);
        capture_vs_eager(e, Family::Qwen2, t, 64);
    }
}

/// Replays cut into submissions of two dispatches read back the same bytes as whole ones.
#[test]
fn wgpu_submissions_split_replay() {
    let test = "wgpu_submissions_split_replay";
    let Some(mut whole) = device(test) else {
        return;
    };
    let t = target(&whole);
    let (want, one) = decode_run(&mut whole, t, 12, WgpuDevice::submissions);
    assert_eq!(
        one, 1,
        "the tiny decode step fits one submission by default"
    );
    let opts = WgpuOptions {
        submit_dispatches: 2,
        ..WgpuOptions::default()
    };
    let Some(mut split) = device_with(test, &opts) else {
        return;
    };
    let (got, many) = decode_run(&mut split, t, 12, WgpuDevice::submissions);
    println!("submissions of two dispatches: {many} per step");
    assert!(many >= 4, "submissions of two gave {many} per step");
    assert!(want == got, "split replays read back different bytes");
}

#[test]
fn wgpu_trap_is_a_typed_fault() {
    if let Some(mut e) = device("wgpu_trap_is_a_typed_fault") {
        let t = target(&e);
        trap_needs_reset(&mut e, t);
    }
}

#[test]
fn wgpu_timeout_poisons() {
    let opts = WgpuOptions {
        timeout: Duration::from_nanos(1),
        ..WgpuOptions::default()
    };
    if let Some(mut e) = device_with("wgpu_timeout_poisons", &opts) {
        let t = target(&e);
        timeout_poisons(&mut e, t);
    }
}

#[test]
fn wgpu_tier3_smollm2() {
    tier3("wgpu_tier3_smollm2", Checkpoint::SmolLm2);
}

#[test]
fn wgpu_tier3_qwen05() {
    tier3("wgpu_tier3_qwen05", Checkpoint::Qwen05);
}

fn tier3(test: &str, c: Checkpoint) {
    if let Some(mut e) = device(test) {
        let (t, cpu) = (target(&e), e.device().is_cpu());
        tier3_sized(test, &mut e, c, t, cpu);
    }
}
