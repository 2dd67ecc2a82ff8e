//! `poot-compile`: the compiler's command line.
//!
//! Today it traces checkpoints (`trace`) and generates text with the CPU reference
//! (`generate`); the bundle issue adds `poot-compile MODEL --target ... -o model.pbundle`.

use clap::{Parser, Subcommand};
use poot_compiler::families::{Model, StepShape, trace};
use poot_compiler::oracle::Oracle;
use poot_compiler::passes::{PassOptions, optimize};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "poot-compile",
    version,
    about = "poot's ahead-of-time compiler"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate text greedily with the CPU reference (the oracle every device is checked against).
    Generate {
        /// A GGUF file, or a folder with config.json + model.safetensors + tokenizer.json.
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

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> poot_compiler::Result<()> {
    match cli.cmd {
        Cmd::Generate {
            model,
            prompt,
            chat,
            max_tokens,
            cap,
            chunk,
        } => {
            let m = Model::load(&model)?;
            let codec = m.codec.as_ref().ok_or_else(|| {
                poot_compiler::CompileError::Tokenizer(format!(
                    "{} has no tokenizer",
                    model.display()
                ))
            })?;
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
            let mut on_token = |s: &poot_compiler::oracle::StepOut| {
                first.get_or_insert(start.elapsed().as_secs_f64());
                out_ids.push(s.token);
                if let Ok(t) = codec.decode(&out_ids) {
                    print!("{}", t.get(printed.len()..).unwrap_or(""));
                    std::io::stdout().flush().ok();
                    printed = t;
                }
            };
            let outs = oracle.generate(&ids, max_tokens, codec.eos, &mut on_token)?;
            let total = start.elapsed().as_secs_f64();
            let prefill = first.unwrap_or(total);
            let decode_steps = outs.len().saturating_sub(1).max(1);
            println!();
            eprintln!(
                "prompt {} tokens: prefill {:.2} s ({:.1} tok/s); {} new tokens: decode {:.1} ms/token",
                ids.len(),
                prefill,
                ids.len() as f64 / prefill,
                outs.len(),
                (total - prefill) * 1000.0 / decode_steps as f64
            );
            Ok(())
        }
        Cmd::Trace {
            model,
            rows,
            tokens,
            cap,
            raw,
        } => {
            let m = Model::load(&model)?;
            let step = StepShape::prefill(rows, tokens, cap);
            let mut g = trace(&m, step)?;
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
            print!("{}", poot_ir::print(&g));
            Ok(())
        }
    }
}
