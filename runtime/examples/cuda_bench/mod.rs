//! What the CUDA examples share: a context with one non-blocking stream, PTX modules,
//! zeroed buffers, launches with or without programmatic dependent launch, captured graphs,
//! and event-timed medians.
//!
//! Each example compiles this module on its own and uses a part of it.
#![allow(dead_code)]

use cudarc::driver::result::{self, DriverError};
use cudarc::driver::sys;
use std::error::Error;
use std::ffi::{CString, c_void};

pub type Res<T> = Result<T, Box<dyn Error>>;

/// A loaded kernel.
pub struct Kernel {
    pub module: sys::CUmodule,
    pub function: sys::CUfunction,
    pub name: String,
    pub block: u32,
    pub params: usize,
    /// Registers a thread (as the driver loaded it).
    pub registers: i32,
    /// The most work-groups of `block` threads an SM holds at once (the driver's occupancy).
    pub per_sm: i32,
}

/// The context's stream.
pub struct Bench {
    pub stream: sys::CUstream,
    /// The device's SMs.
    pub sms: i32,
}

impl Bench {
    pub fn new() -> Res<Bench> {
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
        // SAFETY: a device handle returned by the driver.
        let sms = unsafe {
            result::device::get_attribute(
                dev,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
        }?;
        Ok(Bench { stream, sms })
    }

    pub fn module(&self, text: &str) -> Res<sys::CUmodule> {
        let src = CString::new(text)?;
        // SAFETY: a NUL-terminated PTX module.
        Ok(unsafe { result::module::load_data(src.as_ptr() as *const c_void) }?)
    }

    pub fn function(&self, module: sys::CUmodule, name: &str) -> Res<sys::CUfunction> {
        // SAFETY: a loaded module.
        Ok(unsafe { result::module::get_function(module, CString::new(name)?) }?)
    }

    /// A kernel file cut from a bundle (`poot-compile inspect --kernels`): its entry, its
    /// `.maxntid` threads and its parameters, every one a `.u64` buffer address.
    pub fn kernel(&self, text: &str) -> Res<Kernel> {
        let name = text
            .split(".entry ")
            .nth(1)
            .and_then(|t| t.split('(').next())
            .ok_or("no .entry in the file")?
            .trim()
            .to_string();
        let block = match text.split(".maxntid ").nth(1) {
            Some(t) => t.split(',').next().unwrap_or("128").trim().parse()?,
            None => 128,
        };
        let module = self.module(text)?;
        let function = self.function(module, &name)?;
        let params = text.matches(".param .u64").count();
        // SAFETY: a loaded function.
        let registers = unsafe {
            result::function::get_function_attribute(
                function,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS,
            )
        }?;
        let mut per_sm = 0;
        // SAFETY: a loaded function; writes one integer.
        unsafe {
            sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut per_sm, function, block as i32, 0)
        }
        .result()?;
        Ok(Kernel {
            module,
            function,
            name,
            block,
            params,
            registers,
            per_sm,
        })
    }

    /// The module's global `name` (address and bytes), if it has one.
    pub fn global(&self, module: sys::CUmodule, name: &str) -> Option<(sys::CUdeviceptr, usize)> {
        // SAFETY: a loaded module.
        unsafe { result::module::get_global(module, CString::new(name).ok()?) }.ok()
    }

    pub fn zeroed(&self, bytes: usize) -> Res<sys::CUdeviceptr> {
        // SAFETY: a plain allocation, cleared on our stream.
        let p = unsafe { result::malloc_sync(bytes) }?;
        unsafe { result::memset_d8_async(p, 0, bytes, self.stream) }?;
        Ok(p)
    }

    /// Launches `f` on `grid` work-groups of `block` threads, as a programmatic dependent of
    /// the previous launch when `pdl`.
    pub fn launch(
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
    pub fn graph(&self, launches: impl Fn() -> Result<(), DriverError>) -> Res<sys::CUgraphExec> {
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
    pub fn time(&self, f: impl Fn() -> Result<(), DriverError>) -> Res<f64> {
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
    pub fn wall(&self, f: impl Fn() -> Result<(), DriverError>) -> Res<f64> {
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

    pub fn replay(&self, exec: sys::CUgraphExec) -> Result<(), DriverError> {
        // SAFETY: an instantiated graph on our stream.
        unsafe { result::graph::launch(exec, self.stream) }
    }
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `X` or `XxYxZ`.
pub fn parse_grid(s: &str) -> Res<[u32; 3]> {
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
