//! The CUDA device: tier 2 on the tiny configs, capture versus eager over 64 steps, tier 3 on
//! SmolLM2 and Qwen2.5-0.5B. Without a CUDA machine each test prints `SKIP` (and fails when
//! `POOT_REQUIRE_GPU=1`); built only with `--features cuda`.
#![cfg(feature = "cuda")]

use poot_bundle::Target;
use poot_compiler::families::Family;
use poot_runtime::Engine;
use poot_runtime::devices::cuda::CudaDevice;
use poot_tests::tier2::{capture_vs_eager, nonfinite_flag, run_tiny, run_wide_ffn};
use poot_tests::tier3::tier3_device;
use poot_tests::{Checkpoint, engine_or_skip, require_gpu};

const PTX: Target = Target::Ptx { sm: 90 };

fn device(test: &str) -> Option<Engine<CudaDevice>> {
    engine_or_skip(test, CudaDevice::new(0), require_gpu())
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
