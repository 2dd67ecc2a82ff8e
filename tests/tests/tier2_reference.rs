//! Tier 2 on the reference device: every entry of tiny llama and qwen2 bundles (and of a tiny
//! llama with a 4096-wide feed-forward layer, a tiny qwen2 with one in Q6_K and Q8_0, and a
//! tiny qwen2 with 16-wide heads), run through
//! `Engine<ReferenceDevice>`, matches `poot_eval` on every output and carried state; and the
//! recorded dispatch list replays bit-identically to launching it eagerly.

use poot_bundle::Target;
use poot_compiler::families::Family;
use poot_runtime::Engine;
use poot_runtime::devices::reference::ReferenceDevice;
use poot_tests::tier2::{
    capture_vs_eager, nonfinite_flag, run_heads_16, run_tiny, run_wide_codes, run_wide_ffn,
};

#[test]
fn llama_tiny_reference_matches_eval() {
    run_tiny(
        Engine::new(ReferenceDevice::new()),
        Family::Llama,
        Target::Reference,
    );
}

#[test]
fn qwen2_tiny_reference_matches_eval() {
    run_tiny(
        Engine::new(ReferenceDevice::new()),
        Family::Qwen2,
        Target::Reference,
    );
}

#[test]
fn llama_wide_ffn_reference_matches_eval() {
    run_wide_ffn(Engine::new(ReferenceDevice::new()), Target::Reference);
}

#[test]
fn qwen2_wide_codes_reference_matches_eval() {
    run_wide_codes(Engine::new(ReferenceDevice::new()), Target::Reference);
}

#[test]
fn qwen2_heads_16_reference_matches_eval() {
    run_heads_16(Engine::new(ReferenceDevice::new()), Target::Reference);
}

#[test]
fn reference_nonfinite_flag() {
    nonfinite_flag(Engine::new(ReferenceDevice::new()), Target::Reference);
}

#[test]
fn reference_capture_matches_eager() {
    capture_vs_eager(
        Engine::new(ReferenceDevice::new()),
        Family::Llama,
        Target::Reference,
        8,
    );
}
