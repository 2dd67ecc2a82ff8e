//! Tier 3 through a device: a real checkpoint compiled to a bundle, generated greedily by the
//! runtime's `Driver`, against Hugging Face transformers' tokens (`fixtures/tier3`).
//!
//! Prompts (5 to 40 tokens) run as one padded chunk of 64 rows on the GPUs, so their tiled
//! matmuls take the 64-row tiles (tensor cores on CUDA), and of 16 on the reference device,
//! where 64 rows would cost CI four times the time.
//!
//! Tolerance: the device's logits may differ from the reference by the tier-2 bound for the
//! model (`Tolerance::for_target` over its widest reduction and its depth) relative to the logits'
//! scale, so a greedy flip is accepted only where the reference's top-two margin is within
//! twice that; the prompt's comparison stops there. Then a prompt one position too long for
//! the cache must be refused, naming the sizes.

use crate::tier2::Tolerance;
use crate::{Checkpoint, ids, json};
use poot_bundle::Target;
use poot_compiler::compile::{CompileOptions, compile};
use poot_compiler::families::Model;
use poot_compiler::plan::Readback;
use poot_runtime::driver::Driver;
use poot_runtime::{Executor, RuntimeError};
use std::ops::Range;

/// A checkpoint compiled for one target, with its fixture and the tolerance of its logits.
pub struct Tier3 {
    c: Checkpoint,
    bundle: poot_bundle::OpenedBundle,
    cap: usize,
    rel: f32,
    fx: serde_json::Value,
}

impl Tier3 {
    /// Compiles `c` for `target` (cache of 256 positions, one decode row, one prefill chunk).
    pub fn new(c: Checkpoint, target: Target) -> Self {
        let model = Model::load(&c.path()).expect("model");
        let opts = CompileOptions {
            cap: 256,
            rows: 1,
            prefill_chunks: if target == Target::Reference {
                vec![16]
            } else {
                vec![64]
            },
            targets: vec![target],
            readback: Readback::Sampled,
        };
        let (manifest, weights) = compile(&model, &opts, &mut |_, _, _| {}).expect("compile");
        let bundle =
            poot_bundle::open_bytes(poot_bundle::write(&manifest, &weights).expect("write"))
                .expect("open");
        let depth = 4 * model.spec.n_layers + 2;
        // The reference's 16-row tiles have no tensor-core form.
        let rel = match target {
            Target::Reference => Tolerance::derive(model.spec.d_ff, depth),
            _ => Tolerance::for_target(target, model.spec.d_ff, depth),
        };
        let fx = json(&format!("tier3/{}.json", c.name()));
        Tier3 {
            c,
            bundle,
            cap: opts.cap,
            rel,
            fx,
        }
    }

    /// A driver of the bundle on `exec` (the bundle's weights loaded there).
    pub fn driver<'e>(&self, exec: &'e mut dyn Executor) -> Driver<'e> {
        Driver::new(exec, &self.bundle).expect("driver")
    }

    /// Generates the fixture prompts `cases` through `driver` and compares each with the
    /// reference's tokens; returns (matched, compared).
    pub fn run(&self, driver: &mut Driver, cases: Range<usize>) -> (usize, usize) {
        let c = self.c;
        let (mut matched, mut total) = (0, 0);
        let all = self.fx["cases"].as_array().expect("cases");
        let chosen = all.get(cases.clone()).unwrap_or_else(|| {
            panic!(
                "{}: {cases:?} asked, the fixture has {} cases",
                c.name(),
                all.len()
            )
        });
        for (i, case) in cases.clone().zip(chosen) {
            let prompt = ids(&case["prompt_ids"]);
            let want = ids(&case["tokens"]);
            let margins: Vec<f64> = case["margins"]
                .as_array()
                .expect("margins")
                .iter()
                .filter_map(|m| m.as_f64())
                .collect();
            let scale = case["top"][0][0][1].as_f64().unwrap_or(1.0).abs().max(1.0);
            let start = std::time::Instant::now();
            let g = driver
                .generate(&prompt, want.len(), None, &mut |_| {})
                .expect("generate");
            let mut n = 0;
            for (j, (got, w)) in g.tokens.iter().zip(&want).enumerate() {
                if got != w {
                    let allowed = 2.0 * self.rel as f64 * scale;
                    assert!(
                        margins[j] <= allowed,
                        "{} case {i} step {j}: device {got} vs reference {w}, margin {} > {allowed}",
                        c.name(),
                        margins[j]
                    );
                    println!(
                        "{} case {i}: allowed flip at step {j} (margin {} <= {allowed})",
                        c.name(),
                        margins[j]
                    );
                    break;
                }
                n += 1;
            }
            println!(
                "{} case {i}: {n}/{} tokens match ({:.2} s)",
                c.name(),
                want.len(),
                start.elapsed().as_secs_f64()
            );
            matched += n;
            total += want.len();
        }
        println!(
            "{} cases {cases:?} through {}: {matched}/{total} tokens match",
            c.name(),
            driver.executor().device_name()
        );
        (matched, total)
    }

    /// A prompt that, with the tokens asked for, would pass the end of the cache is refused
    /// before any step, with the sizes in the message.
    pub fn refuses_too_long(&self, driver: &mut Driver) {
        let prompt = vec![1; self.cap - 6];
        match driver.generate(&prompt, 7, None, &mut |_| {}) {
            Err(e @ RuntimeError::PromptTooLong { .. }) => {
                let want = format!(
                    "prompt of {} tokens plus 7 new tokens exceeds the cache capacity of {} positions",
                    self.cap - 6,
                    self.cap
                );
                assert_eq!(e.to_string(), want);
            }
            Err(other) => panic!("expected a prompt too long for the cache, got {other}"),
            Ok(_) => panic!("a prompt one position past the cache was accepted"),
        }
    }
}

/// Runs the first `cases` fixture prompts of `c` through `exec`, then the prompt too long for
/// the cache; returns (matched, compared).
pub fn tier3_device(
    exec: &mut dyn Executor,
    c: Checkpoint,
    target: Target,
    cases: usize,
) -> (usize, usize) {
    let t = Tier3::new(c, target);
    let mut driver = t.driver(exec);
    let r = t.run(&mut driver, 0..cases);
    t.refuses_too_long(&mut driver);
    r
}

/// Tier 3 sized for the device: on a CPU device (lavapipe: about 4 s a token and 70 s a
/// 64-row chunk on CI's two cores) one SmolLM2 prompt, and Qwen2.5-0.5B is skipped with
/// `SKIP`; on a GPU all eight prompts of either.
pub fn tier3_sized(test: &str, exec: &mut dyn Executor, c: Checkpoint, target: Target, cpu: bool) {
    let cases = match (c, cpu) {
        (Checkpoint::SmolLm2, true) => 1,
        (Checkpoint::Qwen05, true) => {
            println!("SKIP {test}: a CPU device (CI runs tier 3 on SmolLM2 only)");
            return;
        }
        (_, false) => 8,
    };
    let (matched, total) = tier3_device(exec, c, target, cases);
    assert!(matched > 0 && total == 32 * cases, "{matched}/{total}");
}
