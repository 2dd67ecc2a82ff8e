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

/// The executor for `--device`.
fn executor(device: &str) -> Result<Box<dyn Executor>, Box<dyn std::error::Error>> {
    match device {
        "reference" => Ok(Box::new(Engine::new(ReferenceDevice::new()))),
        "auto" => Ok(Box::new(Engine::new(ReferenceDevice::new()))),
        other => Err(format!("unknown device `{other}` (auto, reference)").into()),
    }
}

fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
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
            let g = d.generate(&ids, max_tokens, &mut |t| {
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
    }
}
