//! The CUDA device: tier 2 on the tiny configs, capture versus eager over 64 steps, a trap
//! and a timeout that poison, the tier 2 and capture tests again under NVIDIA's
//! compute-sanitizer, tier 3 on SmolLM2 and Qwen2.5-0.5B. Without a CUDA machine each test
//! prints `SKIP` (and fails when `POOT_REQUIRE_GPU=1`); built only with `--features cuda`.
#![cfg(feature = "cuda")]

use poot_bundle::Target;
use poot_compiler::families::Family;
use poot_runtime::Engine;
use poot_runtime::devices::cuda::{CudaDevice, CudaOptions};
use poot_tests::faults::{timeout_poisons, trap_poisons};
use poot_tests::tier2::{
    capture_vs_eager, nonfinite_flag, run_heads_16, run_tiny, run_wide_codes, run_wide_ffn,
};
use poot_tests::tier3::tier3_device;
use poot_tests::{Checkpoint, engine_or_skip, require_gpu, sanitizer};
use std::time::Duration;

const PTX: Target = Target::Ptx { sm: 90 };

fn device_with(test: &str, opts: &CudaOptions) -> Option<Engine<CudaDevice>> {
    engine_or_skip(test, CudaDevice::new(opts), require_gpu())
}

fn device(test: &str) -> Option<Engine<CudaDevice>> {
    device_with(test, &CudaOptions::default())
}

#[test]
fn cuda_tier2_llama_tiny() {
    if let Some(e) = device("cuda_tier2_llama_tiny") {
        run_tiny(e, Family::Llama, PTX);
    }
}

#[test]
fn cuda_tier2_qwen2_tiny() {
    if let Some(e) = device("cuda_tier2_qwen2_tiny") {
        run_tiny(e, Family::Qwen2, PTX);
    }
}

#[test]
fn cuda_tier2_llama_wide_ffn() {
    if let Some(e) = device("cuda_tier2_llama_wide_ffn") {
        run_wide_ffn(e, PTX);
    }
}

#[test]
fn cuda_tier2_qwen2_wide_codes() {
    if let Some(e) = device("cuda_tier2_qwen2_wide_codes") {
        run_wide_codes(e, PTX);
    }
}

#[test]
fn cuda_tier2_qwen2_heads_16() {
    if let Some(e) = device("cuda_tier2_qwen2_heads_16") {
        run_heads_16(e, PTX);
    }
}

#[test]
fn cuda_nonfinite_flag() {
    if let Some(e) = device("cuda_nonfinite_flag") {
        nonfinite_flag(e, PTX);
    }
}

#[test]
fn cuda_capture_matches_eager_64_steps() {
    if let Some(e) = device("cuda_capture_matches_eager_64_steps") {
        capture_vs_eager(e, Family::Qwen2, PTX, 64);
    }
}

/// A kernel's trap is a sticky CUDA error: the step that meets it is a typed device-lost
/// error naming it, and the engine refuses every later call.
#[test]
fn cuda_trap_poisons() {
    if let Some(mut e) = device("cuda_trap_poisons") {
        trap_poisons(&mut e, PTX, "CUDA_ERROR_");
    }
}

/// A wait past the bound is a typed timeout, and the engine refuses every later call.
#[test]
fn cuda_timeout_poisons() {
    let opts = CudaOptions {
        timeout: Duration::from_nanos(1),
        ..CudaOptions::default()
    };
    if let Some(mut e) = device_with("cuda_timeout_poisons", &opts) {
        timeout_poisons(&mut e, PTX);
    }
}

/// The tests `cuda_sanitized` runs again under each compute-sanitizer tool: every kernel of
/// the tiny configs' prefill and decode entries, captured and eager.
const SANITIZED: [&str; 4] = [
    "cuda_tier2_llama_tiny",
    "cuda_tier2_qwen2_tiny",
    "cuda_tier2_llama_wide_ffn",
    "cuda_capture_matches_eager_64_steps",
];

/// `SANITIZED` under each tool of `sanitizer::TOOLS`: each run must pass with a clean
/// report, and the tool must report its canary (this test again, running only the canary).
/// Without compute-sanitizer it prints `SKIP` (and fails when `POOT_REQUIRE_SANITIZER=1`).
#[test]
fn cuda_sanitized() {
    let test = "cuda_sanitized";
    let Some(mut engine) = device(test) else {
        return;
    };
    if let Ok(tool) = std::env::var(sanitizer::CANARY) {
        return sanitizer::run_canary(engine.device(), &tool);
    }
    drop(engine);
    let Some(cs) = sanitizer::find() else {
        let why = "compute-sanitizer is not on PATH nor in /usr/local/cuda/bin \
                   (POOT_COMPUTE_SANITIZER names it)";
        assert!(
            !std::env::var("POOT_REQUIRE_SANITIZER").is_ok_and(|v| v == "1"),
            "{test}: {why}"
        );
        println!("SKIP {test}: {why}");
        return;
    };
    for (tool, clean, found) in sanitizer::TOOLS {
        let (_, text) = sanitizer::run(&cs, tool, test, true);
        assert!(text.contains(found), "{tool} missed its canary:\n{text}");
        println!("{tool} reports its canary");
        for inner in SANITIZED {
            let (ok, text) = sanitizer::run(&cs, tool, inner, false);
            assert!(
                ok && text.contains("1 passed") && text.contains(clean),
                "{tool} over {inner}:\n{text}"
            );
            println!("{tool} over {inner}: clean");
        }
    }
}

fn tier3(test: &str, c: Checkpoint) {
    if let Some(mut e) = device(test) {
        let (matched, total) = tier3_device(&mut e, c, PTX, 8);
        assert!(total > 0 && matched > 0);
    }
}

#[test]
fn cuda_tier3_smollm2() {
    tier3("cuda_tier3_smollm2", Checkpoint::SmolLm2);
}

#[test]
fn cuda_tier3_qwen05() {
    tier3("cuda_tier3_qwen05", Checkpoint::Qwen05);
}
