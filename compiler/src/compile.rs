//! The compile driver: a model and the entries asked for become one bundle.
//!
//! Invariants: every entry of a bundle has the same rows and cache capacity (they share the
//! carried state); the kernels are lowered once for the bundle's subgroup width and rendered
//! for each target in the same order; the same model and options give the same bytes.

use crate::families::{Model, StepShape, trace};
use crate::lower::{LowerTarget, Tables, lower};
use crate::passes::{PassOptions, optimize};
use crate::plan::{Planner, Readback};
use crate::{CompileError, Result};
use poot_bundle::{
    EntryKey, KernelCode, Manifest, ModelInfo, Sampling, StepKind, Target, TargetCode, TextInfo,
};

/// What to compile.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// KV cache capacity in positions.
    pub cap: usize,
    /// Sequences per step (decode rows).
    pub rows: usize,
    /// Prefill chunk lengths (each > 1) to add as entries.
    pub prefill_chunks: Vec<usize>,
    /// Targets to generate code for.
    pub targets: Vec<Target>,
    /// Which outputs the entries read back.
    pub readback: Readback,
}

/// The subgroup width every target of a bundle shares (PTX warps and the reference device).
pub const SUBGROUP: u32 = 32;

fn ptx_target(sm: u32) -> poot_codegen_ptx::PtxTarget {
    match sm {
        80 => poot_codegen_ptx::PtxTarget::sm80(),
        _ => poot_codegen_ptx::PtxTarget::sm90(),
    }
}

/// Whether `target`'s kernels wait for the kernel launched before them (see
/// `KernelCode::dependent_launch`).
fn dependent_launch(target: Target) -> bool {
    matches!(target, Target::Ptx { sm } if ptx_target(sm).grid_dependency)
}

fn render(target: Target, k: &poot_kir::Kernel) -> Result<Vec<u8>> {
    match target {
        Target::Reference => bincode::serde::encode_to_vec(k, bincode::config::standard())
            .map_err(|e| CompileError::Lower(format!("encoding kernel {}: {e}", k.name))),
        Target::Ptx { sm } => poot_codegen_ptx::render(k, &ptx_target(sm))
            .map(String::into_bytes)
            .map_err(|e| CompileError::Lower(e.to_string())),
        Target::Spirv { native_subgroups } => {
            let t = if native_subgroups {
                poot_codegen_spirv::SpirvTarget::vulkan12()
            } else {
                poot_codegen_spirv::SpirvTarget::portable()
            };
            poot_codegen_spirv::render(k, &t)
                .map(|words| words.iter().flat_map(|w| w.to_le_bytes()).collect())
                .map_err(|e| CompileError::Lower(e.to_string()))
        }
    }
}

/// Compiles `model` into a manifest and its weights section; `progress(done, total, what)`
/// reports each step.
pub fn compile(
    model: &Model,
    opts: &CompileOptions,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<(Manifest, Vec<u8>)> {
    if opts.cap == 0 || opts.rows == 0 {
        return Err(CompileError::Lower(
            "--cap and --batch must be positive".into(),
        ));
    }
    if let Some(t) = opts.prefill_chunks.iter().find(|&&t| t < 2 || t > opts.cap) {
        return Err(CompileError::Lower(format!(
            "prefill chunk {t} must be in 2..={}",
            opts.cap
        )));
    }
    let mut shapes = vec![StepShape::decode(opts.rows, opts.cap)];
    shapes.extend(
        opts.prefill_chunks
            .iter()
            .map(|&t| StepShape::prefill(opts.rows, t, opts.cap)),
    );
    let total = shapes.len() + opts.targets.len();
    let mut tables = Tables::new(opts.cap);
    let mut planner = Planner::new(model);
    for (i, step) in shapes.iter().enumerate() {
        progress(i, total, &step.name(model.spec.family.name()));
        let mut g = trace(model, *step)?;
        optimize(&mut g, PassOptions::default())?;
        let p = lower(&g, LowerTarget { subgroup: SUBGROUP }, &mut tables)?;
        let kind = if step.tokens == 1 {
            StepKind::Decode
        } else {
            StepKind::Prefill {
                tokens: step.tokens as u32,
            }
        };
        let key = EntryKey {
            program: "generate".into(),
            kind,
            rows: step.rows as u32,
            cap: step.cap as u32,
            sampling: Sampling::Greedy,
        };
        planner.add(key, &p, &tables, opts.readback)?;
    }
    let mut targets = Vec::new();
    for (i, &t) in opts.targets.iter().enumerate() {
        progress(shapes.len() + i, total, &t.to_string());
        let kernels = planner
            .kernels
            .iter()
            .map(|k| {
                Ok(KernelCode {
                    name: k.name.clone(),
                    code: render(t, k)?,
                    workgroup: k.workgroup,
                    shared_bytes: k.shared_bytes(),
                    dependent_launch: dependent_launch(t),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        targets.push(TargetCode { target: t, kernels });
    }
    progress(total, total, "done");
    let entries = std::mem::take(&mut planner.entries);
    let (arenas, weights, bytes) = planner.finish();
    let spec = &model.spec;
    let codec = model.codec.as_ref();
    let text = TextInfo {
        tokenizer_json: codec
            .map(|c| c.tokenizer_json())
            .transpose()?
            .unwrap_or_default(),
        chat_template: codec.and_then(|c| c.template.clone()),
        bos: codec.and_then(|c| c.bos),
        eos: codec.and_then(|c| c.eos),
        add_bos: codec.is_some_and(|c| c.add_bos),
    };
    let manifest = Manifest {
        compiler_version: env!("CARGO_PKG_VERSION").to_string(),
        model: ModelInfo {
            family: spec.family.name().to_string(),
            n_layers: spec.n_layers as u32,
            d_model: spec.d_model as u32,
            vocab: spec.vocab as u32,
            context: spec.context as u32,
        },
        text,
        targets,
        entries,
        arenas,
        weights,
    };
    Ok((manifest, bytes))
}
