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
use cudarc::driver::result::{self, DriverError};
use cudarc::driver::sys;
use std::error::Error;
use std::ffi::{CString, c_void};

type Res<T> = Result<T, Box<dyn Error>>;

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

/// The context's stream.
struct Bench {
    stream: sys::CUstream,
}

impl Bench {
    fn new() -> Res<Bench> {
        // SAFETY: only reads whether the library could be loaded.
        if !unsafe { sys::is_culib_present() } {
            return Err("no CUDA driver library (libcuda) on this machine".into());
        }
        result::init()?;
        let dev = result::device::get(0)?;
        // SAFETY: a device handle just returned by the driver.
        let ctx = unsafe { result::primary_ctx::retain(dev) }?;
        // SAFETY: the context just retained.
        unsafe { result::ctx::set_current(ctx) }?;
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)?;
        Ok(Bench { stream })
    }

    fn function(&self, text: &str, name: &str) -> Res<sys::CUfunction> {
        let src = CString::new(text)?;
        // SAFETY: a NUL-terminated PTX module.
        let module = unsafe { result::module::load_data(src.as_ptr() as *const c_void) }?;
        // SAFETY: a loaded module.
        Ok(unsafe { result::module::get_function(module, CString::new(name)?) }?)
    }

    fn zeroed(&self, bytes: usize) -> Res<sys::CUdeviceptr> {
        // SAFETY: a plain allocation, cleared on our stream.
        let p = unsafe { result::malloc_sync(bytes) }?;
        unsafe { result::memset_d8_async(p, 0, bytes, self.stream) }?;
        Ok(p)
    }

    /// Launches `f` on `grid` work-groups of `block` threads, as a programmatic dependent of
    /// the previous launch when `pdl`.
    fn launch(
        &self,
        f: sys::CUfunction,
        grid: [u32; 3],
        block: u32,
        pdl: bool,
        params: &mut [*mut c_void],
    ) -> Result<(), DriverError> {
        let mut attr = sys::CUlaunchAttribute {
            id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            value: sys::CUlaunchAttributeValue {
                programmaticStreamSerializationAllowed: 1,
            },
        };
        let config = sys::CUlaunchConfig {
            gridDimX: grid[0],
            gridDimY: grid[1],
            gridDimZ: grid[2],
            blockDimX: block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 0,
            hStream: self.stream,
            attrs: &mut attr,
            numAttrs: u32::from(pdl),
        };
        // SAFETY: `params` holds one pointer per kernel parameter, alive for the call.
        unsafe { sys::cuLaunchKernelEx(&config, f, params.as_mut_ptr(), std::ptr::null_mut()) }
            .result()
    }

    /// `launches` (N launches on our stream) captured once into a graph.
    fn graph(&self, launches: impl Fn() -> Result<(), DriverError>) -> Res<sys::CUgraphExec> {
        // SAFETY: our stream; `end_capture` below closes the capture.
        unsafe {
            result::stream::begin_capture(
                self.stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        }?;
        let launched = launches();
        // SAFETY: ends the capture begun above.
        let g = unsafe { result::stream::end_capture(self.stream) }?;
        launched?;
        let mut exec = std::mem::MaybeUninit::uninit();
        // SAFETY: `g` was just captured.
        unsafe { sys::cuGraphInstantiateWithFlags(exec.as_mut_ptr(), g, 0) }.result()?;
        // SAFETY: initialised by the successful call above.
        Ok(unsafe { exec.assume_init() })
    }

    /// Median microseconds of `f` between two events, 100 runs after 20 warm-ups.
    fn time(&self, f: impl Fn() -> Result<(), DriverError>) -> Res<f64> {
        let start = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)?;
        let end = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)?;
        let mut v = Vec::new();
        for i in 0..120 {
            // SAFETY: events and stream of our context.
            unsafe { result::event::record(start, self.stream) }?;
            f()?;
            unsafe { result::event::record(end, self.stream) }?;
            unsafe { result::event::synchronize(end) }?;
            if i >= 20 {
                v.push(f64::from(unsafe { result::event::elapsed(start, end) }?) * 1000.0);
            }
        }
        Ok(median(v))
    }

    /// Median wall microseconds of `f` and a synchronize, 100 runs after 20 warm-ups.
    fn wall(&self, f: impl Fn() -> Result<(), DriverError>) -> Res<f64> {
        let mut v = Vec::new();
        for i in 0..120 {
            let t = std::time::Instant::now();
            f()?;
            // SAFETY: our stream.
            unsafe { result::stream::synchronize(self.stream) }?;
            if i >= 20 {
                v.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
        Ok(median(v))
    }

    fn replay(&self, exec: sys::CUgraphExec) -> Result<(), DriverError> {
        // SAFETY: an instantiated graph on our stream.
        unsafe { result::graph::launch(exec, self.stream) }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [file, grid, rest @ ..] => kernel_chain(file, parse_grid(grid)?, count(rest.first())?),
        rest => floors(count(rest.first())?),
    }
}

/// `X` or `XxYxZ`.
fn parse_grid(s: &str) -> Res<[u32; 3]> {
    let dims = s
        .split('x')
        .map(str::parse)
        .collect::<Result<Vec<u32>, _>>()?;
    match dims[..] {
        [x] => Ok([x, 1, 1]),
        [x, y, z] => Ok([x, y, z]),
        _ => Err(format!("grid `{s}`: expected X or XxYxZ").into()),
    }
}

fn count(arg: Option<&String>) -> Res<usize> {
    Ok(arg.map_or(Ok(154), |s| s.parse())?)
}

fn floors(n: usize) -> Res<()> {
    let b = Bench::new()?;
    let buf = b.zeroed(1 << 20)?;
    let (empty, touch, gridbar) = (
        b.function(PTX, "empty")?,
        b.function(PTX, "touch")?,
        b.function(PTX, "gridbar")?,
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
    let text = std::fs::read_to_string(file)?;
    let name = text
        .split(".entry ")
        .nth(1)
        .and_then(|t| t.split('(').next())
        .ok_or("no .entry in the file")?
        .trim()
        .to_string();
    let block: u32 = match text.split(".maxntid ").nth(1) {
        Some(t) => t.split(',').next().unwrap_or("128").trim().parse()?,
        None => 128,
    };
    let b = Bench::new()?;
    let f = b.function(&text, &name)?;
    let bufs = (0..text.matches(".param .u64").count())
        .map(|_| b.zeroed(64 << 20))
        .collect::<Res<Vec<u64>>>()?;
    let exec = b.graph(|| {
        (0..n).try_for_each(|_| {
            let mut ptrs = bufs.clone();
            let mut params: Vec<*mut c_void> = ptrs
                .iter_mut()
                .map(|p| p as *mut u64 as *mut c_void)
                .collect();
            b.launch(f, grid, block, true, &mut params)
        })
    })?;
    let us = b.time(|| b.replay(exec))?;
    let [x, y, z] = grid;
    println!(
        "{name} grid {x}x{y}x{z} x{n}: {us:8.1} us ({:.2} a dispatch)",
        us / n as f64
    );
    Ok(())
}
