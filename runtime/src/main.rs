//! `poot`: runs a bundle. `poot run model.pbundle --prompt "..."` streams text;
//! `poot bench model.pbundle` measures decode speed with and without capture.

use clap::{Parser, Subcommand};
use poot_runtime::devices::reference::ReferenceDevice;
use poot_runtime::driver::Driver;
use poot_runtime::{Engine, Executor};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "poot",
    version,
    about = "poot's runtime: replays compiled bundles"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate text from a prompt.
    Run {
        /// The bundle.
        bundle: PathBuf,
        /// The prompt.
        #[arg(long)]
        prompt: String,
        /// Wrap the prompt in the model's chat template.
        #[arg(long)]
        chat: bool,
        /// Tokens to generate at most.
        #[arg(long, default_value_t = 128)]
        max_tokens: usize,
        /// The device: auto (the best available), cuda or reference.
        #[arg(long, default_value = "auto")]
        device: String,
    },
    /// Decode speed with and without capture, host time per token, and the bandwidth floor.
    Bench {
        /// The bundle.
        bundle: PathBuf,
        /// Timed decode steps per mode.
        #[arg(long, default_value_t = 200)]
        steps: usize,
        /// The device: auto, cuda or reference.
        #[arg(long, default_value = "auto")]
        device: String,
        /// Also print device time per kernel of one eager step (at position 64).
        #[arg(long)]
        profile: bool,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

type AnyError = Box<dyn std::error::Error>;

#[cfg(feature = "cuda")]
fn cuda() -> Result<Engine<poot_runtime::devices::cuda::CudaDevice>, poot_runtime::DeviceError> {
    poot_runtime::devices::cuda::CudaDevice::new(0).map(Engine::new)
}

/// The executor for `--device`: `auto` takes CUDA when this build and machine have it, else
/// the reference device, and says why.
fn executor(device: &str) -> Result<Box<dyn Executor>, AnyError> {
    match device {
        "reference" => Ok(Box::new(Engine::new(ReferenceDevice::new()))),
        #[cfg(feature = "cuda")]
        "cuda" => Ok(Box::new(cuda()?)),
        #[cfg(feature = "cuda")]
        "auto" => match cuda() {
            Ok(e) => Ok(Box::new(e)),
            Err(why) => {
                eprintln!("CUDA unavailable ({why}); using the reference device");
                Ok(Box::new(Engine::new(ReferenceDevice::new())))
            }
        },
        #[cfg(not(feature = "cuda"))]
        "auto" => Ok(Box::new(Engine::new(ReferenceDevice::new()))),
        other => Err(format!(
            "unknown device `{other}` (auto, cuda, reference; cuda needs the `cuda` build feature)"
        )
        .into()),
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Times `steps` decode steps by replay and eagerly on `engine`.
fn bench<D: poot_runtime::Device>(
    mut engine: Engine<D>,
    path: &std::path::Path,
    steps: usize,
    profile: bool,
) -> Result<(), AnyError> {
    use poot_bundle::{SlotKind, StepKind};
    let b = poot_bundle::open(path)?;
    engine.load_weights(&b)?;
    let key = b
        .manifest()
        .entries
        .iter()
        .find(|e| e.key.kind == StepKind::Decode)
        .map(|e| e.key.clone())
        .ok_or("the bundle has no decode entry")?;
    let id = engine.add_entry(&key)?;
    let bytes_read = engine.entry_info(id)?.bytes_read;
    let dispatches = engine.entry_info(id)?.dispatches.len();
    let rows = key.rows as usize;
    let cap = key.cap as usize;
    println!("device: {}", engine.device_name());
    println!(
        "entry: {key}, {dispatches} dispatches, {:.1} MB read per step",
        bytes_read as f64 / 1e6
    );
    let mut results = Vec::new();
    for eager in [false, true] {
        engine.reset_state()?;
        let (mut total, mut host) = (Vec::new(), Vec::new());
        for i in 0..steps + 16 {
            let pos = (i % (cap - 1)) as i32;
            let slots = vec![
                (SlotKind::Token, vec![(i % 1000) as i32 + 1; rows]),
                (SlotKind::Pos, vec![pos; rows]),
            ];
            let start = std::time::Instant::now();
            let (_, h) = engine.step_timed(id, &slots, eager)?;
            if i >= 16 {
                total.push(start.elapsed().as_secs_f64());
                host.push(h);
            }
        }
        let t = median(&mut total);
        let h = median(&mut host);
        results.push((if eager { "eager" } else { "captured" }, t, h));
    }
    let bw = engine.copy_bandwidth()?;
    println!(
        "{:<9} {:>12} {:>14} {:>16}",
        "mode", "tok/s", "step (us)", "host us/token"
    );
    for (mode, t, h) in &results {
        println!(
            "{mode:<9} {:>12.1} {:>14.1} {:>16.1}",
            rows as f64 / t,
            t * 1e6,
            h * 1e6 / rows as f64
        );
    }
    if let Some(bw) = bw {
        let floor = bytes_read as f64 / bw;
        println!(
            "copy bandwidth {:.0} GB/s (read + write); floor {:.1} us/step; captured at {:.1}% of the floor",
            bw / 1e9,
            floor * 1e6,
            100.0 * floor / results[0].1
        );
    }
    if results[1].1 > 0.0 {
        println!("capture speed-up: {:.2}x", results[1].1 / results[0].1);
    }
    if profile {
        let slots = vec![
            (SlotKind::Token, vec![1; rows]),
            (SlotKind::Pos, vec![64.min(cap as i32 - 1); rows]),
        ];
        if let Some(times) = engine.profile(id, &slots)? {
            let names: Vec<String> = b
                .manifest()
                .targets
                .iter()
                .find(|t| !t.kernels.is_empty())
                .map(|t| t.kernels.iter().map(|k| k.name.clone()).collect())
                .unwrap_or_default();
            let entry = engine.entry_info(id)?.clone();
            let mut by: std::collections::BTreeMap<String, (f64, usize)> =
                std::collections::BTreeMap::new();
            for (d, t) in entry.dispatches.iter().zip(&times) {
                let name = names.get(d.kernel as usize).cloned().unwrap_or_default();
                let kind = name
                    .rsplit_once('_')
                    .map_or(name.clone(), |(a, _)| a.to_string());
                let e = by.entry(kind).or_default();
                e.0 += t;
                e.1 += 1;
            }
            let mut rows_: Vec<_> = by.into_iter().collect();
            rows_.sort_by(|a, b| b.1.0.total_cmp(&a.1.0));
            println!("{:<20} {:>6} {:>12}", "kernel kind", "count", "total (us)");
            for (k, (t, n)) in rows_ {
                println!("{k:<20} {n:>6} {:>12.1}", t * 1e6);
            }
            println!(
                "sum of kernel times: {:.1} us",
                times.iter().sum::<f64>() * 1e6
            );
        }
    }
    Ok(())
}

fn run(cli: Cli) -> Result<(), AnyError> {
    match cli.cmd {
        Cmd::Run {
            bundle,
            prompt,
            chat,
            max_tokens,
            device,
        } => {
            let b = poot_bundle::open(&bundle)?;
            let mut exec = executor(&device)?;
            eprintln!("device: {}", exec.device_name());
            let mut d = Driver::new(exec.as_mut(), &b)?;
            let text = if chat { d.text.chat(&prompt)? } else { prompt };
            let ids = d.text.encode(&text)?;
            let mut out = Vec::new();
            let mut printed = String::new();
            let text_codec = poot_runtime::text::Text::new(&b.manifest().text)?;
            let eos = d.text.eos();
            let g = d.generate(&ids, max_tokens, eos, &mut |t| {
                out.push(t);
                if let Ok(s) = text_codec.decode(&out) {
                    print!("{}", s.get(printed.len()..).unwrap_or(""));
                    std::io::stdout().flush().ok();
                    printed = s;
                }
            })?;
            println!();
            let decode_steps = g.tokens.len().saturating_sub(1).max(1);
            eprintln!(
                "prefill: {} tokens in {:.3} s ({:.1} tok/s); decode: {} tokens at {:.1} tok/s",
                g.prompt_tokens,
                g.prefill_secs,
                g.prompt_tokens as f64 / g.prefill_secs.max(1e-9),
                g.tokens.len(),
                decode_steps as f64 / g.decode_secs.max(1e-9)
            );
            Ok(())
        }
        Cmd::Bench {
            bundle,
            steps,
            device,
            profile,
        } => match device.as_str() {
            "reference" => bench(Engine::new(ReferenceDevice::new()), &bundle, steps, profile),
            #[cfg(feature = "cuda")]
            "cuda" | "auto" => bench(cuda()?, &bundle, steps, profile),
            #[cfg(not(feature = "cuda"))]
            "auto" => bench(Engine::new(ReferenceDevice::new()), &bundle, steps, profile),
            other => Err(format!("unknown device `{other}`").into()),
        },
    }
}
