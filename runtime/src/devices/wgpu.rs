//! The wgpu device (feature `wgpu`): SPIR-V kernels through naga, pipelines and bind groups
//! built once per entry, the dispatch list cached and encoded again each replay.
//!
//! Invariants:
//! - One storage buffer per arena. Every binding is read-write, in the bind group layout and
//!   in the module (its `NonWritable` decorations are dropped), so several ranges of one
//!   arena bound in one dispatch are one use and never a conflict.
//! - A replay encodes the cached dispatches in submissions of `submit_dispatches` (one compute
//!   pass each, submitted as soon as it is encoded, so the device starts while the host
//!   encodes the rest; one queue keeps their order), the last also copying the readback arena
//!   and the entry's error words into one mappable buffer;
//!   `synchronize` maps that buffer with a bounded wait, keeps the readback bytes on the host
//!   (the step's reads are served from them) and turns a set error word into a `Fault` naming
//!   the kernel and code (the words are cleared again).
//! - Validation and out-of-memory errors of creation calls are caught in error scopes and
//!   returned; any other error wgpu reports (an uncaptured one) and the device-lost callback
//!   poison the device, as does a wait past the timeout. A poisoned device refuses every call.

use crate::device::{ARENAS, Device, arena_index, arena_sizes};
use crate::error::DeviceError;
use poot_bundle::{Arena, ArenaSizes, Dispatch, KernelCode, Target};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How to open a wgpu device.
#[derive(Clone, Debug)]
pub struct WgpuOptions {
    /// Use the first adapter whose name contains this; the high-performance one when `None`.
    pub name: Option<String>,
    /// Bound on every wait for the device.
    pub timeout: Duration,
    /// Dispatches per submission of a replay (`SUBMIT_DISPATCHES` by default; at least 1).
    pub submit_dispatches: usize,
}

impl Default for WgpuOptions {
    fn default() -> WgpuOptions {
        WgpuOptions {
            name: None,
            timeout: Duration::from_secs(600),
            submit_dispatches: SUBMIT_DISPATCHES,
        }
    }
}

/// Host writes move at most this many bytes per `write_buffer`.
const CHUNK: usize = 64 << 20;
/// Dispatches per submission of a replay by default. On the H200, SmolLM2's 154-dispatch
/// decode step took 1006-1046 us in submissions of 32, 958-1168 us with 24 to 64 or growing
/// sizes, and 1347-1414 us in one (BENCHMARKS.md).
const SUBMIT_DISPATCHES: usize = 32;

/// A loaded kernel.
pub struct WgpuKernel {
    name: String,
    bindings: u32,
    layout: wgpu::BindGroupLayout,
    pipeline: wgpu::ComputePipeline,
}

/// A cached dispatch list.
pub struct WgpuRecording {
    steps: Vec<(wgpu::ComputePipeline, wgpu::BindGroup, [u32; 3])>,
    errors: wgpu::Buffer,
    stride: u64,
    kernels: Arc<[String]>,
}

/// What a submitted replay left to check.
struct Pending {
    index: wgpu::SubmissionIndex,
    /// Bytes of readback at the start of the map buffer, then the error words.
    readback: u64,
    errors: u64,
    stride: u64,
    kernels: Arc<[String]>,
    words: wgpu::Buffer,
}

/// One wgpu adapter and device.
pub struct WgpuDevice {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    limits: wgpu::Limits,
    native32: bool,
    arenas: Vec<wgpu::Buffer>,
    map: Option<wgpu::Buffer>,
    host_readback: Option<Vec<u8>>,
    pending: Option<Pending>,
    transient: Vec<WgpuRecording>,
    /// Set by the device-lost callback and the uncaptured-error handler.
    lost: Arc<Mutex<Option<String>>>,
    poisoned: Option<String>,
    timeout: Duration,
    submit_dispatches: usize,
    submitted: u64,
}

fn other(what: impl std::fmt::Display) -> DeviceError {
    DeviceError::Other(what.to_string())
}

impl WgpuDevice {
    /// Replay submissions so far (each replay makes one per `submit_dispatches` dispatches).
    pub fn submissions(&self) -> u64 {
        self.submitted
    }

    /// Opens an adapter; `Unavailable` when none is found.
    pub fn new(opts: &WgpuOptions) -> Result<WgpuDevice, DeviceError> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: wgpu::Backends::PRIMARY,
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        let adapter = match &opts.name {
            Some(want) => pollster::block_on(instance.enumerate_adapters(wgpu::Backends::PRIMARY))
                .into_iter()
                .find(|a| a.get_info().name.contains(want.as_str()))
                .ok_or_else(|| {
                    DeviceError::Unavailable(format!("no wgpu adapter named like `{want}`"))
                })?,
            None => pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            }))
            .map_err(|e| DeviceError::Unavailable(format!("no wgpu adapter: {e}")))?,
        };
        let info = adapter.get_info();
        let limits = adapter.limits();
        let mut features = wgpu::Features::empty();
        if adapter.features().contains(wgpu::Features::SUBGROUP) {
            features |= wgpu::Features::SUBGROUP;
        }
        let native32 = features.contains(wgpu::Features::SUBGROUP)
            && info.subgroup_min_size == 32
            && info.subgroup_max_size == 32;
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("poot"),
            required_features: features,
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| DeviceError::Unavailable(format!("{}: {e}", info.name)))?;
        let lost = Arc::new(Mutex::new(None));
        let on_lost = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            if let Ok(mut l) = on_lost.lock() {
                l.get_or_insert(format!("device lost ({reason:?}): {msg}"));
            }
        });
        let on_error = lost.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut l) = on_error.lock() {
                l.get_or_insert(format!("uncaptured wgpu error: {e}"));
            }
        }));
        Ok(WgpuDevice {
            device,
            queue,
            info,
            limits,
            native32,
            arenas: Vec::new(),
            map: None,
            host_readback: None,
            pending: None,
            transient: Vec::new(),
            lost,
            poisoned: None,
            timeout: opts.timeout,
            submit_dispatches: opts.submit_dispatches.max(1),
            submitted: 0,
        })
    }

    /// Whether the adapter is a CPU implementation (lavapipe, WARP).
    pub fn is_cpu(&self) -> bool {
        self.info.device_type == wgpu::DeviceType::Cpu
    }

    fn poison(&mut self, e: DeviceError) -> DeviceError {
        self.poisoned.get_or_insert_with(|| e.to_string());
        e
    }

    /// `Ok` while the device is usable.
    fn live(&mut self) -> Result<(), DeviceError> {
        let lost = self.lost.lock().ok().and_then(|l| l.clone());
        if let Some(why) = lost {
            self.poisoned.get_or_insert(why);
        }
        match &self.poisoned {
            None => Ok(()),
            Some(why) => Err(DeviceError::Lost(format!(
                "the wgpu device is poisoned by an earlier failure: {why}"
            ))),
        }
    }

    /// Runs `f` inside validation and out-of-memory error scopes.
    fn scoped<T>(&self, what: &str, f: impl FnOnce(&wgpu::Device) -> T) -> Result<T, DeviceError> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let invalid = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let out = f(&self.device);
        let e1 = pollster::block_on(invalid.pop());
        let e2 = pollster::block_on(oom.pop());
        match e1.or(e2) {
            Some(e) => Err(other(format!("{what}: {e}"))),
            None => Ok(out),
        }
    }

    fn buffer(
        &self,
        size: u64,
        usage: wgpu::BufferUsages,
        label: &str,
    ) -> Result<wgpu::Buffer, DeviceError> {
        let size = size.max(256).div_ceil(4) * 4;
        self.scoped(&format!("allocating {size} bytes for {label}"), |d| {
            d.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage,
                mapped_at_creation: false,
            })
        })
    }

    fn arena(&self, a: Arena, offset: u64, len: u64) -> Result<&wgpu::Buffer, DeviceError> {
        let b = self
            .arenas
            .get(arena_index(a))
            .ok_or_else(|| other(format!("the {a:?} arena is not allocated")))?;
        if offset.checked_add(len).is_none_or(|end| end > b.size()) {
            return Err(other(format!(
                "{len} bytes at {offset} leave the {a:?} arena of {} bytes",
                b.size()
            )));
        }
        Ok(b)
    }

    /// Waits for submission `index`, at most the timeout; a timeout or failure poisons.
    fn wait(&mut self, index: wgpu::SubmissionIndex) -> Result<(), DeviceError> {
        let polled = self.device.poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: Some(self.timeout),
        });
        match polled {
            Ok(_) => self.live(),
            Err(wgpu::PollError::Timeout) => Err(self.poison(DeviceError::Timeout(self.timeout))),
            Err(e) => Err(self.poison(DeviceError::Lost(format!("{}: {e}", self.info.name)))),
        }
    }

    /// Maps `range` of `buf` for reading after submission `index`, and copies it out.
    fn map_read(
        &mut self,
        buf: &wgpu::Buffer,
        len: u64,
        index: wgpu::SubmissionIndex,
    ) -> Result<Vec<u8>, DeviceError> {
        let done = Arc::new(Mutex::new(None));
        let flag = done.clone();
        buf.slice(..len).map_async(wgpu::MapMode::Read, move |r| {
            if let Ok(mut f) = flag.lock() {
                *f = Some(r);
            }
        });
        self.wait(index)?;
        let mapped = done.lock().ok().and_then(|mut f| f.take());
        match mapped {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(self.poison(DeviceError::Lost(format!("map: {e}")))),
            None => {
                return Err(self.poison(DeviceError::Lost(
                    "the mapping did not complete after its submission".into(),
                )));
            }
        }
        let bytes = match buf.slice(..len).get_mapped_range() {
            Ok(view) => view.to_vec(),
            Err(e) => return Err(self.poison(DeviceError::Lost(format!("map: {e}")))),
        };
        buf.unmap();
        Ok(bytes)
    }

    fn build(
        &self,
        kernels: &[WgpuKernel],
        dispatches: &[Dispatch],
    ) -> Result<WgpuRecording, DeviceError> {
        let stride = u64::from(self.limits.min_storage_buffer_offset_alignment).max(4);
        let n = dispatches.len() as u64;
        let errors = self.buffer(
            (n.max(1) * stride).max(256),
            wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            "error words",
        )?;
        let mut steps = Vec::with_capacity(dispatches.len());
        let mut names = Vec::with_capacity(dispatches.len());
        for (i, d) in dispatches.iter().enumerate() {
            let k = kernels
                .get(d.kernel as usize)
                .ok_or_else(|| other(format!("dispatch {i}: no kernel {}", d.kernel)))?;
            let bad = |why: String| other(format!("dispatch {i} ({}): {why}", k.name));
            if d.bindings.len() as u32 + 1 != k.bindings {
                return Err(bad(format!(
                    "{} buffers bound, the module declares {} besides its error words",
                    d.bindings.len(),
                    k.bindings - 1
                )));
            }
            let lim = self.limits.max_compute_workgroups_per_dimension;
            if d.grid.iter().any(|&g| g > lim) {
                return Err(bad(format!(
                    "grid {:?} exceeds {lim} per dimension",
                    d.grid
                )));
            }
            let mut entries = Vec::with_capacity(d.bindings.len() + 1);
            for (j, b) in d.bindings.iter().enumerate() {
                let buf = self
                    .arena(b.arena, b.offset, b.len)
                    .map_err(|e| bad(e.to_string()))?;
                if b.len > self.limits.max_storage_buffer_binding_size {
                    return Err(bad(format!(
                        "a {}-byte binding exceeds the adapter's {} bytes",
                        b.len, self.limits.max_storage_buffer_binding_size
                    )));
                }
                entries.push(wgpu::BindGroupEntry {
                    binding: j as u32,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: buf,
                        offset: b.offset,
                        size: wgpu::BufferSize::new(super::spirv::binding_range(
                            b.offset,
                            b.len,
                            buf.size(),
                        )),
                    }),
                });
            }
            entries.push(wgpu::BindGroupEntry {
                binding: d.bindings.len() as u32,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: &errors,
                    offset: i as u64 * stride,
                    size: wgpu::BufferSize::new(4),
                }),
            });
            let group = self.scoped(&format!("dispatch {i} ({}): bind group", k.name), |dev| {
                dev.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &k.layout,
                    entries: &entries,
                })
            })?;
            steps.push((k.pipeline.clone(), group, d.grid));
            names.push(k.name.clone());
        }
        Ok(WgpuRecording {
            steps,
            errors,
            stride,
            kernels: names.into(),
        })
    }

    fn submit(&mut self, rec: &WgpuRecording) -> Result<(), DeviceError> {
        self.live()?;
        if self.pending.is_some() {
            self.synchronize()?;
        }
        let readback = self.arena(Arena::Readback, 0, 0)?.size();
        let errors = rec.errors.size();
        let need = readback + errors;
        if self.map.as_ref().is_none_or(|m| m.size() < need) {
            self.map = Some(self.buffer(
                need,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                "readback map",
            )?);
        }
        // The first commands run on the device while the host encodes the next ones: the list
        // goes out in submissions of `submit_dispatches`, the last with the copies.
        let map = self.map.as_ref().ok_or_else(|| other("no map buffer"))?;
        let rb = self.arena(Arena::Readback, 0, 0)?;
        let n = rec.steps.len();
        let (mut start, mut sent) = (0, 0);
        let index = loop {
            let end = (start + self.submit_dispatches).min(n);
            let mut enc = self.device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                for (pipeline, group, grid) in &rec.steps[start..end] {
                    pass.set_pipeline(pipeline);
                    pass.set_bind_group(0, group, &[]);
                    pass.dispatch_workgroups(grid[0], grid[1], grid[2]);
                }
            }
            sent += 1;
            if end == n {
                enc.copy_buffer_to_buffer(rb, 0, map, 0, readback);
                enc.copy_buffer_to_buffer(&rec.errors, 0, map, readback, errors);
                break self.queue.submit([enc.finish()]);
            }
            self.queue.submit([enc.finish()]);
            start = end;
        };
        self.submitted += sent;
        self.host_readback = None;
        self.pending = Some(Pending {
            index,
            readback,
            errors,
            stride: rec.stride,
            kernels: rec.kernels.clone(),
            words: rec.errors.clone(),
        });
        Ok(())
    }

    /// Submits `f`'s commands alone and waits.
    fn one_shot(&mut self, f: impl FnOnce(&mut wgpu::CommandEncoder)) -> Result<(), DeviceError> {
        self.live()?;
        let mut enc = self.device.create_command_encoder(&Default::default());
        f(&mut enc);
        let index = self.queue.submit([enc.finish()]);
        self.wait(index)
    }
}

impl Device for WgpuDevice {
    type Kernel = WgpuKernel;
    type Recording = WgpuRecording;

    fn describe(&self) -> String {
        format!(
            "{} (wgpu {:?}, subgroup {}-{})",
            self.info.name,
            self.info.backend,
            self.info.subgroup_min_size,
            self.info.subgroup_max_size
        )
    }

    fn accepts(&self) -> Vec<Target> {
        let mut t = Vec::new();
        if self.native32 {
            t.push(Target::Spirv {
                native_subgroups: true,
            });
        }
        t.push(Target::Spirv {
            native_subgroups: false,
        });
        t
    }

    fn alloc(&mut self, s: &ArenaSizes) -> Result<(), DeviceError> {
        self.live()?;
        self.free();
        let usage = wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_SRC
            | wgpu::BufferUsages::COPY_DST;
        for (a, size) in ARENAS.into_iter().zip(arena_sizes(s)) {
            let b = self.buffer(size, usage, &format!("{a:?} arena"))?;
            self.arenas.push(b);
        }
        Ok(())
    }

    fn write(&mut self, arena: Arena, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.live()?;
        let buf = self.arena(arena, offset, data.len() as u64)?.clone();
        if !offset.is_multiple_of(4) {
            return Err(other(format!("a write at {offset} is not 4-byte aligned")));
        }
        for (i, chunk) in data.chunks(CHUNK).enumerate() {
            let at = offset + (i * CHUNK) as u64;
            if chunk.len().is_multiple_of(4) {
                self.queue.write_buffer(&buf, at, chunk);
            } else {
                // wgpu writes whole words: the last word of an odd-sized write (the end of
                // the weights section) is completed with zeros.
                let mut padded = chunk.to_vec();
                padded.resize(chunk.len().div_ceil(4) * 4, 0);
                if at + padded.len() as u64 > buf.size() {
                    return Err(other("an unaligned write reaches the end of its arena"));
                }
                self.queue.write_buffer(&buf, at, &padded);
            }
        }
        Ok(())
    }

    fn read(&mut self, arena: Arena, offset: u64, out: &mut [u8]) -> Result<(), DeviceError> {
        self.live()?;
        self.synchronize()?;
        let len = out.len() as u64;
        self.arena(arena, offset, len)?;
        if arena == Arena::Readback
            && let Some(h) = &self.host_readback
            && let Some(src) = h.get(offset as usize..(offset + len) as usize)
        {
            out.copy_from_slice(src);
            return Ok(());
        }
        let start = offset / 4 * 4;
        let end = (offset + len).div_ceil(4) * 4;
        let buf = self.arena(arena, 0, 0)?.clone();
        let end = end.min(buf.size());
        let tmp = self.buffer(
            end - start,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            "read",
        )?;
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&buf, start, &tmp, 0, end - start);
        let index = self.queue.submit([enc.finish()]);
        let bytes = self.map_read(&tmp, end - start, index)?;
        let skip = (offset - start) as usize;
        out.copy_from_slice(&bytes[skip..skip + out.len()]);
        Ok(())
    }

    fn zero(&mut self, arena: Arena) -> Result<(), DeviceError> {
        let buf = self.arena(arena, 0, 0)?.clone();
        self.one_shot(|enc| enc.clear_buffer(&buf, 0, None))
    }

    fn load_kernel(&mut self, code: &KernelCode) -> Result<WgpuKernel, DeviceError> {
        self.live()?;
        let (words, bindings) = super::spirv::parse(code)?;
        let words = super::spirv::all_writable(&words);
        let entries: Vec<wgpu::BindGroupLayoutEntry> = (0..bindings)
            .map(|i| wgpu::BindGroupLayoutEntry {
                binding: i,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only: false },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            })
            .collect();
        self.scoped(&format!("kernel {}", code.name), |d| {
            let module = d.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(&code.name),
                source: wgpu::ShaderSource::SpirV(words.into()),
            });
            let layout = d.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some(&code.name),
                entries: &entries,
            });
            let pl = d.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(&code.name),
                bind_group_layouts: &[Some(&layout)],
                immediate_size: 0,
            });
            let pipeline = d.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(&code.name),
                layout: Some(&pl),
                module: &module,
                entry_point: Some(&code.name),
                compilation_options: Default::default(),
                cache: None,
            });
            WgpuKernel {
                name: code.name.clone(),
                bindings,
                layout,
                pipeline,
            }
        })
    }

    fn record(
        &mut self,
        kernels: &[WgpuKernel],
        dispatches: &[Dispatch],
    ) -> Result<WgpuRecording, DeviceError> {
        self.live()?;
        self.build(kernels, dispatches)
    }

    fn replay(&mut self, _kernels: &[WgpuKernel], rec: &WgpuRecording) -> Result<(), DeviceError> {
        self.submit(rec)
    }

    fn eager(
        &mut self,
        kernels: &[WgpuKernel],
        dispatches: &[Dispatch],
    ) -> Result<(), DeviceError> {
        let rec = self.build(kernels, dispatches)?;
        let sent = self.submit(&rec);
        self.transient.push(rec);
        sent
    }

    fn synchronize(&mut self) -> Result<(), DeviceError> {
        self.live()?;
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        let map = self.map.clone().ok_or_else(|| other("no map buffer"))?;
        let mut readback = self.map_read(&map, p.readback + p.errors, p.index)?;
        self.transient.clear();
        let words = readback.split_off(p.readback as usize);
        self.host_readback = Some(readback);
        let fault = super::spirv::first_fault(&words, p.stride as usize, &p.kernels);
        match fault {
            Some(f) => {
                self.host_readback = None;
                let words = p.words;
                self.one_shot(|enc| enc.clear_buffer(&words, 0, None))?;
                Err(f)
            }
            None => Ok(()),
        }
    }

    fn free(&mut self) {
        self.pending = None;
        self.transient.clear();
        self.host_readback = None;
        self.map = None;
        for b in self.arenas.drain(..) {
            b.destroy();
        }
    }
}
