//! [`inspect`]: the human summary `poot-compile inspect` prints; [`dispatches`]: every
//! entry's launches; [`kernel_files`]: every target's kernel code as files. Deterministic:
//! the same bundle always gives the same text and files.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::open::OpenedBundle;
use crate::types::Target;

/// Summarizes a bundle: format, model, targets, kernels per target (name, code bytes), arena
/// sizes, weight bytes, and each entry's dispatch count and bytes read per step.
pub fn inspect(bundle: &OpenedBundle) -> String {
    let m = bundle.manifest();
    let mut out = String::new();
    // Writing to a `String` cannot fail: the results are ignored below.
    let _ = writeln!(out, "bundle {}", bundle.path().display());
    let _ = writeln!(
        out,
        "  format {}, written by {}, {}",
        bundle.version(),
        m.compiler_version,
        size(bundle.bytes().len() as u64)
    );
    let model = &m.model;
    let _ = writeln!(
        out,
        "model: {}, {} layers, d_model {}, vocab {}, context {}",
        model.family, model.n_layers, model.d_model, model.vocab, model.context
    );
    let text = &m.text;
    let token = |id: Option<u32>| id.map_or("none".to_string(), |id| id.to_string());
    let template = text
        .chat_template
        .as_ref()
        .map_or("none".to_string(), |t| size(t.len() as u64));
    let _ = writeln!(
        out,
        "text: tokenizer.json {}, chat template {template}, bos {}, eos {}, add_bos {}",
        size(text.tokenizer_json.len() as u64),
        token(text.bos),
        token(text.eos),
        text.add_bos
    );

    let names: Vec<String> = m.targets.iter().map(|c| c.target.to_string()).collect();
    let _ = writeln!(out, "targets: {}", none_if_empty(names.join(", ")));
    for code in &m.targets {
        let total: u64 = code
            .kernels
            .iter()
            .fold(0, |sum, k| sum.saturating_add(k.code.len() as u64));
        let _ = writeln!(
            out,
            "kernels for {}: {}, {}",
            code.target,
            code.kernels.len(),
            size(total)
        );
        for (i, kernel) in code.kernels.iter().enumerate() {
            let [x, y, z] = kernel.workgroup;
            let _ = writeln!(
                out,
                "  {i:>4} {:<32} {:>12} code, workgroup {x}x{y}x{z}, shared {}",
                kernel.name,
                size(kernel.code.len() as u64),
                kernel.shared_bytes
            );
        }
    }

    let a = &m.arenas;
    let _ = writeln!(
        out,
        "arenas: weights {}, state {}, slots {}, scratch {}, readback {}",
        size(a.weights),
        size(a.state),
        size(a.slots),
        size(a.scratch),
        size(a.readback)
    );
    let tensors: u64 = m.weights.iter().fold(0, |sum, w| sum.saturating_add(w.len));
    let _ = writeln!(
        out,
        "weights: {} tensors, {} of tensor data in a section of {}",
        m.weights.len(),
        size(tensors),
        size(bundle.weights().len() as u64)
    );

    let _ = writeln!(out, "entries: {}", m.entries.len());
    for entry in &m.entries {
        let _ = writeln!(
            out,
            "  {}: {} dispatches, reads {} per step, scratch {}",
            entry.key,
            entry.dispatches.len(),
            size(entry.bytes_read),
            size(entry.scratch_bytes)
        );
    }
    out
}

/// Each entry's launches in order: index, kernel (index and name), grid and relative work,
/// the figures a per-kernel measurement needs (`runtime/examples/launch_floor.rs` replays
/// one kernel on a given grid).
pub fn dispatches(bundle: &OpenedBundle) -> String {
    let m = bundle.manifest();
    let names = m.targets.first().map(|c| &c.kernels);
    let mut out = String::new();
    for entry in &m.entries {
        let _ = writeln!(out, "{}:", entry.key);
        for (i, d) in entry.dispatches.iter().enumerate() {
            let name = names
                .and_then(|k| k.get(d.kernel as usize))
                .map_or("?", |k| k.name.as_str());
            let [x, y, z] = d.grid;
            let _ = writeln!(
                out,
                "  {i:>4} {:>4} {name:<32} grid {x}x{y}x{z}, work {}",
                d.kernel, d.work
            );
        }
    }
    out
}

/// Every target's kernels as files: `TARGET/INDEX-NAME.EXT` (`ptx` text, `spv` SPIR-V
/// words, `kir` encoded kernel IR) and the code's bytes, in target then kernel order. A name
/// keeps only ASCII letters, digits, `_` and `-` (others become `_`), so a crafted bundle
/// cannot name a file outside its target's folder.
pub fn kernel_files(bundle: &OpenedBundle) -> Vec<(PathBuf, &[u8])> {
    let m = bundle.manifest();
    let mut files = Vec::new();
    for code in &m.targets {
        let ext = match code.target {
            Target::Ptx { .. } => "ptx",
            Target::Spirv { .. } => "spv",
            Target::Reference => "kir",
        };
        for (i, k) in code.kernels.iter().enumerate() {
            let name: String = k
                .name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let file = format!("{i:03}-{name}.{ext}");
            files.push((
                PathBuf::from(code.target.to_string()).join(file),
                k.code.as_slice(),
            ));
        }
    }
    files
}

/// `512 B`, or `1234567 B (1.2 MiB)` from 1 KiB up.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = None;
    for name in UNITS {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = Some(name);
    }
    match unit {
        None => format!("{bytes} B"),
        Some(unit) => format!("{bytes} B ({value:.1} {unit})"),
    }
}

fn none_if_empty(text: String) -> String {
    if text.is_empty() {
        "none".to_string()
    } else {
        text
    }
}
