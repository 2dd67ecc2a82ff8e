//! `poot`: runs a bundle. `poot run model.pbundle --prompt "..."` streams text;
//! `poot bench model.pbundle` measures decode speed with and without capture, and the time of
//! each prefill chunk.

use clap::{Parser, Subcommand};
use poot_runtime::devices::reference::ReferenceDevice;
use poot_runtime::devices::vulkan::{VulkanDevice, VulkanOptions};
use poot_runtime::driver::Driver;
use poot_runtime::{Engine, Executor};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Dispatches `poot bench --profile` lists one by one (the first layer and then some).
const PROFILE_LISTED: usize = 12;
/// `poot bench` warms each mode up for at least `WARMUP_STEPS` steps and `WARMUP_SECS`
/// seconds before the timed steps: after 16 steps alone one Vulkan run was 20% slower than
/// the next run of the same bundle (BENCHMARKS.md), likely from clocks still rising.
const WARMUP_STEPS: usize = 16;
/// See `WARMUP_STEPS`.
const WARMUP_SECS: f64 = 0.5;
/// Timed steps of each prefill entry in `poot bench`.
const PREFILL_STEPS: usize = 50;

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
        #[command(flatten)]
        device: DeviceArgs,
    },
    /// Decode speed with and without capture, host time per token, and the bandwidth floor.
    Bench {
        /// The bundle.
        bundle: PathBuf,
        /// Timed decode steps per mode.
        #[arg(long, default_value_t = 200)]
        steps: usize,
        #[command(flatten)]
        device: DeviceArgs,
        /// Also print device time per kernel of one eager step (at position 64).
        #[arg(long)]
        profile: bool,
    },
}

/// Which device, and how it waits.
#[derive(clap::Args)]
struct DeviceArgs {
    /// The device: auto (CUDA, else Vulkan, else the CPU reference), cuda, vulkan, wgpu or
    /// reference.
    #[arg(long, default_value = "auto")]
    device: String,
    /// Bound on every wait for a CUDA, Vulkan or wgpu device, in seconds; a longer wait is an
    /// error.
    #[arg(long, default_value_t = 600)]
    timeout_s: u64,
    /// Vulkan watchdog budget in the planner's work units per command buffer: a replay
    /// becomes several submissions (for devices whose display watchdog kills long ones).
    #[arg(long)]
    watchdog: Option<u64>,
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

type AnyError = Box<dyn std::error::Error>;

/// An opened device, as an engine.
enum Opened {
    Reference(Box<Engine<ReferenceDevice>>),
    Vulkan(Box<Engine<VulkanDevice>>),
    #[cfg(feature = "cuda")]
    Cuda(Box<Engine<poot_runtime::devices::cuda::CudaDevice>>),
    #[cfg(feature = "wgpu")]
    Wgpu(Box<Engine<poot_runtime::devices::wgpu::WgpuDevice>>),
}

impl Opened {
    fn boxed(self) -> Box<dyn Executor> {
        match self {
            Opened::Reference(e) => e,
            Opened::Vulkan(e) => e,
            #[cfg(feature = "cuda")]
            Opened::Cuda(e) => e,
            #[cfg(feature = "wgpu")]
            Opened::Wgpu(e) => e,
        }
    }

    fn accepts(&self) -> Vec<poot_bundle::Target> {
        match self {
            Opened::Reference(e) => e.target_set(),
            Opened::Vulkan(e) => e.target_set(),
            #[cfg(feature = "cuda")]
            Opened::Cuda(e) => e.target_set(),
            #[cfg(feature = "wgpu")]
            Opened::Wgpu(e) => e.target_set(),
        }
    }
}

/// Opens the device called `name`.
fn open_one(name: &str, args: &DeviceArgs) -> Result<Opened, AnyError> {
    let timeout = std::time::Duration::from_secs(args.timeout_s);
    match name {
        "reference" => Ok(Opened::Reference(Box::new(Engine::new(
            ReferenceDevice::new(),
        )))),
        "vulkan" => Ok(Opened::Vulkan(Box::new(Engine::new(VulkanDevice::new(
            &VulkanOptions {
                name: None,
                timeout,
                watchdog: args.watchdog,
            },
        )?)))),
        #[cfg(feature = "cuda")]
        "cuda" => Ok(Opened::Cuda(Box::new(Engine::new(
            poot_runtime::devices::cuda::CudaDevice::new(
                &poot_runtime::devices::cuda::CudaOptions {
                    ordinal: 0,
                    timeout,
                },
            )?,
        )))),
        #[cfg(not(feature = "cuda"))]
        "cuda" => Err("this build of poot has no CUDA support (build with --features cuda)".into()),
        #[cfg(feature = "wgpu")]
        "wgpu" => Ok(Opened::Wgpu(Box::new(Engine::new(
            poot_runtime::devices::wgpu::WgpuDevice::new(
                &poot_runtime::devices::wgpu::WgpuOptions {
                    name: None,
                    timeout,
                    ..Default::default()
                },
            )?,
        )))),
        #[cfg(not(feature = "wgpu"))]
        "wgpu" => Err("this build of poot has no wgpu support (build with --features wgpu)".into()),
        other => {
            Err(format!("unknown device `{other}` (auto, cuda, vulkan, wgpu, reference)").into())
        }
    }
}

/// The device for `--device`: `auto` takes the first of CUDA, Vulkan and the reference
/// device that opens here and runs one of the bundle's targets, saying why it passed over
/// the others.
fn open_device(args: &DeviceArgs, bundle: &poot_bundle::OpenedBundle) -> Result<Opened, AnyError> {
    if args.device != "auto" {
        return open_one(&args.device, args);
    }
    let targets: Vec<_> = bundle.manifest().targets.iter().map(|t| t.target).collect();
    for candidate in ["cuda", "vulkan"] {
        match open_one(candidate, args) {
            Ok(o) if o.accepts().iter().any(|t| targets.contains(t)) => return Ok(o),
            Ok(o) => eprintln!(
                "{candidate}: runs {:?}, the bundle has {:?}; trying the next device",
                o.accepts()
                    .iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>(),
                targets.iter().map(|t| t.to_string()).collect::<Vec<_>>()
            ),
            Err(why) => eprintln!("{candidate} unavailable: {why}"),
        }
    }
    eprintln!("using the reference device (the CPU interpreter)");
    open_one("reference", args)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Times `steps` decode steps by replay and eagerly on `engine`.
fn bench<D: poot_runtime::Device>(
    mut engine: Engine<D>,
    b: &poot_bundle::OpenedBundle,
    steps: usize,
    profile: bool,
) -> Result<(), AnyError> {
    use poot_bundle::{SlotKind, StepKind};
    engine.load_weights(b)?;
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
    say!("device: {}", engine.device_name())?;
    say!(
        "entry: {key}, {dispatches} dispatches, {:.1} MB read per step",
        bytes_read as f64 / 1e6
    )?;
    let slots = |i: usize| {
        vec![
            (SlotKind::Token, vec![bench_token(i, b); rows]),
            (SlotKind::Pos, vec![(i % (cap - 1)) as i32; rows]),
        ]
    };
    let mut results = Vec::new();
    for eager in [false, true] {
        engine.reset_state()?;
        warm_up(|i| engine.step_timed(id, &slots(i), eager).map(drop))?;
        // The timed steps start from an empty cache, the same positions in both modes.
        engine.reset_state()?;
        let (mut total, mut host) = (Vec::new(), Vec::new());
        for i in 0..steps {
            let start = std::time::Instant::now();
            let (_, h) = engine.step_timed(id, &slots(i), eager)?;
            total.push(start.elapsed().as_secs_f64());
            host.push(h);
        }
        let t = median(&mut total);
        let h = median(&mut host);
        results.push((if eager { "eager" } else { "captured" }, t, h));
    }
    let bw = engine.copy_bandwidth()?;
    say!(
        "{:<9} {:>12} {:>14} {:>16}",
        "mode",
        "tok/s",
        "step (us)",
        "host us/token"
    )?;
    for (mode, t, h) in &results {
        say!(
            "{mode:<9} {:>12.1} {:>14.1} {:>16.1}",
            rows as f64 / t,
            t * 1e6,
            h * 1e6 / rows as f64
        )?;
    }
    if let Some(bw) = bw {
        let floor = bytes_read as f64 / bw;
        say!(
            "copy bandwidth {:.0} GB/s (read + write); floor {:.1} us/step; captured at {:.1}% of the floor",
            bw / 1e9,
            floor * 1e6,
            100.0 * floor / results[0].1
        )?;
    }
    if results[1].1 > 0.0 {
        say!("capture speed-up: {:.2}x", results[1].1 / results[0].1)?;
        // The speed-up is about the eager launch cost over the captured time per dispatch.
        let per = |s: f64| s * 1e6 / dispatches.max(1) as f64;
        say!(
            "per dispatch: captured {:.2} us; eager {:.2} us, {:.2} us of it launching on the host",
            per(results[0].1),
            per(results[1].1),
            per(results[1].2)
        )?;
        // Which side bounds the eager step: where the host spends most of it launching, the
        // speed-up is the host's launch rate over the captured time and moves with the host;
        // otherwise the device runs slower than the launches and capture saves only the gaps.
        if results[1].2 >= 0.9 * results[1].1 {
            say!(
                "eager is bound by the host's launches ({:.2} of its {:.2} us a dispatch): the speed-up follows the host's launch rate",
                per(results[1].2),
                per(results[1].1)
            )?;
        } else {
            say!(
                "eager is bound by the device ({:.2} us a dispatch against {:.2} us of launching): capture saves the gaps between kernels",
                per(results[1].1),
                per(results[1].2)
            )?;
        }
    }
    if profile {
        print_profile(&mut engine, b, id, &slots(64.min(cap - 1)), true)?;
    }
    bench_prefill(&mut engine, b, profile)?;
    Ok(())
}

/// The token of step (or prompt position) `i` of a benchmark: 1 to 1000 in turn, or to the
/// last token of a smaller vocabulary.
fn bench_token(i: usize, b: &poot_bundle::OpenedBundle) -> i32 {
    let last = b.manifest().model.vocab.clamp(2, 1001) as usize - 1;
    (i % last) as i32 + 1
}

/// Runs `step(i)` for `i = 0, 1, ...` until at least `WARMUP_STEPS` steps and `WARMUP_SECS`
/// seconds have passed.
fn warm_up(
    mut step: impl FnMut(usize) -> Result<(), poot_runtime::RuntimeError>,
) -> Result<(), AnyError> {
    let warm = std::time::Instant::now();
    let mut i = 0;
    while i < WARMUP_STEPS || warm.elapsed().as_secs_f64() < WARMUP_SECS {
        step(i)?;
        i += 1;
    }
    Ok(())
}

/// `--profile`: each dispatch's marginal time in entry `id` (where the device can time them),
/// summed by kernel (the o and down projections and the vocabulary head, all `matmul`s, apart);
/// with `listed_too` also the first and last dispatches one by one.
fn print_profile<D: poot_runtime::Device>(
    engine: &mut Engine<D>,
    b: &poot_bundle::OpenedBundle,
    id: poot_runtime::EntryId,
    slots: &[(poot_bundle::SlotKind, Vec<i32>)],
    listed_too: bool,
) -> Result<(), AnyError> {
    let Some(times) = engine.profile(id, slots)? else {
        return Ok(());
    };
    let names: Vec<String> = b
        .manifest()
        .targets
        .iter()
        .find(|t| !t.kernels.is_empty())
        .map(|t| t.kernels.iter().map(|k| k.name.clone()).collect())
        .unwrap_or_default();
    let entry = engine.entry_info(id)?.clone();
    let name = |k: u32| names.get(k as usize).map_or("", String::as_str);
    let mut by: std::collections::BTreeMap<&str, (f64, usize)> = std::collections::BTreeMap::new();
    for (d, t) in entry.dispatches.iter().zip(&times) {
        let e = by.entry(name(d.kernel)).or_default();
        e.0 += t;
        e.1 += 1;
    }
    if listed_too {
        let listed: Vec<_> = entry.dispatches.iter().zip(&times).collect();
        let last = listed.len().saturating_sub(PROFILE_LISTED);
        for (title, part) in [
            ("first", &listed[..PROFILE_LISTED.min(listed.len())]),
            ("last", &listed[last..]),
        ] {
            say!("{title} dispatches:")?;
            for (d, t) in part {
                let n = name(d.kernel);
                say!("  {n:<28} grid {:?} {:>8.2} us", d.grid, *t * 1e6)?;
            }
        }
    }
    let mut rows_: Vec<_> = by.into_iter().collect();
    rows_.sort_by(|a, b| b.1.0.total_cmp(&a.1.0));
    say!("{:<28} {:>6} {:>12}", "kernel", "count", "total (us)")?;
    for (k, (t, n)) in rows_ {
        say!("{k:<28} {n:>6} {:>12.1}", t * 1e6)?;
    }
    say!(
        "sum of kernel times: {:.1} us",
        times.iter().sum::<f64>() * 1e6
    )?;
    Ok(())
}

/// Times each prefill entry of `b` (captured, a full chunk at position 0, after the same
/// warm-up as decode): the median chunk time and the prompt tokens per second it gives, and
/// with `profile` its time by kernel.
fn bench_prefill<D: poot_runtime::Device>(
    engine: &mut Engine<D>,
    b: &poot_bundle::OpenedBundle,
    profile: bool,
) -> Result<(), AnyError> {
    use poot_bundle::{SlotKind, StepKind};
    for e in &b.manifest().entries {
        let StepKind::Prefill { tokens } = e.key.kind else {
            continue;
        };
        let (rows, t) = (e.key.rows as usize, tokens as usize);
        let id = engine.add_entry(&e.key)?;
        let slots = [
            (
                SlotKind::Token,
                (0..rows * t).map(|i| bench_token(i, b)).collect(),
            ),
            (SlotKind::Pos, vec![0; rows]),
            (SlotKind::LogitIndex, vec![t as i32 - 1; rows]),
        ];
        engine.reset_state()?;
        warm_up(|_| engine.step(id, &slots).map(drop))?;
        let mut times: Vec<f64> = (0..PREFILL_STEPS)
            .map(|_| {
                let start = std::time::Instant::now();
                engine.step(id, &slots)?;
                Ok(start.elapsed().as_secs_f64())
            })
            .collect::<Result<_, AnyError>>()?;
        let chunk = median(&mut times);
        say!(
            "prefill {t} tokens x {rows} rows: {:.1} us per chunk, {:.1} prompt tok/s",
            chunk * 1e6,
            (rows * t) as f64 / chunk
        )?;
        if profile {
            print_profile(engine, b, id, &slots, false)?;
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
            let mut exec = open_device(&device, &b)?.boxed();
            eprintln!("device: {}", exec.device_name());
            let mut d = Driver::new(exec.as_mut(), &b)?;
            let text = if chat { d.text.chat(&prompt)? } else { prompt };
            let ids = d.text.encode(&text)?;
            let mut out = Vec::new();
            let mut printed = String::new();
            let mut closed: Option<std::io::Error> = None;
            let text_codec = poot_runtime::text::Text::new(&b.manifest().text)?;
            let eos = d.text.eos();
            let g = d.generate(&ids, max_tokens, eos, &mut |t| {
                out.push(t);
                if let Ok(s) = text_codec.decode(&out) {
                    if closed.is_none() {
                        let mut o = std::io::stdout();
                        let new = s.get(printed.len()..).unwrap_or("");
                        closed = o.write_all(new.as_bytes()).and_then(|()| o.flush()).err();
                    }
                    printed = s;
                }
            })?;
            if let Some(e) = closed {
                return Err(e.into());
            }
            say!()?;
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
        } => {
            let b = poot_bundle::open(&bundle)?;
            match open_device(&device, &b)? {
                Opened::Reference(e) => bench(*e, &b, steps, profile),
                Opened::Vulkan(e) => bench(*e, &b, steps, profile),
                #[cfg(feature = "cuda")]
                Opened::Cuda(e) => bench(*e, &b, steps, profile),
                #[cfg(feature = "wgpu")]
                Opened::Wgpu(e) => bench(*e, &b, steps, profile),
            }
        }
    }
}
