//! Horizontal fusion of dispatches that count in `Buf::Counters`: the prefill q/k/v
//! projections of a model 256 wide split `k` over work-groups, so each counts its parts in
//! the counters; merged into one dispatch, each member binds the counters from an offset of
//! its own, 256-byte aligned and inside the entry's counters region, so no two members count
//! in the same word.

use poot_bundle::{Arena, StepKind, Target};
use poot_compiler::compile::{CompileOptions, compile};
use poot_compiler::families::{Family, ModelSpec};
use poot_compiler::plan::Readback;
use poot_compiler::tiny::{tiny_model_of, tiny_spec};

#[test]
fn merged_split_matmuls_count_in_words_of_their_own() {
    let spec = ModelSpec {
        d_model: 256,
        n_heads: 8,
        head_dim: 64,
        rope_dims: 64,
        ..tiny_spec(Family::Llama)
    };
    let model = tiny_model_of(spec, 13).unwrap();
    let opts = CompileOptions {
        cap: 48,
        rows: 2,
        prefill_chunks: vec![36],
        targets: vec![Target::Reference],
        readback: Readback::Sampled,
    };
    let (manifest, _) = compile(&model, &opts, &mut |_, _, _| {}).unwrap();
    let kernels = &manifest.targets[0].kernels;
    let prefill = manifest
        .entries
        .iter()
        .find(|e| matches!(e.key.kind, StepKind::Prefill { .. }))
        .unwrap();
    let merged: Vec<_> = prefill
        .dispatches
        .iter()
        .filter(|d| kernels[d.kernel as usize].name.starts_with("gemmx3"))
        .collect();
    assert!(!merged.is_empty(), "no merged q/k/v projections");
    for d in merged {
        // The q/k/v projections write values in scratch and read weights: their state
        // bindings are the counters.
        let counters: Vec<_> = d
            .bindings
            .iter()
            .filter(|b| b.arena == Arena::State)
            .collect();
        assert_eq!(counters.len(), 3, "one counters binding a member");
        for pair in counters.windows(2) {
            assert_eq!(pair[1].offset, pair[0].offset + 256);
            assert_eq!(pair[1].len + 256, pair[0].len);
        }
        for b in &counters {
            assert!(b.writes);
            assert_eq!(b.offset % 256, 0);
            assert!(b.offset + b.len <= manifest.arenas.state);
        }
    }
}
