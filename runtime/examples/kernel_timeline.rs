//! Where a chain of kernels spends its time on the device, kernel by kernel and phase by
//! phase: the figures behind the per-dispatch analysis in BENCHMARKS.md.
//!
//! `kernel_timeline ROUNDS [--mib M] [--fresh] [--slowest] FILE:GRID[:P=V,...] ...` loads
//! each file (a kernel cut from a bundle by `poot-compile inspect --kernels`, usually stamped by
//! `scripts/ptx-timeline.py`), gives every `.u64` parameter a zeroed buffer of M MiB (64
//! unless told; `--fresh`: new buffers every round, so weights come from memory as in a step
//! over many layers, not from L2), writes the `u32` V at the start of parameter P's buffer
//! (a position slot, say), and captures ROUNDS rounds of the files in order, each launch a
//! programmatic dependent of the one before, into one graph. It prints the event-timed
//! median of the graph and each kernel's registers and occupancy (work-groups an SM holds at
//! once, and in how many waves its grid runs), then replays it once more and reads back each
//! stamped kernel's records (per work-group, `%globaltimer` on entry, after the grid wait
//! and at the end; `%clock64` after the wait, after the first barrier, at the dependents'
//! trigger and at the end). Per kernel, medians over the rounds after the first, us (cycles
//! converted at the clock the records themselves give):
//!
//! - `gap`: from the previous launch's last work-group end to this launch's first release
//!   from the grid wait (the dependency's cost);
//! - `span`: from that release to this launch's last work-group end;
//! - `spread`: the releases' spread over the work-groups; `early`: how long before its
//!   release the first work-group was running (the prologue overlapped with the previous
//!   launch);
//! - `stage`, `products`, `tail`: a work-group's median time from the release to the first
//!   barrier, from there to the trigger, and from the trigger to its end (or between the
//!   barriers `scripts/ptx-timeline.py` was told to stamp); with `--slowest`, the times of
//!   the work-group that ended last instead of the median (a kernel whose work-groups mostly
//!   exit early, such as a decode attention's splits past the position).
//!
//! Every parameter has a buffer of its own, so a kernel's prefetch of the next dispatch's
//! weights (its `ahead` parameters) warms buffers no kernel reads: a `--fresh` chain waits
//! on memory for weights that a decode step finds in L2 (SmolLM2's step was no shorter with
//! 39 MB of its weights persisting in L2, while its `--fresh` chain is 2.4 us a layer longer
//! than its chain in L2; BENCHMARKS.md, twentieth session).
//!
//! The stamps change the kernel: ptxas keeps more values live across the clock reads (Qwen2.5-
//! 0.5B's gate/up took 163 registers a thread stamped against 56 plain, 3 work-groups an SM
//! instead of 9, so its 608 work-groups ran in two waves and their releases spread over 4 us).
//! Compare the occupancy lines of a stamped and a plain run before reading a phase.
//!
//! `cargo build --release -p poot-runtime --features cuda --example kernel_timeline`
mod cuda_bench;

use cuda_bench::{Bench, Kernel, Res, median};
use cudarc::driver::{result, sys};
use std::ffi::c_void;

/// One file of the chain.
struct Spec {
    kernel: Kernel,
    file: String,
    grid: [u32; 3],
    fills: Vec<(usize, u32)>,
}

/// One work-group's stamps (`scripts/ptx-timeline.py`): globaltimer ns at entry, release and
/// end; clock cycles at release, first barrier, trigger and end; then its index.
type Record = [u64; 8];
/// Where each stamp lies in a `Record`.
const GT_ENTRY: usize = 0;
const GT_RELEASE: usize = 1;
const GT_END: usize = 2;
const CLK_RELEASE: usize = 3;
const CLK_FIRST: usize = 4;
const CLK_SECOND: usize = 5;
const CLK_END: usize = 6;

/// The stamps of one launch: globaltimer ns, then a work-group's median phases in cycles.
struct Launch {
    entry: u64,
    release: u64,
    release_last: u64,
    end: u64,
    stage: f64,
    products: f64,
    tail: f64,
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (rounds, rest) = args.split_first().ok_or(
        "usage: kernel_timeline ROUNDS [--mib M] [--fresh] [--slowest] FILE:GRID[:P=V,...] ...",
    )?;
    let rounds: usize = rounds.parse()?;
    let (mut mib, mut fresh, mut slowest, mut files) = (64usize, false, false, Vec::new());
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--mib" => mib = it.next().ok_or("--mib needs a size")?.parse()?,
            "--fresh" => fresh = true,
            "--slowest" => slowest = true,
            f => files.push(f.to_string()),
        }
    }
    let b = Bench::new()?;
    let specs = files
        .iter()
        .map(|f| spec(&b, f))
        .collect::<Res<Vec<Spec>>>()?;
    let sets = if fresh { rounds } else { 1 };
    let mut bufs = Vec::new();
    for s in &specs {
        let mut per_set = Vec::new();
        for _ in 0..sets {
            let set = (0..s.kernel.params)
                .map(|_| b.zeroed(mib << 20))
                .collect::<Res<Vec<u64>>>()?;
            for &(p, v) in &s.fills {
                let ptr = *set.get(p).ok_or(format!("{}: no parameter {p}", s.file))?;
                // SAFETY: the first word of a buffer of at least one MiB.
                unsafe { result::memcpy_htod_sync(ptr, &[v]) }?;
            }
            per_set.push(set);
        }
        bufs.push(per_set);
    }
    let exec = b.graph(|| {
        (0..rounds).try_for_each(|r| {
            specs.iter().zip(&bufs).try_for_each(|(s, per_set)| {
                let mut ptrs = per_set[r % sets].clone();
                let mut params: Vec<*mut c_void> = ptrs
                    .iter_mut()
                    .map(|p| p as *mut u64 as *mut c_void)
                    .collect();
                b.launch(s.kernel.function, s.grid, s.kernel.block, true, &mut params)
            })
        })
    })?;
    let us = b.time(|| b.replay(exec))?;
    let n = rounds * specs.len();
    println!(
        "{rounds} rounds of {} kernels: {us:.1} us a graph, {:.2} a round, {:.2} a dispatch",
        specs.len(),
        us / rounds as f64,
        us / n as f64
    );
    for s in &specs {
        let groups: u32 = s.grid.iter().product();
        let at_once = (s.kernel.per_sm * b.sms).max(1) as u32;
        println!(
            "{}: {} registers a thread, {} work-groups an SM at most, {groups} in {} wave(s)",
            s.file,
            s.kernel.registers,
            s.kernel.per_sm,
            groups.div_ceil(at_once)
        );
    }
    timeline(&b, &specs, rounds, exec, slowest)
}

/// `FILE:GRID[:P=V,...]`.
fn spec(b: &Bench, arg: &str) -> Res<Spec> {
    let mut parts = arg.split(':');
    let file = parts.next().ok_or("empty kernel argument")?.to_string();
    let grid = cuda_bench::parse_grid(parts.next().ok_or(format!("{arg}: no grid"))?)?;
    let fills = parts
        .next()
        .map(|f| {
            f.split(',')
                .map(|pv| {
                    let (p, v) = pv.split_once('=').ok_or(format!("{pv}: expected P=V"))?;
                    Ok((p.parse()?, v.parse()?))
                })
                .collect::<Res<Vec<(usize, u32)>>>()
        })
        .transpose()?
        .unwrap_or_default();
    let kernel = b.kernel(&std::fs::read_to_string(&file)?)?;
    Ok(Spec {
        kernel,
        file,
        grid,
        fills,
    })
}

fn timeline(
    b: &Bench,
    specs: &[Spec],
    rounds: usize,
    exec: sys::CUgraphExec,
    slowest: bool,
) -> Res<()> {
    let mut globals = Vec::new();
    for s in specs {
        let count = b.global(s.kernel.module, "poot_tl_cnt");
        let recs = b.global(s.kernel.module, "poot_tl");
        let Some((count, recs)) = count.zip(recs) else {
            println!("{}: no timeline (not stamped)", s.file);
            return Ok(());
        };
        // One u32 launch counter per work-group (`poot_tl_cnt`).
        let (groups, counters) = (s.grid.iter().product::<u32>() as usize, count.1 / 4);
        if groups > counters {
            let e = format!(
                "{}: {groups} work-groups, launch counters for {counters}",
                s.file
            );
            return Err(e.into());
        }
        // SAFETY: the module's own globals, whole.
        unsafe { result::memset_d8_sync(count.0, 0, count.1) }?;
        unsafe { result::memset_d8_sync(recs.0, 0, recs.1) }?;
        globals.push(recs);
    }
    b.replay(exec)?;
    // SAFETY: our stream.
    unsafe { result::stream::synchronize(b.stream) }?;
    let mut launches: Vec<Vec<Launch>> = Vec::new();
    let (mut cycles, mut ns) = (0u64, 0u64);
    for (s, recs) in specs.iter().zip(&globals) {
        let groups = s.grid.iter().product::<u32>() as usize;
        let want = rounds * groups;
        if want * 64 > recs.1 {
            return Err(format!("{}: {want} records do not fit", s.file).into());
        }
        let mut words = vec![0u64; want * 8];
        // SAFETY: `want` records of 64 bytes inside the global.
        unsafe { result::memcpy_dtoh_sync(&mut words, recs.0) }?;
        let recs: Vec<Record> = words
            .chunks_exact(8)
            .map(|c| [c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
            .collect();
        if let Some(i) = recs.iter().position(|r| r[GT_END] == 0) {
            return Err(format!("{}: record {i} of {want} missing", s.file).into());
        }
        for r in &recs {
            cycles += r[CLK_END] - r[CLK_RELEASE];
            ns += r[GT_END] - r[GT_RELEASE];
        }
        launches.push(
            recs.chunks_exact(groups)
                .map(|l| launch(l, slowest))
                .collect(),
        );
    }
    let ghz = cycles as f64 / ns.max(1) as f64;
    println!("clock: {ghz:.3} GHz (cycles over globaltimer ns, release to end, all records)");
    println!(
        "{:40} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8} {:>7}",
        "kernel (medians, us)", "gap", "span", "spread", "early", "stage", "products", "tail"
    );
    let mut total = 0.0;
    for (j, s) in specs.iter().enumerate() {
        let prev_end = |r: usize| match j {
            0 => launches[specs.len() - 1][r - 1].end,
            _ => launches[j - 1][r].end,
        };
        let col = |f: &dyn Fn(usize, &Launch) -> f64| {
            median((1..rounds).map(|r| f(r, &launches[j][r])).collect())
        };
        let us = |ns: u64| ns as f64 / 1e3;
        let gap = col(&|r, l| us(l.release) - us(prev_end(r)));
        let span = col(&|_, l| us(l.end) - us(l.release));
        total += gap + span;
        let clk = |c: f64| c / ghz / 1e3;
        println!(
            "{:40} {gap:7.2} {span:7.2} {:7.2} {:7.2} {:7.2} {:8.2} {:7.2}",
            format!("{} {}", s.kernel.name, grid_text(s.grid)),
            col(&|_, l| us(l.release_last) - us(l.release)),
            col(&|_, l| us(l.release) - us(l.entry)),
            col(&|_, l| clk(l.stage)),
            col(&|_, l| clk(l.products)),
            col(&|_, l| clk(l.tail)),
        );
    }
    println!("sum of gap and span medians: {total:.2} us a round");
    Ok(())
}

/// The launch of these records; its phases are the work-groups' medians, or with `slowest`
/// those of the work-group that ended last.
fn launch(recs: &[Record], slowest: bool) -> Launch {
    let min = |i: usize| recs.iter().map(|r| r[i]).min().unwrap_or(0);
    let max = |i: usize| recs.iter().map(|r| r[i]).max().unwrap_or(0);
    let last = recs.iter().max_by_key(|r| r[GT_END]);
    let phase = |a: usize, b: usize| {
        let len = |r: &Record| r[b].saturating_sub(r[a]) as f64;
        match last {
            Some(r) if slowest => len(r),
            _ => median(recs.iter().map(len).collect()),
        }
    };
    Launch {
        entry: min(GT_ENTRY),
        release: min(GT_RELEASE),
        release_last: max(GT_RELEASE),
        end: max(GT_END),
        stage: phase(CLK_RELEASE, CLK_FIRST),
        products: phase(CLK_FIRST, CLK_SECOND),
        tail: phase(CLK_SECOND, CLK_END),
    }
}

fn grid_text([x, y, z]: [u32; 3]) -> String {
    format!("{x}x{y}x{z}")
}
