//! Tier 2 support: compile a model, run its entries on an executor, compare every output and
//! carried state with `poot_eval` element by element.
//!
//! Tolerance. A device reassociates the reference's sums (matmul and norm reductions split
//! over lanes, attention with an online softmax split over the cache) and fuses multiply-adds.
//! A reassociated f32 sum of `k` terms differs by at most about `k * u * sum|terms|`
//! (u = 2^-24), and a step chains `depth` such reductions; so an element may differ by
//! `k_max * depth * u` relative to the scale of the values it came from. `Tolerance::derive`
//! computes that bound from the model's largest reduction and its depth; a NaN or infinity
//! where the reference is finite fails at any tolerance. Where the tiled matmuls run on
//! tensor cores (`Tolerance::for_target`: the PTX and reference targets run `matrix` forms),
//! each product is three exact tf32 products within `3 * 2^-20 = 48u` of it, so a sum of `k`
//! products is `3k` terms plus that: the bound takes `3 k_max + 48` for `k_max`. Block-format
//! weights take two exact products of their codes (`x c` within `2^-20 |x c|`), and each run
//! of 16 or 32 codes adds its sum times its scale and its inputs' sum times its min: fewer
//! terms, of magnitudes `|scale c x|` and `|min x|` (within a few times `|w x|` for these
//! formats), which the tensor's own scale in `compare` absorbs.

use poot_eval::{Data, Tensor};

/// An element-wise tolerance: `|device - reference| <= rel * max(scale, |reference|)`.
#[derive(Clone, Copy, Debug)]
pub struct Tolerance {
    /// Relative bound.
    pub rel: f32,
    /// The magnitude below which errors are measured absolutely (the tensor's own scale).
    pub scale: f32,
}

impl Tolerance {
    /// The bound for reductions of at most `k_max` terms chained `depth` deep.
    pub fn derive(k_max: usize, depth: usize) -> f32 {
        k_max as f32 * depth as f32 * f32::EPSILON / 2.0
    }

    /// `derive` for a device rendering `target`: with tensor-core matmuls (every PTX target,
    /// and the reference device, which runs the same form) `3 k_max + 48` terms.
    pub fn for_target(target: Target, k_max: usize, depth: usize) -> f32 {
        match target {
            Target::Ptx { .. } | Target::Reference => Self::derive(3 * k_max + 48, depth),
            Target::Spirv { .. } => Self::derive(k_max, depth),
        }
    }
}

/// Compares a device tensor (raw little-endian bytes) with the reference; the error says where.
pub fn compare(name: &str, device: &[u8], reference: &Tensor, rel: f32) -> Result<f32, String> {
    match &reference.data {
        Data::F32(r) => {
            if device.len() != 4 * r.len() {
                return Err(format!(
                    "{name}: {} bytes for {} elements",
                    device.len(),
                    r.len()
                ));
            }
            let scale = r
                .iter()
                .map(|x| x.abs())
                .filter(|x| x.is_finite())
                .fold(0f32, f32::max)
                .max(1e-6);
            let mut worst = 0f32;
            for (i, (c, &want)) in device.chunks_exact(4).zip(r).enumerate() {
                let got = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                if want.is_finite() && !got.is_finite() {
                    return Err(format!("{name}[{i}]: device {got}, reference {want}"));
                }
                let err = (got - want).abs() / scale;
                if err.is_nan() || err > rel {
                    return Err(format!(
                        "{name}[{i}]: device {got}, reference {want}, error {err:e} (scale {scale}) > {rel:e}"
                    ));
                }
                worst = worst.max(err);
            }
            Ok(worst)
        }
        Data::I32(r) => {
            let got: Vec<i32> = device
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            if &got != r {
                return Err(format!("{name}: device {got:?}, reference {r:?}"));
            }
            Ok(0.0)
        }
        Data::Bool(r) => {
            let got: Vec<bool> = device.chunks_exact(4).map(|c| c != [0, 0, 0, 0]).collect();
            if &got != r {
                return Err(format!("{name}: device {got:?}, reference {r:?}"));
            }
            Ok(0.0)
        }
        _ => Err(format!("{name}: unsupported dtype")),
    }
}

use poot_bundle::{SlotKind as BSlot, StepKind, Target};
use poot_compiler::compile::{CompileOptions, compile};
use poot_compiler::families::{Family, ModelSpec, StepShape, trace};
use poot_compiler::passes::{PassOptions, optimize};
use poot_compiler::plan::Readback;
use poot_compiler::tiny::{Rng, tiny_model, tiny_model_of, tiny_spec, wide_codes_model};
use poot_eval::{EvalOptions, Evaluation, Inputs, eval};
use poot_ir::{Graph, SlotKind};
use poot_runtime::{Device, Engine, EntryId, Executor, StepOutput};
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

/// A verification bundle (every output read back) of the tiny `family` model for `target`.
pub fn tiny_bundle(
    family: Family,
    target: Target,
    cap: usize,
    rows: usize,
) -> (poot_compiler::families::Model, poot_bundle::OpenedBundle) {
    let model = tiny_model(family, 11).expect("tiny model");
    let bundle = verification_bundle(&model, target, cap, rows);
    (model, bundle)
}

/// A verification bundle of `model` for `target`, with prefill chunks of 4 tokens (eight
/// input rows: the GEMV matmuls), 12 (24 rows: the tiled matmuls, one row a thread, the
/// second tile partial), 20 (40 rows: two rows a thread) and 36 (72 rows: four rows a
/// thread, the second tile partial), those that fit `cap`.
fn verification_bundle(
    model: &poot_compiler::families::Model,
    target: Target,
    cap: usize,
    rows: usize,
) -> poot_bundle::OpenedBundle {
    let opts = CompileOptions {
        cap,
        rows,
        prefill_chunks: [4, 12, 20, 36, 64]
            .into_iter()
            .filter(|&c| c <= cap)
            .collect(),
        targets: vec![target],
        readback: Readback::All,
    };
    let (manifest, weights) = compile(model, &opts, &mut |_, _, _| {}).expect("compile");
    let bytes = poot_bundle::write(&manifest, &weights).expect("write");
    poot_bundle::open_bytes(bytes).expect("open")
}

/// Tier 2 for every entry of the tiny `family` bundle on `engine`: three random trials each
/// (random tokens, positions and cache contents), every output and state compared. The cache
/// of 300 positions splits attention in three (128, 128, 44 positions with 32-wide
/// subgroups): the first trial's positions lie in the first split (one work-group per head
/// writes the output), the last trial's in the last (every split live, the last to finish
/// combines them), the middle trial's anywhere.
pub fn run_tiny<D: Device>(engine: Engine<D>, family: Family, target: Target) {
    run_model(engine, &tiny_model(family, 11).expect("tiny model"), target);
}

/// Tier 2 as `run_tiny` for the tiny llama 256 wide with a feed-forward layer 4096 wide, so
/// the kernel of its gate and up projections computes two columns per subgroup and its down
/// projection splits `k` over four subgroups, each summing four columns, 8 query heads, so
/// its q projection takes two columns per subgroup, a vocabulary 20000 wide, so its head
/// takes eight columns per subgroup and its argmax
/// splits each row over three work-groups (the last one's part shorter), and heads 64 wide
/// (as SmolLM2's and Qwen2.5's), so attention scores go by groups of eight lanes per key row.
pub fn run_wide_ffn<D: Device>(engine: Engine<D>, target: Target) {
    let spec = ModelSpec {
        d_model: 256,
        d_ff: 4096,
        n_heads: 8,
        vocab: 20000,
        head_dim: 64,
        rope_dims: 64,
        ..tiny_spec(Family::Llama)
    };
    run_model(engine, &tiny_model_of(spec, 13).expect("model"), target);
}

/// Tier 2 as `run_tiny` for `tiny::wide_codes_model`: Q6_K and Q8_0 feed-forward weights,
/// whose prefill chunks' gate/up (one kernel with runs of 16 and 32, `k` in 3 parts) and 36-
/// and 64-token chunks' down (`k` in 8 parts) take the tensor-core form with coded weights
/// (`gemm::coded` in the compiler; `compiler/tests/tile_forms.rs` checks that they do).
pub fn run_wide_codes<D: Device>(engine: Engine<D>, target: Target) {
    let model = wide_codes_model(19).expect("model");
    run_model(engine, &model, target);
}

/// Tier 2 as `run_tiny` for the tiny qwen2 with heads 16 wide (4 query heads on 2 K/V
/// heads, rope over the whole head): a prefill chunk's tiled attention then takes 8 query
/// tokens a work-group, 16 lanes a token (the tiny configs' 8-wide heads take 16 tokens,
/// the wide one's 64-wide heads 4).
pub fn run_heads_16<D: Device>(engine: Engine<D>, target: Target) {
    let spec = ModelSpec {
        d_model: 64,
        head_dim: 16,
        rope_dims: 16,
        ..tiny_spec(Family::Qwen2)
    };
    run_model(engine, &tiny_model_of(spec, 17).expect("model"), target);
}

/// One step of entry `id` (traced as `g`) on the device and in `poot_eval`, from the same
/// inputs: each slot element `slot(kind, rng)`, each state uniformly random and then passed
/// through `edit(name, shape, data)`.
fn step_both<D: Device>(
    engine: &mut Engine<D>,
    id: EntryId,
    g: &Graph,
    model: &poot_compiler::families::Model,
    rng: &mut Rng,
    slot: impl Fn(SlotKind, &mut Rng) -> i32,
    edit: impl Fn(&str, &[usize], &mut [f32]),
) -> (Evaluation, StepOutput) {
    let mut slots = HashMap::new();
    let mut dev_slots = Vec::new();
    for (v, k) in g.slots() {
        let data: Vec<i32> = (0..g.ty(v).shape.numel()).map(|_| slot(k, rng)).collect();
        dev_slots.push((bslot(k), data.clone()));
        slots.insert(k, Tensor::i32(g.ty(v).shape.0.clone(), data).expect("slot"));
    }
    let mut state = HashMap::new();
    for (v, name) in g.states() {
        let shape = g.ty(v).shape.0.clone();
        let mut data: Vec<f32> = (0..g.ty(v).shape.numel()).map(|_| rng.unit()).collect();
        edit(name, &shape, &mut data);
        let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
        engine.write_state(name, &bytes).expect("write_state");
        state.insert(name.to_string(), Tensor::f32(shape, data).expect("state"));
    }
    let inputs = Inputs {
        weights: model.weight_views(),
        state,
        slots,
    };
    let want = eval(g, &inputs, EvalOptions::default()).expect("eval");
    let got = engine.step(id, &dev_slots).expect("step");
    (want, got)
}

/// The bytes of the device output `name`.
fn device_output<'a>(got: &'a StepOutput, name: &str) -> &'a [u8] {
    &got.outputs
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no output {name}"))
        .1
}

/// Tier 2 for every entry of `model` on `engine` (see `run_tiny`).
fn run_model<D: Device>(
    mut engine: Engine<D>,
    model: &poot_compiler::families::Model,
    target: Target,
) {
    let (cap, rows) = (300, 2);
    let bundle = verification_bundle(model, target, cap, rows);
    engine.load_weights(&bundle).expect("load_weights");
    let depth = 4 * model.spec.n_layers + 2;
    let rel = Tolerance::for_target(target, model.spec.d_ff.max(cap), depth);
    let mut rng = Rng::new(5);
    for entry in &bundle.manifest().entries {
        let key = entry.key.clone();
        let tokens = match key.kind {
            StepKind::Decode => 1,
            StepKind::Prefill { tokens } => tokens as usize,
        };
        let id = engine.add_entry(&key).expect("add_entry");
        let mut g = trace(model, StepShape::prefill(rows, tokens, cap)).expect("trace");
        optimize(&mut g, PassOptions::default()).expect("optimize");
        for trial in 0..3 {
            let slot = |k: SlotKind, rng: &mut Rng| match k {
                SlotKind::Token => rng.below(model.spec.vocab) as i32,
                SlotKind::Pos => match trial {
                    0 => rng.below(100) as i32,
                    1 => rng.below(cap - tokens + 1) as i32,
                    _ => (cap - tokens - rng.below(8)) as i32,
                },
                _ => rng.below(tokens) as i32,
            };
            let (want, got) = step_both(&mut engine, id, &g, model, &mut rng, slot, |_, _, _| {});
            for (name, t) in &want.outputs {
                let dev = device_output(&got, name);
                let worst = compare(&format!("{key} trial {trial} {name}"), dev, t, rel)
                    .unwrap_or_else(|e| panic!("{e}"));
                println!(
                    "{key} trial {trial}: {name} worst relative error {worst:e} (tolerance {rel:e})"
                );
            }
            for (name, t) in &want.state {
                let dev = engine.read_state(name).expect("read_state");
                compare(&format!("{key} trial {trial} state {name}"), &dev, t, rel)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }
}

/// A NaN reaching the logits sets the step's non-finite flag on the device as in the
/// reference: the tiny llama's decode step (two rows at position 10) with a NaN value at
/// position 3 of row 1's first value cache, so row 1's logits are all NaN (its token the
/// first NaN's index) and row 0's finite: the flag is the OR over the rows. The tokens and
/// the flag match `poot_eval`'s exactly.
pub fn nonfinite_flag<D: Device>(mut engine: Engine<D>, target: Target) {
    let (cap, rows) = (300, 2);
    let (model, bundle) = tiny_bundle(Family::Llama, target, cap, rows);
    engine.load_weights(&bundle).expect("load_weights");
    let id = engine.add_entry(&decode_key(&bundle)).expect("add_entry");
    let mut g = trace(&model, StepShape::prefill(rows, 1, cap)).expect("trace");
    optimize(&mut g, PassOptions::default()).expect("optimize");
    let mut rng = Rng::new(7);
    let slot = |k: SlotKind, rng: &mut Rng| match k {
        SlotKind::Token => rng.below(model.spec.vocab) as i32,
        SlotKind::Pos => 10,
        _ => 0,
    };
    let poison = |name: &str, shape: &[usize], data: &mut [f32]| {
        if name == "v.0" {
            // [rows, cap, groups, head_dim]: row 1, position 3, group 0, dimension 0.
            data[(cap + 3) * shape[2] * shape[3]] = f32::NAN;
        }
    };
    let (want, got) = step_both(&mut engine, id, &g, &model, &mut rng, slot, poison);
    assert!(got.nonfinite, "the device's non-finite flag is clear");
    let mut exact = 0;
    for (name, t) in &want.outputs {
        if matches!(t.data, Data::F32(_)) {
            continue;
        }
        compare(name, device_output(&got, name), t, 0.0).unwrap_or_else(|e| panic!("{e}"));
        exact += 1;
    }
    assert_eq!(exact, 2, "the tokens and the flag");
}

/// The key of `bundle`'s decode entry.
fn decode_key(bundle: &poot_bundle::OpenedBundle) -> poot_bundle::EntryKey {
    bundle
        .manifest()
        .entries
        .iter()
        .find(|e| e.key.kind == StepKind::Decode)
        .expect("decode")
        .key
        .clone()
}

/// Capture versus eager on one device: `steps` decode steps replayed and the same steps
/// launched eagerly read back identical bytes and leave identical state, bit for bit. The
/// steps start at position `128 - steps / 2` of an empty cache of 256, so they cross from one
/// attention split into two.
pub fn capture_vs_eager<D: Device>(
    mut engine: Engine<D>,
    family: Family,
    target: Target,
    steps: usize,
) {
    let (cap, rows) = (256, 2);
    let (_, bundle) = tiny_bundle(family, target, cap, rows);
    engine.load_weights(&bundle).expect("load_weights");
    let id = engine.add_entry(&decode_key(&bundle)).expect("add_entry");
    let names: Vec<String> = bundle.manifest().entries[0]
        .state
        .iter()
        .map(|s| s.name.clone())
        .collect();
    let mut runs = Vec::new();
    for eager in [false, true] {
        engine.reset_state().expect("reset");
        let mut outs = Vec::new();
        let mut tok = vec![3i32, 7];
        let start = 128 - steps / 2;
        for pos in start..start + steps {
            let slots = vec![
                (BSlot::Token, tok.clone()),
                (BSlot::Pos, vec![pos as i32; rows]),
            ];
            let o = engine.run_step(id, &slots, eager).expect("step");
            tok = o.tokens.iter().map(|&t| t as i32).collect();
            outs.push(o.outputs);
        }
        let state: Vec<Vec<u8>> = names
            .iter()
            .map(|n| engine.read_state(n).expect("state"))
            .collect();
        runs.push((outs, state));
    }
    assert!(runs[0].0 == runs[1].0, "captured and eager outputs differ");
    assert!(runs[0].1 == runs[1].1, "captured and eager states differ");
}

/// Each step's read-back outputs, by name.
pub type Outputs = Vec<Vec<(String, Vec<u8>)>>;

/// The read-back outputs of `steps` greedy decode steps of the tiny llama (cap 16, two rows)
/// on `engine`, each step's tokens fed to the next; `submissions` counts the device's
/// submissions, and the second result is how many each step took.
pub fn decode_run<D: Device>(
    engine: &mut Engine<D>,
    target: Target,
    steps: usize,
    submissions: impl Fn(&D) -> u64,
) -> (Outputs, u64) {
    let (_, bundle) = tiny_bundle(Family::Llama, target, 16, 2);
    engine.load_weights(&bundle).expect("load_weights");
    let id = engine
        .add_entry(&crate::faults::decode_key(16))
        .expect("add_entry");
    let mut outs = Vec::new();
    let mut tok = vec![5i32, 9];
    let before = submissions(engine.device());
    for pos in 0..steps {
        let slots = vec![
            (BSlot::Token, tok.clone()),
            (BSlot::Pos, vec![pos as i32; 2]),
        ];
        let o = engine.step(id, &slots).expect("step");
        tok = o.tokens.iter().map(|&t| t as i32).collect();
        outs.push(o.outputs);
    }
    let per_step = (submissions(engine.device()) - before) / steps as u64;
    (outs, per_step)
}
