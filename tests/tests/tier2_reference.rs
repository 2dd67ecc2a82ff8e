//! Tier 2 on the reference device: every entry of tiny llama and qwen2 bundles, run through
//! `Engine<ReferenceDevice>`, matches `poot_eval` on every output and carried state.

use poot_bundle::{EntryKey, SlotKind as BSlot, StepKind, Target};
use poot_compiler::compile::{CompileOptions, compile};
use poot_compiler::families::{Family, StepShape, trace};
use poot_compiler::passes::{PassOptions, optimize};
use poot_compiler::plan::Readback;
use poot_compiler::tiny::{Rng, tiny_model};
use poot_eval::{EvalOptions, Inputs, Tensor, eval};
use poot_ir::SlotKind;
use poot_runtime::devices::reference::ReferenceDevice;
use poot_runtime::{Engine, Executor};
use poot_tests::tier2::{Tolerance, compare};
use std::collections::HashMap;

fn bslot(k: SlotKind) -> BSlot {
    match k {
        SlotKind::Token => BSlot::Token,
        SlotKind::Pos => BSlot::Pos,
        SlotKind::LogitIndex => BSlot::LogitIndex,
        SlotKind::SlotMap => BSlot::SlotMap,
        SlotKind::WriteMap => BSlot::WriteMap,
    }
}

fn run(family: Family) {
    let model = tiny_model(family, 11).unwrap();
    let (cap, rows) = (16, 2);
    let opts = CompileOptions {
        cap,
        rows,
        prefill_chunks: vec![4],
        targets: vec![Target::Reference],
        readback: Readback::All,
    };
    let (manifest, weights) = compile(&model, &opts, &mut |_, _, _| {}).unwrap();
    let bundle = poot_bundle::open_bytes(poot_bundle::write(&manifest, &weights).unwrap()).unwrap();
    let mut engine = Engine::new(ReferenceDevice::new());
    engine.load_weights(&bundle).unwrap();
    let rel = Tolerance::derive(model.spec.d_ff.max(cap), 4 * model.spec.n_layers + 2);
    let mut rng = Rng::new(5);
    for entry in &manifest.entries {
        let key: EntryKey = entry.key.clone();
        let tokens = match key.kind {
            StepKind::Decode => 1,
            StepKind::Prefill { tokens } => tokens as usize,
        };
        let id = engine.add_entry(&key).unwrap();
        let mut g = trace(&model, StepShape::prefill(rows, tokens, cap)).unwrap();
        optimize(&mut g, PassOptions::default()).unwrap();
        for trial in 0..3 {
            let mut slots = HashMap::new();
            let mut dev_slots = Vec::new();
            for (v, k) in g.slots() {
                let n = g.ty(v).shape.numel();
                let data: Vec<i32> = (0..n)
                    .map(|_| match k {
                        SlotKind::Token => rng.below(model.spec.vocab) as i32,
                        SlotKind::Pos => rng.below(cap - tokens + 1) as i32,
                        _ => rng.below(tokens) as i32,
                    })
                    .collect();
                dev_slots.push((bslot(k), data.clone()));
                slots.insert(k, Tensor::i32(g.ty(v).shape.0.clone(), data).unwrap());
            }
            let mut state = HashMap::new();
            for (v, name) in g.states() {
                let data: Vec<f32> = (0..g.ty(v).shape.numel()).map(|_| rng.unit()).collect();
                let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
                engine.write_state(name, &bytes).unwrap();
                state.insert(
                    name.to_string(),
                    Tensor::f32(g.ty(v).shape.0.clone(), data).unwrap(),
                );
            }
            let inputs = Inputs {
                weights: model.weight_views(),
                state,
                slots,
            };
            let want = eval(&g, &inputs, EvalOptions::default()).unwrap();
            let got = engine.step(id, &dev_slots).unwrap();
            for (name, t) in &want.outputs {
                let dev = &got
                    .outputs
                    .iter()
                    .find(|(n, _)| n == name)
                    .unwrap_or_else(|| panic!("no output {name}"))
                    .1;
                let worst = compare(&format!("{key} trial {trial} {name}"), dev, t, rel)
                    .unwrap_or_else(|e| panic!("{e}"));
                println!(
                    "{key} trial {trial}: {name} worst relative error {worst:e} (tolerance {rel:e})"
                );
            }
            for (name, t) in &want.state {
                let dev = engine.read_state(name).unwrap();
                compare(&format!("{key} trial {trial} state {name}"), &dev, t, rel)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }
}

#[test]
fn llama_tiny_reference_matches_eval() {
    run(Family::Llama);
}

#[test]
fn qwen2_tiny_reference_matches_eval() {
    run(Family::Qwen2);
}
