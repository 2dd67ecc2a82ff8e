//! [`inspect`]: the human summary `poot-compile inspect` prints. Deterministic: the same
//! bundle always gives the same text.

use std::fmt::Write as _;

use crate::open::OpenedBundle;

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
