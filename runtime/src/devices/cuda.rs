//! The CUDA device (cudarc's driver API, loaded at run time): PTX kernels, one CUDA graph per
//! entry.
//!
//! Invariants: `libcuda` is probed before any other call (a machine without it gets
//! `Unavailable`, never a panic); all work goes to one non-blocking stream; `record` captures
//! the entry's launches into a graph and instantiates it once, `replay` launches that graph;
//! kernel arguments are arena base plus binding offset, fixed at capture (slot contents change,
//! their addresses never do). A failed launch or synchronize carries CUDA's error name; the
//! errors CUDA makes sticky (illegal address, launch failure, a kernel `trap`) are `Lost`,
//! which poisons the engine. Every wait polls the stream or event for at most the timeout
//! (`CudaOptions`); a wait past it is `Timeout`, which poisons too. Freeing waits for the
//! stream at most `FREE_WAIT`, and leaks the memory when it does not drain (a hung kernel
//! may still use it; after a sticky error the context is unusable anyway).
//!
//! A step touches host memory only through pinned buffers, so it costs one launch and one
//! synchronize: the readback arena is mapped host memory the kernels write directly (read
//! after a synchronize, never through a copy), and slot writes land in a pinned copy of the
//! slot arena whose changed range is uploaded by one asynchronous copy ahead of the next
//! replay or launch. While that upload may be running, the pinned copy is not written.

use crate::device::{Device, arena_index, arena_sizes};
use crate::error::DeviceError;
use cudarc::driver::result::{self, DriverError};
use cudarc::driver::sys;
use poot_bundle::{Arena, ArenaSizes, Dispatch, KernelCode, Target};
use std::ffi::{CString, c_void};
use std::time::{Duration, Instant};

/// How to open a CUDA device.
#[derive(Clone, Debug)]
pub struct CudaOptions {
    /// The device's ordinal.
    pub ordinal: i32,
    /// Bound on every wait for the device.
    pub timeout: Duration,
}

impl Default for CudaOptions {
    fn default() -> CudaOptions {
        CudaOptions {
            ordinal: 0,
            timeout: Duration::from_secs(600),
        }
    }
}

/// A wait spins this long before it sleeps between polls: a decode step's wait ends well
/// within it, and a sleep costs tens of microseconds of timer slack.
const SPIN: Duration = Duration::from_millis(10);
/// The sleep between polls of a longer wait.
const POLL: Duration = Duration::from_micros(50);
/// The longest `free` waits for the stream before it leaks the memory instead.
const FREE_WAIT: Duration = Duration::from_secs(10);

/// One NVIDIA GPU.
pub struct CudaDevice {
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    stream: sys::CUstream,
    arenas: [(sys::CUdeviceptr, u64); 5],
    /// The readback arena's host address (mapped: `arenas` holds its device address).
    readback: *mut u8,
    /// The pinned copy of the slot arena, the range of it not yet uploaded, and whether an
    /// upload may still be running.
    slots: *mut u8,
    dirty: Option<(u64, u64)>,
    uploading: bool,
    name: String,
    sm: u32,
    modules: Vec<sys::CUmodule>,
    timeout: Duration,
}

/// Replays timed per dispatch-list prefix by `profile`.
const PROFILE_REPLAYS: usize = 15;

/// A loaded kernel.
pub struct CudaKernel {
    func: sys::CUfunction,
    block: [u32; 3],
    name: String,
    /// Launched as a programmatic dependent of the previous launch
    /// (`KernelCode::dependent_launch`).
    dependent: bool,
}

/// An instantiated CUDA graph.
pub struct CudaGraph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

fn convert(what: &str, e: DriverError) -> DeviceError {
    use sys::CUresult::*;
    let name = e
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0));
    let msg = format!("{what}: {name}");
    match e.0 {
        CUDA_ERROR_ILLEGAL_ADDRESS
        | CUDA_ERROR_LAUNCH_FAILED
        | CUDA_ERROR_ILLEGAL_INSTRUCTION
        | CUDA_ERROR_ASSERT
        | CUDA_ERROR_HARDWARE_STACK_ERROR
        | CUDA_ERROR_MISALIGNED_ADDRESS
        | CUDA_ERROR_INVALID_PC
        | CUDA_ERROR_ECC_UNCORRECTABLE
        | CUDA_ERROR_CONTEXT_IS_DESTROYED => DeviceError::Lost(msg),
        CUDA_ERROR_NO_DEVICE | CUDA_ERROR_NOT_INITIALIZED => DeviceError::Unavailable(msg),
        _ => DeviceError::Other(msg),
    }
}

impl CudaDevice {
    /// Opens GPU `opts.ordinal`; `Unavailable` when this machine has no CUDA driver or device.
    pub fn new(opts: &CudaOptions) -> Result<CudaDevice, DeviceError> {
        let ordinal = opts.ordinal;
        // SAFETY: only probes for the library; every later call needs it present.
        if !unsafe { sys::is_culib_present() } {
            return Err(DeviceError::Unavailable(
                "libcuda.so was not found: this machine has no NVIDIA driver".into(),
            ));
        }
        result::init().map_err(|e| convert("cuInit", e))?;
        let count = result::device::get_count().map_err(|e| convert("cuDeviceGetCount", e))?;
        if ordinal >= count {
            return Err(DeviceError::Unavailable(format!(
                "no CUDA device {ordinal} ({count} present)"
            )));
        }
        let dev = result::device::get(ordinal).map_err(|e| convert("cuDeviceGet", e))?;
        // SAFETY: `dev` came from cuDeviceGet.
        let ctx = unsafe { result::primary_ctx::retain(dev) }
            .map_err(|e| convert("cuDevicePrimaryCtxRetain", e))?;
        // SAFETY: `ctx` was just retained.
        unsafe { result::ctx::set_current(ctx) }.map_err(|e| convert("cuCtxSetCurrent", e))?;
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| convert("cuStreamCreate", e))?;
        let name = result::device::get_name(dev).map_err(|e| convert("cuDeviceGetName", e))?;
        let attr = |a| unsafe { result::device::get_attribute(dev, a) };
        let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
            .map_err(|e| convert("cuDeviceGetAttribute", e))?;
        let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
            .map_err(|e| convert("cuDeviceGetAttribute", e))?;
        Ok(CudaDevice {
            dev,
            ctx,
            stream,
            arenas: [(0, 0); 5],
            readback: std::ptr::null_mut(),
            slots: std::ptr::null_mut(),
            dirty: None,
            uploading: false,
            name,
            sm: (major * 10 + minor) as u32,
            modules: Vec::new(),
            timeout: opts.timeout,
        })
    }

    /// Polls `query` (a stream or event query) until it no longer answers "not ready", for at
    /// most `bound`: spinning for `SPIN`, then sleeping `POLL` between polls.
    fn wait(
        what: &str,
        bound: Duration,
        query: impl Fn() -> sys::CUresult,
    ) -> Result<(), DeviceError> {
        let start = Instant::now();
        loop {
            match query() {
                sys::CUresult::CUDA_SUCCESS => return Ok(()),
                sys::CUresult::CUDA_ERROR_NOT_READY => {}
                e => return Err(convert(what, DriverError(e))),
            }
            let waited = start.elapsed();
            if waited > bound {
                return Err(DeviceError::Timeout(bound));
            }
            if waited > SPIN {
                std::thread::sleep(POLL);
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Waits for our stream, for at most `bound`.
    fn drain(&self, bound: Duration) -> Result<(), DeviceError> {
        let stream = self.stream;
        // SAFETY: our stream.
        Self::wait("cuStreamQuery", bound, || unsafe {
            sys::cuStreamQuery(stream)
        })
    }

    fn ptr(&self, arena: Arena, offset: u64, len: u64) -> Result<sys::CUdeviceptr, DeviceError> {
        let (base, size) = self.arenas[arena_index(arena)];
        if base == 0 && size > 0 || offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(DeviceError::Other(format!(
                "{len} bytes at {offset} leave the {arena:?} arena of {size} bytes"
            )));
        }
        Ok(base + offset)
    }

    /// Pinned host memory of `bytes` bytes (zeroed), mapped into the device when `mapped`.
    fn pinned(bytes: usize, mapped: bool) -> Result<*mut u8, DeviceError> {
        let flags = if mapped {
            sys::CU_MEMHOSTALLOC_DEVICEMAP
        } else {
            0
        };
        // SAFETY: a plain allocation, zeroed before use.
        let p = unsafe { result::malloc_host(bytes, flags) }
            .map_err(|e| convert("cuMemHostAlloc", e))? as *mut u8;
        // SAFETY: `p` holds `bytes` bytes.
        unsafe { std::ptr::write_bytes(p, 0, bytes) };
        Ok(p)
    }

    /// Uploads the slot range written since the last upload, asynchronously on our stream.
    fn upload_slots(&mut self) -> Result<(), DeviceError> {
        let Some((lo, hi)) = self.dirty.take() else {
            return Ok(());
        };
        let dst = self.ptr(Arena::Slots, lo, hi - lo)?;
        // SAFETY: `lo..hi` lies in the slot arena and its pinned copy; the copy is not written
        // again before a synchronize (`uploading`).
        let src =
            unsafe { std::slice::from_raw_parts(self.slots.add(lo as usize), (hi - lo) as usize) };
        // SAFETY: as above; pinned memory, so the copy runs asynchronously.
        unsafe { result::memcpy_htod_async(dst, src, self.stream) }
            .map_err(|e| convert("cuMemcpyHtoD", e))?;
        self.uploading = true;
        Ok(())
    }

    fn launch(&self, k: &CudaKernel, d: &Dispatch) -> Result<(), DeviceError> {
        let mut ptrs: Vec<u64> = Vec::with_capacity(d.bindings.len());
        for b in &d.bindings {
            ptrs.push(self.ptr(b.arena, b.offset, b.len)?);
        }
        let mut params: Vec<*mut c_void> = ptrs
            .iter_mut()
            .map(|p| p as *mut u64 as *mut c_void)
            .collect();
        // A dependent kernel may start while the previous one runs: it waits for that
        // kernel (`griddepcontrol.wait`) before touching memory that kernel may write (before
        // the wait it reads only weights, tables and slots). Inside a capture this becomes a
        // programmatic edge of the graph.
        let mut attr = sys::CUlaunchAttribute {
            id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            value: sys::CUlaunchAttributeValue {
                programmaticStreamSerializationAllowed: 1,
            },
        };
        let config = sys::CUlaunchConfig {
            gridDimX: d.grid[0],
            gridDimY: d.grid[1],
            gridDimZ: d.grid[2],
            blockDimX: k.block[0],
            blockDimY: k.block[1],
            blockDimZ: k.block[2],
            sharedMemBytes: 0,
            hStream: self.stream,
            attrs: &mut attr,
            numAttrs: u32::from(k.dependent),
        };
        // SAFETY: `func` is a loaded kernel whose parameters are exactly these pointers (the
        // bundle validated the bindings against the kernel), each inside its arena; `config`
        // and `attr` outlive the call.
        unsafe { sys::cuLaunchKernelEx(&config, k.func, params.as_mut_ptr(), std::ptr::null_mut()) }
            .result()
            .map_err(|e| convert(&format!("launch of {}", k.name), e))
    }

    /// Device-to-device copy bandwidth in bytes per second (bytes read plus written), the
    /// median of ten event-timed copies of `bytes` bytes after two warm-ups.
    pub fn measure_copy(&mut self, bytes: usize) -> Result<f64, DeviceError> {
        // SAFETY: plain allocations on our stream, freed before returning.
        let (a, b) = unsafe {
            let a = result::malloc_sync(bytes).map_err(|e| convert("cuMemAlloc", e))?;
            let b = result::malloc_sync(bytes).map_err(|e| convert("cuMemAlloc", e));
            let b = b.inspect_err(|_| {
                result::free_sync(a).ok();
            })?;
            (a, b)
        };
        // SAFETY: `a` and `b` hold `bytes` bytes each.
        let timed = unsafe { result::memset_d8_async(a, 1, bytes, self.stream) }
            .map_err(|e| convert("cuMemset", e))
            .and_then(|()| {
                self.median_time(2, 10, |stream| {
                    // SAFETY: as above, on our stream.
                    unsafe { result::memcpy_dtod_async(b, a, bytes, stream) }
                        .map_err(|e| convert("cuMemcpyDtoD", e))
                })
            });
        // SAFETY: allocated above; the timed copies completed (their events synchronized).
        unsafe {
            result::free_sync(a).ok();
            result::free_sync(b).ok();
        }
        Ok(2.0 * bytes as f64 / timed?)
    }

    /// The median device time in seconds of `runs` runs of `op` on our stream (events around
    /// each, waited for), after `warmups` untimed ones.
    fn median_time(
        &self,
        warmups: usize,
        runs: usize,
        mut op: impl FnMut(sys::CUstream) -> Result<(), DeviceError>,
    ) -> Result<f64, DeviceError> {
        let ev = || {
            result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
                .map_err(|e| convert("cuEventCreate", e))
        };
        let start = ev()?;
        let end = ev().inspect_err(|_| {
            // SAFETY: created just above, destroyed once.
            unsafe { result::event::destroy(start) }.ok();
        })?;
        let mut samples = Vec::with_capacity(runs);
        let mut timed = || -> Result<(), DeviceError> {
            for i in 0..warmups + runs {
                // SAFETY: events created above, recorded on our stream around `op`'s work.
                unsafe { result::event::record(start, self.stream) }
                    .map_err(|e| convert("cuEventRecord", e))?;
                op(self.stream)?;
                // SAFETY: as above; `end` completes before `elapsed` reads the pair.
                unsafe { result::event::record(end, self.stream) }
                    .map_err(|e| convert("cuEventRecord", e))?;
                // SAFETY: an event recorded above.
                Self::wait("cuEventQuery", self.timeout, || unsafe {
                    sys::cuEventQuery(end)
                })?;
                // SAFETY: both events recorded and complete.
                let ms = unsafe { result::event::elapsed(start, end) }
                    .map_err(|e| convert("cuEventElapsedTime", e))?;
                if i >= warmups {
                    samples.push(ms as f64 / 1e3);
                }
            }
            Ok(())
        };
        let ran = timed();
        for e in [start, end] {
            // SAFETY: created above, destroyed once.
            unsafe { result::event::destroy(e) }.ok();
        }
        ran?;
        samples.sort_by(f64::total_cmp);
        Ok(samples.get(samples.len() / 2).copied().unwrap_or(f64::NAN))
    }
}

impl Device for CudaDevice {
    type Kernel = CudaKernel;
    type Recording = CudaGraph;

    fn describe(&self) -> String {
        format!("{} (CUDA, sm_{})", self.name, self.sm)
    }

    fn accepts(&self) -> Vec<Target> {
        let mut t = vec![Target::Ptx { sm: 90 }, Target::Ptx { sm: 80 }];
        t.retain(|x| matches!(x, Target::Ptx { sm } if *sm <= self.sm));
        t
    }

    fn alloc(&mut self, s: &ArenaSizes) -> Result<(), DeviceError> {
        self.free();
        for (i, size) in arena_sizes(s).into_iter().enumerate() {
            let bytes = size.max(256) as usize;
            let p = if i == arena_index(Arena::Readback) {
                self.readback = Self::pinned(bytes, true)?;
                let mut d = 0;
                // SAFETY: `readback` was allocated mapped just above.
                unsafe {
                    sys::cuMemHostGetDevicePointer_v2(&mut d, self.readback as *mut c_void, 0)
                }
                .result()
                .map_err(|e| convert("cuMemHostGetDevicePointer", e))?;
                d
            } else {
                if i == arena_index(Arena::Slots) {
                    self.slots = Self::pinned(bytes, false)?;
                }
                // SAFETY: a plain allocation, zeroed on our stream before use.
                let p =
                    unsafe { result::malloc_sync(bytes) }.map_err(|e| convert("cuMemAlloc", e))?;
                unsafe { result::memset_d8_async(p, 0, bytes, self.stream) }
                    .map_err(|e| convert("cuMemset", e))?;
                p
            };
            self.arenas[i] = (p, size);
        }
        self.synchronize()
    }

    fn write(&mut self, arena: Arena, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        let p = self.ptr(arena, offset, data.len() as u64)?;
        let host = match arena {
            Arena::Slots => self.slots,
            Arena::Readback => self.readback,
            _ => {
                // SAFETY: `p..p + len` lies in the arena; the copy is synchronous for pageable
                // memory.
                return unsafe { result::memcpy_htod_async(p, data, self.stream) }
                    .map_err(|e| convert("cuMemcpyHtoD", e));
            }
        };
        if self.uploading || arena == Arena::Readback {
            self.synchronize()?;
        }
        let (lo, hi) = (offset, offset + data.len() as u64);
        // SAFETY: `ptr` checked `offset..offset + len` against the arena, whose host copy is
        // as large, and nothing on the device reads or writes it now (synchronized above).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), host.add(lo as usize), data.len()) };
        if arena == Arena::Slots {
            self.dirty = Some(match self.dirty {
                Some((a, b)) => (a.min(lo), b.max(hi)),
                None => (lo, hi),
            });
        }
        Ok(())
    }

    fn read(&mut self, arena: Arena, offset: u64, out: &mut [u8]) -> Result<(), DeviceError> {
        let p = self.ptr(arena, offset, out.len() as u64)?;
        if arena == Arena::Readback {
            self.synchronize()?;
            // SAFETY: checked against the arena by `ptr`; the kernels that write it are done.
            let src = unsafe { self.readback.add(offset as usize) };
            unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
            return Ok(());
        }
        self.upload_slots()?;
        // SAFETY: as for `write`; the stream is synchronized before `out` is used.
        unsafe { result::memcpy_dtoh_async(out, p, self.stream) }
            .map_err(|e| convert("cuMemcpyDtoH", e))?;
        self.synchronize()
    }

    fn zero(&mut self, arena: Arena) -> Result<(), DeviceError> {
        let (p, size) = self.arenas[arena_index(arena)];
        if size == 0 {
            return Ok(());
        }
        match arena {
            Arena::Readback => {
                self.synchronize()?;
                // SAFETY: the whole mapped arena; the kernels that write it are done.
                unsafe { std::ptr::write_bytes(self.readback, 0, size as usize) };
                return Ok(());
            }
            Arena::Slots => {
                self.synchronize()?;
                self.dirty = None;
                // SAFETY: the whole pinned copy; no upload is running (synchronized above).
                unsafe { std::ptr::write_bytes(self.slots, 0, size as usize) };
            }
            _ => {}
        }
        // SAFETY: the whole arena.
        unsafe { result::memset_d8_async(p, 0, size as usize, self.stream) }
            .map_err(|e| convert("cuMemset", e))
    }

    fn load_kernel(&mut self, code: &KernelCode) -> Result<CudaKernel, DeviceError> {
        let text = CString::new(code.code.clone()).map_err(|_| {
            DeviceError::Other(format!("kernel {}: PTX holds a NUL byte", code.name))
        })?;
        // SAFETY: a NUL-terminated PTX image.
        let module = unsafe { result::module::load_data(text.as_ptr() as *const c_void) }
            .map_err(|e| convert(&format!("loading PTX of {}", code.name), e))?;
        self.modules.push(module);
        let name = CString::new(code.name.clone())
            .map_err(|_| DeviceError::Other("kernel name holds a NUL byte".into()))?;
        // SAFETY: the module was just loaded.
        let func = unsafe { result::module::get_function(module, name) }
            .map_err(|e| convert(&format!("finding {}", code.name), e))?;
        Ok(CudaKernel {
            func,
            block: code.workgroup,
            name: code.name.clone(),
            dependent: code.dependent_launch,
        })
    }

    fn record(
        &mut self,
        kernels: &[CudaKernel],
        dispatches: &[Dispatch],
    ) -> Result<CudaGraph, DeviceError> {
        // SAFETY: our stream; every launch in between is a valid kernel launch.
        unsafe {
            result::stream::begin_capture(
                self.stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        }
        .map_err(|e| convert("cuStreamBeginCapture", e))?;
        let mut launched = Ok(());
        for d in dispatches {
            let k = kernels
                .get(d.kernel as usize)
                .ok_or_else(|| DeviceError::Other(format!("no kernel {}", d.kernel)));
            launched = k.and_then(|k| self.launch(k, d));
            if launched.is_err() {
                break;
            }
        }
        // SAFETY: ends the capture begun above (also after a failed launch).
        let graph = unsafe { result::stream::end_capture(self.stream) }
            .map_err(|e| convert("cuStreamEndCapture", e))?;
        launched?;
        let mut exec = std::mem::MaybeUninit::uninit();
        // SAFETY: `graph` was just captured.
        unsafe { sys::cuGraphInstantiateWithFlags(exec.as_mut_ptr(), graph, 0) }
            .result()
            .map_err(|e| convert("cuGraphInstantiate", e))?;
        // SAFETY: initialised by the successful call above.
        Ok(CudaGraph {
            graph,
            exec: unsafe { exec.assume_init() },
        })
    }

    fn replay(&mut self, _: &[CudaKernel], rec: &CudaGraph) -> Result<(), DeviceError> {
        self.upload_slots()?;
        // SAFETY: an instantiated graph on our stream.
        unsafe { result::graph::launch(rec.exec, self.stream) }
            .map_err(|e| convert("cuGraphLaunch", e))
    }

    fn eager(
        &mut self,
        kernels: &[CudaKernel],
        dispatches: &[Dispatch],
    ) -> Result<(), DeviceError> {
        self.upload_slots()?;
        for d in dispatches {
            let k = kernels
                .get(d.kernel as usize)
                .ok_or_else(|| DeviceError::Other(format!("no kernel {}", d.kernel)))?;
            self.launch(k, d)?;
        }
        Ok(())
    }

    fn synchronize(&mut self) -> Result<(), DeviceError> {
        self.drain(self.timeout)?;
        self.uploading = false;
        Ok(())
    }

    /// The marginal device time of each dispatch inside a captured graph: the graph of the
    /// first `i` dispatches is timed (events around the launch, median of
    /// `PROFILE_REPLAYS` replays after a warm-up) for every `i`, and dispatch `i` is given
    /// the difference with the graph of the first `i - 1` (so launch gaps and overlap are
    /// counted as in a replay; a difference can be slightly negative from noise).
    fn profile(
        &mut self,
        kernels: &[CudaKernel],
        dispatches: &[Dispatch],
    ) -> Result<Option<Vec<f64>>, DeviceError> {
        self.upload_slots()?;
        let mut times = Vec::with_capacity(dispatches.len());
        let mut before = 0.0;
        for n in 1..=dispatches.len() {
            let graph = self.record(kernels, &dispatches[..n])?;
            let t = self.median_time(1, PROFILE_REPLAYS, |stream| {
                // SAFETY: an instantiated graph, launched on our stream.
                unsafe { result::graph::launch(graph.exec, stream) }
                    .map_err(|e| convert("cuGraphLaunch", e))
            })?;
            times.push(t - before);
            before = t;
        }
        Ok(Some(times))
    }

    fn copy_bandwidth(&mut self) -> Result<Option<f64>, DeviceError> {
        self.measure_copy(1 << 30).map(Some)
    }

    fn free(&mut self) {
        // Nothing may still use the arenas freed below: memory the stream may still use
        // (it did not drain) is leaked instead.
        let idle = self.drain(self.timeout.min(FREE_WAIT)).is_ok();
        self.uploading = false;
        let readback = arena_index(Arena::Readback);
        for (i, (p, _)) in self.arenas.iter_mut().enumerate() {
            if idle && *p != 0 && i != readback {
                // SAFETY: allocated by `alloc`, freed once.
                unsafe { result::free_sync(*p) }.ok();
            }
            *p = 0;
        }
        for h in [&mut self.readback, &mut self.slots] {
            if idle && !h.is_null() {
                // SAFETY: allocated by `pinned`, freed once; the stream is idle.
                unsafe { result::free_host(*h as *mut c_void) }.ok();
            }
            *h = std::ptr::null_mut();
        }
        self.dirty = None;
    }
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        // SAFETY: created by `record`, destroyed once.
        unsafe {
            result::graph::exec_destroy(self.exec).ok();
            result::graph::destroy(self.graph).ok();
        }
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        self.free();
        // SAFETY: modules and stream created by this device; the context retained in `new`.
        unsafe {
            for m in self.modules.drain(..) {
                result::module::unload(m).ok();
            }
            result::stream::destroy(self.stream).ok();
            result::primary_ctx::release(self.dev).ok();
        }
        let _ = self.ctx;
    }
}
