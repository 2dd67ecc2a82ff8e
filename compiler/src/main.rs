//! `poot-compile`: the compiler's command line.
//!
//! `poot-compile MODEL --target ptx -o model.pbundle` compiles; `inspect` prints a bundle;
//! `generate` runs the CPU reference; `trace` prints a step's IR.

use clap::{Args, Parser, Subcommand};
use poot_bundle::Target;
use poot_compiler::CompileError;
use poot_compiler::compile::{CompileOptions, compile};
use poot_compiler::families::{Model, StepShape, trace};
use poot_compiler::oracle::Oracle;
use poot_compiler::passes::{PassOptions, optimize};
use poot_compiler::plan::Readback;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "poot-compile",
    version,
    about = "poot's ahead-of-time compiler",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    compile: CompileArgs,
}

#[derive(Args)]
struct CompileArgs {
    /// A GGUF file, or a folder with config.json + model.safetensors + tokenizer.json.
    model: Option<PathBuf>,
    /// Targets, comma-separated: ptx (sm_90), ptx-sm80, ptx-sm90, spirv (Vulkan 1.2), reference.
    #[arg(long, default_value = "ptx,reference")]
    target: String,
    /// Output bundle.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// KV cache capacity in positions.
    #[arg(long, default_value_t = 1024)]
    cap: usize,
    /// Sequences per decode step.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Prefill chunk lengths, comma-separated [default: 256,128,64,16, those within --cap].
    #[arg(long)]
    prefill_chunks: Option<String>,
    /// Read back every output (logits included), for verification bundles.
    #[arg(long)]
    readback_all: bool,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print a bundle's targets, entries, kernels, arenas and bytes per token.
    Inspect {
        /// The bundle.
        bundle: PathBuf,
        /// Also print every entry's launches (kernel, grid, work).
        #[arg(long)]
        dispatches: bool,
        /// Also write every target's kernel code to DIR/TARGET/INDEX-NAME.{ptx,spv,kir}.
        #[arg(long, value_name = "DIR")]
        kernels: Option<PathBuf>,
    },
    /// Generate text greedily with the CPU reference (the oracle every device is checked against).
    Generate {
        /// The checkpoint.
        model: PathBuf,
        /// The prompt.
        #[arg(long)]
        prompt: String,
        /// Wrap the prompt in the model's chat template.
        #[arg(long)]
        chat: bool,
        /// Tokens to generate at most.
        #[arg(long, default_value_t = 64)]
        max_tokens: usize,
        /// KV cache capacity in positions.
        #[arg(long, default_value_t = 512)]
        cap: usize,
        /// Prefill chunk length.
        #[arg(long, default_value_t = 16)]
        chunk: usize,
    },
    /// Print the text IR of one step shape, after the passes unless --raw.
    Trace {
        /// The checkpoint.
        model: PathBuf,
        /// Sequences per step.
        #[arg(long, default_value_t = 1)]
        rows: usize,
        /// Tokens per sequence (1 = decode).
        #[arg(long, default_value_t = 1)]
        tokens: usize,
        /// KV cache capacity.
        #[arg(long, default_value_t = 512)]
        cap: usize,
        /// Print the trace before the passes.
        #[arg(long)]
        raw: bool,
    },
}

/// `println!` that returns the write's error instead of panicking on it: a reader of stdout
/// that went away (`| head`) ends the command quietly (see `main`).
macro_rules! say {
    ($($arg:tt)*) => {
        writeln!(std::io::stdout(), $($arg)*)
    };
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if closed_stdout(&*e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Whether `e` is stdout's reader going away, after which a pipeline's producer stops
/// without complaint.
fn closed_stdout(e: &(dyn std::error::Error + 'static)) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

type AnyResult = Result<(), Box<dyn std::error::Error>>;

fn targets(s: &str) -> Result<Vec<Target>, Box<dyn std::error::Error>> {
    s.split(',')
        .map(|t| match t.trim() {
            "ptx" => Ok(Target::Ptx { sm: 90 }),
            other => other.parse::<Target>().map_err(|e| e.into()),
        })
        .collect()
}

fn run(cli: Cli) -> AnyResult {
    match cli.cmd {
        None => compile_cmd(cli.compile),
        Some(Cmd::Inspect {
            bundle,
            dispatches,
            kernels,
        }) => {
            let b = poot_bundle::open(&bundle)?;
            write!(std::io::stdout(), "{}", poot_bundle::inspect(&b))?;
            if dispatches {
                write!(std::io::stdout(), "{}", poot_bundle::dispatches(&b))?;
            }
            if let Some(dir) = kernels {
                let files = poot_bundle::kernel_files(&b);
                for (file, code) in &files {
                    let path = dir.join(file);
                    let io = |source| CompileError::Io {
                        path: path.clone(),
                        source,
                    };
                    if let Some(parent) = path.parent() {
                        std::fs::create_dir_all(parent).map_err(io)?;
                    }
                    std::fs::write(&path, code).map_err(io)?;
                }
                say!("wrote {} kernel files under {}", files.len(), dir.display())?;
            }
            Ok(())
        }
        Some(Cmd::Generate {
            model,
            prompt,
            chat,
            max_tokens,
            cap,
            chunk,
        }) => {
            let m = Model::load(&model)?;
            let codec = m
                .codec
                .as_ref()
                .ok_or_else(|| format!("{} has no tokenizer", model.display()))?;
            let text = if chat {
                codec.render_chat(&prompt)?
            } else {
                prompt
            };
            let ids = codec.encode(&text)?;
            let mut oracle = Oracle::new(&m, cap, chunk)?;
            let start = Instant::now();
            let mut first: Option<f64> = None;
            let mut out_ids = Vec::new();
            let mut printed = String::new();
            let mut closed: Option<std::io::Error> = None;
            let mut on_token = |s: &poot_compiler::oracle::StepOut| {
                first.get_or_insert(start.elapsed().as_secs_f64());
                out_ids.push(s.token);
                if let Ok(t) = codec.decode(&out_ids) {
                    if closed.is_none() {
                        let mut o = std::io::stdout();
                        let new = t.get(printed.len()..).unwrap_or("");
                        closed = o.write_all(new.as_bytes()).and_then(|()| o.flush()).err();
                    }
                    printed = t;
                }
            };
            let outs = oracle.generate(&ids, max_tokens, codec.eos, &mut on_token)?;
            let total = start.elapsed().as_secs_f64();
            let prefill = first.unwrap_or(total);
            if let Some(e) = closed {
                return Err(e.into());
            }
            say!()?;
            eprintln!(
                "prompt {} tokens: prefill {:.2} s ({:.1} tok/s); {} new tokens: decode {:.1} ms/token",
                ids.len(),
                prefill,
                ids.len() as f64 / prefill,
                outs.len(),
                (total - prefill) * 1000.0 / outs.len().saturating_sub(1).max(1) as f64
            );
            Ok(())
        }
        Some(Cmd::Trace {
            model,
            rows,
            tokens,
            cap,
            raw,
        }) => {
            let m = Model::load(&model)?;
            let mut g = trace(&m, StepShape::prefill(rows, tokens, cap))?;
            if !raw {
                for t in optimize(&mut g, PassOptions { verify_each: true })? {
                    eprintln!(
                        "{:>14}: {:>8.2} ms, {} nodes",
                        t.name,
                        t.time.as_secs_f64() * 1e3,
                        t.nodes
                    );
                }
            }
            write!(std::io::stdout(), "{}", poot_ir::print(&g))?;
            Ok(())
        }
    }
}

/// Prefill chunks when `--prefill-chunks` is not given (those within `--cap`): a chunk's time
/// is mostly fixed, so long prompts go fastest through long chunks, and the runtime's plan
/// (`poot_runtime::driver::plan_prefill`) pads the last one only where that is cheaper than
/// shorter ones. On the H100, SmolLM2's chunks of 256, 128, 64 and 16 tokens ran 72.5k, 58.5k,
/// 37.9k and 16.4k prompt tokens a second (BENCHMARKS.md, twenty-ninth session).
const DEFAULT_CHUNKS: [usize; 4] = [256, 128, 64, 16];

fn compile_cmd(a: CompileArgs) -> AnyResult {
    let model = a
        .model
        .ok_or("give a model to compile (or a subcommand; see --help)")?;
    let output = a.output.ok_or("give the output bundle with -o")?;
    let prefill_chunks = match &a.prefill_chunks {
        Some(list) => list
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| {
                s.trim()
                    .parse::<usize>()
                    .map_err(|e| format!("--prefill-chunks `{s}`: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?,
        None => DEFAULT_CHUNKS.into_iter().filter(|&t| t <= a.cap).collect(),
    };
    let opts = CompileOptions {
        cap: a.cap,
        rows: a.batch,
        prefill_chunks,
        targets: targets(&a.target)?,
        readback: if a.readback_all {
            Readback::All
        } else {
            Readback::Sampled
        },
    };
    let start = Instant::now();
    let m = Model::load(&model)?;
    let bar = indicatif::ProgressBar::new(1);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let (manifest, weights) = compile(&m, &opts, &mut |done, total, what| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        bar.set_message(what.to_string());
    })?;
    bar.finish_and_clear();
    poot_bundle::write_file(&output, &manifest, &weights)?;
    let size = std::fs::metadata(&output).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "{}: {} entries, {} kernels, {:.1} MB, {:.1} s",
        output.display(),
        manifest.entries.len(),
        manifest.targets.first().map_or(0, |t| t.kernels.len()),
        size as f64 / 1e6,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
