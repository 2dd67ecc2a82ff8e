//! Tier 3 on the CPU: the oracle's greedy tokens on real checkpoints against Hugging Face
//! transformers' (`fixtures/tier3/make_reference.py`, run on the same GGUF files).
//!
//! Tolerance. The oracle and transformers both dequantize to the same f32 weights and differ
//! only in float reassociation (blocked GEMMs vs. `poot_eval`'s lane order, libm vs. MKL
//! `exp`/`sin`), so a logit differs by a small multiple of f32 rounding over the whole
//! network. Measured element by element on the full first-step logits (`first_logits`), the
//! worst difference is 2.9e-5 (SmolLM2) and 2.7e-5 (Qwen2.5-0.5B) on logits of magnitude
//! 20-35, i.e. about 2^-20 relative; `LOGIT_TOL` = 1e-3 (2^-10 of a unit logit, 35x the
//! measured worst) leaves room for other prompts and positions without hiding a real bug,
//! which moves logits by whole units. A greedy flip is accepted only at a step
//! whose reference top-two margin is within `2 * LOGIT_TOL` (each of the two logits may move
//! by the tolerance), and comparison of that prompt stops there because the continuations
//! then legitimately differ.

use poot_compiler::families::Model;
use poot_compiler::oracle::Oracle;
use poot_tests::{Checkpoint, fixture, ids, json};

/// Largest allowed |oracle - transformers| on any logit.
const LOGIT_TOL: f32 = 1e-3;
/// Cache capacity and prefill chunk the oracle runs with.
const CAP: usize = 256;
const CHUNK: usize = 16;

fn read_f32(rel: &str) -> Vec<f32> {
    let b = std::fs::read(fixture(rel)).unwrap();
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn tier3(c: Checkpoint) {
    let model = Model::load(&c.path()).unwrap();
    let fx = json(&format!("tier3/{}.json", c.name()));
    let first = read_f32(&format!("tier3/{}", fx["first_logits"].as_str().unwrap()));
    let mut oracle = Oracle::new(&model, CAP, CHUNK).unwrap();
    let cases = fx["cases"].as_array().unwrap();
    assert!(
        cases.len() >= 8
            && cases
                .iter()
                .filter(|c| c["chat"].as_bool().unwrap())
                .count()
                >= 4
    );
    let (mut matched, mut total) = (0, 0);
    for (i, case) in cases.iter().enumerate() {
        let prompt = ids(&case["prompt_ids"]);
        let want = ids(&case["tokens"]);
        let margins: Vec<f32> = case["margins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_f64().unwrap() as f32)
            .collect();
        oracle.reset();
        let start = std::time::Instant::now();
        let outs = oracle
            .generate(&prompt, want.len(), None, &mut |_| {})
            .unwrap();
        let secs = start.elapsed().as_secs_f64();
        if i == 0 {
            let got = &outs[0].logits;
            assert_eq!(got.len(), first.len());
            let worst = got
                .iter()
                .zip(&first)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            println!(
                "{}: first-step logits max |oracle - transformers| = {worst:.2e}",
                c.name()
            );
            assert!(got.iter().all(|x| x.is_finite()));
            assert!(
                worst <= LOGIT_TOL,
                "{}: logits differ by {worst} > {LOGIT_TOL}",
                c.name()
            );
        }
        let mut n = 0;
        for (j, (o, w)) in outs.iter().zip(&want).enumerate() {
            if o.token != *w {
                assert!(
                    margins[j] <= 2.0 * LOGIT_TOL,
                    "{} case {i} step {j}: oracle {} vs reference {w} with margin {} > {}",
                    c.name(),
                    o.token,
                    margins[j],
                    2.0 * LOGIT_TOL
                );
                println!(
                    "{} case {i}: allowed flip at step {j} (margin {})",
                    c.name(),
                    margins[j]
                );
                break;
            }
            n += 1;
        }
        println!(
            "{} case {i} ({}{} prompt tokens): {n}/{} tokens match, {:.2} s",
            c.name(),
            if case["chat"].as_bool().unwrap() {
                "chat, "
            } else {
                ""
            },
            prompt.len(),
            want.len(),
            secs
        );
        matched += n;
        total += want.len();
    }
    println!("{}: {matched}/{total} tokens match", c.name());
}

#[test]
fn smollm2_greedy_matches_transformers() {
    tier3(Checkpoint::SmolLm2);
}

#[test]
fn qwen05_greedy_matches_transformers() {
    tier3(Checkpoint::Qwen05);
}
