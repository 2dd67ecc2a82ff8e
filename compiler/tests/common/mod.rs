//! Shared test support: random step inputs and bit-exact comparison of evaluations.

use poot_compiler::tiny::Rng;
use poot_eval::{Data, Evaluation, Inputs, Tensor};
use poot_ir::{DType, Graph, SlotKind};
use std::collections::HashMap;

/// Random slots and state for one step of `g` over a vocabulary of `vocab`.
pub fn random_step(
    g: &Graph,
    vocab: usize,
    seed: u64,
) -> (HashMap<SlotKind, Tensor>, HashMap<String, Tensor>) {
    let mut rng = Rng::new(seed);
    let mut slots = HashMap::new();
    let (mut t, mut cap) = (1, 1);
    for (v, k) in g.slots() {
        if k == SlotKind::Token {
            t = g.ty(v).shape.dims()[1];
        }
    }
    for (v, _) in g.states() {
        cap = g.ty(v).shape.dims()[1];
    }
    for (v, k) in g.slots() {
        let ty = g.ty(v).clone();
        let n = ty.shape.numel();
        let data: Vec<i32> = (0..n)
            .map(|_| match k {
                SlotKind::Token => rng.below(vocab) as i32,
                SlotKind::Pos => rng.below(cap - t + 1) as i32,
                SlotKind::LogitIndex => rng.below(t) as i32,
                _ => rng.below(cap) as i32,
            })
            .collect();
        assert_eq!(ty.dtype, DType::I32);
        slots.insert(k, Tensor::new(ty, Data::I32(data)).unwrap());
    }
    let state = g
        .states()
        .map(|(v, name)| {
            let ty = g.ty(v).clone();
            let data = (0..ty.shape.numel()).map(|_| rng.unit()).collect();
            (name.to_string(), Tensor::new(ty, Data::F32(data)).unwrap())
        })
        .collect();
    (slots, state)
}

fn bits(t: &Tensor) -> Vec<u64> {
    match &t.data {
        Data::F32(v) => v.iter().map(|x| x.to_bits() as u64).collect(),
        Data::I32(v) => v.iter().map(|x| *x as u32 as u64).collect(),
        Data::U32(v) => v.iter().map(|x| *x as u64).collect(),
        Data::U8(v) => v.iter().map(|x| *x as u64).collect(),
        Data::Bool(v) => v.iter().map(|x| *x as u64).collect(),
    }
}

/// Asserts two evaluations are bit-identical in every output and every state.
pub fn assert_bit_identical(a: &Evaluation, b: &Evaluation, what: &str) {
    assert_eq!(a.outputs.len(), b.outputs.len(), "{what}: output count");
    for ((na, ta), (nb, tb)) in a.outputs.iter().zip(&b.outputs) {
        assert_eq!(na, nb, "{what}: output names");
        assert_eq!(ta.ty, tb.ty, "{what}: output {na} type");
        assert!(bits(ta) == bits(tb), "{what}: output {na} differs");
    }
    assert_eq!(a.state.len(), b.state.len(), "{what}: state count");
    for (name, ta) in &a.state {
        let tb = &b.state[name];
        assert!(bits(ta) == bits(tb), "{what}: state {name} differs");
    }
}

/// Inputs over the given weights, slots and state.
pub fn inputs<'a>(
    weights: HashMap<poot_ir::WeightRole, poot_eval::WeightView<'a>>,
    slots: HashMap<SlotKind, Tensor>,
    state: HashMap<String, Tensor>,
) -> Inputs<'a> {
    Inputs {
        weights,
        state,
        slots,
    }
}
