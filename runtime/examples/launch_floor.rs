//! The per-dispatch floor of the CUDA device, the figures behind the capture-versus-eager
//! analysis in BENCHMARKS.md:
//!
//! - `launch_floor [N]`: chains of N trivial kernels (`empty`: only `griddepcontrol.wait`;
//!   `touch`: each thread loads, increments and stores one word), one or 144 work-groups of
//!   128 threads, captured in a graph with and without programmatic dependent launch (median
//!   of 100 event-timed replays) and launched eagerly (median wall time of 100 rounds of N
//!   launches and a synchronize); then a persistent kernel whose work-groups meet N times at
//!   a grid barrier (an atomic count and a spin), the in-kernel alternative to a dispatch.
//! - `launch_floor FILE.ptx GRID [N]`: the file's kernel (its `.maxntid` threads, every
//!   `.u64` parameter a zeroed 64 MiB buffer) on GRID work-groups (`X` or `XxYxZ`, as
//!   `poot-compile inspect --dispatches` prints them; the kernel files come from `inspect
//!   --kernels DIR`) replayed N times in one graph with programmatic dependent launch: one
//!   kernel's cost per dispatch, its weights in L2.
//!
//! `cargo run --release -p poot-runtime --features cuda --example launch_floor`
mod cuda_bench;

use cuda_bench::{Bench, Res};
use cudarc::driver::result;
use std::ffi::c_void;

const PTX: &str = r#"
.version 8.0
.target sm_90
.address_size 64
.visible .entry empty(.param .u64 p0)
{
  griddepcontrol.wait;
  ret;
}
.visible .entry touch(.param .u64 p0)
{
  .reg .u64 %rd<5>; .reg .u32 %r<6>;
  griddepcontrol.wait;
  ld.param.u64 %rd1, [p0];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %tid.x;
  mad.lo.u32 %r3, %r1, 128, %r2;
  mul.wide.u32 %rd2, %r3, 4;
  add.u64 %rd3, %rd1, %rd2;
  ld.global.u32 %r4, [%rd3];
  add.u32 %r4, %r4, 1;
  st.global.u32 [%rd3], %r4;
  ret;
}
.visible .entry gridbar(.param .u64 p0, .param .u32 p1)
{
  .reg .u64 %rd<5>; .reg .u32 %r<10>; .reg .pred %p<4>;
  ld.param.u64 %rd1, [p0];
  cvta.to.global.u64 %rd1, %rd1;
  ld.param.u32 %r1, [p1];
  mov.u32 %r2, %nctaid.x;
  mov.u32 %r3, %tid.x;
  setp.eq.u32 %p1, %r3, 0;
  mov.u32 %r4, 0;
LOOP:
  add.u32 %r4, %r4, 1;
  bar.sync 0;
  @!%p1 bra AFTER;
  red.release.gpu.global.add.u32 [%rd1], 1;
  mul.lo.u32 %r5, %r4, %r2;
SPIN:
  ld.acquire.gpu.global.u32 %r6, [%rd1];
  setp.lt.u32 %p2, %r6, %r5;
  @%p2 bra SPIN;
AFTER:
  bar.sync 0;
  setp.lt.u32 %p3, %r4, %r1;
  @%p3 bra LOOP;
  ret;
}
"#;

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [file, grid, rest @ ..] => {
            kernel_chain(file, cuda_bench::parse_grid(grid)?, count(rest.first())?)
        }
        rest => floors(count(rest.first())?),
    }
}

fn count(arg: Option<&String>) -> Res<usize> {
    Ok(arg.map_or(Ok(154), |s| s.parse())?)
}

fn floors(n: usize) -> Res<()> {
    let b = Bench::new()?;
    let buf = b.zeroed(1 << 20)?;
    let module = b.module(PTX)?;
    let (empty, touch, gridbar) = (
        b.function(module, "empty")?,
        b.function(module, "touch")?,
        b.function(module, "gridbar")?,
    );
    println!("{n} dispatches a step; median us a step (a dispatch)");
    for (name, f) in [("empty", empty), ("touch", touch)] {
        for grid in [1u32, 144] {
            for pdl in [false, true] {
                let chain = || {
                    let mut p = buf;
                    (0..n).try_for_each(|_| {
                        b.launch(
                            f,
                            [grid, 1, 1],
                            128,
                            pdl,
                            &mut [&mut p as *mut u64 as *mut c_void],
                        )
                    })
                };
                let exec = b.graph(chain)?;
                let graph = b.time(|| b.replay(exec))?;
                let eager = b.wall(chain)?;
                println!(
                    "{name:6} grid {grid:4} pdl {pdl:5}: graph {graph:8.1} ({:.2}), eager {eager:8.1} ({:.2})",
                    graph / n as f64,
                    eager / n as f64
                );
            }
        }
    }
    for grid in [66u32, 132] {
        let rounds = u32::try_from(n)?;
        let us = b.time(|| {
            // SAFETY: the counter word of `buf`, on our stream.
            unsafe { result::memset_d8_async(buf, 0, 4, b.stream) }?;
            let (mut p, mut r) = (buf, rounds);
            b.launch(
                gridbar,
                [grid, 1, 1],
                128,
                false,
                &mut [
                    &mut p as *mut u64 as *mut c_void,
                    &mut r as *mut u32 as *mut c_void,
                ],
            )
        })?;
        println!(
            "grid barrier x{rounds}, {grid} work-groups: {us:8.1} ({:.2})",
            us / n as f64
        );
    }
    Ok(())
}

fn kernel_chain(file: &str, grid: [u32; 3], n: usize) -> Res<()> {
    let b = Bench::new()?;
    let k = b.kernel(&std::fs::read_to_string(file)?)?;
    let bufs = (0..k.params)
        .map(|_| b.zeroed(64 << 20))
        .collect::<Res<Vec<u64>>>()?;
    let exec = b.graph(|| {
        (0..n).try_for_each(|_| {
            let mut ptrs = bufs.clone();
            let mut params: Vec<*mut c_void> = ptrs
                .iter_mut()
                .map(|p| p as *mut u64 as *mut c_void)
                .collect();
            b.launch(k.function, grid, k.block, true, &mut params)
        })
    })?;
    let us = b.time(|| b.replay(exec))?;
    let [x, y, z] = grid;
    println!(
        "{} grid {x}x{y}x{z} x{n}: {us:8.1} us ({:.2} a dispatch)",
        k.name,
        us / n as f64
    );
    Ok(())
}
