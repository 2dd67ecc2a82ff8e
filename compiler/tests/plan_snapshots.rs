//! The plans of the tiny llama and qwen2 bundles in text, one insta snapshot per family
//! (`snapshots/plan-*.snap`): arena sizes, then per entry its slots, state, read-back fields
//! and every dispatch (kernel, grid, work weight, bindings as arena[offset+len], w = written).
//! A change in fusion, layout or liveness packing shows as a diff.

use poot_bundle::{Arena, Manifest, Target};
use poot_compiler::compile::{CompileOptions, compile};
use poot_compiler::families::Family;
use poot_compiler::plan::Readback;
use poot_compiler::tiny::tiny_model;
use std::fmt::Write;

fn arena(a: Arena) -> &'static str {
    match a {
        Arena::Weights => "weights",
        Arena::State => "state",
        Arena::Slots => "slots",
        Arena::Scratch => "scratch",
        Arena::Readback => "readback",
    }
}

fn plan_text(m: &Manifest) -> String {
    let a = &m.arenas;
    let mut s = format!(
        "arenas: weights {} state {} slots {} scratch {} readback {}\n",
        a.weights, a.state, a.slots, a.scratch, a.readback
    );
    let kernels = &m.targets[0].kernels;
    for e in &m.entries {
        writeln!(
            s,
            "\nentry {}: {} dispatches, scratch {}, reads {}",
            e.key,
            e.dispatches.len(),
            e.scratch_bytes,
            e.bytes_read
        )
        .ok();
        for x in &e.slots {
            writeln!(
                s,
                "  slot {:?} {}{:?} at {}+{}",
                x.kind, x.dtype, x.dims, x.offset, x.len
            )
            .ok();
        }
        for x in &e.state {
            writeln!(
                s,
                "  state {} {:?} at {}+{}",
                x.name, x.dims, x.offset, x.len
            )
            .ok();
        }
        for x in &e.readback {
            writeln!(
                s,
                "  readback {} {}{:?} at {}+{}",
                x.name, x.dtype, x.dims, x.offset, x.len
            )
            .ok();
        }
        for d in &e.dispatches {
            let binds: Vec<String> = d
                .bindings
                .iter()
                .map(|b| {
                    format!(
                        "{}[{}+{}]{}",
                        arena(b.arena),
                        b.offset,
                        b.len,
                        if b.writes { "w" } else { "" }
                    )
                })
                .collect();
            writeln!(
                s,
                "  {} grid={:?} work={} {}",
                kernels[d.kernel as usize].name,
                d.grid,
                d.work,
                binds.join(" ")
            )
            .ok();
        }
    }
    s
}

fn snapshot(family: Family) {
    let model = tiny_model(family, 7).unwrap();
    let opts = CompileOptions {
        cap: 48,
        rows: 2,
        prefill_chunks: vec![4, 12],
        targets: vec![Target::Reference],
        readback: Readback::Sampled,
    };
    let (manifest, _) = compile(&model, &opts, &mut |_, _, _| {}).unwrap();
    insta::with_settings!({
        snapshot_path => "../../snapshots",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!(format!("plan-{}", family.name()), plan_text(&manifest));
    });
}

#[test]
fn llama_plan() {
    snapshot(Family::Llama);
}

#[test]
fn qwen2_plan() {
    snapshot(Family::Qwen2);
}
