//! The form each tiled matmul reaches (`Dispatch::tiles`), for the shapes tier 2 relies on:
//! `tiny::wide_codes_model` is in tier 2 (`run_wide_codes`) to run the tensor-core form with
//! coded weights, which only a split `k` of block-format weights takes; were a change of the
//! form's rules to send those matmuls elsewhere, tier 2 would still pass without testing the
//! form. Lowered here as tier 2 compiles them: two rows, a 300-position cache.

use poot_compiler::families::{StepShape, trace};
use poot_compiler::lower::{Buf, LowerTarget, Products, Program, Tables, TileForm, lower};
use poot_compiler::passes::{PassOptions, optimize};
use poot_compiler::tiny::wide_codes_model;
use poot_ir::{Op, RoleKind};

/// The prefill chunk of `tokens` lowered, and for each dispatch with tiles the roles of the
/// weights it reads with its tiles' forms.
fn forms(tokens: usize) -> Vec<(Vec<RoleKind>, Vec<TileForm>)> {
    let model = wide_codes_model(19).unwrap();
    let mut g = trace(&model, StepShape::prefill(2, tokens, 300)).unwrap();
    optimize(&mut g, PassOptions::default()).unwrap();
    let p: Program = lower(&g, LowerTarget { subgroup: 32 }, &mut Tables::new(300)).unwrap();
    p.dispatches
        .iter()
        .filter(|d| !d.tiles.is_empty())
        .map(|d| {
            let roles = d
                .args
                .iter()
                .filter_map(|(b, _)| match *b {
                    Buf::Value(v) => match &p.graph.nodes[v].op {
                        Op::Weight(r) => Some(r.kind),
                        _ => None,
                    },
                    _ => None,
                })
                .collect();
            (roles, d.tiles.clone())
        })
        .collect()
}

/// The forms of the dispatches reading a weight of `role`.
fn of(forms: &[(Vec<RoleKind>, Vec<TileForm>)], role: RoleKind) -> Vec<TileForm> {
    forms
        .iter()
        .filter(|(r, _)| r.contains(&role))
        .flat_map(|(_, t)| t.clone())
        .collect()
}

const CODED: Products = Products::TensorCores { coded: true };

#[test]
fn wide_codes_chunks_reach_the_coded_form() {
    for tokens in [20, 36, 64] {
        let f = forms(tokens);
        println!("{tokens} tokens: {f:?}");
        let gate_up = of(&f, RoleKind::FfnGate);
        assert!(
            !gate_up.is_empty(),
            "{tokens} tokens: no tiled gate/up in {f:?}"
        );
        for t in &gate_up {
            assert_eq!(t.products, CODED, "{tokens} tokens: gate/up {t:?}");
            assert!(t.k_parts > 1, "{tokens} tokens: gate/up {t:?}");
        }
        let down = of(&f, RoleKind::FfnDown);
        assert!(!down.is_empty(), "{tokens} tokens: no tiled down in {f:?}");
        for t in &down {
            // At 20 tokens `k` goes in 9 parts of 1.3 steps, too short for tensor cores.
            let want = if tokens >= 36 { CODED } else { Products::Fma };
            assert_eq!(t.products, want, "{tokens} tokens: down {t:?}");
        }
    }
}

#[test]
fn sixteen_row_tiles_take_multiply_adds() {
    // 12 tokens of two rows: 24 rows, 16-row tiles, which have no tensor-core form.
    let f = forms(12);
    assert!(!f.is_empty(), "no tiled matmul at 12 tokens");
    for (roles, tiles) in &f {
        for t in tiles {
            assert_eq!(
                (t.rows, t.products),
                (16, Products::Fma),
                "{roles:?}: {t:?}"
            );
        }
    }
}
