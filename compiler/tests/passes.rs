//! Tier 1 for the graph passes on both families' tiny configs: after every pass the graph
//! verifies, its text round-trips, its snapshot matches `snapshots/`, and `poot_eval` gives
//! bit-identical outputs and state on random inputs.

mod common;

use common::{assert_bit_identical, inputs, random_step};
use poot_compiler::families::{Family, StepShape, trace};
use poot_compiler::passes::PIPELINE;
use poot_compiler::tiny::tiny_model;
use poot_eval::{EvalOptions, eval};
use poot_ir::{Graph, parse, print, verify};

fn snapshot(name: &str, g: &Graph) {
    insta::with_settings!({
        snapshot_path => "../../snapshots",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!(name.to_string(), print(g));
    });
}

fn round_trip(g: &Graph) {
    let text = print(g);
    let back = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(print(&back), text, "print -> parse -> print differs");
    assert_eq!(&back, g, "parse(print(g)) != g");
}

fn check(family: Family, step: StepShape, shape: &str) {
    let model = tiny_model(family, 7).unwrap();
    let mut g = trace(&model, step).unwrap();
    verify(&g).unwrap();
    round_trip(&g);
    let tag = format!("{}-{shape}", family.name());
    snapshot(&format!("{tag}-0-trace"), &g);
    let mut nodes = vec![g.nodes.len()];
    for seed in 0..3 {
        let (slots, state) = random_step(&g, model.spec.vocab, seed);
        let inp = inputs(model.weight_views(), slots, state);
        let mut h = g.clone();
        let before = eval(&h, &inp, EvalOptions::default()).unwrap();
        for (name, pass) in PIPELINE {
            pass(&mut h).unwrap();
            verify(&h).unwrap_or_else(|e| panic!("after {name}: {e}"));
            let after = eval(&h, &inp, EvalOptions::default()).unwrap();
            assert_bit_identical(&before, &after, &format!("{tag} after {name}, seed {seed}"));
        }
    }
    for (i, (name, pass)) in PIPELINE.into_iter().enumerate() {
        pass(&mut g).unwrap();
        round_trip(&g);
        snapshot(&format!("{tag}-{}-{name}", i + 1), &g);
        nodes.push(g.nodes.len());
    }
    // Each family's trace leaves work for the pipeline: it must shrink the graph.
    assert!(
        nodes.last() < nodes.first(),
        "{tag}: passes removed nothing: {nodes:?}"
    );
}

#[test]
fn llama_decode() {
    check(Family::Llama, StepShape::decode(2, 16), "decode-r2");
}

#[test]
fn llama_prefill() {
    check(Family::Llama, StepShape::prefill(2, 4, 16), "prefill4-r2");
}

#[test]
fn qwen2_decode() {
    check(Family::Qwen2, StepShape::decode(2, 16), "decode-r2");
}

#[test]
fn qwen2_prefill() {
    check(Family::Qwen2, StepShape::prefill(2, 4, 16), "prefill4-r2");
}

#[test]
fn traced_graphs_are_position_free() {
    // Two decode traces at different cache capacities differ only in cap-sized dimensions;
    // the same trace serves every position, which only ever arrives through `slot pos`.
    let model = tiny_model(Family::Llama, 7).unwrap();
    let g = trace(&model, StepShape::decode(1, 16)).unwrap();
    let text = print(&g);
    assert!(text.contains("slot pos"));
    for (v, node) in g.nodes.iter() {
        if let poot_ir::Op::Const(poot_ir::Scalar::I32(x)) = node.op {
            assert!(x <= 1, "{v} bakes an integer {x} into the decode graph");
        }
    }
}
